//! Faults injected by the database itself, between two writes of one store call.
//!
//! A store proves that a call is one transaction when a failure after its first write
//! leaves nothing of it behind. The failure is made by the database, with a trigger on
//! the table of the call's second write that raises an error, so the stores under test
//! carry no test hooks: what runs is exactly what ships. A fault stays armed until it is
//! disarmed (or replaced); it fires for every handle on the database.

use connector_store::StoreError;

/// Where a store call fails.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// `put_binding`: after the binding row is written, at its grant.
    AfterBindingWrite,
    /// `delete_binding`: after the binding row is deleted, at its grants.
    AfterBindingDelete,
    /// `put_connector` and `rotate_connector`: after the connector row is written, at the
    /// re-derivation of its grants (a connector with grants).
    AfterConnectorWrite,
    /// `delete_unit`: after the unit is deleted, at its change-log entry (the bump of the
    /// state version); every other write's entry is written.
    AfterUnitDelete,
    /// `complete_delivery` and `insert_routed_delivery`: after the first message of a
    /// delivery is written, at its second.
    AfterMessagesWrite,
    /// Any write of a message into an inbox (a delivery then stays unfinished).
    InboxWrite,
    /// The audit record of a credential a guest asked for (`secret.read`,
    /// `installation_token.mint`); every other record is written.
    CredentialRecord,
    /// The audit record of a webhook delivery (`delivery.*`); every other record is
    /// written.
    DeliveryRecord,
}

/// What every injected failure says (in the store's error, whatever its kind).
pub const INJECTED: &str = "injected fault";

/// Whether `error` is an injected failure.
pub fn is_injected(error: &StoreError) -> bool {
    error.to_string().contains(INJECTED)
}

/// The trigger's name: one fault at a time per database.
const TRIGGER: &str = "injected_fault";

/// The table and timing of the trigger of `fault`, and the condition it fires on.
fn trigger_of(fault: Fault) -> (&'static str, &'static str, Option<&'static str>) {
    match fault {
        Fault::AfterBindingWrite => ("BEFORE INSERT", "grants", None),
        Fault::AfterBindingDelete => ("BEFORE DELETE", "grants", None),
        Fault::AfterConnectorWrite => ("BEFORE UPDATE", "grants", None),
        Fault::AfterUnitDelete => (
            "BEFORE INSERT",
            "state_changes",
            Some(r#"NEW.change LIKE '%"write":"delete_unit"%'"#),
        ),
        Fault::AfterMessagesWrite => (
            "AFTER INSERT",
            "messages",
            Some(
                "(SELECT count(*) FROM messages m
                  WHERE m.connector = NEW.connector AND m.delivery_id = NEW.delivery_id) >= 2",
            ),
        ),
        Fault::InboxWrite => ("AFTER INSERT", "messages", None),
        Fault::CredentialRecord => (
            "BEFORE INSERT",
            "audit_log",
            Some("NEW.action IN ('secret.read', 'installation_token.mint')"),
        ),
        Fault::DeliveryRecord => (
            "BEFORE INSERT",
            "audit_log",
            Some("NEW.action LIKE 'delivery.%'"),
        ),
    }
}

/// Arms `fault` (or with `None` disarms) in the SQLite database at `path`.
pub fn inject_sqlite(path: &std::path::Path, fault: Option<Fault>) -> rusqlite::Result<()> {
    let conn = rusqlite::Connection::open(path)?;
    conn.busy_timeout(std::time::Duration::from_secs(10))?;
    conn.execute_batch(&format!("DROP TRIGGER IF EXISTS {TRIGGER};"))?;
    if let Some(fault) = fault {
        let (timing, table, when) = trigger_of(fault);
        let when = when.map(|w| format!("WHEN {w}")).unwrap_or_default();
        conn.execute_batch(&format!(
            "CREATE TRIGGER {TRIGGER} {timing} ON {table} FOR EACH ROW {when}
             BEGIN SELECT RAISE(ABORT, '{INJECTED}: {fault:?}'); END;"
        ))?;
    }
    Ok(())
}

/// Arms `fault` (or with `None` disarms) in the PostgreSQL database at `url`.
#[cfg(feature = "postgres")]
pub async fn inject_postgres(url: &str, fault: Option<Fault>) -> Result<(), tokio_postgres::Error> {
    let (client, connection) = tokio_postgres::connect(url, tokio_postgres::NoTls).await?;
    let driver = tokio::spawn(connection);
    let tables = ["grants", "state_changes", "messages", "audit_log"];
    for table in tables {
        client
            .batch_execute(&format!("DROP TRIGGER IF EXISTS {TRIGGER} ON {table};"))
            .await?;
    }
    if let Some(fault) = fault {
        // A PostgreSQL trigger's WHEN clause cannot query tables: the condition runs in
        // the function instead.
        let (timing, table, when) = trigger_of(fault);
        let skip = when
            .map(|condition| format!("IF NOT ({condition}) THEN RETURN NEW; END IF;"))
            .unwrap_or_default();
        client
            .batch_execute(&format!(
                "CREATE OR REPLACE FUNCTION {TRIGGER}() RETURNS trigger LANGUAGE plpgsql AS $$
                 BEGIN {skip} RAISE EXCEPTION '{INJECTED}: {fault:?}'; END $$;
                 CREATE TRIGGER {TRIGGER} {timing} ON {table} FOR EACH ROW
                 EXECUTE FUNCTION {TRIGGER}();"
            ))
            .await?;
    }
    drop(client);
    let _ = driver.await;
    Ok(())
}
