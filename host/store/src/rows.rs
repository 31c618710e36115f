//! Stored rows back into records, written once for every database (public so that the
//! PostgreSQL store, in its own crate, decodes rows the same way).
//!
//! Each store selects the columns listed here, in this order, and hands every row to the
//! decoder of its record through [`StoredRow`]: what a column means, how JSON text is
//! read back and which values count as corrupt is decided in one place, so SQLite and
//! PostgreSQL cannot read the same data differently.

use super::{decode_json, StoreError, StoreResult};

use connector_model::audit::{Actor, ActorKind, AuditRecord};
use connector_model::records::{
    AgentRecord, BindingRecord, ConnectorRecord, DeliveryRecord, DeliveryStatus, GrantRecord,
    ImageToolsRecord, MessageRecord, Subject, UnitRecord,
};

/// One row as a database driver returns it, read column by column (0-based). A value of
/// the wrong type is [`StoreError::Corrupt`].
pub trait StoredRow {
    /// Column `i` as text.
    fn text(&self, i: usize) -> StoreResult<String>;
    /// Column `i` as text, or `None` for NULL.
    fn opt_text(&self, i: usize) -> StoreResult<Option<String>>;
    /// Column `i` as an integer.
    fn int(&self, i: usize) -> StoreResult<i64>;
    /// Column `i` as bytes.
    fn bytes(&self, i: usize) -> StoreResult<Vec<u8>>;
    /// Column `i` as a boolean.
    fn flag(&self, i: usize) -> StoreResult<bool>;
}

/// A connector's row without its component's bytes (those are read by digest, when
/// needed).
pub const CONNECTOR_COLUMNS: &str = "slug, namespace, digest, bundled, installed_at, manifest";

/// A row of [`CONNECTOR_COLUMNS`] as a record.
pub fn connector(r: &impl StoredRow) -> StoreResult<ConnectorRecord> {
    let slug = r.text(0)?;
    let manifest = r
        .opt_text(5)?
        .map(|text| decode_json(&format!("the description of connector {slug}"), &text))
        .transpose()?;
    Ok(ConnectorRecord {
        namespace: r.text(1)?,
        digest: r.text(2)?,
        bundled: r.flag(3)?,
        installed_at: r.text(4)?,
        manifest,
        slug,
    })
}

/// The columns [`unit`] reads, in order.
pub const UNIT_COLUMNS: &str = "id, parent, display_name, created_at";

/// A row of [`UNIT_COLUMNS`] as a record.
pub fn unit(r: &impl StoredRow) -> StoreResult<UnitRecord> {
    Ok(UnitRecord {
        id: r.text(0)?,
        parent: r.opt_text(1)?,
        display_name: r.opt_text(2)?,
        created_at: r.text(3)?,
    })
}

/// An agent's unit memberships, in order (first = primary).
pub const MEMBERSHIP_COLUMNS: &str = "agent_id, unit_id";

/// A row of [`MEMBERSHIP_COLUMNS`]: (agent id, unit id).
pub fn membership(r: &impl StoredRow) -> StoreResult<(String, String)> {
    Ok((r.text(0)?, r.text(1)?))
}

/// The columns [`agent`] reads, in order.
pub const AGENT_COLUMNS: &str = "id, display_name, created_at, token_epoch";

/// Every agent's row as a snapshot reads them: in id order, bytewise (`id` is how the
/// database sorts its `id` column that way). The directory keeps agents sorted by id, so
/// building it from a million agents in this order sorts nothing.
pub fn agents_sql(id: &str) -> String {
    format!("SELECT {AGENT_COLUMNS} FROM agents ORDER BY {id}")
}

/// Agents' unit memberships as a snapshot reads them, before their agents: rows of
/// [`MEMBERSHIP_COLUMNS`] in agent id order (bytewise), each agent's in position order,
/// grouped by agent. Each agent's units are taken when its row is read ([`agent`]).
/// A sorted list rather than a hash map: at a million agents the map held about twice
/// the memory while a start filled it, and hashed every row twice.
#[derive(Debug, Default)]
pub struct Memberships {
    by_agent: Vec<(String, Vec<String>)>,
    /// A row came before the previous one's agent (another collation than bytewise):
    /// the groups are sorted (stably) and merged before the first lookup.
    out_of_order: bool,
}

impl Memberships {
    /// Adds one row (agent id, unit id).
    pub fn push(&mut self, (agent, unit): (String, String)) {
        match self.by_agent.last_mut() {
            Some((last, units)) if *last == agent => units.push(unit),
            last => {
                if last.is_some_and(|(last, _)| agent < *last) {
                    self.out_of_order = true;
                }
                self.by_agent.push((agent, vec![unit]));
            }
        }
    }

    /// Agent `id`'s units in position order, taken (empty when it has none).
    fn take(&mut self, id: &str) -> Vec<String> {
        if std::mem::take(&mut self.out_of_order) {
            // Stable: an agent's groups keep their order, so merged they keep positions.
            self.by_agent.sort_by(|a, b| a.0.cmp(&b.0));
            let mut merged: Vec<(String, Vec<String>)> = Vec::with_capacity(self.by_agent.len());
            for (agent, units) in self.by_agent.drain(..) {
                match merged.last_mut() {
                    Some((last, kept)) if *last == agent => kept.extend(units),
                    _ => merged.push((agent, units)),
                }
            }
            self.by_agent = merged;
        }
        match self
            .by_agent
            .binary_search_by(|(agent, _)| agent.as_str().cmp(id))
        {
            Ok(at) => std::mem::take(&mut self.by_agent[at].1),
            Err(_) => Vec::new(),
        }
    }
}

/// An agent with its units taken from `memberships`.
pub fn agent(r: &impl StoredRow, memberships: &mut Memberships) -> StoreResult<AgentRecord> {
    let id = r.text(0)?;
    Ok(AgentRecord {
        units: memberships.take(&id),
        id,
        display_name: r.opt_text(1)?,
        created_at: r.text(2)?,
        token_epoch: r.text(3)?,
    })
}

/// The columns [`binding`] reads, in order.
pub const BINDING_COLUMNS: &str = "unit_id, connector, config, routing_keys, bound_at";

/// A row of [`BINDING_COLUMNS`] as a record.
pub fn binding(r: &impl StoredRow) -> StoreResult<BindingRecord> {
    let unit_id = r.text(0)?;
    let connector = r.text(1)?;
    let what = format!("the binding of {connector} to unit {unit_id}");
    Ok(BindingRecord {
        config: decode_json(&format!("the config of {what}"), &r.text(2)?)?,
        routing_keys: decode_json(&format!("the routing keys of {what}"), &r.text(3)?)?,
        bound_at: r.text(4)?,
        unit_id,
        connector,
    })
}

/// The columns [`grant`] reads, in order.
pub const GRANT_COLUMNS: &str = "subject_kind, subject_id, tool, namespace, provenance, created_at";

/// A row of [`GRANT_COLUMNS`] as a record.
pub fn grant(r: &impl StoredRow) -> StoreResult<GrantRecord> {
    let kind = r.text(0)?;
    let id = r.text(1)?;
    let tool = r.text(2)?;
    let subject = match kind.as_str() {
        "unit" => Subject::Unit(id),
        "agent" => Subject::Agent(id),
        other => {
            return Err(StoreError::Corrupt(format!(
                "a grant of {tool} has the unknown subject kind {other:?}"
            )))
        }
    };
    let provenance = r.text(4)?.parse().map_err(|e| {
        StoreError::Corrupt(format!("a grant of {tool} has a malformed provenance: {e}"))
    })?;
    Ok(GrantRecord {
        subject,
        tool,
        namespace: r.text(3)?,
        provenance,
        created_at: r.text(5)?,
    })
}

/// The columns [`image_tools`] reads, in order.
pub const IMAGE_TOOLS_COLUMNS: &str = "agent_id, digest, tools";

/// A row of [`IMAGE_TOOLS_COLUMNS`] as a record.
pub fn image_tools(r: &impl StoredRow) -> StoreResult<ImageToolsRecord> {
    let agent_id = r.text(0)?;
    Ok(ImageToolsRecord {
        tools: decode_json(&format!("the image tools of agent {agent_id}"), &r.text(2)?)?,
        agent_id,
        digest: r.text(1)?,
    })
}

/// The columns [`delivery`] reads, in order.
pub const DELIVERY_COLUMNS: &str = "connector, delivery_id, event, headers, body, \
     received_unix, received_at, status, attempts, error, routed_to, claimed_by, claim_until";

/// A row of [`DELIVERY_COLUMNS`] as a record.
pub fn delivery(r: &impl StoredRow) -> StoreResult<DeliveryRecord> {
    let delivery_id = r.text(1)?;
    let status = match r.text(7)?.as_str() {
        "pending" => DeliveryStatus::Pending,
        "done" => DeliveryStatus::Done,
        "failed" => DeliveryStatus::Failed,
        other => {
            return Err(StoreError::Corrupt(format!(
                "delivery {delivery_id} has unknown status `{other}`"
            )))
        }
    };
    let attempts = r.int(8)?;
    Ok(DeliveryRecord {
        connector: r.text(0)?,
        event: r.opt_text(2)?,
        headers: decode_json("delivery headers", &r.text(3)?)?,
        body: r.bytes(4)?,
        received_unix: r.int(5)?,
        received_at: r.text(6)?,
        status,
        attempts: u32::try_from(attempts).map_err(|_| {
            StoreError::Corrupt(format!("delivery {delivery_id} has {attempts} attempts"))
        })?,
        error: r.opt_text(9)?,
        routed_to: decode_json("delivery routed_to", &r.text(10)?)?,
        claimed_by: r.opt_text(11)?,
        claim_until: r.int(12)?,
        delivery_id,
    })
}

/// The columns [`message`] reads, in order.
pub const MESSAGE_COLUMNS: &str =
    "seq, id, unit_id, connector, kind, delivery_id, thread_key, payload, received_at";

/// A row of [`MESSAGE_COLUMNS`] as a record.
pub fn message(r: &impl StoredRow) -> StoreResult<MessageRecord> {
    Ok(MessageRecord {
        seq: r.int(0)?,
        id: r.text(1)?,
        unit_id: r.text(2)?,
        connector: r.text(3)?,
        kind: r.text(4)?,
        delivery_id: r.text(5)?,
        thread_key: r.opt_text(6)?,
        payload: decode_json("message payload", &r.text(7)?)?,
        received_at: r.text(8)?,
    })
}

/// An audit record's row.
pub const AUDIT_COLUMNS: &str =
    "seq, at, actor_kind, actor_id, action, target, outcome, details, trace_id, prev, hash";

/// A row of [`AUDIT_COLUMNS`] as a record. A row whose actor kind is not one the
/// contract names is [`StoreError::Corrupt`]; one whose details were edited still reads
/// (the chain check is what finds it).
pub fn audit_record(r: &impl StoredRow) -> StoreResult<AuditRecord> {
    let kind = r.text(2)?;
    let kind = ActorKind::parse(&kind).ok_or_else(|| {
        StoreError::Corrupt(format!(
            "an audit record names an unknown actor kind `{kind}`"
        ))
    })?;
    let details = r.text(7)?;
    Ok(AuditRecord {
        seq: r.int(0)?,
        at: r.text(1)?,
        actor: Actor {
            kind,
            id: r.opt_text(3)?,
        },
        action: r.text(4)?,
        target: r.text(5)?,
        outcome: r.text(6)?,
        // Text that is no longer JSON stays visible as a string (and breaks the chain).
        details: serde_json::from_str(&details).unwrap_or(serde_json::Value::String(details)),
        trace_id: r.opt_text(8)?,
        prev: r.text(9)?,
        hash: r.text(10)?,
    })
}

#[cfg(test)]
mod tests {
    use super::Memberships;

    fn rows(rows: &[(&str, &str)]) -> Memberships {
        let mut m = Memberships::default();
        for (agent, unit) in rows {
            m.push((agent.to_string(), unit.to_string()));
        }
        m
    }

    #[test]
    fn each_agent_gets_its_units_in_position_order_once() {
        let mut m = rows(&[("a", "u1"), ("a", "u2"), ("b-x", "u3"), ("b_y", "u1")]);
        assert_eq!(m.take("b-x"), ["u3"]);
        assert_eq!(m.take("a"), ["u1", "u2"]);
        assert_eq!(m.take("b_y"), ["u1"]);
        assert!(m.take("a").is_empty(), "taken once");
        assert!(m.take("nobody").is_empty());
    }

    /// Rows in another collation's order (an agent's rows apart, ids out of byte
    /// order) are found all the same, each agent's units still in the order read.
    #[test]
    fn rows_out_of_byte_order_are_sorted_and_merged_before_the_first_lookup() {
        let mut m = rows(&[
            ("b_y", "u1"),
            ("b-x", "u3"),
            ("a", "u1"),
            ("b_y", "u2"),
            ("a", "u9"),
        ]);
        assert_eq!(m.take("a"), ["u1", "u9"]);
        assert_eq!(m.take("b_y"), ["u1", "u2"]);
        assert_eq!(m.take("b-x"), ["u3"]);
    }
}
