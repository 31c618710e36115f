//! The manifest's JSON Schema blocks (`settings`, `parameters`): their properties, which
//! of them are required, secret, or bound, and the schemas `pack` emits from them.
//!
//! A block is `{type: object, properties: {...}, required: [...]}`. Inside a property
//! anything JSON Schema allows is kept as is (unknown keywords included: they are JSON
//! Schema annotations), except `require_binding`, which is the manifest's own flag and
//! never reaches an emitted schema. At the block level only keywords `pack` can honour are
//! accepted, so a block never silently loses a constraint.

use std::sync::LazyLock;

use regex_lite::Regex;
use serde_json::{Map, Value};

use super::error::Problems;
use super::yaml::{Kind, Node, Pos};

/// Which block is being read: the rules for `require_binding` and `required` differ.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum BlockKind {
    /// `settings`: operator-only binding config.
    Settings,
    /// The root `parameters`: tool arguments, or binding config with `require_binding`.
    RootParameters,
    /// An action's `parameters`: tool arguments of that action.
    ActionParameters,
    /// An event's `parameters`: binding config read by its filter.
    EventParameters,
}

/// One property of a block.
#[derive(Debug, Clone)]
pub(crate) struct Property {
    /// The key, verbatim (dots allowed: `github.token`).
    pub name: String,
    /// Where the key is written.
    pub pos: Pos,
    /// Its field path, like `settings.properties.token`.
    pub field: String,
    /// Its JSON Schema, `require_binding` removed (and `writeOnly` added for secrets).
    pub schema: Map<String, Value>,
    /// Its `default`.
    pub default: Option<Value>,
    /// Binding config rather than a tool argument (settings, `require_binding`, event
    /// parameters).
    pub binding: bool,
    /// Required in the schema it lands in.
    pub required: bool,
    /// A secret setting.
    pub secret: bool,
}

/// Keys, settings and parameter names: dot-separated parts of letters, digits, `_`, `-`.
static NAME: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"^[A-Za-z_][A-Za-z0-9_-]*(\.[A-Za-z_][A-Za-z0-9_-]*)*$")
        .unwrap_or_else(|e| unreachable!("{e}"))
});

/// The block-level keywords `pack` accepts.
const BLOCK_KEYS: &[&str] = &[
    "type",
    "properties",
    "required",
    "title",
    "description",
    "additionalProperties",
    "$schema",
    "$id",
    "$comment",
    "examples",
];

/// Parts of a setting key that make it secret (compared case-insensitively, with `-` and
/// `.` read as `_`: `x-api-key`, `aws.access-key`).
const SECRET_WORDS: &[&str] = &[
    "token",
    "secret",
    "password",
    "passwd",
    "api_key",
    "apikey",
    "access_key",
    "private_key",
    "credential",
];

/// Whether a setting is secret: `format: password`, `writeOnly: true`, or a secret-like
/// key that does not say `writeOnly: false` (a `token_url`, say, is not a secret).
pub(crate) fn is_secret(key: &str, schema: &Map<String, Value>) -> bool {
    let lower = key.to_ascii_lowercase().replace(['-', '.'], "_");
    let write_only = schema.get("writeOnly").and_then(Value::as_bool);
    schema.get("format").and_then(Value::as_str) == Some("password")
        || write_only == Some(true)
        || (write_only.is_none() && SECRET_WORDS.iter().any(|w| lower.contains(w)))
}

/// Reads one block (absent or null: no properties).
pub(crate) fn read_block(
    node: Option<&Node>,
    field: &str,
    kind: BlockKind,
    problems: &mut Problems,
) -> Vec<Property> {
    let Some(node) = node else {
        return Vec::new();
    };
    let entries = match &node.kind {
        Kind::Null => return Vec::new(),
        Kind::Map(entries) => entries,
        _ => {
            problems.at(
                node.pos,
                field,
                format!(
                    "must be a JSON Schema mapping with `properties`, found {}",
                    node.describe()
                ),
            );
            return Vec::new();
        }
    };
    for e in entries {
        let at = format!("{field}.{}", e.key);
        match e.key.as_str() {
            "type" if e.value.as_str() != Some("object") => problems.at(
                e.value.pos,
                &at,
                "must be `object` (or left out): a block declares named properties",
            ),
            "additionalProperties" if e.value.kind != Kind::Bool(false) => problems.at(
                e.value.pos,
                &at,
                "only `false` is supported: every undeclared key is refused; declare each \
                 property under `properties`",
            ),
            "require_binding" => problems.at(
                e.key_pos,
                &at,
                "`require_binding` belongs on a property, under `properties.<name>`",
            ),
            key if !BLOCK_KEYS.contains(&key) => problems.at(
                e.key_pos,
                &at,
                format!(
                    "unknown key `{key}` in a schema block; it may hold {}, and each property's \
                     own schema goes under `properties`",
                    BLOCK_KEYS.join(", ")
                ),
            ),
            _ => {}
        }
    }

    let explicit = node
        .get("required")
        .map(|n| required_list(n, field, problems));
    let mut properties = Vec::new();
    match node.get("properties").map(|n| (n, &n.kind)) {
        None | Some((_, Kind::Null)) => {}
        Some((_, Kind::Map(entries))) => {
            for e in entries {
                let at = format!("{field}.properties.{}", e.key);
                if let Some(p) = read_property(&e.key, e.key_pos, &e.value, &at, kind, problems) {
                    properties.push(p);
                }
            }
        }
        Some((n, _)) => problems.at(
            n.pos,
            &format!("{field}.properties"),
            format!(
                "must be a mapping of property names to JSON Schemas, found {}",
                n.describe()
            ),
        ),
    }

    if let Some(list) = &explicit {
        for (name, pos) in list {
            if !properties.iter().any(|p| &p.name == name) {
                problems.at(
                    *pos,
                    &format!("{field}.required"),
                    format!("`{name}` is not a property of this block; declare it under `properties` or remove it from `required`"),
                );
            }
        }
    }
    for p in &mut properties {
        let listed = explicit
            .as_ref()
            .map(|list| list.iter().any(|(n, _)| n == &p.name));
        p.required = match (kind, listed) {
            // A bound parameter must be bound unless it has a default.
            (BlockKind::RootParameters, _) if p.binding => {
                p.default.is_none() || listed == Some(true)
            }
            (BlockKind::EventParameters, _) => p.default.is_none() || listed == Some(true),
            (_, Some(listed)) => listed,
            (_, None) => p.default.is_none(),
        };
    }
    properties
}

fn required_list(node: &Node, field: &str, problems: &mut Problems) -> Vec<(String, Pos)> {
    let at = format!("{field}.required");
    let Some(items) = node.as_seq() else {
        problems.at(
            node.pos,
            &at,
            format!(
                "must be a list of property names, found {}",
                node.describe()
            ),
        );
        return Vec::new();
    };
    items
        .iter()
        .filter_map(|item| match item.as_str() {
            Some(s) => Some((s.to_string(), item.pos)),
            None => {
                problems.at(
                    item.pos,
                    &at,
                    format!("must list property names, found {}", item.describe()),
                );
                None
            }
        })
        .collect()
}

fn read_property(
    name: &str,
    pos: Pos,
    node: &Node,
    field: &str,
    kind: BlockKind,
    problems: &mut Problems,
) -> Option<Property> {
    if !NAME.is_match(name) {
        problems.at(
            pos,
            field,
            format!(
                "`{name}` is not a usable name: use letters, digits, `_` and `-`, in parts \
                 separated by `.` (like `owner` or `github.token`)"
            ),
        );
    }
    let Value::Object(mut schema) = node.to_json() else {
        problems.at(
            node.pos,
            field,
            format!(
                "must be a JSON Schema mapping such as `{{type: string}}`, found {}",
                node.describe()
            ),
        );
        return None;
    };
    let mut binding = matches!(kind, BlockKind::Settings | BlockKind::EventParameters);
    if let Some(flag) = schema.remove("require_binding") {
        let flag_pos = node.get("require_binding").map_or(node.pos, |n| n.pos);
        let at = format!("{field}.require_binding");
        match (flag.as_bool(), kind) {
            (None, _) => problems.at(
                flag_pos,
                &at,
                format!("must be true or false, found {flag}"),
            ),
            (Some(true), BlockKind::Settings) => problems.at(
                flag_pos,
                &at,
                "settings are always binding config; remove `require_binding`",
            ),
            (Some(true), BlockKind::ActionParameters) => problems.at(
                flag_pos,
                &at,
                "an action's parameter cannot require a binding; declare it in the root \
                 `parameters` with `require_binding: true`",
            ),
            (Some(b), BlockKind::RootParameters) => binding = b,
            (Some(_), _) => {}
        }
    }
    match jsonschema::meta::try_validate(&Value::Object(schema.clone())) {
        Ok(Ok(())) => {}
        Ok(Err(e)) => problems.at(node.pos, field, format!("not a valid JSON Schema: {e}")),
        Err(e) => problems.at(node.pos, field, format!("not a valid JSON Schema: {e}")),
    }
    let default = schema.get("default").cloned();
    if let Some(default) = &default {
        let schema_value = Value::Object(schema.clone());
        if let Ok(validator) = jsonschema::validator_for(&schema_value) {
            if let Some(error) = validator.iter_errors(default).next() {
                let default_pos = node.get("default").map_or(node.pos, |n| n.pos);
                problems.at(
                    default_pos,
                    &format!("{field}.default"),
                    format!("the default does not match the property's own schema: {error}"),
                );
            }
        }
    }
    let secret = kind == BlockKind::Settings && is_secret(name, &schema);
    if secret && default.is_some() {
        let default_pos = node.get("default").map_or(node.pos, |n| n.pos);
        problems.at(
            default_pos,
            &format!("{field}.default"),
            format!(
                "`{name}` is a secret setting (write-only: `format: password`, `writeOnly`, or \
                 a secret-like name), so it cannot have a default: the default would ship in \
                 the component and in its config schema for anyone to read. Remove it and give \
                 the value in each binding (or, if the value is not a secret, say \
                 `writeOnly: false`)"
            ),
        );
    }
    if secret {
        schema.insert("writeOnly".into(), Value::Bool(true));
    }
    Some(Property {
        name: name.to_string(),
        pos,
        field: field.to_string(),
        schema,
        default,
        binding,
        required: false,
        secret,
    })
}

/// `{"type":"object","properties":{…},"required":[…],"additionalProperties":false}`.
pub(crate) fn object_schema<'a>(properties: impl IntoIterator<Item = &'a Property>) -> Value {
    let mut props = Map::new();
    let mut required = Vec::new();
    for p in properties {
        props.insert(p.name.clone(), Value::Object(p.schema.clone()));
        if p.required {
            required.push(Value::String(p.name.clone()));
        }
    }
    serde_json::json!({
        "type": "object",
        "properties": props,
        "required": required,
        "additionalProperties": false,
    })
}
