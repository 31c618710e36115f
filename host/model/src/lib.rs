//! The vocabulary every part of connector-host shares, and nothing else: ids and
//! timestamps as the contract spells them ([`ids`]), the contract's error codes and the
//! one error type ([`error`]), the records that are stored and served ([`records`]), a
//! connector and its tools as the contract shows them with their naming rules
//! ([`connector`]), what a tool call returns ([`tool_output`]) and why a subject has a
//! tool ([`provenance`]), and the audit log's records and their hash chain ([`audit`]).
//!
//! It depends on no runtime, database or web framework, so the sandbox, the stores, the
//! core and the edges can all build on it.

#![deny(missing_docs)]

pub mod audit;
pub mod bundled;
pub mod connector;
pub mod error;
pub mod ids;
pub mod provenance;
pub mod records;
pub mod tool_output;

pub use error::{ErrorCode, HostError, HostResult};
