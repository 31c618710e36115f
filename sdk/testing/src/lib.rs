//! Run a connector component in the real `connector-host` runtime from a plain `#[test]`.
//!
//! `connector-sdk` stays free of the host (and of wasmtime); this crate is what a connector
//! adds as a **dev-dependency** to test its built component end to end: the same sandbox,
//! limits, schema checks and outbound-HTTP policy as a host, without a server or database.
//!
//! ```toml
//! [dev-dependencies]
//! connector-testing = { path = "/path/to/connector-host/sdk/testing" }
//! serde_json = "1"
//! ```
//!
//! ```no_run
//! use connector_testing::Harness;
//! use serde_json::json;
//!
//! # fn main() -> Result<(), connector_testing::Error> {
//! // Build first: cargo build --target wasm32-wasip2 --release
//! let mut harness = Harness::load("target/wasm32-wasip2/release/demo.wasm")?;
//! assert_eq!(harness.info().slug, "demo");
//! harness.bind(json!({}))?; // checks the configSchema and the connector's own `bind`
//! let greeting = harness.call("hello", json!({"name": "Ada"}))?;
//! assert_eq!(greeting["greeting"], "Hello, Ada!");
//! # Ok(())
//! # }
//! ```
//!
//! The API is blocking (an internal tokio runtime runs the guest), so it works from a
//! plain `#[test]`. The component is loaded from a file: build it before `cargo test`
//! (the test does not rebuild it).

use std::collections::BTreeMap;
use std::fmt;
use std::path::Path;
use std::sync::Arc;

use connector_host::registry::{ConnectorRegistry, InstalledConnector};

use connector_model::connector::Connector;
use connector_runtime::{
    wit, ConnectorRuntime, GuestError, GuestLimits, LoadedComponent, OutboundPolicy,
    RuntimeOptions, Sandbox,
};
use serde_json::Value;

pub use connector_model::tool_output::{ContentBlock, ToolOutput};
pub use serde_json::json;

/// Why a harness operation failed. `code` is the host's error code for the same failure
/// (`invalid_config`, `invalid_arguments`, `unknown_tool`, `tool_failed`, `unauthorized`,
/// `connector_trapped`, `connector_timeout`, `refused`, `context_conflict`, or, when loading,
/// the broken rule such as `tool_id_pattern`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Error {
    /// Machine-readable code.
    pub code: String,
    /// What happened.
    pub message: String,
}

impl Error {
    fn new(code: impl Into<String>, message: impl Into<String>) -> Self {
        Error {
            code: code.into(),
            message: message.into(),
        }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.code, self.message)
    }
}

impl std::error::Error for Error {}

fn guest_error(e: &GuestError) -> Error {
    Error::new(e.code().as_str(), e.to_string())
}

/// A message produced by `translate_webhook`.
#[derive(Debug, Clone, PartialEq)]
pub struct Message {
    /// The routing key the host matches against bindings' routes.
    pub route: String,
    /// The message kind.
    pub kind: String,
    /// Optional thread key.
    pub thread_key: Option<String>,
    /// The payload (JSON).
    pub payload: Value,
}

/// What `runtime_context` returned, after the host's prefix and folder rules.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AgentContext {
    /// Env vars, in the order the connector gave them.
    pub env: Vec<(String, String)>,
    /// Files (path relative to the agent's home, content).
    pub files: Vec<(String, String)>,
}

/// One component loaded in a private runtime, plus the binding it is called with.
pub struct Harness {
    connector: InstalledConnector,
    /// The connector's linked component (prepared at load).
    component: LoadedComponent,
    registry: ConnectorRegistry,
    config: Value,
    unit: String,
    agent: Option<String>,
    allowed_hosts: Option<Vec<String>>,
    allow_private_networks: bool,
    secrets: BTreeMap<String, String>,
    routes: Vec<String>,
    calls: u64,
    // Last: dropped after everything that may hold runtime resources.
    rt: tokio::runtime::Runtime,
}

impl fmt::Debug for Harness {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Harness")
            .field("slug", &self.connector.info().slug)
            .field("unit", &self.unit)
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

impl Harness {
    /// Loads a component file and validates it exactly as installing it into a host would
    /// (world, naming rules, schemas).
    pub fn load(path: impl AsRef<Path>) -> Result<Harness, Error> {
        let path = path.as_ref();
        let bytes = std::fs::read(path).map_err(|e| {
            Error::new(
                "unreadable",
                format!(
                    "could not read {} (build the component first: cargo build --target wasm32-wasip2 --release): {e}",
                    path.display()
                ),
            )
        })?;
        Self::from_bytes(&bytes)
    }

    /// Loads a component from its bytes.
    pub fn from_bytes(bytes: &[u8]) -> Result<Harness, Error> {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .map_err(|e| Error::new("runtime", e.to_string()))?;
        let options = RuntimeOptions {
            limits: GuestLimits {
                max_concurrent_instances: 4,
                ..GuestLimits::default()
            },
            cache_dir: None,
            installation_tokens: None,
            credential_log: None,
            ..RuntimeOptions::default()
        };
        let (registry, connector) = rt.block_on(async {
            let runtime = ConnectorRuntime::new(options)
                .map_err(|e| Error::new("runtime", format!("{e:#}")))?;
            let registry = ConnectorRegistry::new(Arc::new(runtime));
            let connector = registry.prepare(bytes).await.map_err(|e| {
                let mut message = e.to_string();
                if let Some(id) = e.offending_id() {
                    message.push_str(&format!(" (offending id: {id})"));
                }
                Error::new(e.rule(), message)
            })?;
            Ok::<_, Error>((registry, connector))
        })?;
        let component = connector
            .loaded()
            .cloned()
            .ok_or_else(|| Error::new("load", "the component did not load"))?;
        Ok(Harness {
            connector,
            component,
            registry,
            config: Value::Object(Default::default()),
            unit: "test".into(),
            agent: None,
            allowed_hosts: None,
            allow_private_networks: false,
            secrets: BTreeMap::new(),
            routes: Vec::new(),
            calls: 0,
            rt,
        })
    }

    /// The validated description (what `connector-host inspect` prints).
    pub fn info(&self) -> &Connector {
        self.connector.info()
    }

    /// The unit calls are made for [default: `test`].
    pub fn with_unit(mut self, unit: impl Into<String>) -> Self {
        self.unit = unit.into();
        self
    }

    /// The agent calls are made for [default: none].
    pub fn with_agent(mut self, agent: impl Into<String>) -> Self {
        self.agent = Some(agent.into());
        self
    }

    /// A secret `connector_sdk::secrets::get(name)` returns (as an operator would set
    /// `[connectors.<slug>] secrets` in the host's configuration).
    pub fn with_secret(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
        self.secrets.insert(name.into(), value.into());
        self
    }

    /// Narrows outbound HTTP to `host` (repeatable), as the operator's `allowed_hosts`
    /// does. Only hosts the component declares can be reached either way.
    pub fn allow_host(mut self, host: impl Into<String>) -> Self {
        self.allowed_hosts
            .get_or_insert_with(Vec::new)
            .push(host.into());
        self
    }

    /// Lets the component reach loopback and private addresses (a local test server).
    pub fn allow_private_networks(mut self) -> Self {
        self.allow_private_networks = true;
        self
    }

    fn sandbox(&self) -> Sandbox {
        let info = self.connector.info();
        let outbound = OutboundPolicy::new(
            &info.allowed_hosts,
            self.allowed_hosts.as_deref(),
            self.allow_private_networks,
        );
        // As in a host: the routing keys `installation:<id>` of the binding; as in a local
        // `connector-host call`: the config field `installationId`.
        let installations: Vec<u64> = self
            .routes
            .iter()
            .filter_map(|k| k.strip_prefix("installation:")?.parse().ok())
            .chain(self.config.get("installationId").and_then(Value::as_u64))
            .collect();
        Sandbox {
            connector: Arc::from(info.slug.as_str()),
            outbound: Arc::new(outbound),
            installations: Arc::from(installations),
            secrets: Arc::new(self.secrets.clone()),
            caller: connector_runtime::Caller::Host,
            memory_bytes: None,
        }
    }

    fn wit_binding(&self) -> wit::Binding {
        wit::Binding {
            unit: self.unit.clone(),
            config: self.config.to_string(),
        }
    }

    /// Binds with `config`: checks it against the configSchema, then the connector's own
    /// `bind`; returns the routing keys. Later calls use this config.
    pub fn bind(&mut self, config: Value) -> Result<Vec<String>, Error> {
        if let Err(violations) = self.connector.check_config(&config) {
            let lines: Vec<String> = violations.iter().map(ToString::to_string).collect();
            return Err(Error::new(
                "invalid_config",
                format!(
                    "the config does not match the configSchema: {}",
                    lines.join("; ")
                ),
            ));
        }
        self.config = config;
        self.routes.clear();
        let sandbox = self.sandbox();
        let text = self.config.to_string();
        let runtime = self.registry.runtime().clone();
        let component = self.component.clone();
        match self
            .rt
            .block_on(async move { runtime.bind(&component, &sandbox, &text).await })
        {
            Ok(Ok(routes)) => {
                self.routes = routes.clone();
                Ok(routes)
            }
            Ok(Err(reason)) => Err(Error::new(
                "invalid_config",
                format!("the connector refused the config: {reason}"),
            )),
            Err(e) => Err(guest_error(&e)),
        }
    }

    /// Calls a tool (`hello` or `demo.hello`) with `arguments`, checked against its
    /// inputSchema first, with the current binding config; returns the structured result
    /// (`null` for a tool that returned content blocks only: see [`Harness::call_output`]).
    pub fn call(&mut self, tool: &str, arguments: Value) -> Result<Value, Error> {
        Ok(self
            .call_output(tool, arguments)?
            .structured
            .unwrap_or(Value::Null))
    }

    /// Like [`Harness::call`], returning the whole output: the structured result and the
    /// content blocks (binary data base64-encoded, as the host serves them). The structured
    /// result is checked against the tool's output schema, as the host does.
    pub fn call_output(&mut self, tool: &str, arguments: Value) -> Result<ToolOutput, Error> {
        let info = self.connector.info();
        let tool_id = if tool.contains('.') {
            tool.to_string()
        } else {
            format!("{}.{tool}", info.tool_namespace)
        };
        if self.connector.tool(&tool_id).is_none() {
            let names: Vec<&str> = info.tools.iter().map(|t| t.name.as_str()).collect();
            return Err(Error::new(
                "unknown_tool",
                format!(
                    "`{tool_id}` is not a tool of `{}` (tools: {})",
                    info.slug,
                    names.join(", ")
                ),
            ));
        }
        if let Err(violations) = self.connector.check_arguments(&tool_id, &arguments) {
            let lines: Vec<String> = violations.iter().map(ToString::to_string).collect();
            return Err(Error::new(
                "invalid_arguments",
                format!(
                    "the arguments do not match the inputSchema: {}",
                    lines.join("; ")
                ),
            ));
        }
        self.calls += 1;
        let ctx = wit::CallContext {
            binding: self.wit_binding(),
            agent: self.agent.clone(),
            call_id: format!("test-{}", self.calls),
        };
        let sandbox = self.sandbox();
        let runtime = self.registry.runtime().clone();
        let component = self.component.clone();
        let args = arguments.to_string();
        let tool_name = tool_id.clone();
        let outcome = self
            .rt
            .block_on(async move {
                runtime
                    .call_tool(&component, &sandbox, ctx, &tool_id, &args)
                    .await
            })
            .map_err(|e| guest_error(&e))?;
        match outcome {
            Ok(output) => self
                .connector
                .tool_output(&tool_name, output)
                .map_err(|refused| {
                    Error::new(
                        refused.code().as_str(),
                        format!("the connector returned {refused}"),
                    )
                }),
            Err(wit::ToolError::Failed(m)) => Err(Error::new("tool_failed", m)),
            Err(wit::ToolError::InvalidArguments(m)) => Err(Error::new("invalid_arguments", m)),
            Err(wit::ToolError::Unauthorized(m)) => Err(Error::new("unauthorized", m)),
        }
    }

    /// Runs `translate_webhook` on a delivery (the signature is not checked here: the
    /// host verifies it before the guest sees the delivery).
    pub fn translate(
        &self,
        headers: &[(&str, &str)],
        body: impl AsRef<[u8]>,
    ) -> Result<Vec<Message>, Error> {
        let hook = wit::Webhook {
            headers: headers
                .iter()
                .map(|(k, v)| (k.to_ascii_lowercase(), v.to_string()))
                .collect(),
            body: body.as_ref().to_vec(),
        };
        let sandbox = self.sandbox();
        let runtime = self.registry.runtime().clone();
        let component = self.component.clone();
        let messages = self
            .rt
            .block_on(async move { runtime.translate_webhook(&component, &sandbox, hook).await })
            .map_err(|e| guest_error(&e))?
            .map_err(|m| Error::new("refused", m))?;
        messages
            .into_iter()
            .map(|m| {
                let payload = serde_json::from_str(&m.payload).map_err(|e| {
                    Error::new(
                        "connector_trapped",
                        format!("a message payload is not JSON: {e}"),
                    )
                })?;
                Ok(Message {
                    route: m.route,
                    kind: m.kind,
                    thread_key: m.thread_key,
                    payload,
                })
            })
            .collect()
    }

    /// Runs the per-binding filter `accept` for the current binding.
    pub fn accept(&self, message: &Message) -> Result<bool, Error> {
        let wit_message = wit::Message {
            route: message.route.clone(),
            kind: message.kind.clone(),
            thread_key: message.thread_key.clone(),
            payload: message.payload.to_string(),
        };
        let binding = self.wit_binding();
        let sandbox = self.sandbox();
        let runtime = self.registry.runtime().clone();
        let component = self.component.clone();
        self.rt
            .block_on(async move {
                runtime
                    .accept(&component, &sandbox, binding, wit_message)
                    .await
            })
            .map_err(|e| guest_error(&e))
    }

    /// Runs `runtime_context` for the current binding and applies the host's rules: env
    /// names only under `SPRING_CONNECTOR_<SLUG>_` (`GITHUB_TOKEN` for `github`), files only
    /// under `.spring/connectors/<slug>/`. A breach is a `context_conflict` error.
    pub fn runtime_context(&self) -> Result<AgentContext, Error> {
        let binding = self.wit_binding();
        let sandbox = self.sandbox();
        let runtime = self.registry.runtime().clone();
        let component = self.component.clone();
        let ctx = self
            .rt
            .block_on(async move { runtime.runtime_context(&component, &sandbox, binding).await })
            .map_err(|e| guest_error(&e))?
            .map_err(|m| Error::new("refused", m))?;
        let slug = &self.connector.info().slug;
        let prefix = format!(
            "SPRING_CONNECTOR_{}_",
            slug.to_ascii_uppercase().replace('-', "_")
        );
        for (name, _) in &ctx.env {
            let chars_ok = !name.is_empty()
                && name
                    .bytes()
                    .all(|b| b.is_ascii_uppercase() || b.is_ascii_digit() || b == b'_');
            let granted = slug == "github" && name == "GITHUB_TOKEN";
            if !(chars_ok && (name.starts_with(&prefix) && name.len() > prefix.len() || granted)) {
                return Err(Error::new(
                    "context_conflict",
                    format!(
                        "connector `{slug}` wrote env var `{name}`, outside its prefix `{prefix}`"
                    ),
                ));
            }
        }
        let folder = format!(".spring/connectors/{slug}/");
        for (path, _) in &ctx.files {
            let inside = path.starts_with(&folder)
                && path.len() > folder.len()
                && !path.contains(['\\', '\0'])
                && path
                    .split('/')
                    .all(|seg| !seg.is_empty() && seg != "." && seg != "..");
            if !inside {
                return Err(Error::new(
                    "context_conflict",
                    format!(
                        "connector `{slug}` wrote file `{path}`, outside its folder `{folder}`"
                    ),
                ));
            }
        }
        Ok(AgentContext {
            env: ctx.env,
            files: ctx.files,
        })
    }
}
