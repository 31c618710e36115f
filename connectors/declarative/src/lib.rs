//! The interpreter behind declarative connectors.
//!
//! `connector-host pack` writes a compiled manifest (a [`declarative_plan::Plan`]) into
//! the slot below; this component reads it on every call and does what it says. Unpacked
//! (as built), the slot is empty and every export fails with a message saying so.
//!
//! The interpreter decides nothing about policy: which agent may call which tool, which
//! hosts are reachable, which installation tokens may be minted, and whether a webhook is
//! authentic are all decided by the host from operator data, exactly as for a connector
//! written in Rust. It only fills templates ([`render`]), makes requests ([`call`]),
//! keeps secret values out of what it returns ([`redact`]) and evaluates event filters
//! ([`events`]).

pub mod call;
pub mod events;
pub mod redact;
pub mod render;

use declarative_plan::{Plan, Slot, SlotPlan, SLOT_CAPACITY, SLOT_FILL, SLOT_MAGIC};
use serde_json::{Map, Value};

/// Where `pack` puts the plan. Only its initialiser mentions the magic.
static SLOT: Slot = Slot {
    magic: SLOT_MAGIC,
    len: [0; 4],
    data: [SLOT_FILL; SLOT_CAPACITY],
};

/// The plan as written by `pack` ([`declarative_plan::encode`]), or `None` when nothing was
/// packed.
pub fn plan_bytes() -> Option<&'static [u8]> {
    // The optimiser knows the initialiser; `black_box` makes it read the packed bytes.
    let slot: &'static Slot = std::hint::black_box(&SLOT);
    let len = u32::from_le_bytes(std::hint::black_box(slot.len)) as usize;
    (len > 0 && len <= SLOT_CAPACITY).then(|| &slot.data[..len])
}

/// The packed plan as a call reads it: its head built, each tool read when asked for.
pub fn slot() -> Result<SlotPlan<'static>, String> {
    let bytes = plan_bytes().ok_or_else(|| {
        "this is the unpacked declarative interpreter: pack a manifest into it with \
         `connector-host pack TOOL.yaml -o TOOL.wasm`"
            .to_owned()
    })?;
    SlotPlan::read(bytes).map_err(unreadable)
}

/// The whole packed plan, every tool read.
pub fn plan() -> Result<Plan, String> {
    slot()?.into_plan().map_err(unreadable)
}

/// Why the packed plan could not be read.
pub fn unreadable(e: serde_json::Error) -> String {
    format!("the packed manifest is unreadable: {e}")
}

/// A JSON object from a JSON document (`{}` when it is not an object).
pub fn object(json: &str) -> Result<Map<String, Value>, String> {
    match serde_json::from_str::<Value>(json) {
        Ok(Value::Object(map)) => Ok(map),
        Ok(_) => Err("expected a JSON object".to_owned()),
        Err(e) => Err(format!("not valid JSON: {e}")),
    }
}

/// `values` with `defaults` filled in where a key is absent or `null`.
pub fn with_defaults(
    mut values: Map<String, Value>,
    defaults: &Map<String, Value>,
) -> Map<String, Value> {
    for (key, value) in defaults {
        if values.get(key).is_none_or(Value::is_null) {
            values.insert(key.clone(), value.clone());
        }
    }
    values
}

/// What `bind` checks beyond the config schema (which the host has checked): every value
/// a request needs, secret values long enough to redact ([`redact::MIN_SECRET_BYTES`]),
/// and a usable installation id when the tool mints GitHub tokens.
/// Returns the routing keys.
pub fn bind<T>(plan: &Plan<T>, config: &Map<String, Value>) -> Result<Vec<String>, String> {
    let missing: Vec<&str> = plan
        .required_config
        .iter()
        .filter(|key| config.get(*key).is_none_or(Value::is_null))
        .map(String::as_str)
        .collect();
    if !missing.is_empty() {
        return Err(format!(
            "the config must set {}: the tools' requests use {}",
            missing
                .iter()
                .map(|k| format!("`{k}`"))
                .collect::<Vec<_>>()
                .join(", "),
            if missing.len() == 1 { "it" } else { "them" }
        ));
    }
    if let Some((key, _)) = redact::secret_values(&plan.secret_keys, config)
        .iter()
        .find(|(_, value)| !value.is_empty() && value.len() < redact::MIN_SECRET_BYTES)
    {
        return Err(format!(
            "`{key}` is a secret setting, and its value is shorter than {min} bytes: a value \
             this short cannot be told apart from ordinary text in answers, so it cannot be \
             kept from agents; set the real credential (at least {min} bytes)",
            min = redact::MIN_SECRET_BYTES
        ));
    }
    if let Some(key) = &plan.github_installation_key {
        if config
            .get(key)
            .and_then(Value::as_u64)
            .is_none_or(|id| id == 0)
        {
            return Err(format!(
                "`{key}` must be the GitHub App installation id (a positive integer) this binding acts for"
            ));
        }
    }
    Ok(if plan.events.is_empty() {
        Vec::new()
    } else {
        vec![declarative_plan::EVENT_ROUTE.to_owned()]
    })
}

#[cfg(target_arch = "wasm32")]
mod exports;

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn bind_refuses_a_config_without_a_value_a_request_needs() {
        let mut plan: Plan = serde_json::from_value(json!({
            "format": 1, "slug": "s", "namespace": "s", "display_name": "s", "description": "",
            "version": "1", "config_schema": {}, "allowed_hosts": [], "webhooks": false,
            "secret_keys": [], "argument_defaults": {}, "config_defaults": {},
            "binding_parameters": [], "required_config": ["api_key", "folder"],
            "github_installation_key": null, "tools": [], "events": []
        }))
        .unwrap();
        let config = |v: Value| v.as_object().cloned().unwrap();
        assert_eq!(
            bind(&plan, &config(json!({"folder": "f"}))),
            Err("the config must set `api_key`: the tools' requests use it".into())
        );
        assert_eq!(
            bind(&plan, &config(json!({"folder": "f", "api_key": "k"}))),
            Ok(vec![])
        );
        plan.github_installation_key = Some("installationId".into());
        let with = |id: Value| config(json!({"folder": "f", "api_key": "k", "installationId": id}));
        assert!(bind(&plan, &with(json!(0))).is_err());
        assert!(bind(&plan, &with(json!("12"))).is_err());
        assert_eq!(bind(&plan, &with(json!(12))), Ok(vec![]));
    }

    #[test]
    fn bind_refuses_a_secret_too_short_to_tell_apart_from_other_text() {
        let plan: Plan = serde_json::from_value(json!({
            "format": 1, "slug": "s", "namespace": "s", "display_name": "s", "description": "",
            "version": "1", "config_schema": {}, "allowed_hosts": [], "webhooks": false,
            "secret_keys": ["api_key", "max_tokens"], "argument_defaults": {}, "config_defaults": {},
            "binding_parameters": [], "required_config": ["api_key"],
            "github_installation_key": null, "tools": [], "events": []
        }))
        .unwrap();
        let config = |v: Value| v.as_object().cloned().unwrap();
        let Err(why) = bind(&plan, &config(json!({"api_key": "k-1"}))) else {
            panic!("a 3-byte secret was accepted");
        };
        assert!(
            why.contains("`api_key`") && why.contains("at least 4 bytes"),
            "{why}"
        );
        assert!(!why.contains("k-1"), "the refusal quotes the secret: {why}");
        assert!(bind(&plan, &config(json!({"api_key": ["long enough", "é"]}))).is_err());
        assert_eq!(bind(&plan, &config(json!({"api_key": "k-12"}))), Ok(vec![]));
        // A number under 4 digits is not treated as a secret (a count such as
        // `max_tokens` whose name looks secret), so it binds.
        assert_eq!(
            bind(
                &plan,
                &config(json!({"api_key": "k-12", "max_tokens": 100}))
            ),
            Ok(vec![])
        );
    }
}
