//! The interpreter behind declarative connectors.
//!
//! `connector-host pack` writes a compiled manifest (a [`declarative_plan::Plan`]) into
//! the slot below; this component reads it on every call and does what it says. Unpacked
//! (as built), the slot is empty and every export fails with a message saying so.
//!
//! The interpreter decides nothing about policy: which agent may call which tool, which
//! hosts are reachable, which installation tokens may be minted, and whether a webhook is
//! authentic are all decided by the host from operator data, exactly as for a connector
//! written in Rust. It only fills templates ([`render`]), makes requests ([`call`]) and
//! evaluates event filters ([`events`]).

pub mod call;
pub mod events;
pub mod render;

use declarative_plan::{Plan, Slot, SLOT_CAPACITY, SLOT_FILL, SLOT_MAGIC};
use serde_json::{Map, Value};

/// Where `pack` puts the plan. Only its initialiser mentions the magic.
static SLOT: Slot = Slot {
    magic: SLOT_MAGIC,
    len: [0; 4],
    data: [SLOT_FILL; SLOT_CAPACITY],
};

/// The plan's JSON as written by `pack`, or `None` when nothing was packed.
pub fn plan_bytes() -> Option<&'static [u8]> {
    // The optimiser knows the initialiser; `black_box` makes it read the packed bytes.
    let slot: &'static Slot = std::hint::black_box(&SLOT);
    let len = u32::from_le_bytes(std::hint::black_box(slot.len)) as usize;
    (len > 0 && len <= SLOT_CAPACITY).then(|| &slot.data[..len])
}

/// The packed plan.
pub fn plan() -> Result<Plan, String> {
    let bytes = plan_bytes().ok_or_else(|| {
        "this is the unpacked declarative interpreter: pack a manifest into it with \
         `connector-host pack TOOL.yaml -o TOOL.wasm`"
            .to_owned()
    })?;
    serde_json::from_slice(bytes).map_err(|e| format!("the packed manifest is unreadable: {e}"))
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

/// What `bind` checks beyond the config schema (which the host has checked): a usable
/// installation id when the tool mints GitHub tokens. Returns the routing keys.
pub fn bind(plan: &Plan, config: &Map<String, Value>) -> Result<Vec<String>, String> {
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
