//! The fixture the resolver and console benches share: an agent at the bottom of a
//! [`DEPTH`]-deep unit chain, with [`BINDINGS`] connectors of [`TOOLS_PER_CONNECTOR`]
//! tools each bound along the chain (connector `c{i}`, namespace `ns{i}`, on unit
//! `u{i % DEPTH}`), so every tool the agent gets is inherited.

use std::collections::BTreeMap;
use std::sync::Arc;

use connector_host::grants::Directory;
use connector_host::registry::InstalledConnector;
use connector_model::connector::{Connector, ToolInfo};
use connector_model::records::{AgentRecord, BindingRecord, GrantRecord, Snapshot, UnitRecord};
use connector_runtime::{ConnectorRuntime, GuestLimits, RuntimeOptions};
use serde_json::json;

pub const DEPTH: usize = 32;
pub const BINDINGS: usize = 200;
pub const TOOLS_PER_CONNECTOR: usize = 25;

/// The installed connectors (by namespace) and the directory of the chain.
pub struct Chain {
    pub connectors: BTreeMap<String, Arc<InstalledConnector>>,
    pub directory: Directory,
    /// The runtime the connectors' component was loaded with (keep it for the bench).
    pub runtime: ConnectorRuntime,
}

/// Builds the chain; `tool(ns, t)` describes tool `t` of namespace `ns`, and
/// `display_name(ns, i)` names connector `i`.
pub fn chain(
    tool: impl Fn(&str, usize) -> ToolInfo,
    display_name: impl Fn(&str, usize) -> String,
) -> Chain {
    let runtime = ConnectorRuntime::new(RuntimeOptions {
        limits: GuestLimits {
            max_concurrent_instances: 4,
            ..GuestLimits::default()
        },
        cache_dir: None,
        installation_tokens: None,
        credential_log: None,
        ..RuntimeOptions::default()
    })
    .expect("runtime");
    let component = runtime
        .load(connector_bundled::component("acme").expect("acme"))
        .expect("load");

    let mut connectors = BTreeMap::new();
    for i in 0..BINDINGS {
        let ns = format!("ns{i:03}");
        let info = Connector {
            slug: format!("c{i:03}").parse().expect("a slug"),
            tool_namespace: ns.clone(),
            display_name: display_name(&ns, i),
            description: String::new(),
            version: "1".into(),
            digest: "sha256:00".into(),
            world: String::new(),
            tools: (0..TOOLS_PER_CONNECTOR).map(|t| tool(&ns, t)).collect(),
            config_schema: json!({}),
            webhook: None,
            allowed_hosts: vec![],
            source: connector_model::connector::SOURCE_UPLOAD.to_string(),
            signed_by: None,
        };
        let installed = InstalledConnector::from_parts(info, component.clone()).expect("valid");
        connectors.insert(ns, Arc::new(installed));
    }

    let mut snapshot = Snapshot::default();
    for d in 0..DEPTH {
        snapshot.units.push(UnitRecord {
            id: format!("u{d:02}"),
            parent: (d > 0).then(|| format!("u{:02}", d - 1)),
            display_name: None,
            created_at: "2026-01-01T00:00:00Z".into(),
        });
    }
    for i in 0..BINDINGS {
        let unit = format!("u{:02}", i % DEPTH);
        let slug: connector_model::ids::Slug = format!("c{i:03}").parse().expect("a slug");
        snapshot.bindings.push(BindingRecord {
            unit_id: unit.clone(),
            connector: slug.to_string(),
            config: json!({}),
            routing_keys: vec![],
            bound_at: "2026-01-01T00:00:00Z".into(),
        });
        snapshot.grants.push(GrantRecord::of_binding(
            &unit,
            &slug,
            &format!("ns{i:03}"),
            "2026-01-01T00:00:00Z".into(),
        ));
    }
    snapshot.agents.push(AgentRecord {
        id: "agent".into(),
        units: vec![format!("u{:02}", DEPTH - 1)],
        display_name: None,
        created_at: "2026-01-01T00:00:00Z".into(),
        token_epoch: String::new(),
    });
    Chain {
        connectors,
        directory: Directory::from_snapshot(&mut snapshot),
        runtime,
    }
}
