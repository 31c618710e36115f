//! The one write path of the host's state.
//!
//! Every change of units, agents, bindings, grants, image tools and installed connectors
//! is a [`StateChange`] and goes through [`Host::write`](crate::Host): under the write lock
//! the caller validates against the state as it is *now* (so a unit deleted a moment ago
//! cannot be granted to), the change is persisted in one store transaction, then applied
//! to memory and the resolver cache dropped under the directory's write lock — readers see
//! the state before a change or after it, never half of it, and memory never holds what the
//! database refused.

use std::collections::BTreeMap;
use std::sync::Arc;

use parking_lot::RwLock;

use crate::grants::Directory;
use crate::registry::{ConnectorRegistry, InstalledConnector, ToolInfo};
use crate::runtime::OutboundPolicy;
use crate::store::{
    AgentRecord, BindingRecord, ConnectorRecord, GrantRecord, ImageToolsRecord, Store, StoreResult,
    Subject, UnitRecord,
};

/// One change of the host's state, persisted as one store transaction.
pub(crate) enum StateChange {
    /// Nothing to write (e.g. installing the digest already installed).
    Nothing,
    PutUnit(UnitRecord),
    /// A unit with its bindings, its grants and its place in agents' unit lists.
    DeleteUnit(String),
    PutAgent(AgentRecord),
    /// An agent with its grants and image tools.
    DeleteAgent(String),
    /// A binding and its `<namespace>.*` grant.
    PutBinding(BindingRecord, GrantRecord),
    /// A binding and exactly its grants.
    DeleteBinding {
        unit: String,
        connector: String,
    },
    PutGrant(GrantRecord),
    DeleteGrant {
        subject: Subject,
        tool: String,
        provenance: String,
    },
    PutImageTools(ImageToolsRecord),
    /// An install or rotation: the connector, its kept (re-keyed) bindings with re-derived
    /// grants, and the bindings it breaks removed.
    InstallConnector {
        record: ConnectorRecord,
        prepared: Box<InstalledConnector>,
        policy: Arc<OutboundPolicy>,
        kept: Vec<(BindingRecord, GrantRecord)>,
        removed: Vec<String>,
    },
    /// A connector with every binding and grant of it.
    RemoveConnector(String),
}

impl StateChange {
    /// Writes the change in one transaction.
    pub(crate) async fn persist(&self, store: &dyn Store) -> StoreResult<()> {
        match self {
            StateChange::Nothing => Ok(()),
            StateChange::PutUnit(unit) => store.put_unit(unit).await,
            StateChange::DeleteUnit(id) => store.delete_unit(id).await.map(drop),
            StateChange::PutAgent(agent) => store.put_agent(agent).await,
            StateChange::DeleteAgent(id) => store.delete_agent(id).await.map(drop),
            StateChange::PutBinding(binding, grant) => store.put_binding(binding, grant).await,
            StateChange::DeleteBinding { unit, connector } => {
                store.delete_binding(unit, connector).await.map(drop)
            }
            StateChange::PutGrant(grant) => store.put_grant(grant).await,
            StateChange::DeleteGrant {
                subject,
                tool,
                provenance,
            } => store
                .delete_grant(subject, tool, provenance)
                .await
                .map(drop),
            StateChange::PutImageTools(record) => store.put_image_tools(record).await,
            StateChange::InstallConnector {
                record,
                kept,
                removed,
                ..
            } => store.rotate_connector(record, kept, removed).await,
            StateChange::RemoveConnector(slug) => store.delete_connector(slug).await.map(drop),
        }
    }

    /// Applies the persisted change to memory. The caller holds the directory's write lock
    /// and drops the resolver cache afterwards.
    pub(crate) fn apply(self, dir: &mut Directory, memory: &Memory<'_>) {
        match self {
            StateChange::Nothing => {}
            StateChange::PutUnit(unit) => dir.put_unit(unit),
            StateChange::DeleteUnit(id) => dir.remove_unit(&id),
            StateChange::PutAgent(agent) => dir.put_agent(agent),
            StateChange::DeleteAgent(id) => {
                dir.remove_agent(&id);
                memory.image_tools.write().remove(&id);
            }
            StateChange::PutBinding(binding, grant) => dir.put_binding(binding, grant),
            StateChange::DeleteBinding { unit, connector } => {
                dir.remove_binding(&unit, &connector);
            }
            StateChange::PutGrant(grant) => dir.put_grant(grant),
            StateChange::DeleteGrant {
                subject,
                tool,
                provenance,
            } => {
                dir.remove_grant(&subject, &tool, &provenance);
            }
            StateChange::PutImageTools(record) => {
                memory
                    .image_tools
                    .write()
                    .insert(record.agent_id.clone(), image_tool_infos(&record));
                dir.put_image_tools(record);
            }
            StateChange::InstallConnector {
                record,
                prepared,
                policy,
                kept,
                removed,
            } => {
                memory.registry.insert(*prepared);
                memory.policies.write().insert(record.slug.clone(), policy);
                dir.rename_connector_namespace(&record.slug, &record.namespace);
                for unit in &removed {
                    dir.remove_binding(unit, &record.slug);
                }
                for (binding, grant) in kept {
                    dir.put_binding(binding, grant);
                }
            }
            StateChange::RemoveConnector(slug) => {
                dir.remove_connector(&slug);
                memory.registry.remove(&slug);
                memory.policies.write().remove(&slug);
            }
        }
    }
}

/// Outbound policies of installed connectors, by slug.
pub(crate) type Policies = RwLock<BTreeMap<String, Arc<OutboundPolicy>>>;
/// Image tools of agents, by agent id.
pub(crate) type ImageTools = RwLock<BTreeMap<String, Arc<[Arc<ToolInfo>]>>>;

/// The in-memory state beside the directory that some changes touch.
pub(crate) struct Memory<'a> {
    pub(crate) registry: &'a ConnectorRegistry,
    pub(crate) policies: &'a Policies,
    pub(crate) image_tools: &'a ImageTools,
}

/// The tools an image record declares, as the resolver takes them.
pub(crate) fn image_tool_infos(record: &ImageToolsRecord) -> Arc<[Arc<ToolInfo>]> {
    let tools: Vec<Arc<ToolInfo>> = record
        .tools
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|t| {
            Some(Arc::new(ToolInfo {
                name: t.get("name")?.as_str()?.to_string(),
                description: t
                    .get("description")
                    .and_then(serde_json::Value::as_str)
                    .unwrap_or_default()
                    .to_string(),
                input_schema: t
                    .get("inputSchema")
                    .cloned()
                    .unwrap_or_else(|| serde_json::json!({"type": "object"})),
                annotations: Default::default(),
            }))
        })
        .collect();
    Arc::from(tools)
}
