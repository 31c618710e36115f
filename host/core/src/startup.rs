//! Start-up: opens the host's parts in dependency order and brings them to the stored
//! state — credentials, the state and its connectors (stored, bundled, then the
//! connectors directory), left-over webhook deliveries — then starts the background work
//! (the shared-state refresh and the delivery sweep), which stops when the parts are
//! dropped.

use std::sync::Arc;

use anyhow::Context as _;

use crate::audit::{Audit, AuditLog};
use crate::auth::{read_or_create_secret, Credentials};
use crate::catalog::{Catalog, InstallOptions, Installed, Preparing, Provenance};
use crate::config::HostConfig;
use crate::directory::DirectoryService;
use crate::dispatch::ToolDispatcher;
use crate::inbox::Inbox;
use crate::registry::ConnectorRegistry;
use crate::replicas::ReplicaSync;
use crate::sources::{ComponentSource, InstallRequest, Sources};
use crate::state::State;
use crate::webhooks::Webhooks;
use connector_model::audit::{target, Actor};
use connector_model::error::{ErrorCode, HostResult};
use connector_model::records::Snapshot;
use connector_runtime::{ConnectorRuntime, RuntimeOptions};
use connector_store::sqlite::Writes;
use connector_store::Store;

/// What `Host::open` reports about start-up.
#[derive(Debug, Clone)]
pub struct StartupReport {
    /// The operator token when it was generated now (print it once), else `None`.
    pub generated_operator_token: Option<String>,
}

/// Opens the store named by the configuration's database URL (CONTRACT §2):
/// `postgres://…` / `postgresql://…` for PostgreSQL (with the `postgres` feature),
/// otherwise SQLite ([`connector_store::open_store`]). Error messages never repeat the
/// URL (it may carry a password).
pub async fn open_store(config: &HostConfig) -> anyhow::Result<Arc<dyn Store>> {
    open_store_with(config, Writes::Grouped).await
}

/// As [`open_store`], with an SQLite file's writes run as `writes` says.
pub(crate) async fn open_store_with(
    config: &HostConfig,
    writes: Writes,
) -> anyhow::Result<Arc<dyn Store>> {
    let url = config.database_url();
    let opened = if url.starts_with("postgres://") || url.starts_with("postgresql://") {
        open_postgres(&url).await
    } else {
        tokio::task::spawn_blocking(move || connector_store::open_store_with(&url, writes))
            .await
            .map_err(|e| {
                connector_store::StoreError::Unavailable(format!(
                    "opening the database did not finish: {e}"
                ))
            })
            .and_then(|opened| opened)
    };
    opened.context("cannot open the database")
}

#[cfg(feature = "postgres")]
async fn open_postgres(url: &str) -> connector_store::StoreResult<Arc<dyn Store>> {
    Ok(Arc::new(
        connector_store_postgres::PostgresStore::connect(url).await?,
    ))
}

#[cfg(not(feature = "postgres"))]
async fn open_postgres(_url: &str) -> connector_store::StoreResult<Arc<dyn Store>> {
    Err(connector_store::StoreError::Unavailable(
        "this build of connector-host has no PostgreSQL support: build it with the `postgres` feature".into(),
    ))
}

/// What a host process does besides serving from its state.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Role {
    /// `serve`, or a platform embedding the host: installs the bundled and directory
    /// connectors, resumes and sweeps webhook deliveries.
    #[default]
    Server,
    /// Serves tools beside a [`Role::Server`] on the same database: adopts the stored
    /// connectors as they are, writes nothing at start, starts no webhook work, and
    /// checks for other processes' writes before each request (and in the background)
    /// whatever the store, SQLite included.
    ToolServer,
}

/// The parts of one host, each owning its concern.
pub(crate) struct Parts {
    pub(crate) config: Arc<HostConfig>,
    pub(crate) store: Arc<dyn Store>,
    pub(crate) state: Arc<State>,
    pub(crate) catalog: Arc<Catalog>,
    pub(crate) directory: DirectoryService,
    pub(crate) tools: ToolDispatcher,
    pub(crate) inbox: Arc<Inbox>,
    pub(crate) webhooks: Arc<Webhooks>,
    pub(crate) replicas: Arc<ReplicaSync>,
    pub(crate) credentials: Credentials,
    pub(crate) sources: Sources,
    pub(crate) audit: Arc<AuditLog>,
}

impl Parts {
    /// Opens every part on `config` and `store`, installs what is stored, bundled and in
    /// the connectors directory, resumes left-over deliveries and starts the background
    /// work.
    pub(crate) async fn open(
        config: HostConfig,
        store: Arc<dyn Store>,
        role: Role,
    ) -> anyhow::Result<(Arc<Parts>, StartupReport)> {
        let config = Arc::new(config);
        std::fs::create_dir_all(&config.data_dir).with_context(|| {
            format!(
                "cannot create the data directory {}",
                config.data_dir.display()
            )
        })?;
        // The App key is read and proven at start-up: a bad key fails here, not at first use.
        let github_app = match &config.github_app {
            Some(settings) => Some(Arc::new(
                crate::github_app::GithubApp::new(settings).context("github_app")?,
            )),
            None => None,
        };
        let audit = AuditLog::new(store.clone(), config.audit.clone());
        let runtime = Arc::new(ConnectorRuntime::new(RuntimeOptions {
            limits: config.runtime_limits(),
            cache_dir: Some(config.data_dir.join("compiled")),
            installation_tokens: github_app
                .map(|app| app as Arc<dyn connector_runtime::InstallationTokens>),
            credential_log: Some(audit.clone()),
            ..RuntimeOptions::default()
        })?);
        let (credentials, generated_operator_token) =
            Credentials::open(&config, store.as_ref()).await?;
        let sources = Sources::open(config.clone())?;
        let replica_path = config.data_dir.join("replica-id");
        let (replica_id, _) = read_or_create_secret(&replica_path)
            .with_context(|| format!("cannot read or create {}", replica_path.display()))?;

        let mut snapshot = store.load().await.context("cannot load the stored state")?;
        // Every write below is checked against the state just loaded (and kept current
        // by `refresh`): on a shared database, one racing another replica's is refused.
        store.refuse_stale_writes();
        let registry = ConnectorRegistry::new(runtime.clone());
        let state = Arc::new(State::new(
            store.clone(),
            audit.clone(),
            registry,
            &mut snapshot,
        ));
        store.applied(snapshot.version);
        let catalog = Arc::new(Catalog::new(config.clone(), runtime, state.clone()));
        let others_write = store.is_shared() || role == Role::ToolServer;
        let replicas = Arc::new(ReplicaSync::new(
            store.clone(),
            state.clone(),
            catalog.clone(),
            replica_id,
            snapshot.version,
            others_write,
        ));
        let inbox = Arc::new(Inbox::new(store.clone(), state.clone(), others_write));
        let http = reqwest::Client::builder()
            .timeout(std::time::Duration::from_secs(10))
            .build()
            .context("cannot build the HTTP client")?;
        let parts = Parts {
            directory: DirectoryService::new(state.clone(), catalog.clone(), http),
            tools: ToolDispatcher::new(state.clone(), catalog.clone(), audit.clone()),
            webhooks: Arc::new(Webhooks::new(
                config.clone(),
                store.clone(),
                state.clone(),
                catalog.clone(),
                inbox.clone(),
                replicas.clone(),
            )),
            config,
            store,
            state,
            catalog,
            inbox,
            replicas,
            credentials,
            sources,
            audit,
        };
        let parts = Arc::new(parts);
        if role == Role::ToolServer {
            // The server beside it installs, rotates and delivers; this process serves
            // what is stored.
            parts.adopt_stored(&snapshot).await;
            parts.replicas.spawn_background_refresh();
            return Ok((
                parts,
                StartupReport {
                    generated_operator_token,
                },
            ));
        }
        parts.install_at_start(&snapshot).await?;
        // Deliveries stored but not routed when the previous process stopped.
        parts
            .webhooks
            .resume()
            .await
            .context("cannot read stored webhook deliveries")?;
        parts.replicas.spawn_background_refresh();
        parts.webhooks.spawn_sweeper();
        parts.audit.spawn_pruning();
        Ok((
            parts,
            StartupReport {
                generated_operator_token,
            },
        ))
    }

    /// Puts the connectors `snapshot` stores in place: from their stored descriptions,
    /// their components loading in the background, except the bundled ones, loaded now
    /// (see [`Preparing::Start`]).
    async fn adopt_stored(&self, snapshot: &Snapshot) {
        let ready = self
            .catalog
            .prepare_stored(snapshot, Vec::new(), Preparing::Start)
            .await;
        self.state.install_stored(ready);
    }

    /// Installs, in order: the connectors `snapshot` stores, the bundled connectors
    /// (unless the operator installed their own version of that slug), then the
    /// connectors directory's.
    async fn install_at_start(&self, snapshot: &Snapshot) -> anyhow::Result<()> {
        self.adopt_stored(snapshot).await;
        for bundled in self.config.bundled.clone() {
            let name = bundled.name;
            let stored = snapshot.connectors.iter().find(|c| c.slug == name);
            if stored.is_some_and(|c| !c.bundled) {
                continue;
            }
            // Stored by an earlier start and adopted above: installing it again would
            // load and describe it once more only to find the same digest, and write
            // nothing. (A stored copy damaged since is found when its compiled code is
            // not in the cache: adopting it then fails its digest, and this install
            // writes the binary's copy again.)
            let adopted = self.state.registry().get(name);
            if adopted.is_some_and(|c| c.info().digest == bundled.digest) {
                continue;
            }
            let options = InstallOptions {
                force: true,
                accept_tool_changes: true,
            };
            self.install(
                &Actor::host(),
                Arc::from(bundled.bytes),
                Some(bundled.digest),
                Provenance::upload(),
                options,
            )
            .await
            .with_context(|| format!("bundled connector `{name}` failed to install"))?;
        }
        let Some(dir) = self.config.connectors_dir.clone() else {
            return Ok(());
        };
        let mut files: Vec<_> = std::fs::read_dir(&dir)
            .with_context(|| format!("cannot read connectors_dir {}", dir.display()))?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|x| x == "wasm"))
            .collect();
        files.sort();
        for file in files {
            let bytes =
                std::fs::read(&file).with_context(|| format!("cannot read {}", file.display()))?;
            // The operator placed it there: its tool changes are accepted (and reported).
            let options = InstallOptions {
                force: true,
                accept_tool_changes: true,
            };
            let installed = self
                .install_from(
                    &Actor::host(),
                    InstallRequest {
                        source: ComponentSource::Upload(Arc::from(bytes)),
                        options,
                    },
                )
                .await
                .with_context(|| file.display().to_string())?;
            if !installed.tool_changes.is_empty() {
                tracing::warn!(file = %file.display(), slug = %installed.connector.slug, changes = %serde_json::to_string(&installed.tool_changes).unwrap_or_default(), "a connector from connectors_dir changed its tool definitions");
            }
        }
        Ok(())
    }

    /// Installs or rotates the component `source` names (uploaded bytes or a registry
    /// reference), under the signature policy.
    /// A refusal before the component names its slug (a registry that does not answer, a
    /// signature or a component that does not check) is recorded too, on target
    /// `connector:?`, with where the component came from.
    pub(crate) async fn install_from(
        &self,
        actor: &Actor,
        request: InstallRequest,
    ) -> HostResult<Installed> {
        let unnamed = unnamed_install(actor, source_detail(&request.source));
        let fetched = self.sources.fetch(request.source).await;
        let (bytes, provenance) = self.audit.outcome_of(&unnamed, fetched).await?;
        self.install_as(actor, &unnamed, bytes, None, provenance, request.options)
            .await
    }

    /// Installs or rotates a component. On a shared database another replica's write
    /// landing meanwhile refuses the write (`409 state_changed`): the state is refreshed
    /// and the write tried again (what the new version already checked is kept), a few
    /// times. Replicas starting together race for the same rows this way too.
    pub(crate) async fn install(
        &self,
        actor: &Actor,
        bytes: Arc<[u8]>,
        bundled: Option<&str>,
        provenance: Provenance,
        options: InstallOptions,
    ) -> HostResult<Installed> {
        let source = match bundled {
            Some(name) => format!("bundled:{name}"),
            None => "upload".to_string(),
        };
        let unnamed = unnamed_install(actor, source);
        self.install_as(actor, &unnamed, bytes, bundled, provenance, options)
            .await
    }

    /// [`Self::install`]; a component refused before its slug is known is recorded as
    /// `unnamed`.
    async fn install_as(
        &self,
        actor: &Actor,
        unnamed: &Audit,
        bytes: Arc<[u8]>,
        bundled: Option<&str>,
        provenance: Provenance,
        options: InstallOptions,
    ) -> HostResult<Installed> {
        let prepared = self
            .catalog
            .prepare_install(bytes, bundled, provenance, options)
            .await;
        let mut pending = self.audit.outcome_of(unnamed, prepared).await?;
        let info = pending.prepared.info();
        let audit = Audit::new(actor, "connector.install", target::connector(&info.slug))
            .with_details(serde_json::json!({"digest": info.digest, "version": info.version}));
        let mut attempt = 0;
        let result = loop {
            match self.catalog.finish_install(&audit, &mut pending).await {
                Err(e) if e.code == ErrorCode::StateChanged && attempt < 10 => {
                    attempt += 1;
                    if let Err(e) = self.replicas.refresh().await {
                        break Err(e);
                    }
                }
                other => break other,
            }
        };
        self.audit.outcome_of(&audit, result).await
    }
}

/// The record of an install by `actor` from `source` refused before the component named
/// its slug (target `connector:?`).
fn unnamed_install(actor: &Actor, source: String) -> Audit {
    Audit::new(actor, "connector.install", target::connector("?"))
        .with_details(serde_json::json!({"source": source}))
}

/// Where a component to install comes from, as its audit record says it: `upload`, or
/// the registry reference as it parsed (a reference that does not parse is not written:
/// it could hold anything, a password included).
fn source_detail(source: &ComponentSource) -> String {
    match source {
        ComponentSource::Upload(_) => "upload".to_string(),
        ComponentSource::Registry(reference) => registry_detail(reference),
    }
}

#[cfg(feature = "oci")]
fn registry_detail(reference: &str) -> String {
    match connector_distribution::OciReference::parse(reference) {
        Ok(parsed) => connector_model::ids::truncate(&parsed.to_string(), 256),
        Err(_) => "registry (a reference that does not parse)".to_string(),
    }
}

#[cfg(not(feature = "oci"))]
fn registry_detail(_: &str) -> String {
    "registry".to_string()
}
