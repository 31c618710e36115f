//! [`Host`]: everything the host does, as a Rust API.
//!
//! The HTTP API, the CLI and an embedding platform all go through this one type, so the
//! rules (ids, grants, schema checks, transactions) live in exactly one place. Writes
//! are serialised by one async mutex: each one is persisted through the [`Store`] first
//! (one transaction), then applied to the in-memory [`Directory`] and the resolver cache
//! is dropped, all under the directory's write lock, so readers see either the state
//! before a change or after it, never half of it.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use parking_lot::RwLock;
use serde::Serialize;
use serde_json::{json, Value};

use crate::auth::{read_or_create_secret, AgentTokens, OperatorToken};
use crate::config::HostConfig;
use crate::error::{ErrorCode, HostError, HostResult};
use crate::grants::{
    connector_provenance, unit_order, Directory, EffectiveToolResolver, Provider, ResolvedTools,
    ToolCatalog, EXPLICIT,
};
use crate::registry::manifest::{is_namespace, is_tool_id};
use crate::registry::{
    Connector, ConnectorRegistry, InstallError, InstalledConnector, SchemaViolation,
    ToolAnnotations, ToolInfo,
};
use crate::runtime::{wit, ConnectorRuntime, GuestError, OutboundPolicy, RuntimeOptions, Sandbox};
use crate::store::{
    AgentRecord, BindingRecord, ConnectorRecord, GrantRecord, ImageToolsRecord, Store, Subject,
    UnitRecord,
};
use crate::writes::{image_tool_infos, ImageTools, Memory, Policies, StateChange};

static ID_RULE: std::sync::LazyLock<regex_lite::Regex> = std::sync::LazyLock::new(|| {
    regex_lite::Regex::new(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")
        .unwrap_or_else(|e| unreachable!("{e}"))
});

/// Checks a unit or agent id against the contract's id pattern.
pub fn check_id(kind: &str, id: &str) -> HostResult<()> {
    if ID_RULE.is_match(id) {
        Ok(())
    } else {
        Err(HostError::invalid_request(format!(
            "{kind} id `{}` is invalid: ids match ^[A-Za-z0-9][A-Za-z0-9._-]{{0,127}}$",
            truncate(id, 80)
        )))
    }
}

fn truncate(s: &str, max: usize) -> String {
    if s.chars().count() <= max {
        s.to_string()
    } else {
        s.chars().take(max).collect::<String>() + "…"
    }
}

/// RFC 3339 of now, UTC, second precision.
pub fn now_rfc3339() -> String {
    let now = time::OffsetDateTime::now_utc()
        .replace_nanosecond(0)
        .unwrap_or_else(|_| time::OffsetDateTime::now_utc());
    now.format(&time::format_description::well_known::Rfc3339)
        .unwrap_or_default()
}

/// A handler of a platform tool an embedding platform registers.
pub trait PlatformToolHandler: Send + Sync {
    /// Runs the tool for `agent` with schema-checked `arguments`.
    fn call(
        &self,
        agent: &str,
        arguments: Value,
    ) -> std::pin::Pin<Box<dyn std::future::Future<Output = Result<Value, String>> + Send + '_>>;
}

pub(crate) struct PlatformTools {
    /// Sorted by name.
    tools: Arc<[Arc<ToolInfo>]>,
    handlers: BTreeMap<String, Arc<dyn PlatformToolHandler>>,
    validators: BTreeMap<String, Arc<jsonschema::Validator>>,
}

/// The contract's `Unit` object.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct UnitView {
    pub id: String,
    pub parent: Option<String>,
    pub display_name: Option<String>,
    pub bindings: Vec<BindingView>,
    pub effective_tools: Arc<ResolvedTools>,
}

/// The contract's `Agent` object.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct AgentView {
    pub id: String,
    pub units: Vec<String>,
    pub display_name: Option<String>,
    pub effective_tools: Arc<ResolvedTools>,
}

/// The contract's `Grant` object.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct GrantView {
    pub tool: String,
    pub namespace: String,
    pub provenance: String,
    pub created_at: String,
}

impl From<&GrantRecord> for GrantView {
    fn from(g: &GrantRecord) -> Self {
        Self {
            tool: g.tool.clone(),
            namespace: g.namespace.clone(),
            provenance: g.provenance.clone(),
            created_at: g.created_at.clone(),
        }
    }
}

/// The contract's `Binding` object (secrets masked).
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct BindingView {
    pub unit_id: String,
    pub connector: String,
    pub config: Value,
    pub bound_at: String,
    pub grants: Vec<GrantView>,
}

/// Whether a write created something or replaced it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Written {
    Created,
    Updated,
}

/// The result of installing a component.
#[derive(Debug, Clone)]
pub struct Installed {
    pub connector: Connector,
    pub written: Written,
}

/// An issued agent token.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct IssuedToken {
    pub token: String,
    pub expires_at: String,
}

/// Counters exported at `/metrics`.
#[derive(Debug, Default)]
pub struct Metrics {
    pub tool_calls_ok: AtomicU64,
    pub tool_calls_failed: AtomicU64,
    pub tool_calls_rejected: AtomicU64,
}

pub(crate) struct Inner {
    pub(crate) config: HostConfig,
    pub(crate) runtime: Arc<ConnectorRuntime>,
    pub(crate) registry: ConnectorRegistry,
    pub(crate) store: Arc<dyn Store>,
    pub(crate) directory: RwLock<Directory>,
    pub(crate) resolver: EffectiveToolResolver,
    pub(crate) policies: Policies,
    pub(crate) platform: RwLock<PlatformTools>,
    pub(crate) image_tools: ImageTools,
    pub(crate) writes: tokio::sync::Mutex<()>,
    pub(crate) operator: OperatorToken,
    pub(crate) agent_tokens: AgentTokens,
    pub(crate) metrics: Metrics,
    pub(crate) http: reqwest::Client,
    pub(crate) in_flight: crate::webhooks::InFlightSet,
    pub(crate) inbox: tokio::sync::broadcast::Sender<Arc<crate::store::MessageRecord>>,
    pub(crate) replica: crate::replicas::ReplicaState,
}

/// The connector host. Cheap to clone; all clones share one state.
#[derive(Clone)]
pub struct Host {
    pub(crate) inner: Arc<Inner>,
}

/// What `Host::open` reports about start-up.
#[derive(Debug, Clone)]
pub struct StartupReport {
    /// The operator token when it was generated now (print it once), else `None`.
    pub generated_operator_token: Option<String>,
}

include!(concat!(env!("OUT_DIR"), "/bundled_connectors.rs"));

/// The bytes of a connector bundled into the host binary (`acme`, ...).
pub fn bundled_component(name: &str) -> Option<&'static [u8]> {
    BUNDLED_COMPONENTS
        .iter()
        .find(|(n, _)| *n == name)
        .map(|(_, b)| *b)
}

fn builtin_platform_tools() -> PlatformTools {
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
        },
        ToolInfo {
            name: "sv.tools.list".into(),
            description: "List the tools you can call (your effective tool set), with their provenance.".into(),
            input_schema: json!({"type": "object", "properties": {}, "additionalProperties": false}),
            annotations,
        },
    ];
    let mut validators = BTreeMap::new();
    for t in &tools {
        if let Ok(v) = jsonschema::validator_for(&t.input_schema) {
            validators.insert(t.name.clone(), Arc::new(v));
        }
    }
    PlatformTools {
        tools: tools.into_iter().map(Arc::new).collect(),
        handlers: BTreeMap::new(),
        validators,
    }
}

/// The `<namespace>.*` grant a binding of `slug` on `unit` carries (keeping the creation
/// time of the one it replaces).
fn binding_grant(dir: &Directory, unit: &str, slug: &str, namespace: &str) -> GrantRecord {
    let provenance = connector_provenance(slug);
    let existing = dir
        .grants_of(&Subject::Unit(unit.to_string()))
        .iter()
        .find(|g| g.provenance == provenance)
        .map(|g| g.created_at.clone());
    GrantRecord {
        subject: Subject::Unit(unit.to_string()),
        tool: format!("{namespace}.*"),
        namespace: namespace.to_string(),
        provenance,
        created_at: existing.unwrap_or_else(now_rfc3339),
    }
}

/// `Created` when there was nothing before, else `Updated`.
fn written<T>(existing: Option<T>) -> Written {
    if existing.is_some() {
        Written::Updated
    } else {
        Written::Created
    }
}

fn violations_json(v: &[SchemaViolation]) -> Value {
    serde_json::to_value(v).unwrap_or(Value::Null)
}

/// Masks config fields the schema marks `writeOnly` or `format: password`.
pub fn mask_secrets(schema: &Value, config: &Value) -> Value {
    match (schema, config) {
        (Value::Object(s), Value::Object(c)) => {
            let props = s.get("properties").and_then(Value::as_object);
            let mut out = serde_json::Map::new();
            for (k, v) in c {
                let prop = props.and_then(|p| p.get(k));
                let secret = prop.is_some_and(|p| {
                    p.get("writeOnly").and_then(Value::as_bool) == Some(true)
                        || p.get("format").and_then(Value::as_str) == Some("password")
                });
                let masked = if secret {
                    Value::String("***".into())
                } else if let Some(p) = prop {
                    mask_secrets(p, v)
                } else {
                    v.clone()
                };
                out.insert(k.clone(), masked);
            }
            Value::Object(out)
        }
        _ => config.clone(),
    }
}

/// A guest failure as the contract's error (`504 connector_timeout` or `502 connector_trapped`).
pub(crate) fn guest_error(err: GuestError) -> HostError {
    HostError::new(err.code(), err.to_string())
}

fn install_error(err: InstallError) -> HostError {
    let mut details = json!({"rule": err.rule()});
    if let Some(id) = err.offending_id() {
        details["id"] = Value::String(id.to_string());
    }
    HostError::new(ErrorCode::InvalidComponent, err.to_string()).with_details(details)
}

/// Calls `f` with every string value in `config` (at any depth).
fn named_strings(config: &Value, f: &mut impl FnMut(&str)) {
    match config {
        Value::String(s) => f(s),
        Value::Array(a) => a.iter().for_each(|v| named_strings(v, f)),
        Value::Object(o) => o.values().for_each(|v| named_strings(v, f)),
        _ => {}
    }
}

/// Routing keys a binding's config names for GitHub installations (`installation:<id>`).
fn installations_of(routing_keys: &[String]) -> Arc<[u64]> {
    routing_keys
        .iter()
        .filter_map(|k| k.strip_prefix("installation:")?.parse().ok())
        .collect::<Vec<u64>>()
        .into()
}

impl Host {
    /// Opens a host on `config`: the store, the runtime, the bundled connectors, the
    /// connectors directory and everything persisted.
    pub async fn open(config: HostConfig) -> anyhow::Result<(Host, StartupReport)> {
        let store = open_store(&config).await?;
        Self::open_with_store(config, store).await
    }

    /// Like [`Host::open`] with a store of the caller's choosing.
    pub async fn open_with_store(
        config: HostConfig,
        store: Arc<dyn Store>,
    ) -> anyhow::Result<(Host, StartupReport)> {
        std::fs::create_dir_all(&config.data_dir).map_err(|e| {
            anyhow::anyhow!(
                "cannot create the data directory {}: {e}",
                config.data_dir.display()
            )
        })?;
        // The App key is read and proven at start-up: a bad key fails here, not at first use.
        let github_app = match &config.github_app {
            Some(settings) => Some(Arc::new(
                crate::github_app::GithubApp::new(settings)
                    .map_err(|e| anyhow::anyhow!("github_app: {e}"))?,
            )),
            None => None,
        };
        let runtime = Arc::new(ConnectorRuntime::new(RuntimeOptions {
            limits: config.limits,
            cache_dir: Some(config.data_dir.join("compiled")),
            installation_tokens: github_app
                .clone()
                .map(|app| app as Arc<dyn crate::runtime::InstallationTokens>),
        })?);
        let (operator, generated_operator_token) = operator_token(&config, store.as_ref()).await?;
        let key_path = config.data_dir.join("agent-token-key");
        let (mut agent_key, _) = read_or_create_secret(&key_path)
            .map_err(|e| anyhow::anyhow!("cannot read or create {}: {e}", key_path.display()))?;
        if store.is_shared() {
            // Every replica must accept the agent tokens any replica issued.
            agent_key = store
                .shared_secret("agent-token-key", &agent_key)
                .await
                .map_err(|e| anyhow::anyhow!("cannot read the shared agent-token key: {e}"))?;
        }
        let replica_path = config.data_dir.join("replica-id");
        let (replica_id, _) = read_or_create_secret(&replica_path).map_err(|e| {
            anyhow::anyhow!("cannot read or create {}: {e}", replica_path.display())
        })?;

        let snapshot = store
            .load()
            .await
            .map_err(|e| anyhow::anyhow!("cannot load the stored state: {e}"))?;
        // Every write below is checked against the state just loaded (and kept current
        // by `refresh`): on a shared database, one racing another replica's is refused.
        store.refuse_stale_writes();
        let inner = Inner {
            registry: ConnectorRegistry::new(runtime.clone()),
            runtime,
            store,
            directory: RwLock::new(Directory::from_snapshot(&snapshot)),
            resolver: EffectiveToolResolver::default(),
            policies: RwLock::new(BTreeMap::new()),
            platform: RwLock::new(builtin_platform_tools()),
            image_tools: RwLock::new(BTreeMap::new()),
            writes: tokio::sync::Mutex::new(()),
            operator,
            agent_tokens: AgentTokens::new(agent_key.as_bytes()),
            metrics: Metrics::default(),
            http: reqwest::Client::builder()
                .timeout(std::time::Duration::from_secs(10))
                .build()
                .map_err(|e| anyhow::anyhow!("cannot build the HTTP client: {e}"))?,
            in_flight: parking_lot::Mutex::new(std::collections::HashSet::new()),
            inbox: tokio::sync::broadcast::channel(4096).0,
            replica: crate::replicas::ReplicaState::new(replica_id, snapshot.version),
            config,
        };
        let host = Host {
            inner: Arc::new(inner),
        };

        // Persisted connectors and image tools first, then bundled connectors (unless the
        // operator installed their own version of that slug), then the connectors
        // directory.
        host.adopt_stored(&snapshot).await;
        for (name, bytes) in BUNDLED_COMPONENTS {
            let stored = snapshot.connectors.iter().find(|c| c.slug == *name);
            if stored.is_some_and(|c| !c.bundled) {
                continue;
            }
            host.install_at_start(bytes, true).await.map_err(|e| {
                anyhow::anyhow!("bundled connector `{name}` failed to install: {e}")
            })?;
        }
        if let Some(dir) = host.inner.config.connectors_dir.clone() {
            let mut files: Vec<_> = std::fs::read_dir(&dir)
                .map_err(|e| anyhow::anyhow!("cannot read connectors_dir {}: {e}", dir.display()))?
                .filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|p| p.extension().is_some_and(|x| x == "wasm"))
                .collect();
            files.sort();
            for file in files {
                let bytes = std::fs::read(&file)
                    .map_err(|e| anyhow::anyhow!("cannot read {}: {e}", file.display()))?;
                host.install_at_start(&bytes, false)
                    .await
                    .map_err(|e| anyhow::anyhow!("{}: {e}", file.display()))?;
            }
        }
        // Deliveries stored but not routed when the previous process stopped.
        host.resume_deliveries()
            .await
            .map_err(|e| anyhow::anyhow!("cannot read stored webhook deliveries: {e}"))?;
        host.start_background();
        Ok((
            host,
            StartupReport {
                generated_operator_token,
            },
        ))
    }

    /// The configuration in force.
    pub fn config(&self) -> &HostConfig {
        &self.inner.config
    }

    /// The sandbox runtime.
    pub fn runtime(&self) -> &Arc<ConnectorRuntime> {
        &self.inner.runtime
    }

    /// The store.
    pub fn store(&self) -> &Arc<dyn Store> {
        &self.inner.store
    }

    /// Counters for `/metrics`.
    pub fn metrics(&self) -> &Metrics {
        &self.inner.metrics
    }

    /// Whether `token` is the operator token (constant time).
    pub fn is_operator_token(&self, token: &str) -> bool {
        self.inner.operator.matches(token)
    }

    /// The agent an agent token was issued for.
    pub fn agent_of_token(&self, token: &str) -> Option<String> {
        self.inner.agent_tokens.verify(token).ok()
    }

    /// The outbound policy of a connector: what it declares, narrowed by the operator's
    /// settings of its slug.
    fn policy_of(&self, info: &Connector) -> Arc<OutboundPolicy> {
        let settings = self.inner.config.connector(&info.slug);
        Arc::new(OutboundPolicy::new(
            &info.allowed_hosts,
            settings.allowed_hosts.as_deref(),
            settings.allow_private_networks,
        ))
    }

    pub(crate) fn remember_policy(&self, info: &Connector) {
        let policy = self.policy_of(info);
        self.inner
            .policies
            .write()
            .insert(info.slug.clone(), policy);
    }

    /// The sandbox a call of connector `slug` runs in on behalf of `binding` (if any): its
    /// outbound policy, the installations its routing keys name, the secrets its config
    /// names.
    pub fn sandbox(&self, slug: &str, binding: Option<&BindingRecord>) -> Sandbox {
        let outbound = self
            .inner
            .policies
            .read()
            .get(slug)
            .cloned()
            .unwrap_or_else(|| Arc::new(OutboundPolicy::deny_all()));
        self.sandbox_with(slug, binding, outbound)
    }

    /// [`Host::sandbox`] with a given outbound policy.
    fn sandbox_with(
        &self,
        slug: &str,
        binding: Option<&BindingRecord>,
        outbound: Arc<OutboundPolicy>,
    ) -> Sandbox {
        let routing_keys = binding.map(|b| b.routing_keys.as_slice()).unwrap_or(&[]);
        let mut secrets = BTreeMap::new();
        if let Some(b) = binding {
            let configured = self.inner.config.connector(slug).secrets;
            if !configured.is_empty() {
                named_strings(&b.config, &mut |name| {
                    if let Some(value) = configured.get(name) {
                        secrets.insert(name.to_string(), value.clone());
                    }
                });
            }
        }
        Sandbox {
            connector: Arc::from(slug),
            outbound,
            installations: installations_of(routing_keys),
            secrets: Arc::new(secrets),
        }
    }

    /// The one write path (see [`crate::writes`]): under the write lock, `decide` checks
    /// the request against the state as it is now and says what to change; the change is
    /// persisted in one store transaction, then applied to memory with the resolver cache
    /// dropped, under the directory's write lock.
    pub(crate) async fn write<T, Fut>(&self, decide: impl FnOnce() -> Fut) -> HostResult<T>
    where
        Fut: std::future::Future<Output = HostResult<(StateChange, T)>>,
    {
        let _write = self.inner.writes.lock().await;
        let (change, out) = decide().await?;
        change.persist(self.inner.store.as_ref()).await?;
        let memory = Memory {
            registry: &self.inner.registry,
            policies: &self.inner.policies,
            image_tools: &self.inner.image_tools,
        };
        let mut dir = self.inner.directory.write();
        change.apply(&mut dir, &memory);
        self.inner.resolver.invalidate();
        Ok(out)
    }

    // ----- connectors -------------------------------------------------------------

    /// Installs a component at start-up. Replicas starting together race for the same
    /// rows: a write refused because another replica wrote first is retried on the
    /// refreshed state.
    async fn install_at_start(&self, bytes: &[u8], bundled: bool) -> HostResult<Installed> {
        let mut attempt = 0;
        loop {
            match self.install_component(bytes, bundled, true).await {
                Err(e) if e.code == ErrorCode::StateChanged && attempt < 10 => {
                    attempt += 1;
                    self.refresh().await?;
                }
                other => return other,
            }
        }
    }

    /// Installs a component (a new slug) or rotates an installed one (same slug, new
    /// digest). A rotation keeps bindings, re-checks each binding's config against the new
    /// connector and refuses with `409 rotation_breaks_bindings` if any fails, unless
    /// `force` (then the failing bindings are unbound).
    pub async fn install_connector(&self, bytes: &[u8], force: bool) -> HostResult<Installed> {
        self.install_component(bytes, false, force).await
    }

    async fn install_component(
        &self,
        bytes: &[u8],
        bundled: bool,
        force: bool,
    ) -> HostResult<Installed> {
        let prepared = self
            .inner
            .registry
            .prepare(bytes)
            .await
            .map_err(install_error)?;
        self.write(|| self.plan_install(prepared, bytes, bundled, force))
            .await
    }

    /// Decides an install or rotation under the write lock: conflicts with installed
    /// connectors, and every binding of the slug re-checked against the new version.
    async fn plan_install(
        &self,
        prepared: InstalledConnector,
        bytes: &[u8],
        bundled: bool,
        force: bool,
    ) -> HostResult<(StateChange, Installed)> {
        let previous = self
            .inner
            .registry
            .check_conflicts(prepared.info())
            .map_err(install_error)?;
        let slug = prepared.info().slug.clone();
        if let Some(previous) = &previous {
            if previous.info().digest == prepared.info().digest {
                let unchanged = Installed {
                    connector: previous.info().clone(),
                    written: Written::Updated,
                };
                return Ok((StateChange::Nothing, unchanged));
            }
        }
        // Re-validate every binding of this slug against the new connector.
        let bindings: Vec<BindingRecord> = self
            .inner
            .directory
            .read()
            .bindings_of_connector(&slug)
            .cloned()
            .collect();
        let mut kept = Vec::new();
        let mut broken = Vec::new();
        let policy = self.policy_of(prepared.info());
        for b in bindings {
            let verdict = match prepared.check_config(&b.config) {
                Err(v) => Err(json!({"unitId": b.unit_id, "violations": violations_json(&v)})),
                Ok(()) => {
                    let sandbox = self.sandbox_with(&slug, Some(&b), policy.clone());
                    match self
                        .inner
                        .runtime
                        .bind(prepared.component(), &sandbox, &b.config.to_string())
                        .await
                    {
                        Ok(Ok(keys)) => Ok(keys),
                        Ok(Err(msg)) => Err(json!({"unitId": b.unit_id, "message": msg})),
                        Err(e) => Err(json!({"unitId": b.unit_id, "message": e.to_string()})),
                    }
                }
            };
            match verdict {
                Ok(keys) => kept.push(BindingRecord {
                    routing_keys: keys,
                    ..b
                }),
                Err(why) => broken.push((b, why)),
            }
        }
        if !broken.is_empty() && !force {
            return Err(HostError::new(ErrorCode::RotationBreaksBindings,
                format!(
                    "the new version of `{slug}` rejects the configuration of {} existing binding(s); fix them or install with ?force=true to unbind them",
                    broken.len()
                ),
            )
            .with_details(json!({"bindings": broken.iter().map(|(_, why)| why.clone()).collect::<Vec<_>>()})));
        }
        let record = ConnectorRecord {
            slug: slug.clone(),
            namespace: prepared.info().tool_namespace.clone(),
            digest: prepared.info().digest.clone(),
            component: bytes.to_vec(),
            bundled,
            installed_at: now_rfc3339(),
        };
        let namespace = record.namespace.clone();
        let kept: Vec<(BindingRecord, GrantRecord)> = {
            let dir = self.inner.directory.read();
            kept.into_iter()
                .map(|b| {
                    let grant = binding_grant(&dir, &b.unit_id, &slug, &namespace);
                    (b, grant)
                })
                .collect()
        };
        let removed: Vec<String> = broken.iter().map(|(b, _)| b.unit_id.clone()).collect();
        let info = prepared.info().clone();
        let installed = Installed {
            connector: info,
            written: written(previous.as_ref()),
        };
        // Connector, re-derived grants, dropped and re-keyed bindings: one transaction.
        let change = StateChange::InstallConnector {
            record,
            prepared: Box::new(prepared),
            policy,
            kept,
            removed,
        };
        Ok((change, installed))
    }

    /// Every installed connector, sorted by slug.
    pub fn list_connectors(&self) -> Vec<Connector> {
        self.inner
            .registry
            .list()
            .iter()
            .map(|c| c.info().clone())
            .collect()
    }

    /// One installed connector.
    pub fn connector(&self, slug: &str) -> HostResult<Arc<InstalledConnector>> {
        self.inner.registry.get(slug).ok_or_else(|| {
            HostError::not_found(format!(
                "no connector `{}` is installed",
                truncate(slug, 80)
            ))
        })
    }

    /// Removes a connector; while bound it is refused (`409 connector_in_use`) unless
    /// `force`, which unbinds it everywhere first.
    pub async fn remove_connector(&self, slug: &str, force: bool) -> HostResult<()> {
        self.write(|| async {
            self.connector(slug)?;
            let bound: Vec<String> = self
                .inner
                .directory
                .read()
                .bindings_of_connector(slug)
                .map(|b| b.unit_id.clone())
                .collect();
            if !bound.is_empty() && !force {
                return Err(HostError::new(ErrorCode::ConnectorInUse,
                    format!("connector `{slug}` is bound to {} unit(s); unbind it first or delete with ?force=true", bound.len()),
                )
                .with_details(json!({"units": bound})));
            }
            Ok((StateChange::RemoveConnector(slug.to_string()), ()))
        })
        .await
    }

    // ----- units and agents ------------------------------------------------------

    /// Creates or updates a unit.
    pub async fn put_unit(
        &self,
        id: &str,
        parent: Option<&str>,
        display_name: Option<&str>,
    ) -> HostResult<(UnitView, Written)> {
        check_id("unit", id)?;
        if let Some(p) = parent {
            check_id("unit", p)?;
        }
        let written = self
            .write(|| async {
                let dir = self.inner.directory.read();
                if let Some(p) = parent {
                    if dir.unit(p).is_none() {
                        return Err(HostError::not_found(format!(
                            "parent unit `{p}` does not exist; create it first"
                        )));
                    }
                    if p == id || dir.would_cycle(id, p) {
                        return Err(HostError::new(
                            ErrorCode::Cycle,
                            format!("making `{p}` the parent of `{id}` would create a cycle"),
                        ));
                    }
                }
                let existing = dir.unit(id);
                let record = UnitRecord {
                    id: id.to_string(),
                    parent: parent.map(str::to_string),
                    display_name: display_name.map(str::to_string),
                    created_at: existing
                        .map(|u| u.created_at.clone())
                        .unwrap_or_else(now_rfc3339),
                };
                Ok((StateChange::PutUnit(record), written(existing)))
            })
            .await?;
        Ok((self.unit(id)?, written))
    }

    /// A unit with its bindings and effective tools.
    pub fn unit(&self, id: &str) -> HostResult<UnitView> {
        check_id("unit", id)?;
        let dir = self.inner.directory.read();
        let unit = dir
            .unit(id)
            .ok_or_else(|| HostError::not_found(format!("unit `{id}` does not exist")))?;
        let bindings = self.binding_views(&dir, id);
        let tools = self
            .resolve_locked(&dir, &Subject::Unit(id.to_string()))
            .unwrap_or_default();
        Ok(UnitView {
            id: unit.id.clone(),
            parent: unit.parent.clone(),
            display_name: unit.display_name.clone(),
            bindings,
            effective_tools: tools,
        })
    }

    /// Deletes a unit (its bindings are unbound and grants revoked); refused while it has
    /// children (`409 has_children`).
    pub async fn delete_unit(&self, id: &str) -> HostResult<()> {
        check_id("unit", id)?;
        self.write(|| async {
            let dir = self.inner.directory.read();
            if dir.unit(id).is_none() {
                return Err(HostError::not_found(format!("unit `{id}` does not exist")));
            }
            if dir.has_children(id) {
                return Err(HostError::new(
                    ErrorCode::HasChildren,
                    format!("unit `{id}` has child units; delete or move them first"),
                ));
            }
            // Bindings, grants and agents' memberships go in the same transaction.
            Ok((StateChange::DeleteUnit(id.to_string()), ()))
        })
        .await
    }

    /// Creates or updates an agent (`units`: first = primary).
    pub async fn put_agent(
        &self,
        id: &str,
        units: &[String],
        display_name: Option<&str>,
    ) -> HostResult<(AgentView, Written)> {
        check_id("agent", id)?;
        if units.is_empty() {
            return Err(HostError::invalid_request(
                "an agent must belong to at least one unit (`units` is empty)",
            ));
        }
        let mut seen = std::collections::HashSet::new();
        for u in units {
            check_id("unit", u)?;
            if !seen.insert(u) {
                return Err(HostError::invalid_request(format!(
                    "unit `{u}` is listed twice in `units`"
                )));
            }
        }
        let written = self
            .write(|| async {
                let dir = self.inner.directory.read();
                if let Some(u) = units.iter().find(|u| dir.unit(u).is_none()) {
                    return Err(HostError::not_found(format!(
                        "unit `{u}` does not exist; create it first"
                    )));
                }
                let existing = dir.agent(id);
                let record = AgentRecord {
                    id: id.to_string(),
                    units: units.to_vec(),
                    display_name: display_name.map(str::to_string),
                    created_at: existing
                        .map(|a| a.created_at.clone())
                        .unwrap_or_else(now_rfc3339),
                };
                Ok((StateChange::PutAgent(record), written(existing)))
            })
            .await?;
        Ok((self.agent(id)?, written))
    }

    /// An agent with its effective tools.
    pub fn agent(&self, id: &str) -> HostResult<AgentView> {
        check_id("agent", id)?;
        let dir = self.inner.directory.read();
        let agent = dir
            .agent(id)
            .ok_or_else(|| HostError::not_found(format!("agent `{id}` does not exist")))?;
        let tools = self
            .resolve_locked(&dir, &Subject::Agent(id.to_string()))
            .unwrap_or_default();
        Ok(AgentView {
            id: agent.id.clone(),
            units: agent.units.clone(),
            display_name: agent.display_name.clone(),
            effective_tools: tools,
        })
    }

    /// Deletes an agent with its explicit grants and image tools.
    pub async fn delete_agent(&self, id: &str) -> HostResult<()> {
        check_id("agent", id)?;
        self.write(|| async {
            if self.inner.directory.read().agent(id).is_none() {
                return Err(HostError::not_found(format!("agent `{id}` does not exist")));
            }
            Ok((StateChange::DeleteAgent(id.to_string()), ()))
        })
        .await
    }

    /// Issues an agent token (default one hour, at most 30 days).
    pub fn issue_agent_token(&self, id: &str, ttl_seconds: Option<u64>) -> HostResult<IssuedToken> {
        check_id("agent", id)?;
        if self.inner.directory.read().agent(id).is_none() {
            return Err(HostError::not_found(format!("agent `{id}` does not exist")));
        }
        let ttl = ttl_seconds.unwrap_or(3600);
        if ttl == 0 || ttl > 30 * 24 * 3600 {
            return Err(HostError::invalid_request(
                "ttlSeconds must be between 1 and 2592000 (30 days)",
            ));
        }
        let (token, exp) = self
            .inner
            .agent_tokens
            .issue(id, ttl)
            .map_err(HostError::internal)?;
        let expires_at = time::OffsetDateTime::from_unix_timestamp(exp)
            .ok()
            .and_then(|t| {
                t.format(&time::format_description::well_known::Rfc3339)
                    .ok()
            })
            .unwrap_or_default();
        Ok(IssuedToken { token, expires_at })
    }

    // ----- bindings -------------------------------------------------------------

    fn binding_views(&self, dir: &Directory, unit: &str) -> Vec<BindingView> {
        dir.bindings_of(unit)
            .map(|b| self.binding_view(dir, b))
            .collect()
    }

    fn binding_view(&self, dir: &Directory, b: &BindingRecord) -> BindingView {
        let provenance = connector_provenance(&b.connector);
        let grants = dir
            .grants_of(&Subject::Unit(b.unit_id.clone()))
            .iter()
            .filter(|g| g.provenance == provenance)
            .map(GrantView::from)
            .collect();
        let config = match self.inner.registry.get(&b.connector) {
            Some(c) => mask_secrets(&c.info().config_schema, &b.config),
            None => Value::String("***".into()),
        };
        BindingView {
            unit_id: b.unit_id.clone(),
            connector: b.connector.clone(),
            config,
            bound_at: b.bound_at.clone(),
            grants,
        }
    }

    /// Binds a connector to a unit (or replaces the binding's config): validates the
    /// config against the connector's schema and its own `bind`, then writes the binding
    /// and its `<namespace>.*` grant in one transaction.
    pub async fn bind(
        &self,
        unit: &str,
        slug: &str,
        config: Value,
    ) -> HostResult<(BindingView, Written)> {
        check_id("unit", unit)?;
        let connector = self.connector(slug)?;
        if self.inner.directory.read().unit(unit).is_none() {
            return Err(HostError::not_found(format!(
                "unit `{unit}` does not exist"
            )));
        }
        if let Err(v) = connector.check_config(&config) {
            return Err(HostError::new(
                ErrorCode::InvalidConfig,
                format!("the configuration does not match the configSchema of `{slug}`"),
            )
            .with_details(json!({"violations": violations_json(&v)})));
        }
        let sandbox = self.sandbox(slug, None);
        let keys = match self
            .inner
            .runtime
            .bind(connector.component(), &sandbox, &config.to_string())
            .await
        {
            Ok(Ok(keys)) => keys,
            Ok(Err(msg)) => {
                return Err(HostError::new(
                    ErrorCode::InvalidConfig,
                    format!("connector `{slug}` refused the configuration: {msg}"),
                )
                .with_details(json!({"connector": msg})))
            }
            Err(e) => return Err(guest_error(e)),
        };
        if self.inner.config.github_app.is_none()
            && keys.iter().any(|k| k.starts_with("installation:"))
        {
            return Err(HostError::new(ErrorCode::GithubAppNotConfigured,
                "this binding names a GitHub App installation, but no GitHub App is configured on this host (set github_app.app_id and github_app.private_key_path, or use patSecret)",
            ));
        }
        let written = self
            .write(|| async {
                // Checked again under the write lock: the unit or the connector may have
                // gone meanwhile.
                let dir = self.inner.directory.read();
                if dir.unit(unit).is_none() {
                    return Err(HostError::not_found(format!(
                        "unit `{unit}` does not exist"
                    )));
                }
                let connector = self.connector(slug)?;
                let namespace = connector.info().tool_namespace.clone();
                let existing = dir.binding(unit, slug);
                let record = BindingRecord {
                    unit_id: unit.to_string(),
                    connector: slug.to_string(),
                    config,
                    routing_keys: keys,
                    bound_at: existing
                        .map(|b| b.bound_at.clone())
                        .unwrap_or_else(now_rfc3339),
                };
                let grant = binding_grant(&dir, unit, slug, &namespace);
                Ok((StateChange::PutBinding(record, grant), written(existing)))
            })
            .await?;
        let dir = self.inner.directory.read();
        let record = dir
            .binding(unit, slug)
            .ok_or_else(|| HostError::not_found(format!("unit `{unit}` does not exist")))?;
        Ok((self.binding_view(&dir, record), written))
    }

    /// The bindings of a unit.
    pub fn bindings(&self, unit: &str) -> HostResult<Vec<BindingView>> {
        check_id("unit", unit)?;
        let dir = self.inner.directory.read();
        if dir.unit(unit).is_none() {
            return Err(HostError::not_found(format!(
                "unit `{unit}` does not exist"
            )));
        }
        Ok(self.binding_views(&dir, unit))
    }

    /// Every binding of every unit (for webhook routing and runtime context).
    pub fn all_bindings(&self) -> Vec<BindingRecord> {
        self.inner
            .directory
            .read()
            .all_bindings()
            .cloned()
            .collect()
    }

    /// Unbinds: deletes the binding and exactly its grants in one transaction.
    pub async fn unbind(&self, unit: &str, slug: &str) -> HostResult<()> {
        check_id("unit", unit)?;
        self.write(|| async {
            if self.inner.directory.read().binding(unit, slug).is_none() {
                return Err(HostError::not_found(format!(
                    "connector `{}` is not bound to unit `{unit}`",
                    truncate(slug, 80)
                )));
            }
            let change = StateChange::DeleteBinding {
                unit: unit.to_string(),
                connector: slug.to_string(),
            };
            Ok((change, ()))
        })
        .await
    }

    // ----- grants and effective tools ------------------------------------------------

    fn resolve_locked(&self, dir: &Directory, subject: &Subject) -> Option<Arc<ResolvedTools>> {
        if let Some(hit) = self.inner.resolver.cached(subject) {
            return Some(hit);
        }
        let connectors = self.inner.registry.namespaces();
        let platform = self.inner.platform.read();
        let catalog = ToolCatalog {
            connectors: &connectors,
            platform: &platform.tools,
        };
        let image = match subject {
            Subject::Agent(a) => self.inner.image_tools.read().get(a).cloned(),
            Subject::Unit(_) => None,
        };
        self.inner.resolver.resolve(dir, &catalog, image, subject)
    }

    /// The effective tools of a unit or agent.
    pub fn effective_tools(&self, subject: &Subject) -> HostResult<Arc<ResolvedTools>> {
        let (kind, id) = match subject {
            Subject::Unit(id) => ("unit", id),
            Subject::Agent(id) => ("agent", id),
        };
        check_id(kind, id)?;
        let dir = self.inner.directory.read();
        self.resolve_locked(&dir, subject)
            .ok_or_else(|| HostError::not_found(format!("{kind} `{id}` does not exist")))
    }

    fn subject_exists(dir: &Directory, subject: &Subject) -> HostResult<()> {
        let (kind, id, exists) = match subject {
            Subject::Unit(id) => ("unit", id, dir.unit(id).is_some()),
            Subject::Agent(id) => ("agent", id, dir.agent(id).is_some()),
        };
        check_id(kind, id)?;
        if exists {
            Ok(())
        } else {
            Err(HostError::not_found(format!(
                "{kind} `{id}` does not exist"
            )))
        }
    }

    /// Grants a tool id or a whole namespace to a subject explicitly.
    pub async fn grant(&self, subject: Subject, tool_or_namespace: &str) -> HostResult<GrantView> {
        let (tool, namespace) = parse_grant_target(tool_or_namespace)?;
        self.write(|| async {
            // The subject is checked under the write lock: a unit or agent deleted
            // concurrently cannot be left with a grant.
            Self::subject_exists(&self.inner.directory.read(), &subject)?;
            let record = GrantRecord {
                subject,
                tool,
                namespace,
                provenance: EXPLICIT.to_string(),
                created_at: now_rfc3339(),
            };
            let view = GrantView::from(&record);
            Ok((StateChange::PutGrant(record), view))
        })
        .await
    }

    /// Revokes an explicit grant.
    pub async fn revoke(&self, subject: Subject, tool_or_namespace: &str) -> HostResult<()> {
        let (tool, _) = parse_grant_target(tool_or_namespace)?;
        self.write(|| async {
            let dir = self.inner.directory.read();
            Self::subject_exists(&dir, &subject)?;
            let present = dir
                .grants_of(&subject)
                .iter()
                .any(|g| g.tool == tool && g.provenance == EXPLICIT);
            if !present {
                return Err(HostError::not_found(format!(
                    "no explicit grant of `{tool}` exists on this subject"
                )));
            }
            let change = StateChange::DeleteGrant {
                subject,
                tool,
                provenance: EXPLICIT.to_string(),
            };
            Ok((change, ()))
        })
        .await
    }

    pub(crate) fn cache_image_tools(&self, record: &ImageToolsRecord) {
        self.inner
            .image_tools
            .write()
            .insert(record.agent_id.clone(), image_tool_infos(record));
    }

    /// Stores the tools an agent's image declares.
    pub async fn put_image_tools(
        &self,
        agent: &str,
        digest: &str,
        tools: Value,
    ) -> HostResult<Value> {
        check_id("agent", agent)?;
        if self.inner.directory.read().agent(agent).is_none() {
            return Err(HostError::not_found(format!(
                "agent `{agent}` does not exist"
            )));
        }
        let tools = validate_image_tools(tools)?;
        if digest.is_empty() || digest.len() > 200 {
            return Err(HostError::invalid_request(
                "`digest` must be a non-empty string such as sha256:<hex>",
            ));
        }
        let record = ImageToolsRecord {
            agent_id: agent.to_string(),
            digest: digest.to_string(),
            tools: tools.clone(),
        };
        self.write(|| async {
            if self.inner.directory.read().agent(agent).is_none() {
                return Err(HostError::not_found(format!(
                    "agent `{agent}` does not exist"
                )));
            }
            Ok((StateChange::PutImageTools(record), ()))
        })
        .await?;
        Ok(json!({"digest": digest, "tools": tools}))
    }

    /// Fetches `GET {url}/a2a/tools` from an agent's image and stores the tools.
    pub async fn introspect_image_tools(&self, agent: &str, url: &str) -> HostResult<Value> {
        check_id("agent", agent)?;
        if self.inner.directory.read().agent(agent).is_none() {
            return Err(HostError::not_found(format!(
                "agent `{agent}` does not exist"
            )));
        }
        let parsed = reqwest::Url::parse(url)
            .map_err(|e| HostError::invalid_request(format!("`url` is not a URL: {e}")))?;
        if !matches!(parsed.scheme(), "http" | "https") {
            return Err(HostError::invalid_request(
                "`url` must be http:// or https://",
            ));
        }
        let target = format!("{}/a2a/tools", url.trim_end_matches('/'));
        let failed = |msg: String| HostError::new(ErrorCode::IntrospectionFailed, msg);
        let response = self
            .inner
            .http
            .get(&target)
            .send()
            .await
            .map_err(|e| failed(format!("GET {target} failed: {e}")))?;
        if !response.status().is_success() {
            return Err(failed(format!(
                "GET {target} answered {}",
                response.status()
            )));
        }
        let header_digest = response
            .headers()
            .get("x-image-digest")
            .and_then(|v| v.to_str().ok())
            .map(str::to_string);
        let body = response
            .bytes()
            .await
            .map_err(|e| failed(format!("reading {target} failed: {e}")))?;
        if body.len() > 8 * 1024 * 1024 {
            return Err(failed(format!("{target} answered more than 8 MiB")));
        }
        let tools: Value = serde_json::from_slice(&body)
            .map_err(|e| failed(format!("{target} did not answer JSON: {e}")))?;
        let digest = header_digest.unwrap_or_else(|| {
            use sha2::Digest;
            format!("sha256:{}", hex::encode(sha2::Sha256::digest(&body)))
        });
        self.put_image_tools(agent, &digest, tools)
            .await
            .map_err(|e| {
                if e.code == ErrorCode::InvalidRequest {
                    failed(format!(
                        "{target} answered an invalid tool list: {}",
                        e.message
                    ))
                } else {
                    e
                }
            })
    }

    /// Registers a platform tool (`sv.*`) every subject gets.
    pub fn register_platform_tool(
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
        let _dir = self.inner.directory.write();
        let mut platform = self.inner.platform.write();
        let mut tools: Vec<Arc<ToolInfo>> = platform
            .tools
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
        platform.tools = tools.into();
        self.inner.resolver.invalidate();
        Ok(())
    }

    // ----- tool calls -----------------------------------------------------------------

    /// Calls a tool on behalf of an agent: grant check, schema check, then the guest (or
    /// the platform handler) with the closest granting binding.
    pub async fn call_tool(&self, agent: &str, tool: &str, arguments: Value) -> HostResult<Value> {
        let result = self.call_tool_inner(agent, tool, arguments).await;
        let m = &self.inner.metrics;
        match &result {
            Ok(_) => m.tool_calls_ok.fetch_add(1, Ordering::Relaxed),
            Err(e) if !e.code.is_rejection() => m.tool_calls_failed.fetch_add(1, Ordering::Relaxed),
            Err(_) => m.tool_calls_rejected.fetch_add(1, Ordering::Relaxed),
        };
        result
    }

    async fn call_tool_inner(
        &self,
        agent: &str,
        tool: &str,
        arguments: Value,
    ) -> HostResult<Value> {
        check_id("agent", agent)?;
        let subject = Subject::Agent(agent.to_string());
        let (tools, binding) = {
            let dir = self.inner.directory.read();
            if dir.agent(agent).is_none() {
                return Err(HostError::not_found(format!(
                    "agent `{agent}` does not exist"
                )));
            }
            let tools = self.resolve_locked(&dir, &subject).unwrap_or_default();
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
                if let Err(v) = connector.check_arguments(tool, &arguments) {
                    return Err(invalid_arguments(tool, &v));
                }
                let (unit, config) = match &binding {
                    Some(b) => (b.unit_id.clone(), b.config.to_string()),
                    None => {
                        let primary = self.inner.directory.read().agent(agent).and_then(|a| a.units.first().cloned()).unwrap_or_default();
                        (primary, "{}".to_string())
                    }
                };
                let sandbox = self.sandbox(connector.slug(), binding.as_ref());
                let ctx = wit::CallContext {
                    binding: wit::Binding { unit, config },
                    agent: Some(agent.to_string()),
                    call_id: crate::auth::random_secret(12),
                };
                let args = arguments.to_string();
                match self.inner.runtime.call_tool(connector.component(), &sandbox, ctx, tool, &args).await {
                    Ok(Ok(json_text)) => serde_json::from_str(&json_text).map_err(|e| {
                        HostError::new(ErrorCode::ConnectorTrapped, format!("connector `{}` returned a result that is not JSON: {e}", connector.slug()))
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
                    let p = self.inner.platform.read();
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
                    "sv.tools.list" => Ok(json!({"tools": &*tools})),
                    "sv.tools.describe" => {
                        let name = arguments.get("name").and_then(Value::as_str).unwrap_or_default();
                        match tools.get(name) {
                            Some(t) => serde_json::to_value(t).map_err(|e| HostError::internal(e.to_string())),
                            None => Err(HostError::new(ErrorCode::ToolFailed, format!("`{name}` is not one of your tools"))),
                        }
                    }
                    _ => match handler {
                        Some(h) => h.call(agent, arguments).await.map_err(|m| HostError::new(ErrorCode::ToolFailed, m)),
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
                .inner
                .registry
                .by_namespace(ns)
                .is_some_and(|c| c.tool(tool).is_some())
                || self
                    .inner
                    .platform
                    .read()
                    .tools
                    .iter()
                    .any(|t| t.name == tool));
        if exists {
            HostError::new(ErrorCode::ToolNotGranted, format!("`{tool}` exists but is not granted to this agent; bind its connector to one of the agent's units or grant it explicitly"))
        } else {
            HostError::new(
                ErrorCode::UnknownTool,
                format!("no tool `{}` exists", truncate(tool, 120)),
            )
        }
    }

    /// The units whose bindings reach a subject, closest first.
    pub fn unit_order(&self, subject: &Subject) -> Option<Vec<Arc<str>>> {
        unit_order(&self.inner.directory.read(), subject)
    }

    /// The installed connector registry.
    pub fn registry(&self) -> &ConnectorRegistry {
        &self.inner.registry
    }
}

fn invalid_arguments(tool: &str, v: &[SchemaViolation]) -> HostError {
    HostError::new(
        ErrorCode::InvalidArguments,
        format!("the arguments do not match the input schema of `{tool}`"),
    )
    .with_details(json!({"violations": violations_json(v)}))
}

fn parse_grant_target(target: &str) -> HostResult<(String, String)> {
    if let Some(ns) = target.strip_suffix(".*") {
        if is_namespace(ns) {
            return Ok((target.to_string(), ns.to_string()));
        }
    } else if is_namespace(target) {
        return Ok((format!("{target}.*"), target.to_string()));
    } else if is_tool_id(target) {
        let ns = target.split('.').next().unwrap_or_default().to_string();
        return Ok((target.to_string(), ns));
    }
    Err(HostError::invalid_request(format!(
        "`{}` is neither a tool id (^[a-z][a-z0-9_]*(\\.[a-z][a-z0-9_]*)+$) nor a namespace",
        truncate(target, 80)
    )))
}

fn validate_image_tools(tools: Value) -> HostResult<Value> {
    let Some(list) = tools.as_array() else {
        return Err(HostError::invalid_request(
            "`tools` must be an array of {name, description, inputSchema}",
        ));
    };
    let mut seen = std::collections::HashSet::new();
    for (i, t) in list.iter().enumerate() {
        let name = t.get("name").and_then(Value::as_str).unwrap_or_default();
        if !is_tool_id(name) {
            return Err(HostError::invalid_request(format!(
                "tools[{i}].name `{}` is not a tool id",
                truncate(name, 80)
            )));
        }
        if !seen.insert(name.to_string()) {
            return Err(HostError::invalid_request(format!(
                "tools[{i}].name `{name}` is listed twice"
            )));
        }
        if let Some(schema) = t.get("inputSchema") {
            if jsonschema::meta::validate(schema).is_err() {
                return Err(HostError::invalid_request(format!(
                    "tools[{i}].inputSchema is not a valid JSON Schema"
                )));
            }
        }
    }
    Ok(tools)
}

/// The operator token in force and, if it was generated now, its value (printed once).
///
/// Configured: that token. Otherwise, on a store only this process uses, the token in
/// `<data_dir>/operator-token` (created on first start). On a shared store the replicas
/// agree on one token through the database, which holds only its SHA-256: the first
/// replica to start generates and prints it, the others accept the same token.
async fn operator_token(
    config: &HostConfig,
    store: &dyn Store,
) -> anyhow::Result<(OperatorToken, Option<String>)> {
    if let Some(t) = config.operator_token.as_deref().filter(|t| !t.is_empty()) {
        return Ok((OperatorToken::new(t), None));
    }
    let path = config.data_dir.join("operator-token");
    if !store.is_shared() {
        let (token, created) = read_or_create_secret(&path)
            .map_err(|e| anyhow::anyhow!("cannot read or create {}: {e}", path.display()))?;
        return Ok((OperatorToken::new(&token), created.then_some(token)));
    }
    let existing = std::fs::read_to_string(&path)
        .ok()
        .map(|t| t.trim().to_string())
        .filter(|t| !t.is_empty());
    let (candidate, generated) = match existing {
        Some(t) => (t, false),
        None => (crate::auth::random_secret(32), true),
    };
    let mine = OperatorToken::new(&candidate);
    let shared = store
        .shared_secret("operator-token-sha256", &mine.hex_digest())
        .await
        .map_err(|e| anyhow::anyhow!("cannot read the shared operator token: {e}"))?;
    if shared == mine.hex_digest() {
        if generated {
            crate::auth::write_secret(&path, &candidate)
                .map_err(|e| anyhow::anyhow!("cannot write {}: {e}", path.display()))?;
            return Ok((mine, Some(candidate)));
        }
        return Ok((mine, None));
    }
    if !generated {
        tracing::warn!(
            path = %path.display(),
            "this replica's operator-token file does not match the token the replicas share; use the token the first replica printed, or set operator_token on every replica"
        );
    }
    let token = OperatorToken::from_hex_digest(&shared)
        .ok_or_else(|| anyhow::anyhow!("the shared operator token in the database is malformed"))?;
    Ok((token, None))
}

/// Opens the store named by the configuration's database URL.
pub async fn open_store(config: &HostConfig) -> anyhow::Result<Arc<dyn Store>> {
    let url = config.database_url();
    crate::store::open_database(&url)
        .await
        .map_err(|e| anyhow::anyhow!("cannot open the database: {e}"))
}
