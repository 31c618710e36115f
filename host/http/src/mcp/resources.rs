//! Events as MCP resources (CONTRACT.md §5): each of the agent's units' inboxes is the
//! resource `spring://units/{unitId}/messages`, read a page at a time (`?after=<cursor>`),
//! and subscribed to (`resources/subscribe` in sessions, `subscriptions/listen` with
//! `resourceSubscriptions` at 2026-07-28) for `notifications/resources/updated`.
//!
//! # Why resources
//!
//! Webhooks routed into a unit's inbox are what an agent reacts to, and MCP has no
//! standard server-initiated event yet; resources with subscriptions are the standard
//! primitive agent runtimes already handle. The notification carries only the URI: the
//! client reads from the cursor it last saw (the `next` of its previous read), so a
//! notification lost with a dropped connection costs nothing, and a message is read
//! exactly once however often the client reconnects.
//!
//! Notifications are pushed from the inbox's own commit signal ([`Host::watch_messages`]):
//! at once for messages stored by this process, and within the store poll (250 ms) for
//! those another replica stored. An agent reaches only the units it is in: another
//! unit's URI is `-32602`, as is one that names no inbox.

use serde_json::{json, Value};

use super::jsonrpc::INVALID_PARAMS;
use connector_core::host::Host;
use connector_model::error::{ErrorCode, HostError};
use connector_model::ids::UnitId;

/// Where every inbox URI starts.
pub const URI_PREFIX: &str = "spring://units/";
/// Where every inbox URI ends (before its query).
const URI_SUFFIX: &str = "/messages";
/// The MIME type of a read's text.
pub const MIME_TYPE: &str = "application/json";
/// How many messages one read returns at most.
const PAGE: u32 = 100;

/// The URI of `unit`'s inbox.
pub fn uri_of(unit: &str) -> String {
    format!("{URI_PREFIX}{unit}{URI_SUFFIX}")
}

/// An inbox URI taken apart.
#[derive(Debug, PartialEq, Eq)]
pub struct InboxUri {
    /// The unit whose inbox it names.
    pub unit: UnitId,
    /// `?after=` (the `next` of a previous read).
    pub after: Option<String>,
}

/// A refusal: the JSON-RPC code, message and data.
pub type Refusal = (i64, String, Value);

fn refuse(uri: &str, message: String) -> Refusal {
    (
        INVALID_PARAMS,
        format!("Invalid params: {message}"),
        json!({ "uri": connector_model::ids::truncate(uri, 200) }),
    )
}

/// Parses `spring://units/{unitId}/messages[?after=<cursor>]`.
pub fn parse(uri: &str) -> Result<InboxUri, Refusal> {
    let unknown = || {
        refuse(
            uri,
            format!(
                "resource `{}` not found: this server's resources are spring://units/{{unitId}}/messages (see resources/list)",
                connector_model::ids::truncate(uri, 100)
            ),
        )
    };
    let rest = uri.strip_prefix(URI_PREFIX).ok_or_else(unknown)?;
    let (path, query) = match rest.split_once('?') {
        Some((p, q)) => (p, Some(q)),
        None => (rest, None),
    };
    let unit = path.strip_suffix(URI_SUFFIX).ok_or_else(unknown)?;
    let unit = UnitId::parse(unit).map_err(|_| unknown())?;
    let mut after = None;
    for pair in query.into_iter().flat_map(|q| q.split('&')) {
        match pair.split_once('=') {
            Some(("after", v)) => after = Some(v.to_string()),
            _ if pair.is_empty() => {}
            _ => {
                return Err(refuse(
                    uri,
                    format!(
                        "`{}` is not a query this resource takes (only `after=<cursor>`)",
                        connector_model::ids::truncate(pair, 60)
                    ),
                ))
            }
        }
    }
    Ok(InboxUri { unit, after })
}

/// The units `agent` is in.
fn units_of(host: &Host, agent: &str) -> Result<Vec<String>, HostError> {
    Ok(host.agent(agent)?.units)
}

/// Checks that `uri` names an inbox of one of `agent`'s units; returns the parsed URI.
pub fn check(host: &Host, agent: &str, uri: &str) -> Result<InboxUri, Refusal> {
    let parsed = parse(uri)?;
    let units = units_of(host, agent).map_err(|e| refuse(uri, e.message))?;
    if !units.iter().any(|unit| *unit == parsed.unit) {
        return Err(refuse(
            uri,
            format!(
                "resource `{}` not found: agent `{agent}` is not in unit `{}`; its units' inboxes are in resources/list",
                connector_model::ids::truncate(uri, 100),
                parsed.unit
            ),
        ));
    }
    Ok(parsed)
}

/// `resources/list`: one resource per unit of the agent.
pub fn list(host: &Host, agent: &str) -> Result<Value, HostError> {
    let resources: Vec<Value> = units_of(host, agent)?
        .iter()
        .map(|unit| {
            json!({
                "uri": uri_of(unit),
                "name": format!("{unit}-messages"),
                "title": format!("Messages of unit {unit}"),
                "description": format!(
                    "Webhook events routed to unit {unit}, oldest first: {{\"messages\": [Message], \"next\": cursor}}. Read again with ?after=<next> for what came since; subscribe to hear of new ones."
                ),
                "mimeType": MIME_TYPE,
            })
        })
        .collect();
    Ok(json!({ "resources": resources }))
}

/// `resources/templates/list`: none (every inbox the agent may read is listed).
pub fn templates() -> Value {
    json!({ "resourceTemplates": [] })
}

/// `resources/read` of an inbox URI: `{"messages": [Message], "next": cursor}` as text.
pub async fn read(host: &Host, agent: &str, params: Option<&Value>) -> Result<Value, Refusal> {
    let uri = uri_param(params)?;
    let parsed = check(host, agent, uri)?;
    let page = host
        .messages(&parsed.unit, parsed.after.as_deref(), Some(PAGE))
        .await
        .map_err(|e| match e.code {
            ErrorCode::InvalidRequest | ErrorCode::NotFound => refuse(uri, e.message),
            _ => (
                super::jsonrpc::INTERNAL_ERROR,
                format!("Internal error: {}", e.message),
                json!({ "code": e.code.as_str() }),
            ),
        })?;
    let text = serde_json::to_string(&page).unwrap_or_default();
    Ok(json!({
        "contents": [{ "uri": uri, "mimeType": MIME_TYPE, "text": text }],
    }))
}

/// `params.uri`, required.
pub fn uri_param(params: Option<&Value>) -> Result<&str, Refusal> {
    params
        .and_then(|p| p.get("uri"))
        .and_then(Value::as_str)
        .ok_or_else(|| {
            (
                INVALID_PARAMS,
                "Invalid params: `uri` (a string) is required".to_string(),
                Value::Null,
            )
        })
}

/// A fingerprint of the resources `agent` lists (its units), for `list_changed`.
pub fn fingerprint(host: &Host, agent: &str) -> Option<u64> {
    use std::hash::{Hash, Hasher};
    let units = units_of(host, agent).ok()?;
    let mut h = std::collections::hash_map::DefaultHasher::new();
    units.hash(&mut h);
    Some(h.finish())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn inbox_uris_parse() {
        assert_eq!(
            parse("spring://units/eng/messages").ok(),
            Some(InboxUri {
                unit: UnitId::parse("eng").expect("an id"),
                after: None
            })
        );
        assert_eq!(
            parse("spring://units/eng.b/messages?after=42").ok(),
            Some(InboxUri {
                unit: UnitId::parse("eng.b").expect("an id"),
                after: Some("42".into())
            })
        );
        for bad in [
            "spring://units/eng",
            "spring://units//messages",
            "spring://units/a/b/messages",
            "test://static-text",
            "spring://units/eng/messages?limit=3",
        ] {
            let (code, _, data) = parse(bad).expect_err(bad);
            assert_eq!(code, -32602, "{bad}");
            assert_eq!(data["uri"], bad);
        }
        assert_eq!(uri_of("eng"), "spring://units/eng/messages");
    }
}
