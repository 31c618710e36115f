//! What the operator trusts (CONTRACT.md §10): the signature policy a component must
//! meet, and the tool definitions a rotation may not change silently.
//!
//! A tool's description and schemas are what a model reads and trusts; a new version that
//! rewrites them after the operator approved the connector (a "rug pull") is the risk
//! `trust.pin_tool_definitions` guards against. Every rotation reports its changes
//! ([`tool_changes`]); with the pin on, a rotation with any is refused unless the
//! operator accepts them.

use serde::Serialize;
use serde_json::{json, Value};

use crate::config::TrustSettings;
use connector_model::connector::{Connector, ToolInfo};
use connector_model::error::{ErrorCode, HostError, HostResult};

/// One change of a tool's definition between two versions of a connector.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ToolChange {
    /// The tool id.
    pub tool: String,
    /// `added`, `removed`, `description`, `inputSchema`, `outputSchema` or `annotations`.
    pub field: &'static str,
    /// The value before (`null` for an added tool).
    pub before: Value,
    /// The value after (`null` for a removed tool).
    pub after: Value,
}

/// What differs in the tools of `after` from those of `before`, tool by tool in the new
/// version's order (removed tools last).
pub fn tool_changes(before: &Connector, after: &Connector) -> Vec<ToolChange> {
    let mut changes = Vec::new();
    let old = |name: &str| before.tools.iter().find(|t| t.name == name);
    for tool in &after.tools {
        let Some(was) = old(&tool.name) else {
            changes.push(ToolChange {
                tool: tool.name.clone(),
                field: "added",
                before: Value::Null,
                after: tool_json(tool),
            });
            continue;
        };
        let mut field = |field: &'static str, before: Value, after: Value| {
            if before != after {
                changes.push(ToolChange {
                    tool: tool.name.clone(),
                    field,
                    before,
                    after,
                });
            }
        };
        field(
            "description",
            json!(was.description),
            json!(tool.description),
        );
        field(
            "inputSchema",
            was.input_schema.clone(),
            tool.input_schema.clone(),
        );
        field(
            "outputSchema",
            was.output_schema.clone().unwrap_or(Value::Null),
            tool.output_schema.clone().unwrap_or(Value::Null),
        );
        field(
            "annotations",
            json!(was.annotations),
            json!(tool.annotations),
        );
    }
    for was in &before.tools {
        if !after.tools.iter().any(|t| t.name == was.name) {
            changes.push(ToolChange {
                tool: was.name.clone(),
                field: "removed",
                before: tool_json(was),
                after: Value::Null,
            });
        }
    }
    changes
}

fn tool_json(tool: &ToolInfo) -> Value {
    serde_json::to_value(tool).unwrap_or(Value::Null)
}

/// Refuses a rotation of `slug` with `changes` when the operator pins tool definitions
/// and did not accept them (`409 tool_definitions_changed`, the changes in `details`).
pub(crate) fn check_pinned(
    trust: &TrustSettings,
    slug: &str,
    changes: &[ToolChange],
    accepted: bool,
) -> HostResult<()> {
    if !trust.pin_tool_definitions || accepted || changes.is_empty() {
        return Ok(());
    }
    Err(HostError::new(
        ErrorCode::ToolDefinitionsChanged,
        format!(
            "the new version of `{slug}` changes {} tool definition(s) and this host pins them (trust.pin_tool_definitions); review the changes and install again with ?acceptToolChanges=true to accept them",
            changes.len()
        ),
    )
    .with_details(json!({"toolChanges": changes})))
}

/// What the signatures of a component to install say. (Without the `oci` feature every
/// component is an upload, and has none.)
#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(not(feature = "oci"), allow(dead_code))]
pub(crate) enum Signatures {
    /// Signed by this trusted key.
    SignedBy(String),
    /// No signature at all (uploads, unsigned artifacts).
    None,
    /// Signatures that verify with no trusted key; why.
    Invalid(String),
}

/// The signature policy: with `trust.require_signatures`, a component without a
/// signature is refused `403 signature_required` and one whose signatures verify with no
/// trusted key `403 signature_invalid`; without it nothing is refused for its
/// signatures. Returns the trusted key that signed it.
pub(crate) fn check_signatures(
    trust: &TrustSettings,
    what: &str,
    signatures: Signatures,
) -> HostResult<Option<String>> {
    match signatures {
        Signatures::SignedBy(key) => Ok(Some(key)),
        Signatures::None if trust.require_signatures => Err(HostError::new(
            ErrorCode::SignatureRequired,
            format!(
                "{what} carries no signature and this host requires one (trust.require_signatures): publish it to a registry signed by a trusted key (`connector-host push FILE.wasm oci://… --sign KEY`) and install it from there"
            ),
        )),
        Signatures::Invalid(why) if trust.require_signatures => Err(HostError::new(
            ErrorCode::SignatureInvalid,
            format!("{what} is not signed by a trusted key (trust.keys): {why}"),
        )),
        Signatures::None | Signatures::Invalid(_) => Ok(None),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use connector_model::connector::ToolAnnotations;

    fn connector(tools: Vec<ToolInfo>) -> Connector {
        serde_json::from_value(json!({
            "slug": "acme", "toolNamespace": "acme", "displayName": "Acme",
            "description": "", "version": "1", "digest": "sha256:00",
            "tools": tools, "configSchema": {}, "webhook": null, "allowedHosts": []
        }))
        .unwrap()
    }

    fn tool(name: &str, description: &str) -> ToolInfo {
        ToolInfo {
            name: name.into(),
            description: description.into(),
            input_schema: json!({"type": "object"}),
            annotations: ToolAnnotations::default(),
            output_schema: None,
        }
    }

    #[test]
    fn changes_name_each_field_and_tool() {
        let before = connector(vec![tool("acme.a", "one"), tool("acme.gone", "x")]);
        let mut changed = tool("acme.a", "two");
        changed.annotations.read_only_hint = true;
        let after = connector(vec![changed, tool("acme.new", "n")]);
        let changes = tool_changes(&before, &after);
        let fields: Vec<(&str, &str)> =
            changes.iter().map(|c| (c.tool.as_str(), c.field)).collect();
        assert_eq!(
            fields,
            [
                ("acme.a", "description"),
                ("acme.a", "annotations"),
                ("acme.new", "added"),
                ("acme.gone", "removed")
            ]
        );
        assert_eq!(changes[0].before, json!("one"));
        assert_eq!(changes[0].after, json!("two"));
        assert!(tool_changes(&before, &before).is_empty());
    }

    #[test]
    fn the_pin_refuses_only_unaccepted_changes() {
        let pinned = TrustSettings {
            pin_tool_definitions: true,
            ..Default::default()
        };
        let change = tool_changes(
            &connector(vec![tool("acme.a", "one")]),
            &connector(vec![tool("acme.a", "two")]),
        );
        let err = check_pinned(&pinned, "acme", &change, false).unwrap_err();
        assert_eq!(err.code, ErrorCode::ToolDefinitionsChanged);
        assert!(check_pinned(&pinned, "acme", &change, true).is_ok());
        assert!(check_pinned(&pinned, "acme", &[], false).is_ok());
        assert!(check_pinned(&TrustSettings::default(), "acme", &change, false).is_ok());
    }
}
