//! What a connector declares, checked against the naming rules of the contract.
//!
//! A component describes itself through the WIT `describe` export. Nothing it says is
//! trusted: every id, the namespace, the slug and every schema are checked here before
//! the component is installed, and a breach rejects the whole component with an error
//! that names the offending id and the rule it broke. A connector whose tools fell
//! outside its namespace must never install and silently grant nothing.

use std::collections::HashSet;
use std::fmt;

use connector_model::connector::{
    is_namespace, is_tool_id, Connector, ToolAnnotations, ToolInfo, WebhookInfo, WebhookSchemeName,
    NAMESPACE_RULE, RESERVED_NAMESPACE, SLUG_RULE, TOOL_ID_RULE,
};
use connector_model::ids::Slug;
use serde_json::Value;

use connector_runtime::wit;

/// A rule of the contract a manifest broke.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ManifestError {
    /// The slug breaks the id rules.
    InvalidSlug {
        /// The slug.
        slug: String,
    },
    /// The namespace breaks the id rules.
    InvalidNamespace {
        /// The namespace.
        namespace: String,
    },
    /// The namespace is one the platform keeps (`sv`).
    ReservedNamespace {
        /// The namespace.
        namespace: String,
    },
    /// A tool id breaks the id rules.
    InvalidToolId {
        /// The tool id.
        id: String,
    },
    /// A tool id is outside the connector's namespace.
    OutsideNamespace {
        /// The tool id.
        id: String,
        /// The connector's namespace.
        namespace: String,
    },
    /// Two tools share an id.
    DuplicateToolId {
        /// The tool id.
        id: String,
    },
    /// A schema is not a usable JSON Schema.
    InvalidSchema {
        /// Whose schema (a tool id, or `config`).
        owner: String,
        /// Why.
        reason: String,
    },
}

impl fmt::Display for ManifestError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ManifestError::InvalidSlug { slug } => write!(f, "slug `{slug}` is invalid: a slug must match {SLUG_RULE}"),
            ManifestError::InvalidNamespace { namespace } => write!(
                f,
                "tool namespace `{namespace}` is invalid: a namespace must be one tool-id segment matching {NAMESPACE_RULE}"
            ),
            ManifestError::ReservedNamespace { namespace } => write!(
                f,
                "tool namespace `{namespace}` is reserved for the platform; choose another namespace"
            ),
            ManifestError::InvalidToolId { id } => write!(f, "tool id `{id}` is invalid: a tool id must match {TOOL_ID_RULE}"),
            ManifestError::OutsideNamespace { id, namespace } => write!(
                f,
                "tool id `{id}` is outside the connector's namespace `{namespace}`: every tool must be named `{namespace}.<name>`"
            ),
            ManifestError::DuplicateToolId { id } => write!(f, "tool id `{id}` is declared more than once: tool ids must be unique"),
            ManifestError::InvalidSchema { owner, reason } => write!(f, "the JSON Schema of `{owner}` is invalid: {reason}"),
        }
    }
}

impl std::error::Error for ManifestError {}

impl ManifestError {
    /// The id (slug, namespace or tool id) the error is about.
    pub fn offending_id(&self) -> &str {
        match self {
            ManifestError::InvalidSlug { slug } => slug,
            ManifestError::InvalidNamespace { namespace }
            | ManifestError::ReservedNamespace { namespace } => namespace,
            ManifestError::InvalidToolId { id }
            | ManifestError::OutsideNamespace { id, .. }
            | ManifestError::DuplicateToolId { id } => id,
            ManifestError::InvalidSchema { owner, .. } => owner,
        }
    }

    /// A short machine-readable name of the rule.
    pub fn rule(&self) -> &'static str {
        match self {
            ManifestError::InvalidSlug { .. } => "slug_pattern",
            ManifestError::InvalidNamespace { .. } => "namespace_pattern",
            ManifestError::ReservedNamespace { .. } => "reserved_namespace",
            ManifestError::InvalidToolId { .. } => "tool_id_pattern",
            ManifestError::OutsideNamespace { .. } => "tool_outside_namespace",
            ManifestError::DuplicateToolId { .. } => "duplicate_tool_id",
            ManifestError::InvalidSchema { .. } => "invalid_json_schema",
        }
    }
}

fn parse_schema(owner: &str, text: &str) -> Result<Value, ManifestError> {
    let value: Value = serde_json::from_str(text).map_err(|e| ManifestError::InvalidSchema {
        owner: owner.to_string(),
        reason: format!("not JSON: {e}"),
    })?;
    if !value.is_object() && !value.is_boolean() {
        return Err(ManifestError::InvalidSchema {
            owner: owner.to_string(),
            reason: "a JSON Schema must be an object or a boolean".into(),
        });
    }
    if let Err(e) = jsonschema::meta::validate(&value) {
        return Err(ManifestError::InvalidSchema {
            owner: owner.to_string(),
            reason: e.to_string(),
        });
    }
    Ok(value)
}

/// An output schema: a JSON Schema whose root is an object schema (`"type": "object"`),
/// as MCP requires of `outputSchema`.
fn parse_output_schema(tool: &str, text: &str) -> Result<Value, ManifestError> {
    let schema = parse_schema(tool, text).map_err(|e| match e {
        ManifestError::InvalidSchema { owner, reason } => ManifestError::InvalidSchema {
            owner,
            reason: format!("its output schema: {reason}"),
        },
        other => other,
    })?;
    if schema.get("type").and_then(Value::as_str) != Some("object") {
        return Err(ManifestError::InvalidSchema {
            owner: tool.to_string(),
            reason: "its output schema must be an object schema with `\"type\": \"object\"` at its root (MCP's rule for outputSchema)".into(),
        });
    }
    Ok(schema)
}

/// Where a schema sits relative to the root of a tool's input schema.
#[derive(Clone, Copy, PartialEq)]
enum Reach {
    Root,
    /// Reached from the root through `properties` keys only.
    Property,
    /// Anywhere else (`items`, `oneOf`, `$defs`, ...).
    Elsewhere,
}

/// Checks the `x-mcp-header` annotations of a tool's input schema (MCP 2026-07-28): each
/// is a non-empty HTTP token, unique ignoring case, on a `string`, `integer` or `boolean`
/// property reached from the root through `properties` only. Clients drop a tool that
/// breaks one of these, and the host could never accept a call that needs such a header,
/// so the component is refused instead.
fn check_mirrored_headers(owner: &str, schema: &Value) -> Result<(), ManifestError> {
    fn is_token(name: &str) -> bool {
        !name.is_empty()
            && name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b))
    }
    fn walk(
        schema: &Value,
        reach: Reach,
        seen: &mut Vec<String>,
    ) -> Result<(), MirroredHeaderProblem> {
        match schema {
            Value::Object(map) => {
                if let Some(name) = map.get("x-mcp-header") {
                    if reach != Reach::Property {
                        return Err(MirroredHeaderProblem::NotAProperty);
                    }
                    let Some(name) = name.as_str().filter(|n| is_token(n)) else {
                        return Err(MirroredHeaderProblem::NotAToken(name.to_string()));
                    };
                    if !matches!(
                        map.get("type").and_then(Value::as_str),
                        Some("string" | "integer" | "boolean")
                    ) {
                        return Err(MirroredHeaderProblem::NotAScalar(name.to_string()));
                    }
                    if seen.iter().any(|s| s.eq_ignore_ascii_case(name)) {
                        return Err(MirroredHeaderProblem::Twice(name.to_string()));
                    }
                    seen.push(name.to_string());
                }
                for (key, value) in map {
                    match (key.as_str(), value) {
                        ("properties", Value::Object(properties)) if reach != Reach::Elsewhere => {
                            for property in properties.values() {
                                walk(property, Reach::Property, seen)?;
                            }
                        }
                        _ => walk(value, Reach::Elsewhere, seen)?,
                    }
                }
                Ok(())
            }
            Value::Array(items) => items
                .iter()
                .try_for_each(|item| walk(item, Reach::Elsewhere, seen)),
            _ => Ok(()),
        }
    }
    walk(schema, Reach::Root, &mut Vec::new()).map_err(|problem| ManifestError::InvalidSchema {
        owner: owner.to_string(),
        reason: problem.to_string(),
    })
}

/// How an `x-mcp-header` annotation breaks the rules [`check_mirrored_headers`] checks.
#[derive(Debug, thiserror::Error)]
enum MirroredHeaderProblem {
    #[error(
        "`x-mcp-header` may only mark a property reached from the schema root through `properties`"
    )]
    NotAProperty,
    /// The annotation's value, as JSON.
    #[error("`x-mcp-header` {0} is not an HTTP header name token")]
    NotAToken(String),
    #[error(
        "`x-mcp-header` `{0}` marks a property that is not of type string, integer or boolean"
    )]
    NotAScalar(String),
    #[error("`x-mcp-header` `{0}` is used twice (names are compared ignoring case)")]
    Twice(String),
}

/// Checks a manifest against every naming rule and turns it into the contract's
/// `Connector` object. Only rules about the component itself are checked here; clashes
/// with other installed connectors are the registry's.
pub fn validate(manifest: wit::Manifest, digest: &str) -> Result<Connector, ManifestError> {
    let Ok(slug) = Slug::parse(&manifest.slug) else {
        return Err(ManifestError::InvalidSlug {
            slug: manifest.slug,
        });
    };
    let namespace = manifest
        .tool_namespace
        .clone()
        .unwrap_or_else(|| manifest.slug.clone());
    if !is_namespace(&namespace) {
        return Err(ManifestError::InvalidNamespace { namespace });
    }
    if namespace == RESERVED_NAMESPACE {
        return Err(ManifestError::ReservedNamespace { namespace });
    }
    let mut seen = HashSet::new();
    let mut tools = Vec::with_capacity(manifest.tools.len());
    for tool in manifest.tools {
        if !is_tool_id(&tool.name) {
            return Err(ManifestError::InvalidToolId { id: tool.name });
        }
        match tool.name.split_once('.') {
            Some((ns, _)) if ns == namespace => {}
            _ => {
                return Err(ManifestError::OutsideNamespace {
                    id: tool.name,
                    namespace,
                })
            }
        }
        if !seen.insert(tool.name.clone()) {
            return Err(ManifestError::DuplicateToolId { id: tool.name });
        }
        let input_schema = parse_schema(&tool.name, &tool.input_schema)?;
        check_mirrored_headers(&tool.name, &input_schema)?;
        let output_schema = match &tool.output_schema {
            None => None,
            Some(text) => Some(parse_output_schema(&tool.name, text)?),
        };
        tools.push(ToolInfo {
            name: tool.name,
            description: tool.description,
            input_schema,
            annotations: ToolAnnotations {
                read_only_hint: tool.annotations.read_only,
                destructive_hint: tool.annotations.destructive,
                idempotent_hint: tool.annotations.idempotent,
                open_world_hint: tool.annotations.open_world,
            },
            output_schema,
        });
    }
    let config_schema = parse_schema("configSchema", &manifest.config_schema)?;
    let webhook = manifest.webhook.map(|scheme| WebhookInfo {
        scheme: match scheme {
            wit::WebhookScheme::GithubHmacSha256 => WebhookSchemeName::GithubHmacSha256,
            wit::WebhookScheme::StandardWebhooks => WebhookSchemeName::StandardWebhooks,
        },
    });
    Ok(Connector {
        slug,
        tool_namespace: namespace,
        display_name: manifest.display_name,
        description: manifest.description,
        version: manifest.version,
        digest: digest.to_string(),
        world: String::new(),
        tools,
        config_schema,
        webhook,
        allowed_hosts: manifest.allowed_hosts,
        source: connector_model::connector::SOURCE_UPLOAD.to_string(),
        signed_by: None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tool(name: &str) -> wit::Tool {
        wit::Tool {
            name: name.into(),
            description: "d".into(),
            input_schema: r#"{"type":"object"}"#.into(),
            annotations: wit::Annotations {
                read_only: true,
                destructive: false,
                idempotent: true,
                open_world: false,
            },
            output_schema: None,
        }
    }

    fn manifest(slug: &str, ns: Option<&str>, tools: &[&str]) -> wit::Manifest {
        wit::Manifest {
            slug: slug.into(),
            tool_namespace: ns.map(Into::into),
            display_name: "X".into(),
            description: "x".into(),
            version: "1.0.0".into(),
            config_schema: "{}".into(),
            tools: tools.iter().map(|t| tool(t)).collect(),
            webhook: None,
            allowed_hosts: vec![],
        }
    }

    #[test]
    fn accepts_valid_manifests_and_keeps_order() {
        let c = validate(
            manifest("acme", None, &["acme.zeta", "acme.alpha", "acme.sub.deep"]),
            "sha256:00",
        )
        .unwrap();
        let names: Vec<_> = c.tools.iter().map(|t| t.name.as_str()).collect();
        assert_eq!(names, ["acme.zeta", "acme.alpha", "acme.sub.deep"]);
        assert_eq!(c.tool_namespace, "acme");
        assert!(c.tools[0].annotations.read_only_hint);
        let empty = validate(manifest("acme", None, &[]), "sha256:00").unwrap();
        assert!(empty.tools.is_empty());
        let custom = validate(manifest("my-conn", Some("mine"), &["mine.x"]), "sha256:00").unwrap();
        assert_eq!(custom.tool_namespace, "mine");
    }

    #[test]
    fn mirrored_header_annotations_are_checked() {
        use serde_json::json;
        let with_schema = |schema: Value| {
            let mut m = manifest("acme", None, &["acme.x"]);
            m.tools[0].input_schema = schema.to_string();
            validate(m, "sha256:00")
        };
        let prop = |p: Value| json!({"type": "object", "properties": p});
        for good in [
            prop(
                json!({"region": {"type": "string", "x-mcp-header": "Region"},
                        "n": {"type": "integer", "x-mcp-header": "N"},
                        "deep": {"type": "object", "properties": {
                            "flag": {"type": "boolean", "x-mcp-header": "Flag"}}}}),
            ),
            // Not an annotation: a property *named* x-mcp-header.
            prop(json!({"x-mcp-header": {"type": "string"}})),
        ] {
            assert!(with_schema(good.clone()).is_ok(), "{good}");
        }
        for (bad, why) in [
            (
                prop(json!({"a": {"type": "string", "x-mcp-header": ""}})),
                "token",
            ),
            (
                prop(json!({"a": {"type": "string", "x-mcp-header": "Has Space"}})),
                "token",
            ),
            (
                prop(json!({"a": {"type": "string", "x-mcp-header": "Colon:"}})),
                "token",
            ),
            (
                prop(json!({"a": {"type": "string", "x-mcp-header": 5}})),
                "token",
            ),
            (
                prop(json!({"a": {"type": "number", "x-mcp-header": "A"}})),
                "type",
            ),
            (
                prop(json!({"a": {"type": "object", "x-mcp-header": "A"}})),
                "type",
            ),
            (prop(json!({"a": {"x-mcp-header": "A"}})), "type"),
            (
                prop(json!({"a": {"type": "string", "x-mcp-header": "Same"},
                            "b": {"type": "string", "x-mcp-header": "same"}})),
                "twice",
            ),
            (
                prop(
                    json!({"a": {"type": "array", "items": {"type": "string", "x-mcp-header": "A"}}}),
                ),
                "reached",
            ),
            (
                json!({"type": "object", "oneOf": [{"properties": {"a": {"type": "string", "x-mcp-header": "A"}}}]}),
                "reached",
            ),
            (json!({"type": "object", "x-mcp-header": "Root"}), "reached"),
        ] {
            let err = with_schema(bad.clone()).expect_err(&bad.to_string());
            assert_eq!(err.rule(), "invalid_json_schema", "{bad}");
            assert!(err.to_string().contains(why), "{bad}: {err}");
        }
    }

    #[test]
    fn each_rule_is_named() {
        let cases: Vec<(wit::Manifest, &str, &str)> = vec![
            (
                manifest("acme", None, &["other.echo"]),
                "other.echo",
                "tool_outside_namespace",
            ),
            (
                manifest("acme", Some("sv"), &["sv.echo"]),
                "sv",
                "reserved_namespace",
            ),
            (manifest("sv", None, &[]), "sv", "reserved_namespace"),
            (
                manifest("acme", None, &["acme.echo", "acme.echo"]),
                "acme.echo",
                "duplicate_tool_id",
            ),
            (
                manifest("acme", None, &["Acme.Echo"]),
                "Acme.Echo",
                "tool_id_pattern",
            ),
            (
                manifest("acme", None, &["acme/echo"]),
                "acme/echo",
                "tool_id_pattern",
            ),
            (
                manifest("acme", None, &["acme_echo"]),
                "acme_echo",
                "tool_id_pattern",
            ),
            (manifest("Bad Slug", None, &[]), "Bad Slug", "slug_pattern"),
            (
                manifest("my-conn", None, &[]),
                "my-conn",
                "namespace_pattern",
            ),
        ];
        for (m, id, rule) in cases {
            let err = validate(m, "sha256:00").unwrap_err();
            assert_eq!(err.offending_id(), id, "{err}");
            assert_eq!(err.rule(), rule, "{err}");
            assert!(err.to_string().contains(id), "{err}");
        }
    }

    #[test]
    fn schemas_must_be_json_schema() {
        let mut m = manifest("acme", None, &["acme.echo"]);
        m.tools[0].input_schema = "not json".into();
        assert_eq!(validate(m, "d").unwrap_err().rule(), "invalid_json_schema");
        let mut m = manifest("acme", None, &["acme.echo"]);
        m.tools[0].input_schema = r#"{"type": 12}"#.into();
        assert_eq!(validate(m, "d").unwrap_err().rule(), "invalid_json_schema");
        let mut m = manifest("acme", None, &[]);
        m.config_schema = "[1]".into();
        assert_eq!(validate(m, "d").unwrap_err().offending_id(), "configSchema");
    }

    #[test]
    fn output_schemas_are_object_schemas() {
        let with_output = |schema: &str| {
            let mut m = manifest("acme", None, &["acme.echo"]);
            m.tools[0].output_schema = Some(schema.into());
            validate(m, "d")
        };
        let good = r#"{"type":"object","properties":{"n":{"type":"integer"}},"required":["n"]}"#;
        let c = with_output(good).unwrap();
        assert_eq!(
            c.tools[0].output_schema,
            Some(serde_json::from_str::<Value>(good).unwrap())
        );
        for (bad, why) in [
            (r#"{"type":"array"}"#, "object schema"),
            (r#"{"properties":{}}"#, "object schema"),
            ("true", "object schema"),
            (r#"{"type": 12}"#, ""),
            ("nope", "not JSON"),
        ] {
            let err = with_output(bad).unwrap_err();
            assert_eq!(err.rule(), "invalid_json_schema", "{bad}");
            assert_eq!(err.offending_id(), "acme.echo", "{bad}");
            assert!(err.to_string().contains("output schema"), "{bad}: {err}");
            assert!(err.to_string().contains(why), "{bad}: {err}");
        }
        assert_eq!(with_output(good).unwrap().tools[0].name, "acme.echo");
        let none = validate(manifest("acme", None, &["acme.echo"]), "d").unwrap();
        assert_eq!(none.tools[0].output_schema, None);
        assert!(!serde_json::to_string(&none.tools[0])
            .unwrap()
            .contains("outputSchema"));
    }
}
