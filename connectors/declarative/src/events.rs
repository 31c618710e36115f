//! Webhooks into messages, and the per-binding CEL filter.
//!
//! The host verifies a webhook's signature before any of this runs. Translation has no
//! binding, so it cannot evaluate a filter that reads `parameters`: it turns the payload
//! into one message per declared event (the rendered `message` text, plus the members of
//! the payload the event's filter reads) and `accept` decides per binding, with that
//! binding's parameters. Only the members a filter names travel, so a 30 KiB GitHub
//! payload does not become 30 KiB in every unit's inbox.

use std::collections::HashMap;
use std::sync::Arc;

use declarative_plan::{Event, MessagePayload, Plan};
use serde_json::{Map, Value};

use crate::render::Scope;

/// One message a webhook becomes: (kind, payload JSON).
pub type Translated = (String, String);

/// The JSON payload of a webhook body: JSON itself, or the `payload` field of a form
/// (`application/x-www-form-urlencoded`, GitHub's default content type).
pub fn payload_of(body: &[u8]) -> Result<Value, String> {
    match serde_json::from_slice(body) {
        Ok(payload) => Ok(payload),
        Err(json_error) => {
            let form = form_urlencoded::parse(body).find(|(key, _)| key == "payload");
            match form {
                Some((_, payload)) => serde_json::from_str(&payload)
                    .map_err(|e| format!("the webhook form's `payload` is not JSON: {e}")),
                None => Err(format!(
                    "the webhook body is neither JSON ({json_error}) nor a form with a `payload` field"
                )),
            }
        }
    }
}

/// Every event's message for the webhook `body`.
pub fn translate<T>(plan: &Plan<T>, body: &[u8]) -> Result<Vec<Translated>, String> {
    let payload = payload_of(body)?;
    let empty = Map::new();
    let mut scope = Scope::new(&empty, &empty);
    scope.event_payload = Some(&payload);
    let mut out = Vec::with_capacity(plan.events.len());
    for event in &plan.events {
        let text = scope.render_lenient(&event.message).trim().to_owned();
        let projected = event.filter.as_ref().map(|_| match &event.filter_paths {
            Some(paths) => project(&payload, paths),
            None => payload.clone(),
        });
        let message = MessagePayload {
            text,
            event: projected,
        };
        let json = serde_json::to_string(&message)
            .map_err(|e| format!("could not encode the message of `{}`: {e}", event.name))?;
        out.push((event.name.clone(), json));
    }
    Ok(out)
}

/// The members of `payload` at `paths`, in their original nesting. Where a path breaks
/// off (a member is absent), the part that exists is kept, as an empty object when it
/// is one, so `has()` and `!has()` answer as they would on the whole payload.
pub fn project(payload: &Value, paths: &[Vec<String>]) -> Value {
    let mut out = Value::Object(Map::new());
    for path in paths {
        // The longest prefix of `path` that exists, and the value there.
        let mut source = payload;
        let mut found = 0;
        for member in path {
            match source.get(member) {
                Some(next) => {
                    source = next;
                    found += 1;
                }
                None => break,
            }
        }
        if found == 0 {
            continue;
        }
        let complete = found == path.len();
        let mut target = &mut out;
        for (i, member) in path[..found].iter().enumerate() {
            let Value::Object(map) = target else { break };
            if i + 1 == found {
                let value = if complete || !source.is_object() {
                    source.clone()
                } else {
                    Value::Object(Map::new())
                };
                // A longer path may have filled this member in already.
                let keep = map.get(member).is_some_and(|v| !complete && v.is_object());
                if !keep {
                    map.insert(member.clone(), value);
                }
                break;
            }
            target = map
                .entry(member.clone())
                .or_insert_with(|| Value::Object(Map::new()));
        }
    }
    out
}

/// Whether the message of kind `kind` with `payload` reaches the binding with `config`.
/// Anything unexpected (an unknown kind, a payload that is not ours, a filter that fails
/// to evaluate or does not yield a bool) is a no: fail closed.
pub fn accept<T>(plan: &Plan<T>, config: &Map<String, Value>, kind: &str, payload: &str) -> bool {
    let Some(event) = plan.events.iter().find(|e| e.name == kind) else {
        return false;
    };
    let Some(filter) = &event.filter else {
        return true;
    };
    let Ok(message) = serde_json::from_str::<MessagePayload>(payload) else {
        return false;
    };
    let parameters = filter_parameters(plan, config);
    evaluate(
        event,
        filter,
        message.event.unwrap_or(Value::Null),
        parameters,
    )
    .unwrap_or(false)
}

/// `parameters` as a filter sees them: argument defaults, then the binding's parameters.
fn filter_parameters<T>(plan: &Plan<T>, config: &Map<String, Value>) -> Map<String, Value> {
    let mut parameters = plan.argument_defaults.clone();
    for key in &plan.binding_parameters {
        if let Some(value) = config.get(key).or_else(|| plan.config_defaults.get(key)) {
            parameters.insert(key.clone(), value.clone());
        }
    }
    parameters
}

fn evaluate(
    event: &Event,
    filter: &str,
    payload: Value,
    parameters: Map<String, Value>,
) -> Option<bool> {
    let program = cel::Program::compile(filter).ok()?;
    let mut context = cel::Context::default();
    let mut event_value = Map::new();
    event_value.insert("payload".into(), payload);
    event_value.insert("name".into(), Value::String(event.name.clone()));
    context.add_variable_from_value("event", to_cel(&Value::Object(event_value)));
    context.add_variable_from_value("parameters", to_cel(&Value::Object(parameters)));
    match program.execute(&context) {
        Ok(cel::Value::Bool(b)) => Some(b),
        _ => None,
    }
}

/// JSON as CEL values, integers as `int` when they fit (so `x == 5` holds for `5`).
fn to_cel(value: &Value) -> cel::Value {
    match value {
        Value::Null => cel::Value::Null,
        Value::Bool(b) => cel::Value::Bool(*b),
        Value::Number(n) => match (n.as_i64(), n.as_u64(), n.as_f64()) {
            (Some(i), _, _) => cel::Value::Int(i),
            (None, Some(u), _) => cel::Value::UInt(u),
            (_, _, Some(f)) => cel::Value::Float(f),
            _ => cel::Value::Null,
        },
        Value::String(s) => cel::Value::String(Arc::new(s.clone())),
        Value::Array(items) => cel::Value::List(Arc::new(items.iter().map(to_cel).collect())),
        Value::Object(map) => {
            let map: HashMap<String, cel::Value> =
                map.iter().map(|(k, v)| (k.clone(), to_cel(v))).collect();
            cel::Value::from(map)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use declarative_plan::{Encoding, Ref, Root, Segment};
    use serde_json::json;

    fn payload_ref(path: &[&str]) -> Segment {
        Segment::Ref {
            value: Ref {
                root: Root::EventPayload,
                key: path[0].into(),
                path: path[1..].iter().map(|s| (*s).to_owned()).collect(),
            },
            encoding: Encoding::Raw,
        }
    }

    fn plan() -> Plan {
        let filter = "event.payload.action == 'created' && has(event.payload.issue.pull_request) \
                      && event.payload.repository.owner.login == parameters.owner \
                      && event.payload.repository.name == parameters.repo";
        serde_json::from_value(json!({
            "format": 1, "slug": "github-pr", "namespace": "tools", "display_name": "github-pr",
            "description": "", "version": "1", "config_schema": {}, "allowed_hosts": [],
            "webhooks": true, "secret_keys": [], "argument_defaults": {}, "config_defaults": {},
            "binding_parameters": ["owner", "repo"], "required_config": [], "github_installation_key": null,
            "tools": [],
            "events": [{
                "name": "comment",
                "message": [],
                "filter": filter,
                "filter_paths": [["action"], ["issue", "pull_request"],
                                 ["repository", "owner", "login"], ["repository", "name"]]
            }]
        }))
        .unwrap()
    }

    fn hook(action: &str, pr: bool, owner: &str) -> Value {
        let mut issue = json!({"number": 7, "title": "t", "body": "a long body"});
        if pr {
            issue["pull_request"] = json!({"url": "u"});
        }
        json!({
            "action": action,
            "issue": issue,
            "comment": {"user": {"login": "ada"}, "body": "LGTM"},
            "repository": {"name": "hello", "owner": {"login": owner}, "big": "x".repeat(1000)}
        })
    }

    fn config(owner: &str) -> Map<String, Value> {
        json!({"owner": owner, "repo": "hello"})
            .as_object()
            .cloned()
            .unwrap()
    }

    #[test]
    fn the_message_is_rendered_and_carries_only_what_the_filter_reads() {
        let mut plan = plan();
        plan.events[0].message = vec![
            payload_ref(&["comment", "user", "login"]),
            Segment::Literal(" commented on PR #".into()),
            payload_ref(&["issue", "number"]),
            Segment::Literal(": ".into()),
            payload_ref(&["comment", "body"]),
            payload_ref(&["absent"]),
        ];
        let body = serde_json::to_vec(&hook("created", true, "octo")).unwrap();
        let out = translate(&plan, &body).unwrap();
        assert_eq!(out.len(), 1);
        let message: MessagePayload = serde_json::from_str(&out[0].1).unwrap();
        assert_eq!(message.text, "ada commented on PR #7: LGTM");
        assert_eq!(
            message.event,
            Some(json!({
                "action": "created",
                "issue": {"pull_request": {"url": "u"}},
                "repository": {"owner": {"login": "octo"}, "name": "hello"}
            }))
        );
        assert!(translate(&plan, b"not json").is_err());
    }

    #[test]
    fn the_filter_decides_per_binding() {
        let plan = plan();
        let deliver = |hook: Value, owner: &str| {
            let body = serde_json::to_vec(&hook).unwrap();
            let (kind, payload) = translate(&plan, &body).unwrap().remove(0);
            accept(&plan, &config(owner), &kind, &payload)
        };
        assert!(deliver(hook("created", true, "octo"), "octo"));
        assert!(!deliver(hook("created", true, "octo"), "other"));
        assert!(!deliver(hook("created", false, "octo"), "octo"), "not a PR");
        assert!(!deliver(hook("deleted", true, "octo"), "octo"));
    }

    #[test]
    fn negated_and_conditional_has_answer_as_on_the_whole_payload() {
        let mut plan = plan();
        for (filter, pr, expected) in [
            ("!has(event.payload.issue.pull_request)", false, true),
            ("!has(event.payload.issue.pull_request)", true, false),
            (
                "has(event.payload.issue.pull_request) ? false : true",
                false,
                true,
            ),
            ("!has(event.payload.issue.pull_request.url)", false, false),
        ] {
            plan.events[0].filter = Some(filter.into());
            let mut path = vec!["issue".to_owned(), "pull_request".to_owned()];
            if filter.contains(".url") {
                path.push("url".into());
            }
            plan.events[0].filter_paths = Some(vec![path]);
            let whole = serde_json::to_vec(&hook("created", pr, "octo")).unwrap();
            let (kind, payload) = translate(&plan, &whole).unwrap().remove(0);
            assert_eq!(
                accept(&plan, &config("octo"), &kind, &payload),
                expected,
                "{filter} (pull request: {pr}); payload {payload}"
            );
        }
    }

    #[test]
    fn a_form_encoded_delivery_is_read_like_json() {
        let json = serde_json::to_string(&hook("created", true, "octo")).unwrap();
        let form: String = form_urlencoded::Serializer::new(String::new())
            .append_pair("payload", &json)
            .finish();
        assert_eq!(
            payload_of(form.as_bytes()).unwrap(),
            hook("created", true, "octo")
        );
        assert!(payload_of(b"a=b").is_err());
        assert!(payload_of(b"payload=%7Bnot").is_err());
    }

    #[test]
    fn anything_unexpected_is_refused() {
        let mut plan = plan();
        assert!(!accept(&plan, &config("octo"), "nope", "{\"text\":\"\"}"));
        assert!(!accept(&plan, &config("octo"), "comment", "not json"));
        // A filter that does not yield a bool, and one that fails, both refuse.
        plan.events[0].filter = Some("event.payload.action".into());
        let body = serde_json::to_vec(&hook("created", true, "octo")).unwrap();
        let (kind, payload) = translate(&plan, &body).unwrap().remove(0);
        assert!(!accept(&plan, &config("octo"), &kind, &payload));
        plan.events[0].filter = Some("event.payload.missing.member == 1".into());
        assert!(!accept(&plan, &config("octo"), &kind, &payload));
        // Numbers compare as CEL ints.
        plan.events[0].filter = Some("event.payload.issue.number == 7".into());
        plan.events[0].filter_paths = Some(vec![vec!["issue".into(), "number".into()]]);
        let (kind, payload) = translate(&plan, &body).unwrap().remove(0);
        assert!(accept(&plan, &config("octo"), &kind, &payload));
        // No filter: every binding.
        plan.events[0].filter = None;
        assert!(accept(&plan, &config("x"), &kind, &payload));
    }
}
