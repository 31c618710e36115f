//! The sandbox connectors run in.
//!
//! One [`ConnectorRuntime`] owns one wasmtime [`Engine`] for the whole host: components
//! are compiled once (and cached on disk), linked once into an `InstancePre`, and then
//! every operation — describe, bind, a tool call, a webhook translation — runs in a
//! **fresh store and instance**. Nothing a guest writes to memory survives its call, so
//! no state leaks between units, agents or calls. The pooling allocator with
//! copy-on-write memory images keeps that cheap (microseconds, not milliseconds).
//!
//! Every call is bounded: wall-clock time through epoch interruption (a ticker thread
//! advances the epoch; a guest past its deadline traps, and a guest inside its budget
//! ends its CPU slice at every tick), linear memory through a resource limiter, result
//! size after the call. How much of the host a caller gets — its concurrent calls, a
//! slot of the instance pool, its part of all guests' memory, turns on the CPU — is
//! decided by `share` (one agent's flood leaves another's calls fast).
//!
//! The guest sees WASI with no files, environment, arguments or sockets; the only way
//! out is `wasi:http/outgoing-handler`, policed by [`OutboundPolicy`], and the host
//! interface of the WIT package (logging, host-minted credentials).
//!
//! Three worlds are linked: the current `spring:connector@0.3.0`, the second, 0.2.0
//! (`previous_0_2`: the same types, three exports named differently), and the first,
//! 0.1.0 (`previous`), so every component ever built keeps working. The host interface is
//! the same in all three, so one implementation answers each world's version of it. The
//! rest of the host sees only the current world's types.

#![deny(missing_docs)]

mod cache;
mod error;
mod lanes;
mod limits;
mod outbound;
mod previous;
mod previous_0_2;
mod share;

use std::collections::BTreeMap;
use std::future::Future;
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use connector_model::error::{HandlerError, HostError};
use connector_trace::InSpan;
use sha2::{Digest, Sha256};
use wasmtime::component::{Component, HasSelf, Linker, ResourceTable};
use wasmtime::{
    Config, Engine, InstanceAllocationStrategy, PoolingAllocationConfig, Store, Trap,
    UpdateDeadline,
};
use wasmtime_wasi::p2::pipe::MemoryOutputPipe;
use wasmtime_wasi::{WasiCtx, WasiCtxView, WasiView};
use wasmtime_wasi_http::{WasiHttpCtx, WasiHttpCtxView, WasiHttpView};

pub use cache::{CacheBound, LoadSource};
pub use error::{GuestError, LoadError};
pub use lanes::LoadLane;
pub use limits::GuestLimits;
pub use outbound::{is_public, OutboundPolicy};
pub use share::Caller;

use cache::{ComponentCache, EntryHold};
use outbound::OutboundHooks;
use share::{Admitted, CpuSlice, HostShare, MemoryBudget, OnTurn};

/// The current world's generated bindings (wasmtime's `bindgen!` documents none of them).
#[allow(missing_docs)]
mod bindings {
    wasmtime::component::bindgen!({
        path: "../../wit/connector.wit",
        world: "connector",
        imports: { default: async },
        exports: { default: async },
    });
}

/// The WIT types exchanged with guests, as generated from `wit/connector.wit` (the
/// current world; 0.1.0 guests are translated to and from these).
pub mod wit {
    pub use super::bindings::spring::connector::host::{AccessToken, LogLevel};
    pub use super::bindings::spring::connector::types::{
        AgentContext, Annotations, Binding, CallContext, ContentBlock, EmbeddedResource, Manifest,
        Media, Message, ResourceContents, ResourceLink, Tool, ToolError, ToolOutput, Webhook,
        WebhookScheme,
    };
}

/// The world of components built against the current WIT package.
pub const CURRENT_WORLD: &str = "spring:connector@0.3.0";

/// How often the epoch advances. A guest past its deadline is stopped within one tick.
const EPOCH_TICK: Duration = Duration::from_millis(5);
/// Bytes of a guest's stderr kept to explain a trap (the panic message).
const STDERR_CAPTURE_BYTES: usize = 8 * 1024;
/// Log lines one guest call may write before further lines are dropped.
const MAX_LOG_LINES_PER_CALL: u32 = 200;
/// Longest log line kept from a guest.
const MAX_LOG_LINE_BYTES: usize = 4 * 1024;

/// A source of GitHub App installation tokens, provided by the host (the App key lives
/// there and never in a guest). The runtime asks it only for installations the current
/// call's binding names.
#[async_trait::async_trait]
pub trait InstallationTokens: Send + Sync {
    /// Mints or returns a cached installation token. A failure's message is what the
    /// guest that asked is told.
    async fn installation_token(
        &self,
        installation_id: u64,
    ) -> Result<wit::AccessToken, HandlerError>;
}

/// One use a guest made of the host's credentials: a secret read or an installation token
/// asked for, granted or refused (what the audit log records of it, CONTRACT §9).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum CredentialUse {
    /// `connectors.<slug>.secrets.<name>`: handed to the guest, or refused (the binding
    /// does not name it, or no such secret exists).
    Secret {
        /// The secret's name (never its value).
        name: String,
        /// Whether the guest got it.
        granted: bool,
    },
    /// A GitHub App installation token: handed to the guest (minted or cached), or
    /// refused.
    InstallationToken {
        /// The installation.
        installation_id: u64,
        /// Why not, when the guest got none, as an error code: `forbidden` (its binding
        /// does not name the installation), `github_app_not_configured`, or `tool_failed`
        /// (GitHub did not mint one).
        refused: Option<&'static str>,
    },
}

/// Where the runtime records each [`CredentialUse`] before the guest gets what it asked
/// for: a secret or token is handed over only once its use is recorded, and refused when
/// it cannot be. Each distinct use is recorded once per call, and a call may make at most
/// [`MAX_CREDENTIAL_USES_PER_CALL`] distinct ones (a guest cannot flood the record).
#[async_trait::async_trait]
pub trait CredentialLog: Send + Sync {
    /// Records that `connector`'s guest, running for `caller`, made `used`; `Err` is why
    /// it could not be recorded (logged with its causes; the guest is told only that the
    /// use could not be recorded).
    async fn record(
        &self,
        connector: &str,
        caller: &Caller,
        used: CredentialUse,
    ) -> Result<(), HostError>;
}

/// Distinct credential uses one call may make (each recorded once); further ones are
/// refused.
pub const MAX_CREDENTIAL_USES_PER_CALL: usize = 32;

/// Settings of a [`ConnectorRuntime`].
#[derive(Clone, Default)]
pub struct RuntimeOptions {
    /// Per-call bounds.
    pub limits: GuestLimits,
    /// Directory of the compiled-component cache; `None` disables it.
    pub cache_dir: Option<PathBuf>,
    /// How far the cache may grow.
    pub cache_bound: CacheBound,
    /// Where GitHub installation tokens come from; `None`: no GitHub App configured.
    pub installation_tokens: Option<Arc<dyn InstallationTokens>>,
    /// Where secret reads and installation tokens asked for are reported; `None`: nowhere.
    pub credential_log: Option<Arc<dyn CredentialLog>>,
}

/// What one guest call may do beyond computing: reach hosts, ask for credentials.
#[derive(Debug, Clone)]
pub struct Sandbox {
    /// The connector's slug, for logs.
    pub connector: Arc<str>,
    /// Outbound HTTP allowed to this call.
    pub outbound: Arc<OutboundPolicy>,
    /// GitHub installations this call may ask tokens for (those its binding names).
    pub installations: Arc<[u64]>,
    /// Secrets this call may read (those of the connector its binding names).
    pub secrets: Arc<BTreeMap<String, String>>,
    /// Whose share of the host the call counts against.
    pub caller: Caller,
    /// This connector's linear-memory bound, when the operator set one
    /// (`connectors.<slug>.memory_mib`); `None`: the runtime's `memory_bytes`.
    pub memory_bytes: Option<usize>,
}

impl Sandbox {
    /// A sandbox with no outbound HTTP and no credentials.
    pub fn isolated(connector: &str) -> Self {
        Self {
            connector: Arc::from(connector),
            outbound: Arc::new(OutboundPolicy::deny_all()),
            installations: Arc::from(Vec::new()),
            secrets: Arc::new(BTreeMap::new()),
            caller: Caller::Host,
            memory_bytes: None,
        }
    }

    /// This sandbox, for a call on behalf of `caller`.
    pub fn for_caller(mut self, caller: Caller) -> Self {
        self.caller = caller;
        self
    }
}

/// A compiled component, linked and ready to instantiate.
#[derive(Clone)]
pub struct LoadedComponent {
    digest: String,
    source: LoadSource,
    pre: WorldPre,
    /// Keeps its compiled-component cache entry while the component is loaded.
    _cache_entry: Option<Arc<EntryHold>>,
}

/// A linked component of one of the worlds the host speaks.
#[derive(Clone)]
enum WorldPre {
    Current(bindings::ConnectorPre<GuestState>),
    /// 0.2.0: the current types under other export names.
    Second(previous_0_2::bindings::ConnectorPre<GuestState>),
    /// 0.1.0: translated to and from the current types.
    Previous(previous::bindings::ConnectorPre<GuestState>),
}

/// One instance of a component, in its world. Its exports were type-checked once, when
/// the component was linked; a call looks up (and checks) only the one export it runs,
/// rather than all six on every instantiation as the generated bindings would.
enum Instance {
    Current(wasmtime::component::Instance),
    Second(wasmtime::component::Instance),
    Previous(wasmtime::component::Instance),
}

impl Instance {
    /// Calls the export the current world names `name` with `params` and returns its
    /// result (a 0.2.0 component exports it under its old name; a 0.1.0 component's
    /// types differ, so its callers translate).
    async fn call<P, R>(
        &self,
        store: &mut Store<GuestState>,
        name: &'static str,
        params: P,
    ) -> wasmtime::Result<R>
    where
        P: wasmtime::component::ComponentNamedList + wasmtime::component::Lower + Send + Sync,
        R: wasmtime::component::ComponentType + wasmtime::component::Lift + Send + Sync + 'static,
    {
        let (instance, name) = match self {
            Instance::Current(instance) => (instance, name),
            Instance::Second(instance) | Instance::Previous(instance) => {
                (instance, previous_0_2::export_name(name))
            }
        };
        let func = instance.get_typed_func::<P, (R,)>(&mut *store, name)?;
        let (result,) = func.call_async(&mut *store, params).await?;
        Ok(result)
    }
}

impl std::fmt::Debug for LoadedComponent {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LoadedComponent")
            .field("digest", &self.digest)
            .field("source", &self.source)
            .field("world", &self.world())
            .finish()
    }
}

impl LoadedComponent {
    /// `sha256:<hex>` of the component's bytes.
    pub fn digest(&self) -> &str {
        &self.digest
    }

    /// Whether it was compiled now or read back from the cache.
    pub fn source(&self) -> LoadSource {
        self.source
    }

    /// The WIT world the component was built against, e.g. `spring:connector@0.2.0`.
    pub fn world(&self) -> &'static str {
        match self.pre {
            WorldPre::Current(_) => CURRENT_WORLD,
            WorldPre::Second(_) => previous_0_2::WORLD,
            WorldPre::Previous(_) => previous::WORLD,
        }
    }
}

/// The engine, the linker and the bounds shared by every connector of a host.
pub struct ConnectorRuntime {
    engine: Engine,
    linker: Linker<GuestState>,
    limits: GuestLimits,
    cache: ComponentCache,
    installation_tokens: Option<Arc<dyn InstallationTokens>>,
    credential_log: Option<Arc<dyn CredentialLog>>,
    share: HostShare,
    ticker_stop: Arc<AtomicBool>,
    /// Slots for compiling components (see [`ConnectorRuntime::load_off_thread`]).
    compiling: tokio::sync::Semaphore,
    /// Where loads run (see [`LoadLane`]).
    load_threads: lanes::LoadThreads,
}

/// Compilations run at once: each already spreads over every core (wasmtime compiles a
/// component's functions in parallel), so more at once would only add memory and keep
/// the cores from everything else longer.
fn compilation_slots() -> usize {
    std::thread::available_parallelism().map_or(1, |n| (n.get() / 4).max(1))
}

/// The outcome of the first, cheap step of a load: the cached code, or the digest of
/// bytes that must be compiled.
enum CacheLookup {
    Loaded(LoadedComponent),
    Compile(String),
}

impl Drop for ConnectorRuntime {
    fn drop(&mut self) {
        self.ticker_stop.store(true, Ordering::Relaxed);
    }
}

/// The `T` of every guest `Store`: WASI state plus what this one call may do.
pub(crate) struct GuestState {
    table: ResourceTable,
    /// Built on the guest's first WASI call (see [`guest_wasi`]).
    wasi: Option<WasiCtx>,
    http: WasiHttpCtx,
    hooks: OutboundHooks,
    limiter: MemoryLimiter,
    stderr: MemoryOutputPipe,
    installations: Arc<[u64]>,
    secrets: Arc<BTreeMap<String, String>>,
    installation_tokens: Option<Arc<dyn InstallationTokens>>,
    credential_log: Option<Arc<dyn CredentialLog>>,
    /// The credential uses this call has recorded (see [`CredentialLog`]).
    recorded: std::collections::HashSet<CredentialUse>,
    caller: Caller,
    deadline: Instant,
    /// The call's CPU turn (see `share`).
    slice: Arc<CpuSlice>,
    log_lines: u32,
}

impl WasiView for GuestState {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        let stderr = &self.stderr;
        WasiCtxView {
            ctx: self.wasi.get_or_insert_with(|| guest_wasi(stderr)),
            table: &mut self.table,
        }
    }
}

/// The WASI a guest sees: no environment, arguments, files or sockets, and a stderr the
/// host keeps (to explain a trap). Built only when a guest first calls into WASI: many
/// calls never do, and building it (it seeds two random generators) was 5 % of a
/// fresh-sandbox call.
fn guest_wasi(stderr: &MemoryOutputPipe) -> WasiCtx {
    WasiCtx::builder()
        .stderr(stderr.clone())
        .allow_tcp(false)
        .allow_udp(false)
        .allow_ip_name_lookup(false)
        .build()
}

impl WasiHttpView for GuestState {
    fn http(&mut self) -> WasiHttpCtxView<'_> {
        WasiHttpCtxView {
            ctx: &mut self.http,
            table: &mut self.table,
            hooks: &mut self.hooks,
        }
    }
}

/// Bounds one guest's linear memory (`limits.memory_mib`) and takes what it grows from
/// the host-wide budget (`limits.guest_memory_total_mib`), waiting for it if need be.
struct MemoryLimiter {
    limit: usize,
    exceeded: bool,
    budget: MemoryBudget,
}

#[async_trait::async_trait]
impl wasmtime::ResourceLimiterAsync for MemoryLimiter {
    async fn memory_growing(
        &mut self,
        current: usize,
        desired: usize,
        maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        if desired > self.limit {
            self.exceeded = true;
            return Ok(false);
        }
        // Past the memory's own maximum the growth fails anyway: take nothing for it.
        if maximum.is_some_and(|max| desired > max) {
            return Ok(false);
        }
        Ok(self.budget.grow(current, desired).await)
    }

    fn memory_grow_failed(&mut self, _error: wasmtime::Error) -> wasmtime::Result<()> {
        // Allowed by the budget but refused by the engine: give the pages back.
        self.budget.undo_last();
        Ok(())
    }

    async fn table_growing(
        &mut self,
        _current: usize,
        desired: usize,
        _maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        Ok(desired <= 100_000)
    }
}

impl bindings::spring::connector::host::Host for GuestState {
    async fn log(&mut self, level: wit::LogLevel, message: String) {
        self.log_lines += 1;
        if self.log_lines > MAX_LOG_LINES_PER_CALL {
            return;
        }
        let mut message = message;
        if message.len() > MAX_LOG_LINE_BYTES {
            let mut cut = MAX_LOG_LINE_BYTES;
            while !message.is_char_boundary(cut) {
                cut -= 1;
            }
            message.truncate(cut);
        }
        let connector = &*self.hooks.connector;
        // A field, never the format string, with control characters escaped: a guest
        // cannot end the host's log line and forge the next one.
        let guest = connector_model::ids::escape_controls(&message);
        match level {
            wit::LogLevel::Trace => {
                tracing::trace!(target: "connector", connector, %guest, "guest log")
            }
            wit::LogLevel::Debug => {
                tracing::debug!(target: "connector", connector, %guest, "guest log")
            }
            wit::LogLevel::Info => {
                tracing::info!(target: "connector", connector, %guest, "guest log")
            }
            wit::LogLevel::Warn => {
                tracing::warn!(target: "connector", connector, %guest, "guest log")
            }
            wit::LogLevel::Error => {
                tracing::error!(target: "connector", connector, %guest, "guest log")
            }
        }
    }

    async fn github_installation_token(
        &mut self,
        installation_id: u64,
    ) -> Result<wit::AccessToken, String> {
        let token = self.installation_token_for(installation_id).await;
        self.record(CredentialUse::InstallationToken {
            installation_id,
            refused: token.as_ref().err().map(|(code, _)| *code),
        })
        .await?;
        token.map_err(|(_, message)| message)
    }

    async fn secret(&mut self, name: String) -> Option<String> {
        let value = self.secrets.get(&name).cloned();
        if value.is_none() {
            tracing::warn!(connector = &*self.hooks.connector, secret = %connector_model::ids::escape_controls(&name), "refused a secret the calling binding does not name");
        }
        let used = CredentialUse::Secret {
            granted: value.is_some(),
            name,
        };
        // Not recorded, not handed over.
        self.record(used).await.ok()?;
        value
    }
}

impl GuestState {
    /// Records `used` (once per call); `Err` is what the guest is told when it cannot be.
    async fn record(&mut self, used: CredentialUse) -> Result<(), String> {
        let Some(log) = self.credential_log.clone() else {
            return Ok(());
        };
        if self.recorded.contains(&used) {
            return Ok(());
        }
        if self.recorded.len() >= MAX_CREDENTIAL_USES_PER_CALL {
            return Err(format!(
                "this call asked for more than {MAX_CREDENTIAL_USES_PER_CALL} different credentials; refused"
            ));
        }
        log.record(&self.hooks.connector, &self.caller, used.clone())
            .await
            .map_err(|e| {
                tracing::warn!(connector = &*self.hooks.connector, error = %e, "a credential was refused: its use could not be recorded");
                "the host could not record this use of a credential, so it is not handed over; try again".to_string()
            })?;
        self.recorded.insert(used);
        Ok(())
    }

    async fn installation_token_for(
        &mut self,
        installation_id: u64,
    ) -> Result<wit::AccessToken, (&'static str, String)> {
        if self.installations.is_empty() {
            tracing::warn!(
                connector = &*self.hooks.connector,
                installation_id,
                "refused a token: this call may mint none (no github_app grant, or no installation in its binding)"
            );
            return Err(("forbidden", format!(
                "installation {installation_id} is not named by this binding: this call may mint no GitHub installation token (the operator lets connector `{0}` mint them with `connectors.{0}.github_app = true`, and only for the installation its binding's config names)",
                self.hooks.connector
            )));
        }
        if !self.installations.contains(&installation_id) {
            tracing::warn!(
                connector = &*self.hooks.connector,
                installation_id,
                "refused a token for an installation the calling binding does not name"
            );
            return Err(("forbidden", format!(
                "installation {installation_id} is not named by this binding; a connector may only ask for the installation of its own binding"
            )));
        }
        let Some(tokens) = self.installation_tokens.clone() else {
            return Err(("github_app_not_configured", "no GitHub App is configured on this host (github_app.app_id and github_app.private_key_path)".into()));
        };
        tokens
            .installation_token(installation_id)
            .await
            .map_err(|e| ("tool_failed", e.message().to_string()))
    }
}

/// Transfer allowance beyond twice `max_output_bytes` (headers, small records).
const HOSTCALL_SLACK: usize = 64 * 1024;
/// What one content block costs against `max_output_bytes` beyond its data: its JSON
/// framing (`{"type": ..., "mimeType": ...}`), so a flood of empty blocks is not free.
const BLOCK_OVERHEAD: usize = 64;

/// Handles (streams, pollables, headers, requests) one guest may hold at once.
const GUEST_RESOURCES: usize = 2048;
/// The largest set of HTTP headers a guest may build or receive.
const GUEST_HEADER_BYTES: usize = 32 * 1024;

/// The versions of the host interface guests import: one per world, the same functions
/// and types in each.
const HOST_INTERFACE_VERSIONS: [&str; 3] = ["0.3.0", "0.2.0", "0.1.0"];

/// Links `spring:connector/host` under every world's version, each answered by the one
/// implementation above. The component model checks an import's types by structure, not
/// by the package that declares them, so the current world's `log-level` and
/// `access-token` serve the older worlds' identical ones.
fn link_host_interfaces(linker: &mut Linker<GuestState>) -> anyhow::Result<()> {
    for version in HOST_INTERFACE_VERSIONS {
        let name = format!("spring:connector/host@{version}");
        let mut instance = linker
            .instance(&name)
            .map_err(|e| setup_failed(e, format!("linking {name}")))?;
        bindings::spring::connector::host::add_to_linker_instance::<
            GuestState,
            HasSelf<GuestState>,
        >(&mut instance, |s| s)
        .map_err(|e| setup_failed(e, format!("linking {name}")))?;
    }
    Ok(())
}

/// A wasmtime error from setting the runtime up, kept as the cause of `what` failed.
fn setup_failed(
    error: wasmtime::Error,
    what: impl std::fmt::Display + Send + Sync + 'static,
) -> anyhow::Error {
    anyhow::Error::from_boxed(error.into_boxed_dyn_error()).context(what)
}

type GuestFuture<'a, R> = Pin<Box<dyn Future<Output = wasmtime::Result<R>> + Send + 'a>>;

impl ConnectorRuntime {
    /// Builds the engine (pooling allocator, copy-on-write images, epoch interruption),
    /// the linker (WASI without capabilities, policed `wasi:http`, the host interface)
    /// and starts the epoch ticker.
    pub fn new(options: RuntimeOptions) -> anyhow::Result<Self> {
        let limits = options.limits;
        let mut pool = PoolingAllocationConfig::new();
        let slots = limits.max_concurrent_instances.max(1);
        pool.total_component_instances(slots)
            .total_core_instances(slots * 8)
            .total_memories(slots * 2)
            .total_tables(slots * 8)
            .total_stacks(slots)
            .max_memories_per_component(4)
            .max_memory_size(limits.instance_memory_bytes())
            .linear_memory_keep_resident(256 * 1024)
            .table_keep_resident(16 * 1024)
            .async_stack_keep_resident(64 * 1024)
            // Where the kernel has `PAGEMAP_SCAN` (Linux 6.7+), a slot's reset restores
            // only the pages the guest made resident instead of `memset`-ing all of the
            // kept-resident bytes; elsewhere the plain reset runs. Fresh-sandbox
            // `acme.echo` p50 9.7 → 8.6 µs (`--bench runtime`, same hour); the HTTP tool
            // call and durable webhook rates did not move measurably.
            .pagemap_scan(wasmtime::Enabled::Auto);
        let mut config = Config::new();
        config
            .allocation_strategy(InstanceAllocationStrategy::Pooling(pool))
            .memory_init_cow(true)
            .epoch_interruption(true)
            // Explicit bounds checks instead of guard pages: a pooled memory slot then
            // stays read/write at the largest size it reached, so neither instantiation
            // nor `memory.grow` calls `mprotect`. With guard pages, every call whose guest
            // grew its memory paid two `mprotect`s, each a TLB shootdown on every core
            // (measured: 7 % of all CPU with durable webhooks at full load). Every access
            // is still checked against the memory's current size, and a slot is reset to
            // its image before reuse. The price is paid once per component, not per call:
            // the checks make compiled code larger, so compiling took 193 → 314 ms and a
            // cached load 0.91 → 1.29 ms for `acme` (durable webhooks: +25 %).
            .signals_based_traps(false)
            .memory_guard_size(0)
            .wasm_backtrace_max_frames(None)
            // The native-to-wasm address map only serves wasm backtraces, which are off:
            // without it compiled code is 10 % smaller (acme 1.35 → 1.21 MB) and a cached
            // load 10 % faster.
            .generate_address_map(false)
            .async_stack_size(1024 * 1024)
            .max_wasm_stack(512 * 1024);
        let engine = Engine::new(&config)
            .map_err(|e| setup_failed(e, "could not create the WebAssembly engine"))?;

        let mut linker: Linker<GuestState> = Linker::new(&engine);
        wasmtime_wasi::p2::add_to_linker_async(&mut linker)
            .map_err(|e| setup_failed(e, "linking WASI"))?;
        wasmtime_wasi_http::p2::add_only_http_to_linker_async(&mut linker)
            .map_err(|e| setup_failed(e, "linking wasi:http"))?;
        link_host_interfaces(&mut linker)?;

        let cache = ComponentCache::new(&engine, options.cache_dir.clone(), options.cache_bound)
            .context("could not create the component cache directory")?;

        let ticker_stop = Arc::new(AtomicBool::new(false));
        {
            let engine = engine.clone();
            let stop = ticker_stop.clone();
            std::thread::Builder::new()
                .name("epoch-ticker".into())
                .spawn(move || {
                    while !stop.load(Ordering::Relaxed) {
                        std::thread::sleep(EPOCH_TICK);
                        engine.increment_epoch();
                    }
                })
                .context("could not start the epoch ticker thread")?;
        }

        Ok(Self {
            engine,
            linker,
            limits,
            cache,
            installation_tokens: options.installation_tokens,
            credential_log: options.credential_log,
            share: HostShare::new(&limits),
            ticker_stop,
            compiling: tokio::sync::Semaphore::new(compilation_slots()),
            load_threads: lanes::LoadThreads::start()
                .context("could not start the component load-ahead thread")?,
        })
    }

    /// The most one transfer out of a guest may copy into the host: twice the output
    /// limit, plus room for headers and small records.
    fn hostcall_fuel(&self) -> usize {
        self.limits.max_output_bytes.saturating_mul(2) + HOSTCALL_SLACK
    }

    /// The bounds every call is held to.
    pub fn limits(&self) -> GuestLimits {
        self.limits
    }

    /// The wasmtime engine (for embedding platforms that compile ahead of time).
    pub fn engine(&self) -> &Engine {
        &self.engine
    }

    /// Compiles (or reads back from the cache) and links a component.
    pub fn load(&self, bytes: &[u8]) -> Result<LoadedComponent, LoadError> {
        self.load_digested(bytes, &sha256_hex(bytes))
    }

    /// [`load`](Self::load) for bytes whose digest is already known: `sha256:<hex>`
    /// taken by the build (the bundled connectors) or when the bytes were stored (an
    /// installed connector). Read back from the cache, the bytes are not hashed again:
    /// what runs is the code compiled from the bytes that have this digest, which is what
    /// was installed. Bytes that must be compiled are hashed first, and a digest they do
    /// not match refuses the load instead of filing their code under another's name.
    ///
    /// # Trust
    /// On a cache hit the digest alone chooses the code that runs, so it must come from
    /// the host's own records (its build, its store), never from whoever supplied the
    /// bytes: an uploaded component goes through [`load`](Self::load).
    pub fn load_known(&self, bytes: &[u8], digest: &str) -> Result<LoadedComponent, LoadError> {
        self.load_digested(bytes, known_digest_hex(digest)?)
    }

    /// [`load`](Self::load) (`digest` `None`) or [`load_known`](Self::load_known), off the
    /// async threads, on `lane`: the cache is read and the bytes are hashed first, and a
    /// component that must be compiled waits for one of the runtime's few compilation
    /// slots, then compiles. An install or a replica catching up never holds a thread that
    /// serves requests for the seconds a compilation takes, and concurrent installs do not
    /// compile all at once.
    pub async fn load_off_thread(
        self: &Arc<Self>,
        bytes: Arc<[u8]>,
        digest: Option<&str>,
        lane: LoadLane,
    ) -> Result<LoadedComponent, LoadError> {
        let known = digest.map(known_digest_hex).transpose()?.map(str::to_owned);
        let (this, first_bytes) = (Arc::clone(self), Arc::clone(&bytes));
        let lookup = self
            .load_threads
            .run(lane, move || {
                check_component(&first_bytes)?;
                let digest_hex = match known {
                    Some(hex) => hex,
                    None => sha256_hex(&first_bytes),
                };
                Ok(match this.cached_code(&digest_hex) {
                    Some(loaded) => CacheLookup::Loaded(loaded?),
                    None => CacheLookup::Compile(digest_hex),
                })
            })
            .await?;
        let digest_hex = match lookup {
            CacheLookup::Loaded(loaded) => return Ok(loaded),
            CacheLookup::Compile(digest_hex) => digest_hex,
        };
        let _slot = self
            .compiling
            .acquire()
            .await
            .map_err(|_| LoadError::Cache("the runtime is shutting down".into()))?;
        let this = Arc::clone(self);
        self.load_threads
            .run(lane, move || this.compile_checked(&bytes, &digest_hex))
            .await
    }

    /// The component whose digest is `digest` (`sha256:<hex>`, from the host's own
    /// records), read back from the compiled-component cache off the async threads, on
    /// `lane`: `None` when it is not cached (then its bytes are needed).
    pub async fn load_cached(
        self: &Arc<Self>,
        digest: &str,
        lane: LoadLane,
    ) -> Option<Result<LoadedComponent, LoadError>> {
        let digest_hex = match known_digest_hex(digest) {
            Ok(hex) => hex.to_owned(),
            Err(e) => return Some(Err(e)),
        };
        let this = Arc::clone(self);
        self.load_threads
            .run(lane, move || Ok(this.cached_code(&digest_hex)))
            .await
            .unwrap_or_else(|e| Some(Err(e)))
    }

    /// Loads `bytes`, whose SHA-256 is claimed to be `digest_hex` (64 lowercase hex
    /// digits); the claim is checked before anything is compiled.
    fn load_digested(&self, bytes: &[u8], digest_hex: &str) -> Result<LoadedComponent, LoadError> {
        check_component(bytes)?;
        match self.cached_code(digest_hex) {
            Some(loaded) => loaded,
            None => self.compile_checked(bytes, digest_hex),
        }
    }

    /// The cached code of `digest_hex`, linked; `None` on a miss.
    fn cached_code(&self, digest_hex: &str) -> Option<Result<LoadedComponent, LoadError>> {
        let component = self.cache.read(&self.engine, digest_hex)?;
        Some(self.link(component, digest_hex.to_owned(), LoadSource::Cache))
    }

    /// Compiles `bytes` after checking they have the SHA-256 `digest_hex`.
    fn compile_checked(
        &self,
        bytes: &[u8],
        digest_hex: &str,
    ) -> Result<LoadedComponent, LoadError> {
        let actual = sha256_hex(bytes);
        if actual != digest_hex {
            return Err(LoadError::DigestMismatch {
                expected: format!("sha256:{digest_hex}"),
                actual: format!("sha256:{actual}"),
            });
        }
        let component = self
            .cache
            .compile(&self.engine, digest_hex, bytes)
            .map_err(|e| LoadError::NotAComponent(format!("{e:#}")))?;
        self.link(component, actual, LoadSource::Compiled)
    }

    /// Compiles a component without touching the cache (for benchmarks and tools).
    pub fn compile_uncached(&self, bytes: &[u8]) -> Result<LoadedComponent, LoadError> {
        let digest_hex = sha256_hex(bytes);
        let component = Component::new(&self.engine, bytes)
            .map_err(|e| LoadError::NotAComponent(format!("{e:#}")))?;
        self.link(component, digest_hex, LoadSource::Compiled)
    }

    fn link(
        &self,
        component: Component,
        digest_hex: String,
        source: LoadSource,
    ) -> Result<LoadedComponent, LoadError> {
        let instance_pre = self
            .linker
            .instantiate_pre(&component)
            .map_err(|e| LoadError::WrongWorld(format!("{e:#}")))?;
        // The exports say which world a component implements: the current one, else
        // the second, else the first; a component of none is refused with each world's
        // reason.
        let pre = match bindings::ConnectorPre::new(instance_pre.clone()) {
            Ok(pre) => WorldPre::Current(pre),
            Err(current) => match previous_0_2::bindings::ConnectorPre::new(instance_pre.clone()) {
                Ok(pre) => WorldPre::Second(pre),
                Err(second) => match previous::bindings::ConnectorPre::new(instance_pre) {
                    Ok(pre) => WorldPre::Previous(pre),
                    Err(first) => {
                        return Err(LoadError::WrongWorld(format!(
                            "0.3.0: {current:#}; 0.2.0: {second:#}; 0.1.0: {first:#}"
                        )))
                    }
                },
            },
        };
        Ok(LoadedComponent {
            _cache_entry: self.cache.hold(&digest_hex).map(Arc::new),
            digest: format!("sha256:{digest_hex}"),
            source,
            pre,
        })
    }

    fn new_store(
        &self,
        sandbox: &Sandbox,
        admitted: &Admitted,
        deadline: Instant,
    ) -> Store<GuestState> {
        let stderr = MemoryOutputPipe::new(STDERR_CAPTURE_BYTES);
        // Host memory a guest can make the host hold outside its linear memory: its
        // handles (streams, headers, requests) and the size of each set of headers.
        let mut table = ResourceTable::new();
        table.set_max_capacity(GUEST_RESOURCES);
        let mut http = WasiHttpCtx::new();
        http.set_field_size_limit(GUEST_HEADER_BYTES);
        let state = GuestState {
            table,
            wasi: None,
            http,
            hooks: OutboundHooks {
                policy: sandbox.outbound.clone(),
                connector: sandbox.connector.clone(),
                connections: Arc::new(tokio::sync::Semaphore::new(outbound::CONNECTIONS_PER_CALL)),
            },
            limiter: MemoryLimiter {
                // Never above the slot size the pool was built with.
                limit: sandbox
                    .memory_bytes
                    .unwrap_or(self.limits.memory_bytes)
                    .min(self.limits.instance_memory_bytes()),
                exceeded: false,
                budget: self.share.memory_budget(admitted, deadline),
            },
            stderr,
            installations: sandbox.installations.clone(),
            secrets: sandbox.secrets.clone(),
            installation_tokens: self.installation_tokens.clone(),
            credential_log: self.credential_log.clone(),
            recorded: std::collections::HashSet::new(),
            caller: sandbox.caller.clone(),
            deadline,
            slice: self.share.cpu_slice(&sandbox.caller),
            log_lines: 0,
        };
        let mut store = Store::new(&self.engine, state);
        store.limiter_async(|s| &mut s.limiter);
        // What the host copies out of the guest in one transfer (a result, an import's
        // arguments), bounded before it is copied: each list element costs at least its
        // host size, so neither large nor very many values pass.
        store.set_hostcall_fuel(self.hostcall_fuel());
        store.set_epoch_deadline(1);
        store.epoch_deadline_callback(|ctx| {
            if Instant::now() >= ctx.data().deadline {
                Ok(UpdateDeadline::Interrupt)
            } else {
                Ok(UpdateDeadline::YieldCustom(
                    1,
                    ctx.data().slice.end_of_slice(),
                ))
            }
        });
        store
    }

    /// Runs `f` against a fresh instance of `component` inside `sandbox`, and turns every
    /// way it can go wrong into a [`GuestError`].
    async fn run<R, F>(
        &self,
        component: &LoadedComponent,
        sandbox: &Sandbox,
        export: &'static str,
        f: F,
    ) -> Result<R, GuestError>
    where
        F: for<'a> FnOnce(&'a Instance, &'a mut Store<GuestState>) -> GuestFuture<'a, R>,
    {
        // The deadline runs from now: waiting for a slot counts toward it.
        let timeout = self.limits.call_timeout;
        let deadline = Instant::now() + timeout;
        let admitted = self.share.admit(&sandbox.caller, deadline).await?;
        // Declared after `admitted`, so dropped before it: the store's memory goes back
        // to its caller's share while the caller's entry (and that share) still exists.
        let mut store = self.new_store(sandbox, &admitted, deadline);
        let hard_stop = tokio::time::Instant::from_std(deadline + EPOCH_TICK * 2);
        let slice = store.data().slice.clone();
        let guest = async {
            let (pre, world): (_, fn(_) -> Instance) = match &component.pre {
                WorldPre::Current(pre) => (pre.instance_pre(), Instance::Current),
                WorldPre::Second(pre) => (pre.instance_pre(), Instance::Second),
                WorldPre::Previous(pre) => (pre.instance_pre(), Instance::Previous),
            };
            let instance = pre
                .instantiate_async(&mut store)
                .in_span(connector_trace::span("guest instantiate").start())
                .await
                .map(world)
                .map_err(|e| (e, true))?;
            f(&instance, &mut store)
                .in_span(
                    connector_trace::span("guest call")
                        .attr("export", connector_trace::Value::Static(export))
                        .start(),
                )
                .await
                .map_err(|e| (e, false))
        };
        let outcome = tokio::time::timeout_at(hard_stop, OnTurn::new(slice, guest)).await;
        match outcome {
            Ok(Ok(value)) => Ok(value),
            // Out of time after waiting for the memory budget: the host's bound, not the
            // guest's.
            Err(_elapsed) => Err(self
                .memory_busy(&store, true)
                .unwrap_or(GuestError::Timeout {
                    after_ms: timeout.as_millis() as u64,
                })),
            Ok(Err((err, during_instantiate))) => {
                Err(self.classify(&store, err, during_instantiate))
            }
        }
    }

    /// The error when memory is why the call failed (see [`MemoryBudget::shortage`]).
    fn memory_busy(&self, store: &Store<GuestState>, out_of_time: bool) -> Option<GuestError> {
        let total_mib = self.limits.total_memory_bytes / (1024 * 1024);
        store.data().limiter.budget.shortage(total_mib, out_of_time)
    }

    fn classify(
        &self,
        store: &Store<GuestState>,
        err: wasmtime::Error,
        during_instantiate: bool,
    ) -> GuestError {
        if let Some(busy) = self.memory_busy(store, false) {
            return busy;
        }
        let state = store.data();
        if state.limiter.exceeded {
            return GuestError::MemoryExceeded {
                limit_bytes: state.limiter.limit,
            };
        }
        // wasmtime's error when a transfer out of the guest passes the hostcall fuel set
        // in `new_store` (its type is private; `runtime::faults_are_reported...` notices
        // if the text changes).
        if format!("{err:#}").contains("fuel allocated for hostcalls has been exhausted") {
            return GuestError::OutputTooLarge {
                bytes: self.hostcall_fuel(),
                limit: self.limits.max_output_bytes,
            };
        }
        if let Some(trap) = err.downcast_ref::<Trap>() {
            if *trap == Trap::Interrupt {
                if let Some(busy) = self.memory_busy(store, true) {
                    return busy;
                }
                return GuestError::Timeout {
                    after_ms: self.limits.call_timeout.as_millis() as u64,
                };
            }
            let stderr = state.stderr.contents();
            let message = panic_message(&String::from_utf8_lossy(&stderr))
                .unwrap_or_else(|| trap.to_string());
            return GuestError::Trapped { message };
        }
        if during_instantiate {
            return GuestError::Instantiate {
                message: format!("{err:#}"),
            };
        }
        let stderr = state.stderr.contents();
        let message =
            panic_message(&String::from_utf8_lossy(&stderr)).unwrap_or_else(|| format!("{err:#}"));
        GuestError::Trapped { message }
    }

    fn check_size(&self, bytes: usize) -> Result<(), GuestError> {
        if bytes > self.limits.max_output_bytes {
            return Err(GuestError::OutputTooLarge {
                bytes,
                limit: self.limits.max_output_bytes,
            });
        }
        Ok(())
    }

    /// Asks the component to describe itself.
    pub async fn describe(&self, component: &LoadedComponent) -> Result<wit::Manifest, GuestError> {
        let sandbox = Sandbox::isolated("(describe)");
        let manifest = self
            .run(component, &sandbox, "describe-connector", |c, store| {
                Box::pin(async move {
                    match c {
                        Instance::Current(_) | Instance::Second(_) => {
                            c.call(store, "describe-connector", ()).await
                        }
                        Instance::Previous(_) => c
                            .call::<_, previous::old::Manifest>(store, "describe-connector", ())
                            .await
                            .map(previous::manifest),
                    }
                })
            })
            .await?;
        let size = manifest.config_schema.len()
            + manifest
                .tools
                .iter()
                .map(|t| {
                    t.input_schema.len()
                        + t.description.len()
                        + t.output_schema.as_ref().map_or(0, String::len)
                })
                .sum::<usize>();
        self.check_size(size)?;
        Ok(manifest)
    }

    /// Validates a binding configuration; `Ok(Err(_))` is the connector refusing it.
    pub async fn bind(
        &self,
        component: &LoadedComponent,
        sandbox: &Sandbox,
        config: &str,
    ) -> Result<Result<Vec<String>, String>, GuestError> {
        let config = config.to_owned();
        self.run(component, sandbox, "validate-binding", move |c, store| {
            Box::pin(async move { c.call(store, "validate-binding", (config.as_str(),)).await })
        })
        .await
    }

    /// Runs one tool; `Ok(Err(_))` is the connector's own failure.
    pub async fn call_tool(
        &self,
        component: &LoadedComponent,
        sandbox: &Sandbox,
        ctx: wit::CallContext,
        tool: &str,
        arguments: &str,
    ) -> Result<Result<wit::ToolOutput, wit::ToolError>, GuestError> {
        let tool = tool.to_owned();
        let arguments = arguments.to_owned();
        let result = self
            .run(component, sandbox, "call-tool", move |c, store| {
                Box::pin(async move {
                    let (tool, arguments) = (tool.as_str(), arguments.as_str());
                    match c {
                        Instance::Current(_) | Instance::Second(_) => {
                            c.call(store, "call-tool", (&ctx, tool, arguments)).await
                        }
                        Instance::Previous(_) => c
                            .call::<_, Result<String, previous::old::ToolError>>(
                                store,
                                "call-tool",
                                (&previous::call_context(ctx), tool, arguments),
                            )
                            .await
                            .map(previous::tool_result),
                    }
                })
            })
            .await?;
        match &result {
            Ok(output) => self.check_size(output_size(output))?,
            Err(
                wit::ToolError::Failed(m)
                | wit::ToolError::InvalidArguments(m)
                | wit::ToolError::Unauthorized(m),
            ) => self.check_size(m.len())?,
        }
        Ok(result)
    }

    /// Translates a verified webhook into messages; `Ok(Err(_))` is the connector refusing it.
    pub async fn translate_webhook(
        &self,
        component: &LoadedComponent,
        sandbox: &Sandbox,
        hook: wit::Webhook,
    ) -> Result<Result<Vec<wit::Message>, String>, GuestError> {
        let result = self
            .run(component, sandbox, "translate-webhook", move |c, store| {
                Box::pin(async move {
                    match c {
                        Instance::Current(_) | Instance::Second(_) => {
                            c.call(store, "translate-webhook", (&hook,)).await
                        }
                        Instance::Previous(_) => c
                            .call::<_, Result<Vec<previous::old::Message>, String>>(
                                store,
                                "translate-webhook",
                                (&previous::webhook(hook),),
                            )
                            .await
                            .map(|r| {
                                r.map(|m| {
                                    m.into_iter().map(previous::message_out).collect::<Vec<_>>()
                                })
                            }),
                    }
                })
            })
            .await?;
        if let Ok(messages) = &result {
            self.check_size(
                messages
                    .iter()
                    .map(|m| m.payload.len() + m.route.len() + m.kind.len())
                    .sum(),
            )?;
        }
        Ok(result)
    }

    /// The per-binding filter.
    pub async fn accept(
        &self,
        component: &LoadedComponent,
        sandbox: &Sandbox,
        binding: wit::Binding,
        message: wit::Message,
    ) -> Result<bool, GuestError> {
        self.run(component, sandbox, "accepts-message", move |c, store| {
            Box::pin(async move {
                match c {
                    Instance::Current(_) | Instance::Second(_) => {
                        c.call(store, "accepts-message", (&binding, &message)).await
                    }
                    Instance::Previous(_) => {
                        let binding = previous::binding(binding);
                        let message = previous::message_in(message);
                        c.call(store, "accepts-message", (&binding, &message)).await
                    }
                }
            })
        })
        .await
    }

    /// The env vars and files an agent under the binding's unit starts with.
    pub async fn runtime_context(
        &self,
        component: &LoadedComponent,
        sandbox: &Sandbox,
        binding: wit::Binding,
    ) -> Result<Result<wit::AgentContext, String>, GuestError> {
        let result = self
            .run(component, sandbox, "runtime-context", move |c, store| {
                Box::pin(async move {
                    match c {
                        Instance::Current(_) | Instance::Second(_) => {
                            c.call(store, "runtime-context", (&binding,)).await
                        }
                        Instance::Previous(_) => c
                            .call::<_, Result<previous::old::AgentContext, String>>(
                                store,
                                "runtime-context",
                                (&previous::binding(binding),),
                            )
                            .await
                            .map(|r| r.map(previous::agent_context)),
                    }
                })
            })
            .await?;
        if let Ok(ctx) = &result {
            self.check_size(
                ctx.env
                    .iter()
                    .chain(ctx.files.iter())
                    .map(|(k, v)| k.len() + v.len())
                    .sum(),
            )?;
        }
        Ok(result)
    }
}

/// Bytes of a tool's output, as counted against `max_output_bytes`: what clients are
/// sent, roughly (binary data as base64, each block with its framing).
fn output_size(output: &wit::ToolOutput) -> usize {
    let base64 = |n: usize| n.div_ceil(3) * 4;
    let block = |b: &wit::ContentBlock| {
        BLOCK_OVERHEAD
            + match b {
                wit::ContentBlock::Text(t) => t.len(),
                wit::ContentBlock::Image(m) | wit::ContentBlock::Audio(m) => {
                    base64(m.data.len()) + m.mime_type.len()
                }
                wit::ContentBlock::ResourceLink(l) => {
                    l.uri.len()
                        + l.name.len()
                        + [&l.title, &l.description, &l.mime_type]
                            .iter()
                            .map(|s| s.as_ref().map_or(0, String::len))
                            .sum::<usize>()
                }
                wit::ContentBlock::Resource(r) => {
                    r.uri.len()
                        + r.mime_type.as_ref().map_or(0, String::len)
                        + match &r.contents {
                            wit::ResourceContents::Text(t) => t.len(),
                            wit::ResourceContents::Blob(b) => base64(b.len()),
                        }
                }
            }
    };
    output.structured.as_ref().map_or(0, String::len)
        + output.content.iter().map(block).sum::<usize>()
}

/// The hex digits of a digest from the host's own records (`sha256:<64 lowercase hex>`).
fn known_digest_hex(digest: &str) -> Result<&str, LoadError> {
    digest
        .strip_prefix("sha256:")
        .filter(|hex| connector_model::ids::is_sha256_hex(hex))
        .ok_or_else(|| LoadError::MalformedDigest(digest.chars().take(80).collect()))
}

/// Refuses bytes that are not a WebAssembly component, saying what they are instead.
fn check_component(bytes: &[u8]) -> Result<(), LoadError> {
    if is_component(bytes) {
        return Ok(());
    }
    let what = if bytes.starts_with(b"\0asm\x01\0\0\0") {
        "this is a core WebAssembly module, not a component"
    } else {
        "the bytes do not start with the WebAssembly magic number"
    };
    Err(LoadError::NotAComponent(what.into()))
}

/// The SHA-256 of `bytes` in lowercase hex: a component's digest without `sha256:`.
fn sha256_hex(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

/// Whether `bytes` start with the binary header of a WebAssembly component (layer 1).
fn is_component(bytes: &[u8]) -> bool {
    bytes.len() >= 8 && &bytes[0..4] == b"\0asm" && bytes[6..8] == [0x01, 0x00]
}

/// Extracts a Rust panic message from a guest's stderr.
fn panic_message(stderr: &str) -> Option<String> {
    let start = stderr.find("panicked at")?;
    let rest = &stderr[start..];
    let body = rest.split_once('\n').map(|(_, b)| b).unwrap_or(rest);
    let body = body.split("\nnote:").next().unwrap_or(body).trim();
    if body.is_empty() {
        Some(rest.trim().to_string())
    } else {
        Some(body.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::{panic_message, ConnectorRuntime, RuntimeOptions};

    #[test]
    fn a_runtime_that_cannot_start_keeps_the_cause() {
        let dir = tempfile::tempdir().expect("temp dir");
        let file = dir.path().join("a-file");
        std::fs::write(&file, b"not a directory").expect("write");
        let Err(error) = ConnectorRuntime::new(RuntimeOptions {
            cache_dir: Some(file.join("compiled")),
            ..RuntimeOptions::default()
        }) else {
            panic!("a cache directory under a file was accepted");
        };
        assert_eq!(
            error.to_string(),
            "could not create the component cache directory"
        );
        let cause = error
            .chain()
            .nth(1)
            .and_then(|c| c.downcast_ref::<std::io::Error>())
            .expect("the I/O error is kept as the cause");
        assert_eq!(cause.kind(), std::io::ErrorKind::NotADirectory);
    }

    #[test]
    fn panic_messages_are_extracted_from_stderr() {
        let stderr = "\nthread '<unnamed>' panicked at src/lib.rs:10:5:\ndeliberate panic: x\nnote: run with `RUST_BACKTRACE=1` environment variable to display a backtrace\n";
        assert_eq!(
            panic_message(stderr).as_deref(),
            Some("deliberate panic: x")
        );
        assert_eq!(panic_message("nothing here"), None);
    }
}
