//! `connector-host dev FILE.wasm`: the connector developer's loop. Validates and describes
//! the component, then watches the file and, on every rebuild, re-validates it and prints
//! what changed in its manifest (optionally running one tool after each reload). With
//! `--live`, every good rebuild also goes into a running host (see [`super::live`]).

use std::collections::BTreeSet;
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use clap::Args;
use serde_json::Value;

use super::inspect::{install_error_message, local_registry};
use super::live::{Live, Rebuild};
use super::{CliError, RemoteArgs};
use connector_model::connector::{Connector, ToolAnnotations, ToolInfo};

pub(crate) const HELP: &str = "\
Loads FILE.wasm like `inspect` (same checks as installing into a host) and prints a summary.
Then polls the file every 300 ms; on every change it reloads the component and prints what
changed: tools added or removed, tool descriptions, input schemas and annotations, the config
schema, webhook scheme, allowed hosts, version and digest. A component that breaks a rule is
reported (error, rule, offending id) and the loop goes on. Ctrl-C ends it.

With --call TOOL JSON the tool runs locally (as `call FILE.wasm TOOL JSON` would) after each
successful load, and its result or error is printed.

With --live, every successful load is also installed (or rotated) into the running host at
--url (token: --token, $CONNECTOR_HOST_OPERATOR_TOKEN or the host's data/operator-token).
Unit --unit (default `dev`) and agent --agent (default `dev`, in that unit) are created when
missing (an existing agent must already be in the unit), the connector is bound on the unit
with --config, and --call runs as that agent over HTTP, as an agent's call would. A rotation
the host refuses (rotation_breaks_bindings) is shown with the bindings it would break; the
loop goes on.

Examples (FILE.wasm stands for the component your build writes):
  connector-host dev FILE.wasm --call hello '{\"name\": \"Ada\"}'
  connector-host dev FILE.wasm --live --call hello '{\"name\": \"Ada\"}'
  # in another terminal: cargo build --target wasm32-wasip2 --release";

/// How often the file is polled.
const POLL: Duration = Duration::from_millis(300);

/// `dev`.
#[derive(Debug, Args)]
pub struct DevArgs {
    /// The component to watch.
    #[arg(value_name = "FILE.wasm")]
    pub file: PathBuf,

    /// Run this tool with these arguments after each successful load.
    #[arg(long, num_args = 2, value_names = ["TOOL", "JSON"])]
    pub call: Option<Vec<String>>,

    /// The binding configuration (for --call, and the binding --live keeps): inline
    /// JSON or @FILE [default: {}].
    #[arg(long, value_name = "JSON|@FILE")]
    pub config: Option<String>,

    /// Install every successful load into the running host at --url, bind it on --unit
    /// and run --call as --agent there.
    #[arg(long)]
    pub live: bool,

    /// With --live: the unit the connector is bound on (created when missing).
    #[arg(long, value_name = "UNIT", default_value = "dev", requires = "live")]
    pub unit: String,

    /// With --live: the agent --call runs as (created in --unit when missing).
    #[arg(long, value_name = "AGENT", default_value = "dev", requires = "live")]
    pub agent: String,
}

/// What identifies one version of the file on disk.
type Stamp = Option<(SystemTime, u64)>;

fn stamp(path: &Path) -> Stamp {
    let meta = std::fs::metadata(path).ok()?;
    Some((meta.modified().ok()?, meta.len()))
}

/// Runs `dev` until Ctrl-C.
pub async fn run(args: DevArgs, remote: &RemoteArgs) -> Result<(), CliError> {
    let config = match &args.config {
        Some(raw) => super::read_json_arg("--config", raw)?,
        None => Value::Object(Default::default()),
    };
    let call = match &args.call {
        Some(call) => Some((
            call[0].clone(),
            super::read_json_arg("the JSON arguments of --call", &call[1])?,
        )),
        None => None,
    };
    let live = if args.live {
        let remote = remote.clone();
        let (unit, agent) = (args.unit.clone(), args.agent.clone());
        Some(Arc::new(Live::new(&remote, unit, agent)?))
    } else {
        None
    };
    let session = Session { config, call, live };
    let registry = local_registry()?;
    let mut last_good: Option<Connector> = None;
    let mut loaded: Stamp = None;
    let mut pending: Stamp = stamp(&args.file);
    let mut first = true;
    let mut waiting_said = false;

    let ctrl_c = tokio::signal::ctrl_c();
    tokio::pin!(ctrl_c);
    loop {
        let now = stamp(&args.file);
        if now.is_none() {
            if !waiting_said {
                say(&format!(
                    "waiting for {} to exist (Ctrl-C to stop)",
                    args.file.display()
                ));
                waiting_said = true;
            }
        } else if now != loaded && (first || now == pending) {
            // Reload only once the file has been stable for one poll: a build that is
            // still writing it is not loaded half-way.
            waiting_said = false;
            first = false;
            loaded = now;
            reload(&registry, &args, &session, &mut last_good).await;
            say("watching for changes (Ctrl-C to stop)");
        }
        pending = now;
        tokio::select! {
            _ = tokio::time::sleep(POLL) => {}
            _ = &mut ctrl_c => return Ok(()),
        }
    }
}

/// What every reload does after validating: the parsed --config and --call, and the
/// live session.
struct Session {
    config: Value,
    call: Option<(String, Value)>,
    live: Option<Arc<Live>>,
}

/// One load: validate, describe or diff, and optionally call (locally, or live).
async fn reload(
    registry: &connector_core::registry::ConnectorRegistry,
    args: &DevArgs,
    session: &Session,
    last_good: &mut Option<Connector>,
) {
    let bytes = match std::fs::read(&args.file) {
        Ok(bytes) => bytes,
        Err(e) => {
            say(&format!("could not read {}: {e}", args.file.display()));
            return;
        }
    };
    let connector = match registry.prepare(&bytes).await {
        Ok(c) => c.info().clone(),
        Err(e) => {
            say(&format!(
                "INVALID: the component would be refused by a host:\n{}",
                indent(&install_error_message(&e))
            ));
            return;
        }
    };
    match last_good {
        None => say(&format!("loaded\n{}", indent(&describe(&connector)))),
        Some(old) => {
            let changes = diff(old, &connector);
            if changes.is_empty() {
                say("reloaded: nothing changed");
            } else {
                let lines: Vec<String> = changes.iter().map(|c| format!("  {c}")).collect();
                say(&format!("reloaded:\n{}", lines.join("\n")));
            }
        }
    }
    *last_good = Some(connector);

    if let Some(live) = &session.live {
        let live = live.clone();
        let rebuild = Rebuild {
            bytes,
            config: session.config.clone(),
            call: session.call.clone(),
        };
        match tokio::task::spawn_blocking(move || live.sync(rebuild, &say)).await {
            Ok(lines) => {
                for line in lines {
                    say(&line);
                }
            }
            Err(e) => say(&format!("live: the update stopped: {e}")),
        }
        return;
    }
    if let Some(call) = &args.call {
        let call_args = super::call::CallArgs {
            target: args.file.to_string_lossy().into_owned(),
            tool: call[0].clone(),
            arguments: call[1].clone(),
            config: args.config.clone(),
            allow_host: Vec::new(),
            allow_private_networks: false,
            secrets: Vec::new(),
        };
        say(&format!("call {} {}:", call[0], call[1]));
        if let Err(e) = super::call::run_local(call_args, Default::default()).await {
            super::print_out(&format!("{}\n", indent(&e.message)));
        }
    }
}

/// A line with a timestamp, on stdout.
fn say(text: &str) {
    let secs = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    let (h, m, s) = (secs / 3600 % 24, secs / 60 % 60, secs % 60);
    super::print_out(&format!("[{h:02}:{m:02}:{s:02}Z] {text}\n"));
}

/// `text` with every line indented by two spaces.
pub(super) fn indent(text: &str) -> String {
    text.lines()
        .map(|l| format!("  {l}"))
        .collect::<Vec<_>>()
        .join("\n")
}

fn hints(a: &ToolAnnotations) -> String {
    let mut out = Vec::new();
    if a.read_only_hint {
        out.push("read-only");
    }
    if a.destructive_hint {
        out.push("destructive");
    }
    if a.idempotent_hint {
        out.push("idempotent");
    }
    if a.open_world_hint {
        out.push("open-world");
    }
    if out.is_empty() {
        "no hints".into()
    } else {
        out.join(", ")
    }
}

/// The summary printed on the first load.
pub fn describe(c: &Connector) -> String {
    let mut out = format!(
        "{} `{}` version {} (tool namespace `{}`)\ndigest {}\n",
        c.display_name, c.slug, c.version, c.tool_namespace, c.digest
    );
    if !c.description.is_empty() {
        out.push_str(&format!("{}\n", c.description));
    }
    out.push_str(&format!("tools ({}):\n", c.tools.len()));
    for t in &c.tools {
        out.push_str(&format!(
            "  {}  [{}]  {}\n",
            t.name,
            hints(&t.annotations),
            t.description
        ));
    }
    let config: Vec<String> = properties(&c.config_schema).into_iter().collect();
    out.push_str(&format!(
        "config: {}\n",
        if config.is_empty() {
            "(no fields)".to_string()
        } else {
            config.join(", ")
        }
    ));
    if let Some(w) = &c.webhook {
        out.push_str(&format!("webhook: {}\n", scheme(w)));
    }
    if !c.allowed_hosts.is_empty() {
        out.push_str(&format!("allowed hosts: {}\n", c.allowed_hosts.join(", ")));
    }
    out
}

fn scheme(w: &connector_model::connector::WebhookInfo) -> String {
    serde_json::to_value(w.scheme)
        .ok()
        .and_then(|v| v.as_str().map(str::to_string))
        .unwrap_or_else(|| format!("{:?}", w.scheme))
}

/// The top-level property names of an object schema.
fn properties(schema: &Value) -> BTreeSet<String> {
    schema
        .get("properties")
        .and_then(Value::as_object)
        .map(|p| p.keys().cloned().collect())
        .unwrap_or_default()
}

/// How a schema changed: property names added and removed (other edits are "changed").
fn schema_change(old: &Value, new: &Value) -> String {
    let (a, b) = (properties(old), properties(new));
    let added: Vec<&String> = b.difference(&a).collect();
    let removed: Vec<&String> = a.difference(&b).collect();
    let mut parts = Vec::new();
    if !added.is_empty() {
        parts.push(format!(
            "properties added: {}",
            added
                .iter()
                .map(|s| s.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        ));
    }
    if !removed.is_empty() {
        parts.push(format!(
            "properties removed: {}",
            removed
                .iter()
                .map(|s| s.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        ));
    }
    if parts.is_empty() {
        "changed".into()
    } else {
        parts.join("; ")
    }
}

/// One difference between two versions of a manifest.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Change {
    /// A top-level field (slug, namespace, display name, description, version, digest,
    /// webhook, allowed hosts) changed from one text to another.
    Field {
        field: &'static str,
        old: String,
        new: String,
    },
    /// A tool appeared.
    ToolAdded(String),
    /// A tool disappeared.
    ToolRemoved(String),
    /// A tool's description changed.
    ToolDescription {
        tool: String,
        old: String,
        new: String,
    },
    /// A tool's input schema changed.
    ToolSchema { tool: String, summary: String },
    /// A tool's annotations changed.
    ToolAnnotations {
        tool: String,
        old: String,
        new: String,
    },
    /// The config schema changed.
    ConfigSchema { summary: String },
}

impl fmt::Display for Change {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Change::Field { field, old, new } => write!(f, "{field}: {old} -> {new}"),
            Change::ToolAdded(t) => write!(f, "+ tool {t}"),
            Change::ToolRemoved(t) => write!(f, "- tool {t}"),
            Change::ToolDescription { tool, old, new } => {
                write!(f, "~ tool {tool}: description {old:?} -> {new:?}")
            }
            Change::ToolSchema { tool, summary } => {
                write!(f, "~ tool {tool}: input schema {summary}")
            }
            Change::ToolAnnotations { tool, old, new } => {
                write!(f, "~ tool {tool}: annotations [{old}] -> [{new}]")
            }
            Change::ConfigSchema { summary } => write!(f, "~ config schema {summary}"),
        }
    }
}

/// The differences from `old` to `new`, in a stable order: identity fields, tools (sorted
/// by id), config schema, webhook, allowed hosts, then version and digest.
pub fn diff(old: &Connector, new: &Connector) -> Vec<Change> {
    let mut changes = Vec::new();
    let field = |changes: &mut Vec<Change>, name: &'static str, a: &str, b: &str| {
        if a != b {
            changes.push(Change::Field {
                field: name,
                old: a.to_string(),
                new: b.to_string(),
            });
        }
    };
    field(&mut changes, "slug", &old.slug, &new.slug);
    field(
        &mut changes,
        "tool namespace",
        &old.tool_namespace,
        &new.tool_namespace,
    );
    field(
        &mut changes,
        "display name",
        &old.display_name,
        &new.display_name,
    );
    field(
        &mut changes,
        "description",
        &old.description,
        &new.description,
    );

    let find = |tools: &[ToolInfo], name: &str| tools.iter().find(|t| t.name == name).cloned();
    let names: BTreeSet<&str> = old
        .tools
        .iter()
        .chain(new.tools.iter())
        .map(|t| t.name.as_str())
        .collect();
    for name in names {
        match (find(&old.tools, name), find(&new.tools, name)) {
            (None, Some(_)) => changes.push(Change::ToolAdded(name.to_string())),
            (Some(_), None) => changes.push(Change::ToolRemoved(name.to_string())),
            (Some(a), Some(b)) => {
                if a.description != b.description {
                    changes.push(Change::ToolDescription {
                        tool: name.to_string(),
                        old: a.description,
                        new: b.description,
                    });
                }
                if a.input_schema != b.input_schema {
                    changes.push(Change::ToolSchema {
                        tool: name.to_string(),
                        summary: schema_change(&a.input_schema, &b.input_schema),
                    });
                }
                if a.annotations != b.annotations {
                    changes.push(Change::ToolAnnotations {
                        tool: name.to_string(),
                        old: hints(&a.annotations),
                        new: hints(&b.annotations),
                    });
                }
            }
            (None, None) => {}
        }
    }

    if old.config_schema != new.config_schema {
        changes.push(Change::ConfigSchema {
            summary: schema_change(&old.config_schema, &new.config_schema),
        });
    }
    let webhook = |c: &Connector| c.webhook.as_ref().map_or("none".to_string(), scheme);
    field(&mut changes, "webhook", &webhook(old), &webhook(new));
    let hosts = |c: &Connector| {
        if c.allowed_hosts.is_empty() {
            "none".to_string()
        } else {
            c.allowed_hosts.join(", ")
        }
    };
    field(&mut changes, "allowed hosts", &hosts(old), &hosts(new));
    field(&mut changes, "version", &old.version, &new.version);
    field(&mut changes, "digest", &old.digest, &new.digest);
    changes
}

#[cfg(test)]
mod tests {
    use super::*;
    use connector_model::connector::{WebhookInfo, WebhookSchemeName};
    use serde_json::json;

    fn tool(name: &str, description: &str, schema: Value) -> ToolInfo {
        ToolInfo {
            name: name.into(),
            description: description.into(),
            input_schema: schema,
            annotations: ToolAnnotations::default(),
            output_schema: None,
        }
    }

    fn base() -> Connector {
        Connector {
            slug: "demo".parse().expect("a slug"),
            tool_namespace: "demo".into(),
            display_name: "Demo".into(),
            description: "d".into(),
            version: "0.1.0".into(),
            digest: "sha256:aa".into(),
            world: String::new(),
            tools: vec![
                tool(
                    "demo.a",
                    "A",
                    json!({"type": "object", "properties": {"x": {}}}),
                ),
                tool("demo.b", "B", json!({"type": "object"})),
            ],
            config_schema: json!({"type": "object", "properties": {}}),
            webhook: None,
            allowed_hosts: vec![],
            source: connector_model::connector::SOURCE_UPLOAD.to_string(),
            signed_by: None,
        }
    }

    #[test]
    fn identical_manifests_have_no_changes() {
        assert_eq!(diff(&base(), &base()), vec![]);
    }

    #[test]
    fn a_rebuild_changes_only_the_digest() {
        let mut new = base();
        new.digest = "sha256:bb".into();
        let changes = diff(&base(), &new);
        assert_eq!(changes.len(), 1);
        assert_eq!(changes[0].to_string(), "digest: sha256:aa -> sha256:bb");
    }

    #[test]
    fn tools_added_removed_and_changed() {
        let mut new = base();
        new.tools.remove(1);
        new.tools.push(tool("demo.c", "C", json!({})));
        new.tools[0].description = "A2".into();
        new.tools[0].input_schema =
            json!({"type": "object", "properties": {"y": {}}, "required": ["y"]});
        new.tools[0].annotations.read_only_hint = true;
        new.tools[0].annotations.idempotent_hint = true;
        let text: Vec<String> = diff(&base(), &new).iter().map(|c| c.to_string()).collect();
        assert_eq!(
            text,
            [
                "~ tool demo.a: description \"A\" -> \"A2\"",
                "~ tool demo.a: input schema properties added: y; properties removed: x",
                "~ tool demo.a: annotations [no hints] -> [read-only, idempotent]",
                "- tool demo.b",
                "+ tool demo.c",
            ]
        );
    }

    #[test]
    fn config_webhook_hosts_and_version() {
        let mut new = base();
        new.config_schema = json!({"type": "object", "properties": {"token": {"writeOnly": true}}});
        new.webhook = Some(WebhookInfo {
            scheme: WebhookSchemeName::StandardWebhooks,
        });
        new.allowed_hosts = vec!["api.example.com".into()];
        new.version = "0.2.0".into();
        let text: Vec<String> = diff(&base(), &new).iter().map(|c| c.to_string()).collect();
        assert_eq!(
            text,
            [
                "~ config schema properties added: token",
                "webhook: none -> standard-webhooks",
                "allowed hosts: none -> api.example.com",
                "version: 0.1.0 -> 0.2.0",
            ]
        );
        let mut tweaked = base();
        tweaked.config_schema["additionalProperties"] = json!(false);
        assert_eq!(
            diff(&base(), &tweaked)[0].to_string(),
            "~ config schema changed"
        );
    }

    #[test]
    fn the_summary_lists_tools_and_config() {
        let text = describe(&base());
        assert!(text.contains("Demo `demo` version 0.1.0"), "{text}");
        assert!(text.contains("demo.a  [no hints]  A"), "{text}");
        assert!(text.contains("config: (no fields)"), "{text}");
    }
}
