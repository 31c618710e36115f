//! The tool dispatcher: every tool call an agent makes, whatever it reaches.
//!
//! A call is checked in one place, in this order: the agent exists, the tool is in its
//! effective set (else `tool_not_granted` or `unknown_tool`), the arguments match the
//! tool's input schema; then it runs in a fresh sandbox with the closest binding that
//! grants it (connector tools) or in the platform's handler (`sv.*`). Outcomes are
//! counted for `/metrics` by their error code.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use parking_lot::RwLock;
use serde_json::{json, Value};

use connector_trace::InSpan;
use std::time::Instant;

use crate::audit::{Audit, AuditLog};
use crate::catalog::{guest_error, violations_json, Catalog};
use crate::grants::Provider;
use crate::registry::{OutputRefused, SchemaViolation};
use crate::state::State;
use connector_model::audit::{target, Actor};
use connector_model::connector::is_tool_id;
use connector_model::connector::{ToolAnnotations, ToolInfo};
use connector_model::error::{ErrorCode, HandlerError, HostError, HostResult};
use connector_model::ids::{truncate, AgentId, IntoId};
use connector_model::records::Subject;
use connector_model::tool_output::ToolOutput;
use connector_remote_answer::error_chain;
use connector_runtime::{wit, Caller};

/// A handler of a platform tool an embedding platform registers.
#[async_trait::async_trait]
pub trait PlatformToolHandler: Send + Sync {
    /// Runs the tool for `agent` with schema-checked `arguments`. A failure is the
    /// call's `tool_failed` error: its message is what the agent reads, its source stays
    /// with the host's error.
    async fn call(&self, agent: &str, arguments: Value) -> Result<Value, HandlerError>;
}

/// The platform tools' handlers and input validators, by name (the tool list itself is
/// part of the [`State`], which resolves it with everything else).
#[derive(Default)]
struct PlatformHandlers {
    handlers: BTreeMap<String, Arc<dyn PlatformToolHandler>>,
    validators: BTreeMap<String, Arc<jsonschema::Validator>>,
}

/// Counters exported at `/metrics`.
#[derive(Debug, Default)]
pub struct Metrics {
    /// Calls that answered.
    pub tool_calls_ok: AtomicU64,
    /// Calls whose connector failed, trapped or timed out.
    pub tool_calls_failed: AtomicU64,
    /// Calls refused before any guest ran (grants, schemas, unknown tools).
    pub tool_calls_rejected: AtomicU64,
}

/// Runs tool calls.
pub(crate) struct ToolDispatcher {
    state: Arc<State>,
    catalog: Arc<Catalog>,
    audit: Arc<AuditLog>,
    platform: RwLock<PlatformHandlers>,
    metrics: Metrics,
}

impl ToolDispatcher {
    /// A dispatcher serving the built-in platform tools (`sv.tools.*`).
    pub(crate) fn new(state: Arc<State>, catalog: Arc<Catalog>, audit: Arc<AuditLog>) -> Self {
        let (tools, handlers) = builtin_platform_tools();
        let mut tools: Vec<Arc<ToolInfo>> = tools.into_iter().map(Arc::new).collect();
        tools.sort_by(|a, b| a.name.cmp(&b.name));
        state.set_platform_tools(tools.into());
        Self {
            state,
            catalog,
            audit,
            platform: RwLock::new(handlers),
            metrics: Metrics::default(),
        }
    }

    /// Counters for `/metrics`.
    pub(crate) fn metrics(&self) -> &Metrics {
        &self.metrics
    }

    /// Registers a platform tool (`sv.*`) every subject gets.
    pub(crate) fn register_platform_tool(
        &self,
        info: ToolInfo,
        handler: Arc<dyn PlatformToolHandler>,
    ) -> HostResult<()> {
        if !is_tool_id(&info.name) || !info.name.starts_with("sv.") {
            return Err(HostError::invalid_request(format!(
                "platform tool `{}` must be a tool id in the `sv` namespace",
                info.name
            )));
        }
        let validator = jsonschema::validator_for(&info.input_schema).map_err(|e| {
            HostError::invalid_request(format!(
                "the input schema of `{}` is invalid: {e}",
                info.name
            ))
        })?;
        let mut platform = self.platform.write();
        let mut tools: Vec<Arc<ToolInfo>> = self
            .state
            .platform_tools()
            .iter()
            .filter(|t| t.name != info.name)
            .cloned()
            .collect();
        platform
            .validators
            .insert(info.name.clone(), Arc::new(validator));
        platform.handlers.insert(info.name.clone(), handler);
        tools.push(Arc::new(info));
        tools.sort_by(|a, b| a.name.cmp(&b.name));
        self.state.set_platform_tools(tools.into());
        Ok(())
    }

    // ----- tool calls -----------------------------------------------------------------

    /// Calls `tool` for `agent` on behalf of `actor` (grant check, schema check, then the
    /// guest or the platform handler with the closest granting binding), and answers once
    /// the call's audit record is committed (outcome, duration, bytes in and out, the
    /// connector's digest; the arguments only with `audit.record_arguments`, the result
    /// never).
    pub(crate) async fn call_tool(
        &self,
        actor: &Actor,
        agent: impl IntoId<AgentId>,
        tool: &str,
        arguments: Value,
    ) -> HostResult<ToolOutput> {
        let span = connector_trace::span("tool call")
            .attr_with("agent", || truncate(agent.as_ref(), 128))
            .attr_with("tool", || truncate(tool, 256))
            .start();
        self.call_tool_recorded(actor, agent, tool, arguments)
            .in_span(span)
            .await
    }

    /// [`Self::call_tool`] inside its span.
    async fn call_tool_recorded(
        &self,
        actor: &Actor,
        agent: impl IntoId<AgentId>,
        tool: &str,
        arguments: Value,
    ) -> HostResult<ToolOutput> {
        let started = Instant::now();
        let bytes_in = json_bytes(&arguments);
        let kept_arguments = self.audit.record_arguments().then(|| arguments.clone());
        // As the caller named it: a refused id is recorded too.
        let named = Value::String(agent.as_ref().to_owned());
        let mut connector = None;
        let result = match agent.into_id() {
            Ok(agent) => {
                self.call_tool_inner(&agent, tool, arguments, &mut connector)
                    .await
            }
            Err(refused) => Err(refused),
        };
        let m = &self.metrics;
        match &result {
            Ok(_) => m.tool_calls_ok.fetch_add(1, Ordering::Relaxed),
            Err(e) if !e.code.is_rejection() => m.tool_calls_failed.fetch_add(1, Ordering::Relaxed),
            Err(_) => m.tool_calls_rejected.fetch_add(1, Ordering::Relaxed),
        };
        let mut details = json!({
            "agent": named,
            "durationMs": started.elapsed().as_millis() as u64,
            "bytesIn": bytes_in,
            "bytesOut": result.as_ref().map_or(0, output_bytes),
        });
        let span = connector_trace::Span::current();
        if let Some((slug, digest)) = connector {
            span.record("connector", slug.as_str());
            span.record("digest", digest.as_str());
            details["connector"] = Value::String(slug);
            details["digest"] = Value::String(digest);
        }
        if let Some(arguments) = kept_arguments {
            details["arguments"] = arguments;
        }
        let outcome = match &result {
            Ok(_) => "ok",
            Err(e) => e.code.as_str(),
        };
        span.record("outcome", outcome);
        let audit = Audit::new(actor, "tool.call", target::tool(&truncate(tool, 256)))
            .with_details(details);
        let entry = audit.into_entry(outcome);
        self.audit.append(entry).await?;
        result
    }

    /// `connector` is set to the slug and digest of the connector the call runs in,
    /// once that is known.
    async fn call_tool_inner(
        &self,
        agent: &AgentId,
        tool: &str,
        arguments: Value,
        connector_of_call: &mut Option<(String, String)>,
    ) -> HostResult<ToolOutput> {
        let subject = Subject::Agent(agent.to_string());
        let (tools, binding) = {
            let dir = self.state.directory();
            if dir.agent(agent).is_none() {
                return Err(HostError::not_found(format!(
                    "agent `{agent}` does not exist"
                )));
            }
            let tools = self.state.resolve(&dir, &subject).unwrap_or_default();
            let binding = tools.get(tool).and_then(|t| {
                let unit = t.group.binding_unit.as_deref()?;
                dir.binding(unit, t.connector()?.slug()).cloned()
            });
            (tools, binding)
        };
        let Some(effective) = tools.get(tool) else {
            return Err(self.not_granted_or_unknown(tool));
        };
        if !arguments.is_object() {
            return Err(HostError::new(
                ErrorCode::InvalidArguments,
                "`arguments` must be a JSON object",
            )
            .with_details(
                json!({"violations": [{"pointer": "", "message": "expected an object"}]}),
            ));
        }
        match &effective.group.provider {
            Provider::Connector(connector) => {
                *connector_of_call = Some((
                    connector.slug().to_string(),
                    connector.info().digest.clone(),
                ));
                if let Err(v) = connector.check_arguments(tool, &arguments) {
                    return Err(invalid_arguments(tool, &v));
                }
                let (unit, config) = match &binding {
                    Some(b) => (b.unit_id.clone(), b.config.to_string()),
                    None => {
                        let primary = self.state.directory().agent(agent).and_then(|a| a.units.first().cloned()).unwrap_or_default();
                        (primary, "{}".to_string())
                    }
                };
                let sandbox = self
                    .catalog
                    .sandbox(connector.slug(), binding.as_ref())
                    .for_caller(Caller::Agent(Arc::from(agent.as_str())));
                let ctx = wit::CallContext {
                    binding: wit::Binding { unit, config },
                    agent: Some(agent.to_string()),
                    call_id: crate::auth::random_secret(12),
                };
                let args = arguments.to_string();
                let runtime = self.catalog.runtime();
                let outcome = match connector.component(runtime.limits().call_timeout).await {
                    Ok(component) => runtime.call_tool(component, &sandbox, ctx, tool, &args).await,
                    Err(e) => Err(e),
                };
                match outcome {
                    Ok(Ok(output)) => connector.tool_output(tool, output).map_err(|refused| {
                        let error = HostError::new(
                            refused.code(),
                            format!("connector `{}` returned {}", connector.slug(), error_chain(&refused)),
                        );
                        let error = match &refused {
                            OutputRefused::BreaksSchema { violations, .. } => error
                                .with_details(json!({"reason": "output_schema", "violations": violations_json(violations)})),
                            OutputRefused::Malformed(_) => error,
                        };
                        error.with_source(refused)
                    }),
                    Ok(Err(wit::ToolError::Failed(msg))) => Err(HostError::new(ErrorCode::ToolFailed, msg)),
                    Ok(Err(wit::ToolError::Unauthorized(msg))) => {
                        Err(HostError::new(ErrorCode::ToolFailed, msg).with_details(json!({"reason": "unauthorized"})))
                    }
                    Ok(Err(wit::ToolError::InvalidArguments(msg))) => Err(HostError::new(ErrorCode::InvalidArguments, msg.clone())
                        .with_details(json!({"violations": [{"pointer": "", "message": msg}]}))),
                    Err(e) => Err(guest_error(e)),
                }
            }
            Provider::Platform(_) => {
                let info = effective.info;
                let (validator, handler) = {
                    let p = self.platform.read();
                    (p.validators.get(&info.name).cloned(), p.handlers.get(&info.name).cloned())
                };
                if let Some(v) = validator {
                    let found: Vec<SchemaViolation> = v
                        .iter_errors(&arguments)
                        .map(|e| SchemaViolation {
                            pointer: e.instance_path.to_string(),
                            message: e.to_string(),
                        })
                        .collect();
                    if !found.is_empty() {
                        return Err(invalid_arguments(tool, &found));
                    }
                }
                match info.name.as_str() {
                    "sv.tools.list" => Ok(ToolOutput::json(json!({"tools": &*tools}))),
                    "sv.tools.describe" => {
                        let name = arguments.get("name").and_then(Value::as_str).unwrap_or_default();
                        match tools.get(name) {
                            Some(t) => serde_json::to_value(t).map(ToolOutput::json).map_err(|e| HostError::internal(e.to_string())),
                            None => Err(HostError::new(ErrorCode::ToolFailed, format!("`{name}` is not one of your tools"))),
                        }
                    }
                    _ => match handler {
                        Some(h) => h.call(agent, arguments).await.map(ToolOutput::json).map_err(|e| HostError::new(ErrorCode::ToolFailed, e.message()).with_source(e)),
                        None => Err(HostError::new(ErrorCode::UnknownTool, format!("platform tool `{tool}` has no handler"))),
                    },
                }
            }
            Provider::Image(_) => Err(HostError::new(ErrorCode::UnknownTool,
                format!("`{tool}` is a tool of the agent's own image: it runs inside the agent's container, not in the host"),
            )),
        }
    }

    fn not_granted_or_unknown(&self, tool: &str) -> HostError {
        let ns = tool.split('.').next().unwrap_or_default();
        let exists = is_tool_id(tool)
            && (self
                .state
                .registry()
                .by_namespace(ns)
                .is_some_and(|c| c.tool(tool).is_some())
                || self.state.platform_tools().iter().any(|t| t.name == tool));
        if exists {
            HostError::new(ErrorCode::ToolNotGranted, format!("`{tool}` exists but is not granted to this agent; bind its connector to one of the agent's units or grant it explicitly"))
        } else {
            HostError::new(
                ErrorCode::UnknownTool,
                format!("no tool `{}` exists", truncate(tool, 120)),
            )
        }
    }
}

/// The platform tools every host serves, and their validators.
fn builtin_platform_tools() -> (Vec<ToolInfo>, PlatformHandlers) {
    let annotations = ToolAnnotations {
        read_only_hint: true,
        destructive_hint: false,
        idempotent_hint: true,
        open_world_hint: false,
    };
    let tools = vec![
        ToolInfo {
            name: "sv.tools.describe".into(),
            description: "Describe one of your effective tools: its description, input schema, annotations and where it comes from.".into(),
            input_schema: json!({"type": "object", "properties": {"name": {"type": "string", "description": "Canonical tool id, e.g. github.create_issue"}}, "required": ["name"], "additionalProperties": false}),
            annotations,
            output_schema: None,
        },
        ToolInfo {
            name: "sv.tools.list".into(),
            description: "List the tools you can call (your effective tool set), with their provenance.".into(),
            input_schema: json!({"type": "object", "properties": {}, "additionalProperties": false}),
            annotations,
            output_schema: None,
        },
    ];
    let mut validators = BTreeMap::new();
    for t in &tools {
        if let Ok(v) = jsonschema::validator_for(&t.input_schema) {
            validators.insert(t.name.clone(), Arc::new(v));
        }
    }
    (
        tools,
        PlatformHandlers {
            handlers: BTreeMap::new(),
            validators,
        },
    )
}

fn invalid_arguments(tool: &str, v: &[SchemaViolation]) -> HostError {
    HostError::new(
        ErrorCode::InvalidArguments,
        format!("the arguments do not match the input schema of `{tool}`"),
    )
    .with_details(json!({"violations": violations_json(v)}))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_builtin_platform_tools_check_their_arguments() {
        let (tools, handlers) = builtin_platform_tools();
        let names: Vec<&str> = tools.iter().map(|t| t.name.as_str()).collect();
        assert_eq!(names, ["sv.tools.describe", "sv.tools.list"]);
        let describe = &handlers.validators["sv.tools.describe"];
        assert!(describe.is_valid(&json!({"name": "acme.echo"})));
        assert!(!describe.is_valid(&json!({})));
        assert!(!describe.is_valid(&json!({"name": "acme.echo", "x": 1})));
        assert!(handlers.validators["sv.tools.list"].is_valid(&json!({})));
    }
}

/// Counts the bytes written through it (a JSON value's size without building its text).
#[derive(Default)]
struct ByteCount(u64);

impl std::io::Write for ByteCount {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0 += buf.len() as u64;
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// The size of `value` as compact JSON.
fn json_bytes(value: &impl serde::Serialize) -> u64 {
    let mut count = ByteCount::default();
    // Writing to a counter cannot fail, and a value that cannot serialise counts as what
    // was written of it.
    let _ = serde_json::to_writer(&mut count, value);
    count.0
}

/// The size of a call's output as JSON: its structured result and its content blocks.
fn output_bytes(output: &ToolOutput) -> u64 {
    output.structured.as_ref().map_or(0, json_bytes) + json_bytes(&output.content)
}
