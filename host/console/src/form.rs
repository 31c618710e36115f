//! The binding form: fields generated from a connector's `configSchema`, and the
//! submitted fields turned back into the `config` object the host validates.
//!
//! The form only shapes input; whether a config is acceptable is decided by the host
//! (the schema check and the connector's own `bind`), exactly as for the HTTP API. Fields
//! the schema marks `writeOnly` or `format: password` are password inputs that are never
//! filled in: left empty on a rebind, the binding keeps the value it has. Fields edited
//! as JSON show a stored binding with every write-only value, at any depth, replaced by
//! [`MASK`]; a [`MASK`] sent back at a write-only place keeps the stored value (and is
//! refused when there is none to keep), so the placeholder is never saved as the secret.

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
    /// The schema's `default`: what the connector uses when the field is left out.
    pub default: Option<Value>,
}

/// The name of the single JSON field used when the schema lists no properties.
pub const WHOLE_CONFIG: &str = "__config";

/// What a write-only value is shown as (as the host's API shows it).
pub const MASK: &str = "***";

/// `config` with every value `schema` marks write-only, at any depth, replaced by
/// [`MASK`]: the host's one masking of binding configs ([`connector_core::mask_secrets`]).
pub fn masked(schema: &Value, config: &Value) -> Value {
    connector_core::mask_secrets(schema, config)
}

/// A string no config holds by accident, standing in for a submitted [`MASK`] to find
/// out whether its place is a secret one (masking it then gives [`MASK`]).
const PROBE: &str = "\u{0}not-a-secret-mask\u{0}";

/// `value` with every [`MASK`] string replaced by [`PROBE`].
fn probed(value: &Value) -> Value {
    match value {
        Value::String(s) if s == MASK => Value::String(PROBE.into()),
        Value::Object(members) => Value::Object(
            members
                .iter()
                .map(|(k, v)| (k.clone(), probed(v)))
                .collect(),
        ),
        Value::Array(items) => Value::Array(items.iter().map(probed).collect()),
        other => other.clone(),
    }
}

/// A [`MASK`] submitted at a secret place with no stored value to stand for.
#[derive(Debug, Clone, PartialEq, Eq)]
struct UnbackedMask {
    /// Its place, as a JSON pointer (empty: the value itself).
    path: String,
    /// Whether it is in a list entry that is not the one shown (added, removed, moved or
    /// changed), which is why nothing stands behind it.
    entry_changed: bool,
}

impl UnbackedMask {
    /// The same place, told relative to `prefix` (the field a form box holds).
    fn within(&self, prefix: &str) -> String {
        let place = match self.path.strip_prefix(prefix) {
            Some("") => "here".to_string(),
            Some(rest) if rest.starts_with('/') => format!("at `{rest}`"),
            _ => self.place(),
        };
        self.told(&place)
    }

    fn place(&self) -> String {
        format!(
            "at `{}`",
            if self.path.is_empty() {
                "/"
            } else {
                &self.path
            }
        )
    }

    fn told(&self, place: &str) -> String {
        let mut text = format!(
            "`{MASK}` {place} stands for a stored secret, but none is stored there: type the value"
        );
        if self.entry_changed {
            text.push_str(
                " (a list entry added, removed, moved or changed keeps no stored secret)",
            );
        }
        text
    }
}

impl std::fmt::Display for UnbackedMask {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.told(&self.place()))
    }
}

/// Puts the stored secrets back into a submitted JSON value: a [`MASK`] at a place the
/// stored config was shown masked stands for what `stored` holds there. List entries are
/// matched by position only while the list is as it was shown (same length, the entry
/// unchanged apart from its secrets); a [`MASK`] at a secret place with no stored value
/// to stand for is an error naming its place (`path`), so the placeholder is never saved.
/// Which places are secret is decided by [`masked`] alone, so what is shown masked and
/// what is put back can never disagree.
fn restore_secrets(
    schema: &Value,
    submitted: &mut Value,
    stored: Option<&Value>,
    path: &str,
) -> Result<(), UnbackedMask> {
    let stored = stored.filter(|v| !v.is_null());
    let shown = stored.map(|s| masked(schema, s));
    let places = masked(schema, &probed(submitted));
    restore_at(submitted, &places, shown.as_ref(), stored, path)
}

fn restore_at(
    submitted: &mut Value,
    places: &Value,
    shown: Option<&Value>,
    stored: Option<&Value>,
    path: &str,
) -> Result<(), UnbackedMask> {
    if submitted.as_str() == Some(MASK) {
        if let (Some(MASK), Some(v)) = (shown.and_then(Value::as_str), stored) {
            *submitted = v.clone();
            return Ok(());
        }
        if places.as_str() == Some(MASK) {
            return Err(UnbackedMask {
                path: path.to_string(),
                entry_changed: false,
            });
        }
        // A literal `***` where nothing is secret: kept as typed.
        return Ok(());
    }
    match submitted {
        Value::Object(members) => {
            for (k, v) in members.iter_mut() {
                let at = format!("{path}/{k}");
                restore_at(
                    v,
                    places.get(k).unwrap_or(&Value::Null),
                    shown.and_then(|o| o.get(k)),
                    stored.and_then(|o| o.get(k)),
                    &at,
                )?;
            }
            Ok(())
        }
        Value::Array(items) => {
            let same = |list: Option<&Value>| {
                list.and_then(Value::as_array)
                    .filter(|b| b.len() == items.len())
                    .cloned()
            };
            let (shown_list, stored_list) = (same(shown), same(stored));
            for (i, v) in items.iter_mut().enumerate() {
                let place = places.get(i).unwrap_or(&Value::Null);
                // The stored entry counts only when this entry is the one shown there.
                let was_shown = shown_list
                    .as_ref()
                    .and_then(|b| b.get(i))
                    .filter(|b| masked_equal(b, place, v));
                let (sh, st) = match was_shown {
                    Some(sh) => (Some(sh), stored_list.as_ref().and_then(|b| b.get(i))),
                    None => (None, None),
                };
                let at = format!("{path}/{i}");
                restore_at(v, place, sh, st, &at).map_err(|mut e| {
                    e.entry_changed |= stored.is_some() && was_shown.is_none();
                    e
                })?;
            }
            Ok(())
        }
        _ => Ok(()),
    }
}

/// Whether a submitted entry (`submitted`, its secret places `places`) is the stored one
/// as it was shown (`shown`): equal once its secrets are masked.
fn masked_equal(shown: &Value, places: &Value, submitted: &Value) -> bool {
    match (shown, places, submitted) {
        (Value::String(m), Value::String(p), Value::String(s)) if m == MASK => {
            p == MASK && s == MASK
        }
        (Value::Object(a), Value::Object(p), Value::Object(b)) => {
            a.len() == b.len()
                && a.iter().all(|(k, av)| match (p.get(k), b.get(k)) {
                    (Some(pv), Some(bv)) => masked_equal(av, pv, bv),
                    _ => false,
                })
        }
        (Value::Array(a), Value::Array(p), Value::Array(b)) => {
            a.len() == b.len()
                && a.iter()
                    .zip(p.iter().zip(b))
                    .all(|(av, (pv, bv))| masked_equal(av, pv, bv))
        }
        _ => shown == submitted,
    }
}

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
            default: prop.get("default").cloned(),
        })
        .collect()
}

/// Whether a property schema marks its value as a secret.
pub fn is_secret(prop: &Value) -> bool {
    connector_core::is_secret_schema(prop)
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
                .map(|i| types_of(i) == ["string"] && !is_secret(i))
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
        let whole_error = |message: String| {
            vec![FieldError {
                field: Some(WHOLE_CONFIG.into()),
                message,
            }]
        };
        let mut config: Value =
            serde_json::from_str(text).map_err(|e| whole_error(format!("not valid JSON: {e}")))?;
        restore_secrets(schema, &mut config, previous, "")
            .map_err(|e| whole_error(e.to_string()))?;
        return Ok(config);
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
            FieldKind::Json => match serde_json::from_str::<Value>(text) {
                Ok(v) => {
                    // Restored as a member of the whole config, so every part of the
                    // schema that speaks of this field counts.
                    let mut one = Value::Object(Map::from_iter([(field.name.clone(), v)]));
                    let prefix = format!("/{}", field.name);
                    restore_secrets(schema, &mut one, previous, "")
                        .map(|()| one.get_mut(&field.name).map(Value::take))
                        .map_err(|e| e.within(&prefix))
                }
                Err(e) => Err(format!("not valid JSON: {e}")),
            },
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

    fn nested_schema() -> Value {
        json!({
            "type": "object",
            "properties": {
                "repo": {"type": "string"},
                "auth": {"type": "object", "properties": {
                    "user": {"type": "string"},
                    "token": {"type": "string", "writeOnly": true}
                }},
                "mirrors": {"type": "array", "items": {"type": "object", "properties": {
                    "url": {"type": "string"},
                    "key": {"type": "string", "format": "password"}
                }}},
                "keys": {"type": "array", "items": {"type": "string", "writeOnly": true}}
            }
        })
    }

    /// The form as the bind page fills it from the stored config: what an operator who
    /// changes nothing sends back.
    fn prefilled(schema: &Value, stored: &Value) -> Vec<(String, String)> {
        let shown = masked(schema, stored);
        fields(schema)
            .iter()
            .map(|f| (format!("f.{}", f.name), shown_value(f, shown.get(&f.name))))
            .collect()
    }

    #[test]
    fn nested_secrets_are_shown_masked_and_an_unchanged_form_keeps_them() {
        let schema = nested_schema();
        let stored = json!({
            "repo": "o/r",
            "auth": {"user": "u", "token": "tok-SECRET-1"},
            "mirrors": [{"url": "https://a", "key": "key-SECRET-A"},
                        {"url": "https://b", "key": "key-SECRET-B"}],
            "keys": ["k-SECRET-1", "k-SECRET-2"]
        });
        let form = prefilled(&schema, &stored);
        let text: String = form.iter().map(|(_, v)| v.as_str()).collect();
        assert!(!text.contains("SECRET"), "a secret is shown: {text}");
        assert!(text.contains(MASK), "{text}");
        let config = config_from_form(&schema, &form, Some(&stored)).expect("valid");
        assert_eq!(config, stored, "an unchanged form saves the stored secrets");
    }

    #[test]
    fn a_mask_never_replaces_a_secret() {
        let schema = nested_schema();
        let stored = json!({
            "auth": {"user": "u", "token": "tok"},
            "mirrors": [{"url": "https://a", "key": "ka"}, {"url": "https://b", "key": "kb"}]
        });
        // A changed sibling keeps the secret of an object.
        let config = config_from_form(
            &schema,
            &pairs(&[("f.auth", r#"{"user": "v", "token": "***"}"#)]),
            Some(&stored),
        )
        .expect("valid");
        assert_eq!(config["auth"], json!({"user": "v", "token": "tok"}));
        // A new secret replaces it.
        let config = config_from_form(
            &schema,
            &pairs(&[("f.auth", r#"{"user": "v", "token": "new"}"#)]),
            Some(&stored),
        )
        .expect("valid");
        assert_eq!(config["auth"]["token"], "new");
        // No stored value to stand for, a moved or a changed list entry: refused, named.
        for (sent, previous) in [
            (r#"{"user": "v", "token": "***"}"#, None),
            (
                r#"{"user": "v", "token": "***"}"#,
                Some(json!({"repo": "x"})),
            ),
        ] {
            let errors = config_from_form(&schema, &pairs(&[("f.auth", sent)]), previous.as_ref())
                .expect_err("a mask with nothing stored");
            assert_eq!(errors[0].field.as_deref(), Some("auth"));
            assert_eq!(
                errors[0].message,
                "`***` at `/token` stands for a stored secret, but none is stored there: type the value"
            );
        }
        for sent in [
            // the second entry, moved first
            r#"[{"url": "https://b", "key": "***"}]"#,
            // the first entry, pointed elsewhere: its key must not follow
            r#"[{"url": "https://evil", "key": "***"}, {"url": "https://b", "key": "***"}]"#,
        ] {
            let errors = config_from_form(&schema, &pairs(&[("f.mirrors", sent)]), Some(&stored))
                .expect_err(sent);
            assert_eq!(errors[0].field.as_deref(), Some("mirrors"), "{errors:?}");
            assert!(
                errors[0]
                    .message
                    .starts_with("`***` at `/0/key` stands for a stored secret")
                    && errors[0].message.ends_with(
                        " (a list entry added, removed, moved or changed keeps no stored secret)"
                    ),
                "{errors:?}"
            );
        }
        // A whole-config form (no properties) restores by the same rule.
        let loose = json!({"type": "object", "additionalProperties": {
            "type": "object", "properties": {"secret": {"type": "string", "writeOnly": true}}}});
        let stored = json!({"a": {"secret": "s1"}});
        assert_eq!(masked(&loose, &stored), json!({"a": {"secret": "***"}}));
        assert_eq!(
            config_from_form(
                &loose,
                &pairs(&[("f.__config", r#"{"a": {"secret": "***"}}"#)]),
                Some(&stored)
            ),
            Ok(stored.clone())
        );
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
