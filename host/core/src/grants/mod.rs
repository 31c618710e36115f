//! Units, agents, bindings, grants and the effective-tool resolver.
//!
//! Binding a connector to a unit grants `<namespace>.*` to that unit; agents inherit the
//! grants of their units and of those units' ancestors. [`directory`] is the in-memory
//! model, [`resolver`] turns it into the effective tool set of a unit or an agent.

pub mod directory;
pub mod resolver;

pub(crate) use directory::ancestry;
pub use directory::{upsert_grant, Directory};
pub use resolver::{
    unit_order, EffectiveTool, EffectiveToolResolver, Group, Provider, ResolvedTools, ToolCatalog,
};
