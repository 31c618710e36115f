//! What the host persists and keeps in memory: connectors, units, agents, bindings,
//! grants, image tools, webhook deliveries and unit messages, as plain records shared by
//! the store that writes them and the parts that read them.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::ids::Slug;
use crate::provenance::GrantProvenance;

/// An installed connector, as persisted. Its component's bytes are stored beside it and
/// read only when needed ([`StateStore::component`]): a replica catching up with another's
/// write reads the bytes of a connector whose digest it has not prepared, never all of them.
#[derive(Debug, Clone, PartialEq)]
pub struct ConnectorRecord {
    /// Its slug.
    pub slug: String,
    /// Its tool namespace.
    pub namespace: String,
    /// `sha256:<hex>` of the component's bytes.
    pub digest: String,
    /// Whether it ships inside the host binary.
    pub bundled: bool,
    /// RFC 3339.
    pub installed_at: String,
    /// The connector's description as the host that installed it validated it (the
    /// contract's `Connector` object), so another host can serve it before compiling its
    /// component. `None` for connectors stored before descriptions were kept.
    pub manifest: Option<Value>,
}

/// A unit (units nest through `parent`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct UnitRecord {
    /// The unit's id.
    pub id: String,
    /// The unit it is nested in.
    pub parent: Option<String>,
    /// A name for people.
    pub display_name: Option<String>,
    /// RFC 3339.
    pub created_at: String,
}

/// An agent and the units it belongs to (first = primary).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AgentRecord {
    /// The agent's id.
    pub id: String,
    /// Its units, primary first.
    pub units: Vec<String>,
    /// A name for people.
    pub display_name: Option<String>,
    /// RFC 3339.
    pub created_at: String,
    /// Agent tokens are good only while they carry this value: revoking them (or deleting
    /// and re-creating the agent) sets a new one. Empty for agents stored before
    /// revocation existed (tokens minted without one match it).
    #[serde(default)]
    pub token_epoch: String,
}

/// A connector bound to a unit.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BindingRecord {
    /// The unit it is bound to.
    pub unit_id: String,
    /// The connector's slug.
    pub connector: String,
    /// The operator's config (secrets included: never shown as is).
    pub config: Value,
    /// What the connector's `bind` returned: webhook routing keys.
    pub routing_keys: Vec<String>,
    /// RFC 3339.
    pub bound_at: String,
}

/// Whom a grant is for.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(tag = "kind", content = "id", rename_all = "lowercase")]
pub enum Subject {
    /// A unit, by id.
    Unit(String),
    /// An agent, by id.
    Agent(String),
}

/// A grant of one tool id or of a whole namespace (`<ns>.*`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GrantRecord {
    /// Who holds it.
    pub subject: Subject,
    /// A tool id, or `<namespace>.*`.
    pub tool: String,
    /// The namespace the grant is in.
    pub namespace: String,
    /// Who made it: an operator, or a binding of a connector.
    pub provenance: GrantProvenance,
    /// RFC 3339.
    pub created_at: String,
}

impl GrantRecord {
    /// The grant a binding of connector `slug` gives `unit`: every tool of `namespace`.
    pub fn of_binding(unit: &str, slug: &Slug, namespace: &str, created_at: String) -> Self {
        GrantRecord {
            subject: Subject::Unit(unit.to_string()),
            tool: whole_namespace(namespace),
            namespace: namespace.to_string(),
            provenance: GrantProvenance::Connector(slug.clone()),
            created_at,
        }
    }
}

/// `<namespace>.*`: every tool of `namespace`, as a grant names it.
pub fn whole_namespace(namespace: &str) -> String {
    format!("{namespace}.*")
}

/// What [`rederive`] changes of one connector's grants.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rederived<K> {
    /// The grants that go (their keys, in the order given).
    pub dropped: Vec<K>,
    /// What every grant that stays grants now: [`whole_namespace`] of the namespace.
    pub tool: String,
    /// The namespace every grant that stays is in now.
    pub namespace: String,
}

/// The one rule for a connector's grants when its tools move to `namespace` (a rotation
/// that changes the namespace; any put of the connector): each subject keeps exactly one
/// grant of the connector, the first it was given (so its creation time and its place
/// among the grants stay), now of all of `namespace`; any other grant of the connector the
/// subject holds (a stale grant of one tool) goes. `grants` are the connector's grants in
/// the order they were made, each as a key the caller finds it by and its subject.
///
/// Every store and the in-memory directory apply this, so they never disagree on which
/// grant survives.
pub fn rederive<K, S: Eq + std::hash::Hash>(
    namespace: &str,
    grants: impl IntoIterator<Item = (K, S)>,
) -> Rederived<K> {
    let mut holders = std::collections::HashSet::new();
    let dropped = grants
        .into_iter()
        .filter_map(|(key, subject)| (!holders.insert(subject)).then_some(key))
        .collect();
    Rederived {
        dropped,
        tool: whole_namespace(namespace),
        namespace: namespace.to_string(),
    }
}

/// The tools an agent's container image declares.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ImageToolsRecord {
    /// The agent whose image it is.
    pub agent_id: String,
    /// The image's digest.
    pub digest: String,
    /// `[{name, description, inputSchema}]`.
    pub tools: Value,
}

/// Where a webhook delivery stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum DeliveryStatus {
    /// Stored, not yet routed.
    Pending,
    /// Routed; its messages are stored.
    Done,
    /// Translation or routing failed; kept for a retry.
    Failed,
}

impl DeliveryStatus {
    /// The status as stored and shown (`pending`, `done`, `failed`).
    pub fn as_str(self) -> &'static str {
        match self {
            DeliveryStatus::Pending => "pending",
            DeliveryStatus::Done => "done",
            DeliveryStatus::Failed => "failed",
        }
    }
}

/// A verified inbound webhook, stored before it is acknowledged.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeliveryRecord {
    /// The connector it was sent to.
    pub connector: String,
    /// The sender's delivery id.
    pub delivery_id: String,
    /// The event name, when the scheme carries one.
    pub event: Option<String>,
    /// Request headers, names lower-cased.
    pub headers: Vec<(String, String)>,
    /// The raw body.
    pub body: Vec<u8>,
    /// Unix seconds of receipt (de-duplication window).
    pub received_unix: i64,
    /// RFC 3339 of receipt.
    pub received_at: String,
    /// Where it stands.
    pub status: DeliveryStatus,
    /// How many times it was routed or tried.
    pub attempts: u32,
    /// The last failure, if it failed.
    pub error: Option<String>,
    /// Units that received messages.
    pub routed_to: Vec<String>,
    /// The replica working on it (see [`Claim`]); `None` once done or never claimed.
    pub claimed_by: Option<String>,
    /// Unix seconds until which `claimed_by` holds it; 0 when unclaimed.
    pub claim_until: i64,
}

/// A message delivered into a unit's inbox.
#[derive(Debug, Clone, PartialEq)]
pub struct MessageRecord {
    /// The inbox cursor; assigned by the store (0 before it is stored).
    pub seq: i64,
    /// A unique id.
    pub id: String,
    /// The unit whose inbox holds it.
    pub unit_id: String,
    /// The connector that translated it.
    pub connector: String,
    /// What happened (`<event>.<action>` for GitHub).
    pub kind: String,
    /// The delivery it came from.
    pub delivery_id: String,
    /// Messages of one conversation share it (an issue, a pull request).
    pub thread_key: Option<String>,
    /// The message itself, as the connector wrote it.
    pub payload: Value,
    /// RFC 3339.
    pub received_at: String,
}

/// Everything persisted (but the connectors' component bytes), as loaded at start-up and
/// when another replica changed the state.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Snapshot {
    /// Installed connectors.
    pub connectors: Vec<ConnectorRecord>,
    /// Units.
    pub units: Vec<UnitRecord>,
    /// Agents, in id order (bytewise); every other kind in the order it was stored.
    pub agents: Vec<AgentRecord>,
    /// Bindings.
    pub bindings: Vec<BindingRecord>,
    /// Grants.
    pub grants: Vec<GrantRecord>,
    /// Image tools.
    pub image_tools: Vec<ImageToolsRecord>,
    /// The state version this snapshot reflects (see [`ReplicaCoordination::changes_since`]).
    pub version: i64,
}

/// A replica's hold on a stored delivery: while it lasts no other replica starts the same
/// delivery; when it lapses (the replica died or stalled) any replica may claim it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Claim {
    /// The claiming replica's id (stable across its restarts).
    pub owner: String,
    /// Unix second up to and including which the claim holds (it lapses after it).
    pub until_unix: i64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rederiving_keeps_each_subjects_first_grant() {
        let grants = [
            (1, "team"),
            (2, "root"),
            (3, "team"),
            (4, "team"),
            (5, "ops"),
        ];
        assert_eq!(
            rederive("newns", grants),
            Rederived {
                dropped: vec![3, 4],
                tool: "newns.*".into(),
                namespace: "newns".into(),
            }
        );
        assert!(rederive("x", Vec::<(u8, &str)>::new()).dropped.is_empty());
    }
}
