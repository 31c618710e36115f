//! `connector-host call`: a tool call, either locally in a component file (for connector
//! developers: no host, no database) or through a running host on behalf of an agent.

use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

use clap::Args;
use serde_json::{json, Value};

use super::client::{Body, Client};
use super::inspect::{local_registry, prepare, read_component};
use super::output::OutputArgs;
use super::{print_json, read_json_arg, CliError};
use connector_core::registry::SchemaViolation;
use connector_runtime::{wit, Caller, GuestError, OutboundPolicy, Sandbox};

pub(crate) const HELP: &str = "\
With FILE.wasm (a TARGET ending in .wasm, containing a `/`, or naming an existing file) the
component runs locally, as the host would run it: the config is checked against its
configSchema and its own `bind`, the arguments against the tool's inputSchema, then the tool
runs in a fresh sandbox (binding unit `local`, no agent). Outbound HTTP is limited to the
hosts the component declares, narrowed by --allow-host when given; private and loopback
addresses are refused unless --allow-private-networks. TOOL may omit the namespace
(`echo` means `<namespace>.echo`).

With AGENT the call goes through the running host (POST /api/v1/agents/AGENT/tool-calls)
and passes its grant and schema checks.

Output: the result as text: the text of its content blocks (an image, audio or resource
block as one bracketed line naming it), else the structured result (a string as is, other
JSON pretty); the outcome (tool, where it ran, time taken) goes to stderr. --json prints the
whole answer as the HTTP API returns it: {\"result\": <structured JSON or null>,
\"content\": [blocks]} (content only when the connector returned blocks; binary data in
base64). A refused or failed call prints its error and exits 1.

Examples (FILE.wasm stands for your component file, token.txt for a file holding a token):
  connector-host call FILE.wasm echo '{\"message\": \"hi\"}'
  connector-host call FILE.wasm get_issue '{\"number\": 1}' --config '{\"repo\": \"octo/hello\", \"patSecret\": \"ci-bot\"}' --secret ci-bot=@token.txt
  connector-host call FILE.wasm fetch '{\"url\": \"http://127.0.0.1:8080\"}' --allow-host 127.0.0.1 --allow-private-networks
  connector-host call ada acme.echo '{\"message\": \"hi\"}'";

const LOCAL: &str = "Local call (FILE.wasm)";

/// `call`.
#[derive(Debug, Args)]
pub struct CallArgs {
    /// A component file (local call) or an agent id (call through the running host).
    #[arg(value_name = "FILE.wasm|AGENT")]
    pub target: String,

    /// The tool id, e.g. acme.echo (locally the namespace may be left out: echo).
    #[arg(value_name = "TOOL")]
    pub tool: String,

    /// The arguments: inline JSON, @FILE, or @- for stdin.
    #[arg(value_name = "JSON", default_value = "{}")]
    pub arguments: String,

    /// The binding configuration: inline JSON, @FILE, or @- for stdin [default: {}].
    #[arg(long, value_name = "JSON|@FILE", help_heading = LOCAL)]
    pub config: Option<String>,

    /// Narrow outbound HTTP to this host (repeatable); only hosts the component declares
    /// can be allowed.
    #[arg(long = "allow-host", value_name = "HOST", help_heading = LOCAL)]
    pub allow_host: Vec<String>,

    /// Let the component reach loopback, private and link-local addresses.
    #[arg(long, help_heading = LOCAL)]
    pub allow_private_networks: bool,

    /// An operator secret the call may read, as `connectors.<slug>.secrets.NAME` would be on
    /// a host (repeatable). As there, the call reads only the secrets its config names
    /// (e.g. `"patSecret": "NAME"`). VALUE may be `@FILE` (the file's content, one
    /// trailing newline dropped); values are never printed.
    #[arg(long = "secret", value_name = "NAME=VALUE", help_heading = LOCAL)]
    pub secrets: Vec<String>,
}

impl CallArgs {
    /// Whether TARGET is a component file rather than an agent id (agent ids never
    /// contain `/`).
    pub fn is_local(&self) -> bool {
        let target = &self.target;
        target.to_ascii_lowercase().ends_with(".wasm")
            || target.contains(['/', '\\'])
            || Path::new(target).is_file()
    }

    fn has_local_flags(&self) -> bool {
        self.config.is_some()
            || !self.allow_host.is_empty()
            || self.allow_private_networks
            || !self.secrets.is_empty()
    }
}

/// A call through the running host on behalf of agent TARGET.
pub fn run_remote(client: &Client, args: CallArgs, out: OutputArgs) -> Result<(), CliError> {
    if args.has_local_flags() {
        return Err(CliError::usage(format!(
            "--config, --secret, --allow-host and --allow-private-networks only apply to a local call of a component file, \
             and `{}` is taken as an agent id (a file name must end in .wasm or contain a `/`)",
            args.target
        )));
    }
    let arguments = read_json_arg("the JSON arguments", &args.arguments)?;
    let started = Instant::now();
    let reply = client.post(
        &["agents", &args.target, "tool-calls"],
        Body::Json(json!({"tool": args.tool, "arguments": arguments})),
    )?;
    let body = reply.body.unwrap_or(Value::Null);
    show_answer(
        out,
        &body,
        &format!("{} as agent `{}`", args.tool, args.target),
        started,
    );
    Ok(())
}

/// Prints a tool call's answer by the output rule: the whole answer with `--json`, else
/// [`readable`] on stdout and the outcome (`called` says what ran where) on stderr.
fn show_answer(out: OutputArgs, body: &Value, called: &str, started: Instant) {
    if out.json {
        print_json(body);
        return;
    }
    let text = readable(body);
    if !text.is_empty() {
        super::print_out(&text);
    }
    super::print_err(&format!(
        "ok: {called} in {} ms ({})",
        started.elapsed().as_millis(),
        shape(body)
    ));
}

/// A tool call's answer `{"result", "content"?}` as text for a person: each content
/// block on its own (a text block's text; an image, audio or resource as one bracketed
/// line naming it, with a resource's text after it), else the structured result (a
/// string as is, null as nothing, other JSON pretty). Ends with a newline unless empty.
pub(crate) fn readable(body: &Value) -> String {
    let mut text = String::new();
    let blocks = body
        .get("content")
        .and_then(Value::as_array)
        .filter(|b| !b.is_empty());
    if let Some(blocks) = blocks {
        for block in blocks {
            text.push_str(&block_text(block));
            if !text.ends_with('\n') {
                text.push('\n');
            }
        }
        return text;
    }
    match body.get("result").unwrap_or(&Value::Null) {
        Value::Null => {}
        Value::String(s) => text.push_str(s),
        other => text.push_str(&super::json_for_terminals(
            &serde_json::to_string_pretty(other).unwrap_or_else(|_| other.to_string()),
        )),
    }
    if !text.is_empty() && !text.ends_with('\n') {
        text.push('\n');
    }
    text
}

/// One content block as text (see [`readable`]).
fn block_text(block: &Value) -> String {
    let s = |v: &Value, key: &str| v.get(key).and_then(Value::as_str).unwrap_or("").to_string();
    let kind = s(block, "type");
    match kind.as_str() {
        "text" => s(block, "text"),
        "image" | "audio" => {
            // Base64 without padding: 3 bytes per 4 characters.
            let data = s(block, "data");
            let bytes = data.trim_end_matches('=').len() * 3 / 4;
            format!("[{kind} {}, {bytes} bytes]", or_dash(&s(block, "mimeType")))
        }
        "resource_link" => {
            let name = s(block, "name");
            let mut line = format!("[resource link {}", or_dash(&s(block, "uri")));
            if !name.is_empty() {
                line.push_str(&format!(" ({name})"));
            }
            line.push(']');
            line
        }
        "resource" => {
            let resource = block.get("resource").unwrap_or(&Value::Null);
            let mut line = format!("[resource {}", or_dash(&s(resource, "uri")));
            let mime = s(resource, "mimeType");
            if !mime.is_empty() {
                line.push_str(&format!(", {mime}"));
            }
            match resource.get("text").and_then(Value::as_str) {
                Some(body) => format!("{line}]\n{body}"),
                None => {
                    let bytes = s(resource, "blob").trim_end_matches('=').len() * 3 / 4;
                    format!("{line}, {bytes} bytes]")
                }
            }
        }
        other => format!("[{} block]", or_dash(other)),
    }
}

fn or_dash(text: &str) -> &str {
    if text.is_empty() {
        "-"
    } else {
        text
    }
}

/// What an answer held, for the outcome line: `3 content blocks`, `a JSON result`, …
fn shape(body: &Value) -> String {
    let blocks = body
        .get("content")
        .and_then(Value::as_array)
        .map_or(0, Vec::len);
    let result = match body.get("result").unwrap_or(&Value::Null) {
        Value::Null => "no structured result",
        Value::String(_) => "a string result",
        _ => "a JSON result",
    };
    match blocks {
        0 => result.to_string(),
        1 => format!("1 content block, {result}"),
        n => format!("{n} content blocks, {result}"),
    }
}

/// What `call` prints of a tool-call answer `{"result", "content"?}`: the result alone
/// when there are no content blocks, else the whole answer.
pub(crate) fn shown_result(body: &Value) -> &Value {
    match body.get("result") {
        Some(result) if body.get("content").is_none() => result,
        _ => body,
    }
}

/// A local call in the component file TARGET.
pub async fn run_local(args: CallArgs, out: OutputArgs) -> Result<(), CliError> {
    let bytes = read_component(Path::new(&args.target))?;
    // Malformed input is reported before the (slow) component load.
    let config = read_json_arg("--config", args.config.as_deref().unwrap_or("{}"))?;
    let arguments = read_json_arg("the JSON arguments", &args.arguments)?;
    let given = parse_secrets(&args.secrets)?;
    let registry = local_registry()?;
    let connector = prepare(&registry, &bytes).await?;
    let info = connector.info();
    let runtime = registry.runtime();

    let tool_id = if args.tool.contains('.') {
        args.tool.clone()
    } else {
        format!("{}.{}", info.tool_namespace, args.tool)
    };
    if connector.tool(&tool_id).is_none() {
        let names: Vec<&str> = info.tools.iter().map(|t| t.name.as_str()).collect();
        return Err(CliError::usage(format!(
            "`{tool_id}` is not a tool of connector `{}`; its tools: {}",
            info.slug,
            if names.is_empty() {
                "(none)".to_string()
            } else {
                names.join(", ")
            }
        )));
    }

    connector.check_config(&config).map_err(|v| {
        CliError::failed(violations(
            "invalid_config: the config does not match the connector's configSchema",
            &v,
        ))
    })?;

    let operator_hosts = (!args.allow_host.is_empty()).then_some(args.allow_host.as_slice());
    let outbound = OutboundPolicy::new(
        &info.allowed_hosts,
        operator_hosts,
        args.allow_private_networks,
    );
    for host in &args.allow_host {
        if !outbound.allows_host(host) {
            tracing::warn!(host = %host, declared = ?info.allowed_hosts, "--allow-host names a host the component does not declare; it stays blocked");
        }
    }
    let installations: Vec<u64> = config
        .get("installationId")
        .and_then(Value::as_u64)
        .into_iter()
        .collect();
    let secrets = named_secrets(&given, &config);
    for name in given.keys().filter(|n| !secrets.contains_key(*n)) {
        super::print_err(&format!(
            "warning: the config names no secret `{name}`, so (as on a host) the call cannot read it; \
             name it in the config, e.g. {{\"patSecret\": \"{name}\"}} for github"
        ));
    }
    let sandbox = Sandbox {
        connector: Arc::from(info.slug.as_str()),
        outbound: Arc::new(outbound),
        installations: Arc::from(installations),
        secrets: Arc::new(secrets),
        caller: Caller::Host,
        memory_bytes: None,
    };

    let config_text = config.to_string();
    let component = connector
        .component(runtime.limits().call_timeout)
        .await
        .map_err(|e| guest_error(&e))?;
    match runtime.bind(component, &sandbox, &config_text).await {
        Ok(Ok(routes)) => tracing::debug!(?routes, "the connector accepted the config"),
        Ok(Err(reason)) => {
            return Err(CliError::failed(format!(
                "invalid_config: the connector refused the config: {reason}"
            )))
        }
        Err(e) => return Err(guest_error(&e)),
    }

    connector
        .check_arguments(&tool_id, &arguments)
        .map_err(|v| {
            CliError::failed(violations(
                &format!(
                    "invalid_arguments: the arguments do not match the inputSchema of `{tool_id}`"
                ),
                &v,
            ))
        })?;

    let ctx = wit::CallContext {
        binding: wit::Binding {
            unit: "local".into(),
            config: config_text,
        },
        agent: None,
        call_id: format!("local-{:016x}", rand::random::<u64>()),
    };
    let started = Instant::now();
    let outcome = runtime
        .call_tool(component, &sandbox, ctx, &tool_id, &arguments.to_string())
        .await
        .map_err(|e| guest_error(&e))?;
    match outcome {
        Ok(output) => {
            let output = connector.tool_output(&tool_id, output).map_err(|refused| {
                CliError::failed(format!(
                    "{}: the connector returned {refused}",
                    refused.code()
                ))
            })?;
            let body = serde_json::to_value(&output)
                .map_err(|e| CliError::failed(format!("the result cannot be shown: {e}")))?;
            show_answer(out, &body, &format!("{tool_id} locally"), started);
            Ok(())
        }
        Err(wit::ToolError::Failed(m)) => Err(CliError::failed(format!("tool_failed: {m}"))),
        Err(wit::ToolError::InvalidArguments(m)) => {
            Err(CliError::failed(format!("invalid_arguments: {m}")))
        }
        Err(wit::ToolError::Unauthorized(m)) => Err(CliError::failed(format!("unauthorized: {m}"))),
    }
}

/// `--secret NAME=VALUE` (or `NAME=@FILE`) flags as a map. A malformed flag is named by
/// its position and name only: what follows `=` may be a secret.
fn parse_secrets(flags: &[String]) -> Result<std::collections::BTreeMap<String, String>, CliError> {
    let mut secrets = std::collections::BTreeMap::new();
    for (i, flag) in flags.iter().enumerate() {
        let Some((name, value)) = flag.split_once('=') else {
            return Err(CliError::usage(format!(
                "--secret #{} is not NAME=VALUE (its text is not shown: it may be the secret)",
                i + 1
            )));
        };
        if name.is_empty()
            || !name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || "._-".contains(c))
        {
            return Err(CliError::usage(format!(
                "--secret #{}: the name before `=` must be letters, digits, `.`, `_` or `-`",
                i + 1
            )));
        }
        let value = match value.strip_prefix('@') {
            Some(path) => {
                let mut text = std::fs::read_to_string(path).map_err(|e| {
                    CliError::usage(format!("--secret {name}: could not read {path}: {e}"))
                })?;
                if text.ends_with('\n') {
                    text.pop();
                    if text.ends_with('\r') {
                        text.pop();
                    }
                }
                text
            }
            None => value.to_string(),
        };
        secrets.insert(name.to_string(), value);
    }
    Ok(secrets)
}

/// The secrets of `given` whose names appear as a string anywhere in `config`: what a
/// host hands to a call of that binding.
fn named_secrets(
    given: &std::collections::BTreeMap<String, String>,
    config: &Value,
) -> std::collections::BTreeMap<String, String> {
    fn strings<'a>(v: &'a Value, out: &mut Vec<&'a str>) {
        match v {
            Value::String(s) => out.push(s),
            Value::Array(a) => a.iter().for_each(|v| strings(v, out)),
            Value::Object(o) => o.values().for_each(|v| strings(v, out)),
            _ => {}
        }
    }
    let mut named = Vec::new();
    strings(config, &mut named);
    given
        .iter()
        .filter(|(name, _)| named.contains(&name.as_str()))
        .map(|(n, v)| (n.clone(), v.clone()))
        .collect()
}

/// The contract's error code for a guest failure, then its description.
fn guest_error(e: &GuestError) -> CliError {
    CliError::failed(format!("{}: {e}", e.code()))
}

/// `heading`, then one `  <pointer>: <message>` line per violation.
fn violations(heading: &str, found: &[SchemaViolation]) -> String {
    let mut text = heading.to_string();
    for v in found {
        text.push_str(&format!("\n  {v}"));
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secrets_are_parsed_and_only_named_ones_given() {
        let given = parse_secrets(&["ci-bot=ghp_abc=def".into(), "other=x".into()]).unwrap();
        assert_eq!(given["ci-bot"], "ghp_abc=def");
        let named = named_secrets(&given, &json!({"repo": "o/r", "patSecret": "ci-bot"}));
        assert_eq!(named.keys().collect::<Vec<_>>(), ["ci-bot"]);
        let e = parse_secrets(&["ghp_looks_like_a_token".into()]).unwrap_err();
        assert_eq!(e.code, 2);
        assert!(!e.message.contains("ghp_looks"), "{}", e.message);
        assert!(parse_secrets(&["=v".into()]).is_err());
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("s");
        std::fs::write(&file, "from-file\n").unwrap();
        let given = parse_secrets(&[format!("f=@{}", file.display())]).unwrap();
        assert_eq!(given["f"], "from-file");
    }

    #[test]
    fn answers_read_as_text() {
        // Content blocks win over the structured result; each block is one piece.
        let rich = json!({
            "result": {"n": 1},
            "content": [
                {"type": "text", "text": "look\nhere"},
                {"type": "image", "data": "AQID", "mimeType": "image/png"},
                {"type": "resource_link", "uri": "file:///a.txt", "name": "a"},
                {"type": "resource", "resource": {"uri": "mem://n", "mimeType": "text/plain", "text": "inside"}},
                {"type": "audio", "data": "AQI=", "mimeType": "audio/wav"}
            ]
        });
        assert_eq!(
            readable(&rich),
            "look\nhere\n[image image/png, 3 bytes]\n[resource link file:///a.txt (a)]\n[resource mem://n, text/plain]\ninside\n[audio audio/wav, 2 bytes]\n"
        );
        assert_eq!(shape(&rich), "5 content blocks, a JSON result");
        // A string result as is; other JSON pretty; null as nothing.
        assert_eq!(readable(&json!({"result": "Hello, Ada!"})), "Hello, Ada!\n");
        assert_eq!(
            readable(&json!({"result": {"message": "hi"}})),
            "{\n  \"message\": \"hi\"\n}\n"
        );
        assert_eq!(readable(&json!({"result": null})), "");
        assert_eq!(shape(&json!({"result": null})), "no structured result");
        // An empty content list falls back to the result.
        assert_eq!(readable(&json!({"result": 1, "content": []})), "1\n");
    }

    #[test]
    fn violations_list_pointers() {
        let text = violations(
            "invalid_arguments: nope",
            &[
                SchemaViolation {
                    pointer: String::new(),
                    message: "\"text\" is a required property".into(),
                },
                SchemaViolation {
                    pointer: "/count".into(),
                    message: "\"x\" is not of type \"integer\"".into(),
                },
            ],
        );
        assert_eq!(
            text,
            "invalid_arguments: nope\n  (root): \"text\" is a required property\n  /count: \"x\" is not of type \"integer\""
        );
    }
}
