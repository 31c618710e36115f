//! The binding form: fields generated from a connector's `configSchema`, and the
//! submitted fields turned back into the `config` object the host validates.
//!
//! The form only shapes input; whether a config is acceptable is decided by the host
//! (the schema check and the connector's own `bind`), exactly as for the HTTP API. Fields
//! the schema marks `writeOnly` or `format: password` are password inputs that are never
//! filled in: left empty on a rebind, the binding keeps the value it has.

use serde_json::{Map, Value};

/// How one top-level config property is edited.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FieldKind {
    /// A text input.
    Text,
    /// A password input; its value is never shown.
    Secret,
    /// A number input (`integer` when `whole`).
    Number { whole: bool },
    /// A checkbox.
    Boolean,
    /// A choice among the schema's `enum` strings.
    Choice(Vec<String>),
    /// A list of strings, one per line.
    Lines,
    /// Anything else, as JSON text.
    Json,
}

/// One field of the form.
#[derive(Debug, Clone)]
pub struct Field {
    pub name: String,
    pub kind: FieldKind,
    pub required: bool,
    pub description: Option<String>,
}

/// The name of the single JSON field used when the schema lists no properties.
pub const WHOLE_CONFIG: &str = "__config";

/// The fields of a `configSchema`; empty when it declares no `properties` (the form then
/// edits the whole config as JSON).
pub fn fields(schema: &Value) -> Vec<Field> {
    let Some(props) = schema.get("properties").and_then(Value::as_object) else {
        return Vec::new();
    };
    let required: Vec<&str> = schema
        .get("required")
        .and_then(Value::as_array)
        .map(|r| r.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    props
        .iter()
        .map(|(name, prop)| Field {
            name: name.clone(),
            kind: kind_of(prop),
            required: required.contains(&name.as_str()),
            description: prop
                .get("description")
                .and_then(Value::as_str)
                .map(str::to_string),
        })
        .collect()
}

/// Whether a property schema marks its value as a secret.
pub fn is_secret(prop: &Value) -> bool {
    prop.get("writeOnly").and_then(Value::as_bool) == Some(true)
        || prop.get("format").and_then(Value::as_str) == Some("password")
}

/// The JSON Schema `type`s a property allows, without `null`.
fn types_of(prop: &Value) -> Vec<&str> {
    match prop.get("type") {
        Some(Value::String(t)) => vec![t.as_str()],
        Some(Value::Array(ts)) => ts.iter().filter_map(Value::as_str).collect(),
        _ => Vec::new(),
    }
    .into_iter()
    .filter(|t| *t != "null")
    .collect()
}

fn kind_of(prop: &Value) -> FieldKind {
    if is_secret(prop) {
        return FieldKind::Secret;
    }
    if let Some(choices) = prop.get("enum").and_then(Value::as_array) {
        let strings: Vec<String> = choices
            .iter()
            .filter_map(Value::as_str)
            .map(str::to_string)
            .collect();
        if strings.len() == choices.len() && !strings.is_empty() {
            return FieldKind::Choice(strings);
        }
    }
    match types_of(prop).as_slice() {
        ["string"] => FieldKind::Text,
        ["integer"] => FieldKind::Number { whole: true },
        ["number"] => FieldKind::Number { whole: false },
        ["boolean"] => FieldKind::Boolean,
        ["array"]
            if prop
                .get("items")
                .map(|i| types_of(i) == ["string"])
                .unwrap_or(false) =>
        {
            FieldKind::Lines
        }
        _ => FieldKind::Json,
    }
}

/// The text a field shows for a (masked) config value; secrets show nothing.
pub fn shown_value(field: &Field, value: Option<&Value>) -> String {
    let Some(value) = value.filter(|v| !v.is_null()) else {
        return String::new();
    };
    match (&field.kind, value) {
        (FieldKind::Secret, _) => String::new(),
        (FieldKind::Lines, Value::Array(items)) => items
            .iter()
            .map(|i| i.as_str().map_or_else(|| i.to_string(), str::to_string))
            .collect::<Vec<_>>()
            .join("\n"),
        (FieldKind::Json, v) => serde_json::to_string_pretty(v).unwrap_or_default(),
        (_, Value::String(s)) => s.clone(),
        (_, v) => v.to_string(),
    }
}

/// A problem with one field (or with the whole form when `field` is `None`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldError {
    pub field: Option<String>,
    pub message: String,
}

/// The config a submitted form describes. `previous` is the binding's stored config (on a
/// rebind): a secret field left empty keeps its value from there. Empty optional fields
/// are left out. Errors name the field whose text is not what its kind needs.
pub fn config_from_form(
    schema: &Value,
    submitted: &[(String, String)],
    previous: Option<&Value>,
) -> Result<Value, Vec<FieldError>> {
    let value_of = |name: &str| {
        submitted
            .iter()
            .find(|(k, _)| k.strip_prefix("f.") == Some(name))
            .map(|(_, v)| v.as_str())
    };
    let fields = fields(schema);
    if fields.is_empty() {
        let text = value_of(WHOLE_CONFIG).unwrap_or("").trim();
        if text.is_empty() {
            return Ok(Value::Object(Map::new()));
        }
        return serde_json::from_str(text).map_err(|e| {
            vec![FieldError {
                field: Some(WHOLE_CONFIG.into()),
                message: format!("not valid JSON: {e}"),
            }]
        });
    }
    let mut config = Map::new();
    let mut errors = Vec::new();
    for field in &fields {
        let raw = value_of(&field.name);
        let text = raw.unwrap_or("");
        let parsed = match &field.kind {
            FieldKind::Boolean => Ok(Some(Value::Bool(raw.is_some()))),
            _ if text.trim().is_empty() => Ok(match &field.kind {
                FieldKind::Secret => previous
                    .and_then(|p| p.get(&field.name))
                    .filter(|v| !v.is_null())
                    .cloned(),
                _ => None,
            }),
            FieldKind::Text | FieldKind::Secret | FieldKind::Choice(_) => {
                Ok(Some(Value::String(text.to_string())))
            }
            FieldKind::Number { whole: true } => text
                .trim()
                .parse::<i64>()
                .map(|n| Some(Value::from(n)))
                .map_err(|_| "must be a whole number".to_string()),
            FieldKind::Number { whole: false } => text
                .trim()
                .parse::<f64>()
                .ok()
                .and_then(serde_json::Number::from_f64)
                .map(|n| Some(Value::Number(n)))
                .ok_or_else(|| "must be a number".to_string()),
            FieldKind::Lines => Ok(Some(Value::Array(
                text.lines()
                    .map(str::trim)
                    .filter(|l| !l.is_empty())
                    .map(|l| Value::String(l.to_string()))
                    .collect(),
            ))),
            FieldKind::Json => serde_json::from_str(text)
                .map(Some)
                .map_err(|e| format!("not valid JSON: {e}")),
        };
        match parsed {
            Ok(Some(v)) => {
                config.insert(field.name.clone(), v);
            }
            Ok(None) => {}
            Err(message) => errors.push(FieldError {
                field: Some(field.name.clone()),
                message,
            }),
        }
    }
    if errors.is_empty() {
        Ok(Value::Object(config))
    } else {
        Err(errors)
    }
}

/// The host's `invalid_config` details as errors next to the fields they concern: a
/// schema violation's JSON pointer names the field (`/repo`, `/repo/0` → `repo`); the
/// connector's own refusal and whole-document violations belong to the form.
pub fn errors_from_details(details: Option<&Value>, message: &str) -> Vec<FieldError> {
    let mut errors = Vec::new();
    if let Some(violations) = details
        .and_then(|d| d.get("violations"))
        .and_then(Value::as_array)
    {
        for v in violations {
            let pointer = v.get("pointer").and_then(Value::as_str).unwrap_or("");
            let text = v
                .get("message")
                .and_then(Value::as_str)
                .unwrap_or("is not valid");
            let field = pointer
                .strip_prefix('/')
                .and_then(|p| p.split('/').next())
                .filter(|f| !f.is_empty())
                .map(|f| f.replace("~1", "/").replace("~0", "~"))
                .or_else(|| missing_property(pointer, text));
            errors.push(FieldError {
                field,
                message: text.to_string(),
            });
        }
    }
    if errors.is_empty() {
        errors.push(FieldError {
            field: None,
            message: message.to_string(),
        });
    }
    errors
}

/// The property a whole-document "`\"name\" is a required property`" violation is about:
/// the missing field is where the operator has to type.
fn missing_property(pointer: &str, message: &str) -> Option<String> {
    if !pointer.is_empty() {
        return None;
    }
    let name = message
        .strip_suffix(" is a required property")?
        .strip_prefix('"')?
        .strip_suffix('"')?;
    (!name.is_empty()).then(|| name.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn schema() -> Value {
        json!({
            "type": "object",
            "required": ["repo"],
            "properties": {
                "repo": {"type": "string", "description": "owner/name"},
                "apiKey": {"type": "string", "writeOnly": true},
                "installationId": {"type": ["integer", "null"]},
                "labels": {"type": "array", "items": {"type": "string"}},
                "loud": {"type": "boolean"},
                "mode": {"enum": ["a", "b"]},
                "extra": {"type": "object"}
            }
        })
    }

    fn pairs(items: &[(&str, &str)]) -> Vec<(String, String)> {
        items
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn fields_follow_the_schema() {
        let f = fields(&schema());
        let kind = |n: &str| f.iter().find(|x| x.name == n).map(|x| x.kind.clone());
        assert_eq!(kind("repo"), Some(FieldKind::Text));
        assert_eq!(kind("apiKey"), Some(FieldKind::Secret));
        assert_eq!(
            kind("installationId"),
            Some(FieldKind::Number { whole: true })
        );
        assert_eq!(kind("labels"), Some(FieldKind::Lines));
        assert_eq!(kind("loud"), Some(FieldKind::Boolean));
        assert_eq!(
            kind("mode"),
            Some(FieldKind::Choice(vec!["a".into(), "b".into()]))
        );
        assert_eq!(kind("extra"), Some(FieldKind::Json));
        assert!(f.iter().any(|x| x.name == "repo" && x.required));
        assert!(fields(&json!({"type": "object"})).is_empty());
    }

    #[test]
    fn a_submitted_form_becomes_a_config() {
        let config = config_from_form(
            &schema(),
            &pairs(&[
                ("csrf", "x"),
                ("f.repo", "o/r"),
                ("f.apiKey", "s3cret"),
                ("f.installationId", " 42 "),
                ("f.labels", "bug\n\n help \n"),
                ("f.loud", "true"),
                ("f.mode", "b"),
                ("f.extra", "{\"k\": 1}"),
            ]),
            None,
        )
        .expect("valid");
        assert_eq!(
            config,
            json!({"repo": "o/r", "apiKey": "s3cret", "installationId": 42,
                   "labels": ["bug", "help"], "loud": true, "mode": "b", "extra": {"k": 1}})
        );
    }

    #[test]
    fn an_empty_secret_keeps_the_stored_value_and_is_never_shown() {
        let previous = json!({"repo": "o/r", "apiKey": "kept"});
        let config = config_from_form(
            &schema(),
            &pairs(&[("f.repo", "o/r2"), ("f.apiKey", "")]),
            Some(&previous),
        )
        .expect("valid");
        assert_eq!(
            config,
            json!({"repo": "o/r2", "apiKey": "kept", "loud": false})
        );
        let secret = fields(&schema())
            .into_iter()
            .find(|f| f.name == "apiKey")
            .expect("field");
        assert_eq!(shown_value(&secret, Some(&json!("kept"))), "");
    }

    #[test]
    fn unparseable_fields_are_named() {
        let errors = config_from_form(
            &schema(),
            &pairs(&[("f.installationId", "forty"), ("f.extra", "{")]),
            None,
        )
        .expect_err("invalid");
        let named: Vec<_> = errors.iter().filter_map(|e| e.field.as_deref()).collect();
        assert_eq!(named, ["extra", "installationId"]);
    }

    #[test]
    fn a_schema_without_properties_takes_json() {
        let s = json!({"type": "object"});
        assert_eq!(
            config_from_form(&s, &pairs(&[("f.__config", "{\"routes\": [\"r\"]}")]), None),
            Ok(json!({"routes": ["r"]}))
        );
        assert!(config_from_form(&s, &pairs(&[("f.__config", "[")]), None).is_err());
    }

    #[test]
    fn host_violations_land_next_to_their_field() {
        let details = json!({"violations": [
            {"pointer": "/repo", "message": "\"x\" does not match"},
            {"pointer": "", "message": "\"repo\" is a required property"}
        ]});
        let errors = errors_from_details(Some(&details), "bad");
        assert_eq!(errors[0].field.as_deref(), Some("repo"));
        assert_eq!(
            errors[1].field.as_deref(),
            Some("repo"),
            "a missing field is named"
        );
        let whole = json!({"violations": [{"pointer": "", "message": "is not an object"}]});
        assert_eq!(errors_from_details(Some(&whole), "bad")[0].field, None);
        let refused = errors_from_details(Some(&json!({"connector": "no"})), "refused: no");
        assert_eq!(
            refused,
            vec![FieldError {
                field: None,
                message: "refused: no".into()
            }]
        );
    }
}
