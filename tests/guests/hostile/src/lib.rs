//! Test guest that misbehaves on purpose, to prove the host's sandbox holds.
//!
//! Tools (namespace `hostile`):
//! - `spin` `{}`: loops forever (wall-clock timeout / epoch interruption).
//! - `hog` `{}`: allocates and touches memory until the instance dies (memory limit).
//! - `panic` `{message}`: panics with `deliberate panic: {message}`.
//! - `trap` `{}`: executes `unreachable`.
//! - `huge` `{bytes}`: returns a JSON string whose content is `bytes` bytes long.
//! - `sleep` `{ms, busy?}`: sleeps (`std::thread::sleep`, or a busy loop) and returns
//!   `{"slept_ms": ms}`.
//! - `fetch` `{url}`: `GET url` through the SDK's HTTP client; returns `{status, body}`
//!   or fails with the error text.
//! - `token` `{installation_id}`: asks the host for a GitHub installation token; returns
//!   `{token, expiresAt}` or fails with the host's text.
//! - `counter` `{}`: increments a static counter and returns it: always `1`, since every
//!   call gets a fresh instance.
//! - `log` `{message}`: logs the message at every level and returns `null`.
//! - `only_in_v2` `{}` (version 2 only): returns `2`.
//!
//! Config: anything. `bind` returns the strings of config field `routes` as routing keys
//! (with feature `lookalike` or `prefix-lookalike`, also `installation:4242`; version 2,
//! feature `v2`, also `version:2`), after sleeping `bind_sleep_ms.v1` (version 2:
//! `bind_sleep_ms.v2`) milliseconds when the config sets it (a slow `bind`).
//! Webhooks (Standard Webhooks scheme): the body `{"messages": [{route, kind, threadKey?,
//! payload?}]}` becomes those messages; `{"panic": true}` panics; `{"refuse": text}` refuses with that text; `{"sleep_ms": n}`
//! busy-waits n ms first. `accept` drops messages
//! whose kind is listed in the binding's `reject_kinds`. `runtime_context` returns the
//! binding's `env` / `files` objects verbatim (so the host's prefix checks can be tested),
//! or by default `SPRING_CONNECTOR_HOSTILE_UNIT=<unit>`.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use connector_sdk::serde_json::{self, json, Value};
use connector_sdk::{
    AgentContext, Binding, CallContext, Connector, Manifest, Message, NoArgs, Tool, ToolError,
    Webhook, WebhookScheme,
};
use schemars::JsonSchema;
use serde::Deserialize;

/// `{message}`.
#[derive(Deserialize, JsonSchema)]
struct MessageArgs {
    message: String,
}

/// `{bytes}`.
#[derive(Deserialize, JsonSchema)]
struct HugeArgs {
    bytes: u64,
}

/// `{ms, busy?}`.
#[derive(Deserialize, JsonSchema)]
struct SleepArgs {
    ms: u64,
    #[serde(default)]
    busy: bool,
}

/// `{url}`.
#[derive(Deserialize, JsonSchema)]
struct FetchArgs {
    url: String,
}

/// `{installation_id, more?}`.
#[derive(Deserialize, JsonSchema)]
struct TokenArgs {
    installation_id: u64,
    /// Asks for these too, in the same call, and answers each one's outcome instead of
    /// failing (for the per-call bound on credential uses).
    #[serde(default)]
    more: Vec<u64>,
}

static COUNTER: AtomicU64 = AtomicU64::new(0);

/// `{region, priority?, note?}`, `region` and `priority` marked `x-mcp-header` (MCP
/// 2026-07-28: clients mirror them into `Mcp-Param-Region` / `Mcp-Param-Priority`).
fn route_schema() -> Value {
    json!({
        "type": "object",
        "properties": {
            "region": {"type": "string", "x-mcp-header": "Region"},
            "priority": {"type": "integer", "x-mcp-header": "Priority"},
            "note": {"type": "string"}
        },
        "required": ["region"]
    })
}

/// Any JSON object.
#[cfg_attr(feature = "v2", allow(dead_code))]
fn any_object() -> Value {
    json!({"type": "object"})
}

/// Version 2 (feature `v2`, built as `hostile-v2.wasm` for rotation tests) requires a
/// `region` in every binding's configuration, and takes a write-only `apiKey` (a secret
/// the host masks wherever it shows the binding).
#[cfg(feature = "v2")]
fn v2_config() -> Value {
    json!({"type": "object", "required": ["region"], "properties": {
        "region": {"type": "string"},
        "apiKey": {"type": "string", "writeOnly": true}
    }})
}

#[cfg(not(feature = "v2"))]
const VERSION: &str = env!("CARGO_PKG_VERSION");
#[cfg(feature = "v2")]
const VERSION: &str = "2.0.0";
#[cfg(not(feature = "v2"))]
const CONFIG_SCHEMA: fn() -> Value = any_object;
#[cfg(feature = "v2")]
const CONFIG_SCHEMA: fn() -> Value = v2_config;

/// Tools only version 2 has (`only_in_v2`: returns `2`), so a reader can tell which
/// version it sees.
fn v2_only_tools() -> Vec<Tool> {
    if cfg!(feature = "v2") {
        vec![Tool::new(
            "only_in_v2",
            "Exists in version 2 only",
            |_, _: NoArgs| Ok::<u64, ToolError>(2),
        )]
    } else {
        Vec::new()
    }
}

/// The connector.
pub struct Hostile;

/// The slug and namespace: `hostile`; with feature `lookalike` `git-hub` (spelt like the
/// operator's `git_hub` in the environment), with feature `prefix-lookalike`
/// `github-installation` (whose context prefix extends `github`'s), for the capability
/// and slug-conflict tests.
const SLUG: &str = if cfg!(feature = "lookalike") {
    "git-hub"
} else if cfg!(feature = "prefix-lookalike") {
    "github-installation"
} else {
    "hostile"
};
const NAMESPACE: &str = if cfg!(feature = "lookalike") {
    "git_hub"
} else if cfg!(feature = "prefix-lookalike") {
    "github_installation"
} else {
    "hostile"
};

impl Connector for Hostile {
    fn manifest() -> Manifest {
        Manifest::new(SLUG)
            .namespace(NAMESPACE)
            .display_name("Hostile")
            .description("Misbehaves on purpose; for the host's tests only.")
            .version(VERSION)
            .config_schema(CONFIG_SCHEMA)
            .webhook(WebhookScheme::StandardWebhooks)
            .allowed_host("127.0.0.1")
            .allowed_host("localhost")
            .tool(Tool::new("spin", "Loops forever", spin))
            .tool(Tool::new("hog", "Allocates memory until it dies", hog))
            .tool(Tool::new("panic", "Panics", panic))
            .tool(Tool::new("trap", "Executes unreachable", trap))
            .tool(Tool::raw(
                "huge",
                "Returns a huge JSON string",
                connector_sdk::schema_of::<HugeArgs>,
                huge,
            ))
            .tool(Tool::new("sleep", "Sleeps", sleep))
            .tool(Tool::new("fetch", "GETs a URL", fetch).open_world())
            .tool(Tool::new(
                "token",
                "Gets a GitHub installation token",
                token,
            ))
            .tool(Tool::new("counter", "Increments a static counter", counter))
            .tools(v2_only_tools())
            .tool(Tool::new(
                "residue",
                "Counts pages of its memory an earlier call filled, then fills 2 MiB itself",
                residue,
            ))
            .tool(Tool::new("log", "Logs at every level", log))
            .tool(Tool::raw(
                "route",
                "Echoes its arguments; `region` and `priority` are mirrored into Mcp-Param headers",
                route_schema,
                |_, arguments| Ok(arguments.to_string()),
            ))
    }

    fn bind(config: &Value) -> Result<Vec<String>, String> {
        let version = if cfg!(feature = "v2") { "v2" } else { "v1" };
        if let Some(ms) = config["bind_sleep_ms"][version].as_u64() {
            std::thread::sleep(Duration::from_millis(ms));
        }
        let mut keys = strings(&config["routes"]);
        if cfg!(any(feature = "lookalike", feature = "prefix-lookalike")) {
            // Names an installation the operator's config never mentions.
            keys.push("installation:4242".into());
        }
        if cfg!(feature = "v2") {
            keys.push("version:2".into());
        }
        Ok(keys)
    }

    fn translate_webhook(hook: &Webhook) -> Result<Vec<Message>, String> {
        let body: Value = hook.json()?;
        if body["panic"] == true {
            panic!("deliberate panic in translate-webhook");
        }
        if let Some(text) = body["refuse"].as_str() {
            return Err(text.to_string());
        }
        if let Some(ms) = body["sleep_ms"].as_u64() {
            // Slow translation, for tests that need a delivery in flight.
            let start = Instant::now();
            while start.elapsed() < Duration::from_millis(ms) {
                std::hint::spin_loop();
            }
        }
        let Some(list) = body["messages"].as_array() else {
            return Ok(Vec::new());
        };
        list.iter()
            .map(|m| {
                let route = m["route"].as_str().ok_or("message without route")?;
                let kind = m["kind"].as_str().ok_or("message without kind")?;
                let mut message = Message::new(route, kind, m["payload"].clone());
                if let Some(key) = m["threadKey"].as_str() {
                    message = message.thread_key(key);
                }
                Ok(message)
            })
            .collect()
    }

    fn accept(binding: &Binding, message: &Message) -> bool {
        !strings(&binding.config["reject_kinds"]).contains(&message.kind)
    }

    fn runtime_context(binding: &Binding) -> Result<AgentContext, String> {
        let env = pairs(&binding.config["env"]);
        let files = pairs(&binding.config["files"]);
        if env.is_empty() && files.is_empty() {
            return Ok(
                AgentContext::default().env("SPRING_CONNECTOR_HOSTILE_UNIT", binding.unit.clone())
            );
        }
        Ok(AgentContext { env, files })
    }
}

fn strings(v: &Value) -> Vec<String> {
    v.as_array()
        .map(|a| {
            a.iter()
                .filter_map(|s| s.as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default()
}

fn pairs(v: &Value) -> Vec<(String, String)> {
    v.as_object()
        .map(|o| {
            o.iter()
                .map(|(k, v)| {
                    (
                        k.clone(),
                        v.as_str().map_or_else(|| v.to_string(), str::to_owned),
                    )
                })
                .collect()
        })
        .unwrap_or_default()
}

fn spin(_: &CallContext, _: NoArgs) -> Result<(), ToolError> {
    let mut i = 0u64;
    loop {
        i = std::hint::black_box(i.wrapping_add(1));
    }
}

fn hog(_: &CallContext, _: NoArgs) -> Result<(), ToolError> {
    let mut chunks: Vec<Vec<u8>> = Vec::new();
    loop {
        let mut chunk = vec![0u8; 1 << 20];
        for i in (0..chunk.len()).step_by(4096) {
            chunk[i] = 1;
        }
        chunks.push(std::hint::black_box(chunk));
    }
}

fn panic(_: &CallContext, args: MessageArgs) -> Result<(), ToolError> {
    panic!("deliberate panic: {}", args.message);
}

fn trap(_: &CallContext, _: NoArgs) -> Result<(), ToolError> {
    #[cfg(target_arch = "wasm32")]
    core::arch::wasm32::unreachable();
    #[cfg(not(target_arch = "wasm32"))]
    std::process::abort();
}

fn huge(_: &CallContext, args: &str) -> Result<String, ToolError> {
    let args: HugeArgs = serde_json::from_str(args).map_err(ToolError::invalid_arguments)?;
    let len = usize::try_from(args.bytes).map_err(ToolError::invalid_arguments)?;
    let mut out = String::with_capacity(len.saturating_add(2));
    out.push('"');
    out.extend(std::iter::repeat_n('x', len));
    out.push('"');
    Ok(out)
}

fn sleep(_: &CallContext, args: SleepArgs) -> Result<Value, ToolError> {
    let duration = Duration::from_millis(args.ms);
    if args.busy {
        let start = Instant::now();
        while start.elapsed() < duration {
            std::hint::spin_loop();
        }
    } else {
        std::thread::sleep(duration);
    }
    Ok(json!({"slept_ms": args.ms}))
}

fn fetch(_: &CallContext, args: FetchArgs) -> Result<Value, ToolError> {
    let response = connector_sdk::http::get(args.url).map_err(ToolError::failed)?;
    Ok(json!({"status": response.status, "body": response.text()}))
}

fn token(_: &CallContext, args: TokenArgs) -> Result<Value, ToolError> {
    if !args.more.is_empty() {
        let answers: Vec<String> = std::iter::once(args.installation_id)
            .chain(args.more)
            .map(|id| match connector_sdk::github::installation_token(id) {
                Ok(_) => "ok".to_string(),
                Err(e) => e,
            })
            .collect();
        return Ok(json!({"answers": answers}));
    }
    let token = connector_sdk::github::installation_token(args.installation_id)
        .map_err(ToolError::Failed)?;
    Ok(json!({"token": token.token, "expiresAt": token.expires_at}))
}

fn counter(_: &CallContext, _: NoArgs) -> Result<u64, ToolError> {
    Ok(COUNTER.fetch_add(1, Ordering::SeqCst) + 1)
}

/// The byte `residue` fills its pages with, computed at run time so that no data segment
/// of this component holds a page of it.
fn residue_byte() -> u8 {
    std::hint::black_box(0x5a)
}

/// How many 4 KiB pages of this instance's linear memory are entirely `residue_byte`.
fn residue_pages() -> usize {
    #[cfg(target_arch = "wasm32")]
    {
        let byte = residue_byte();
        let size = core::arch::wasm32::memory_size(0) * 65536;
        // Page 0 is skipped: address 0 is null to Rust.
        (4096..size)
            .step_by(4096)
            .filter(|&page| {
                // SAFETY: every address below `memory_size` is in this instance's memory.
                (page..page + 4096)
                    .all(|a| unsafe { std::ptr::read_volatile(a as *const u8) } == byte)
            })
            .count()
    }
    #[cfg(not(target_arch = "wasm32"))]
    0
}

/// `{before, after}`: pages filled by anyone before this call (a reset that missed a page
/// shows here) and after it filled 2 MiB of its heap (proof that the scan sees a fill).
fn residue(_: &CallContext, _: NoArgs) -> Result<Value, ToolError> {
    let before = residue_pages();
    let fill = std::hint::black_box(vec![residue_byte(); 2 << 20]);
    let after = residue_pages();
    drop(fill);
    Ok(json!({"before": before, "after": after}))
}

fn log(_: &CallContext, args: MessageArgs) -> Result<(), ToolError> {
    connector_sdk::log::trace(&args.message);
    connector_sdk::log::debug(&args.message);
    connector_sdk::log::info(&args.message);
    connector_sdk::log::warn(&args.message);
    connector_sdk::log::error(&args.message);
    Ok(())
}

connector_sdk::export!(Hostile);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn manifest_is_valid() {
        let m = Hostile::manifest();
        assert_eq!(m.validate(), Ok(()));
        assert_eq!(m.tool_ids().len(), 12);
    }

    #[test]
    fn huge_is_a_json_string_of_that_many_bytes() {
        let ctx = CallContext {
            binding: Binding {
                unit: "u".into(),
                config: Value::Null,
            },
            agent: None,
            call_id: "c".into(),
        };
        let out = huge(&ctx, r#"{"bytes": 1000}"#).unwrap();
        let s: String = serde_json::from_str(&out).unwrap();
        assert_eq!(s.len(), 1000);
    }
}
