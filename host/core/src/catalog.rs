//! The connector catalog: installing, rotating and removing connectors, and building the
//! sandbox every guest call runs in.
//!
//! Policy is decided here from operator data only: a connector's outbound hosts are what
//! its manifest declares narrowed by the operator's settings of its slug, its secrets are
//! the operator's secrets its binding names, and the GitHub App installations it may mint
//! tokens for are the ones its binding's routing keys name. Nothing a guest returns at
//! call time widens a sandbox.

use std::collections::BTreeMap;
use std::sync::Arc;

use serde_json::{json, Value};

use crate::audit::Audit;
use crate::capabilities::Capabilities;
use crate::config::HostConfig;
use crate::registry::{
    ComponentLoader, InstallError, InstalledConnector, LoadFailure, SchemaViolation,
};
use crate::state::{PreparedConnectors, State, StateChange, Working};
use crate::trust::{check_pinned, tool_changes, ToolChange};
use connector_model::connector::{Connector, SOURCE_BUNDLED, SOURCE_UPLOAD};
use connector_model::error::{ErrorCode, HostError, HostResult};
use connector_model::ids::{now_rfc3339, truncate, Slug};
use connector_model::records::{BindingRecord, ConnectorRecord, GrantRecord, Snapshot, Subject};
use connector_runtime::{ConnectorRuntime, GuestError, OutboundPolicy, Sandbox};

/// Whether a write created something or replaced it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Written {
    /// It did not exist.
    Created,
    /// It replaced what was there.
    Updated,
}

impl Written {
    /// `Created` when there was nothing before, else `Updated`.
    pub(crate) fn from_existing<T>(existing: Option<T>) -> Self {
        if existing.is_some() {
            Written::Updated
        } else {
            Written::Created
        }
    }
}

/// A binding's config as a connector version accepted it.
pub(crate) struct CheckedBinding {
    /// The digest of the version that checked it.
    pub digest: String,
    /// What its `bind` returned.
    pub routing_keys: Vec<String>,
}

/// The result of installing a component.
#[derive(Debug, Clone)]
pub struct Installed {
    /// The installed connector.
    pub connector: Connector,
    /// Whether it is new or a rotation.
    pub written: Written,
    /// What a rotation changed in the tools' definitions (empty for a new install, and
    /// when only code changed).
    pub tool_changes: Vec<ToolChange>,
}

/// How an install or rotation was asked for.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct InstallOptions {
    /// Unbind the bindings the new version rejects instead of refusing the rotation.
    pub force: bool,
    /// Accept changed tool definitions where `trust.pin_tool_definitions` pins them.
    pub accept_tool_changes: bool,
}

/// Where a component comes from, and who signed it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Provenance {
    /// `upload`, `bundled`, or the OCI reference pinned to its manifest digest.
    pub source: String,
    /// The trusted key whose signature covers it.
    pub signed_by: Option<String>,
}

impl Provenance {
    pub(crate) fn upload() -> Self {
        Self {
            source: SOURCE_UPLOAD.to_string(),
            signed_by: None,
        }
    }
}

/// How [`Catalog::prepare_stored`] prepares a connector it has not prepared yet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Preparing {
    /// From the description stored with it, its component loaded in the background (a
    /// replica catching up).
    Described,
    /// At start-up: as [`Preparing::Described`], except a bundled connector, which is
    /// loaded now: a stored copy damaged since is then found, and the start installs the
    /// binary's copy again. A start thus neither runs every stored connector to describe
    /// it nor touches their code (at hundreds of connectors, most of a start's memory)
    /// before serving.
    Start,
}

/// Why a stored connector could not be prepared on this host (it stays stored).
#[derive(Debug, thiserror::Error)]
enum UnpreparedRecord {
    /// Its component does not load or describe itself here.
    #[error(transparent)]
    Install(#[from] InstallError),
    /// The database did not answer.
    #[error(transparent)]
    Store(#[from] connector_store::StoreError),
    /// Its component was replaced since the record was read.
    #[error("its component ({digest}) is no longer stored (replaced meanwhile)")]
    Replaced {
        /// The digest the record names.
        digest: String,
    },
}

/// How long loading a described connector's component ahead of its first call may take.
const PRELOAD_WAIT: std::time::Duration = std::time::Duration::from_secs(600);

/// How many bindings a rotation asks the new version's `bind` about at once.
const BIND_CHECKS_AT_ONCE: usize = 4;
/// How many rounds of binding checks a rotation makes while bindings keep changing.
const ROTATION_ATTEMPTS: u32 = 5;

/// What a new version's `bind` said of a binding: its routing keys, or why it refuses it
/// (the details the refusal reports).
type BindVerdict = Result<Vec<String>, Value>;
/// Verdicts by unit id, each with the config it judged.
type BindVerdicts = BTreeMap<String, (Value, BindVerdict)>;

/// An install or rotation prepared by [`Catalog::prepare_install`], not yet written.
pub(crate) struct PendingInstall {
    pub(crate) prepared: Arc<InstalledConnector>,
    component: Arc<[u8]>,
    bundled: bool,
    policy: Arc<OutboundPolicy>,
    /// The stored form of the new version's manifest, made once, before any decision.
    manifest: Option<Value>,
    /// What the new version said of the bindings it checked so far.
    verdicts: BindVerdicts,
    options: InstallOptions,
}

/// Installed connectors and the sandboxes their calls run in.
pub(crate) struct Catalog {
    config: Arc<HostConfig>,
    runtime: Arc<ConnectorRuntime>,
    state: Arc<State>,
}

impl Catalog {
    pub(crate) fn new(
        config: Arc<HostConfig>,
        runtime: Arc<ConnectorRuntime>,
        state: Arc<State>,
    ) -> Self {
        Self {
            config,
            runtime,
            state,
        }
    }

    /// The sandbox runtime.
    pub(crate) fn runtime(&self) -> &Arc<ConnectorRuntime> {
        &self.runtime
    }

    /// Every installed connector, sorted by slug.
    pub(crate) fn list(&self) -> Vec<Connector> {
        self.state
            .registry()
            .list()
            .iter()
            .map(|c| c.info().clone())
            .collect()
    }

    /// One installed connector.
    pub(crate) fn get(&self, slug: &str) -> HostResult<Arc<InstalledConnector>> {
        self.state.registry().get(slug).ok_or_else(|| {
            HostError::not_found(format!(
                "no connector `{}` is installed",
                truncate(slug, 80)
            ))
        })
    }

    /// What the operator grants connector `info` (see [`crate::capabilities`]).
    fn capabilities<'c>(&'c self, info: &'c Connector) -> Capabilities<'c> {
        Capabilities::new(
            info,
            self.config.settings_of(&info.slug),
            self.config.ships(&info.slug, &info.digest),
        )
    }

    /// The outbound policy of a connector: what it declares, narrowed by the operator's
    /// settings of its slug.
    fn policy_of(&self, info: &Connector) -> Arc<OutboundPolicy> {
        self.capabilities(info).outbound()
    }

    /// The sandbox a call of connector `slug` runs in on behalf of `binding` (if any):
    /// what the operator grants it (see [`crate::capabilities`]). A connector that is not
    /// installed gets nothing.
    pub(crate) fn sandbox(&self, slug: &str, binding: Option<&BindingRecord>) -> Sandbox {
        match self.state.registry().get(slug) {
            Some(installed) => self
                .capabilities(installed.info())
                .sandbox(binding, self.state.policy(slug)),
            None => Sandbox::isolated(slug),
        }
    }

    /// Checks a binding's config against connector `slug` as installed now (its schema,
    /// then its own `bind`) and returns the routing keys `bind` gave, with the digest of
    /// the version that gave them: the write must find that version still installed.
    pub(crate) async fn check_binding(
        &self,
        slug: &str,
        config: &Value,
    ) -> HostResult<CheckedBinding> {
        let connector = self.get(slug)?;
        if let Err(v) = connector.check_config(config) {
            return Err(HostError::new(
                ErrorCode::InvalidConfig,
                format!("the configuration does not match the configSchema of `{slug}`"),
            )
            .with_details(json!({"violations": violations_json(&v)})));
        }
        let sandbox = self.sandbox(slug, None);
        let bound = match connector
            .component(self.runtime.limits().call_timeout)
            .await
        {
            Ok(component) => {
                self.runtime
                    .bind(component, &sandbox, &config.to_string())
                    .await
            }
            Err(e) => Err(e),
        };
        let keys = match bound {
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
        // Decided from the operator's config, not from the keys the guest returned.
        let names_installation =
            !crate::capabilities::installation_ids(&connector.info().config_schema, config)
                .is_empty();
        if self.config.github_app.is_none() && names_installation {
            // Another way in is suggested only where this connector's schema has one.
            let alternative = if connector.info().config_schema["properties"]
                .get("patSecret")
                .is_some()
            {
                ", or use patSecret"
            } else {
                ""
            };
            return Err(HostError::new(ErrorCode::GithubAppNotConfigured,
                format!("this binding names a GitHub App installation, but no GitHub App is configured on this host (set github_app.app_id and github_app.private_key_path{alternative})"),
            ));
        }
        Ok(CheckedBinding {
            digest: connector.info().digest.clone(),
            routing_keys: keys,
        })
    }

    /// The connectors `snapshot` stores, ready to serve: one already installed with the
    /// same digest (or prepared by an `earlier` attempt) is reused. Any other with a
    /// description stored with it (and, at start-up, not bundled) is put in place from
    /// that description, its component loaded on first use and ahead of it, one after
    /// the other in the background (see [`InstalledConnector::load_ahead`]): neither a
    /// replica catching up with another's install nor a start compiles or runs anything
    /// before serving, and the loads run one at a time below the priority of the requests
    /// served meanwhile. Otherwise (a bundled connector at start-up, or one stored without
    /// a description) it is loaded now: read back from the compiled-component cache by
    /// its digest or, on a miss, read from the store and compiled, off the async threads,
    /// and described; one that does not load on this host is logged and left out. Runs
    /// before the write lock is taken.
    pub(crate) async fn prepare_stored(
        &self,
        snapshot: &Snapshot,
        earlier: PreparedConnectors,
        preparing: Preparing,
    ) -> PreparedConnectors {
        let registry = self.state.registry();
        let mut ready = Vec::with_capacity(snapshot.connectors.len());
        let mut load_ahead = Vec::new();
        for record in &snapshot.connectors {
            let same = |c: &Arc<InstalledConnector>| {
                c.slug() == record.slug && c.info().digest == record.digest
            };
            let reused = registry
                .get(&record.slug)
                .filter(same)
                .or_else(|| earlier.iter().map(|(c, _)| c).find(|c| same(c)).cloned());
            let from_description = match preparing {
                Preparing::Described => true,
                Preparing::Start => !record.bundled,
            };
            let described = match reused.is_none() && from_description {
                true => self.described(record),
                false => None,
            };
            if let Some(connector) = &described {
                load_ahead.push(Arc::downgrade(connector));
            }
            let connector = match (reused, described) {
                (Some(connector), _) | (None, Some(connector)) => connector,
                (None, None) => match self.prepare_record(record).await {
                    Ok(prepared) => Arc::new(prepared),
                    Err(e) => {
                        tracing::error!(slug = %record.slug, error = %e, "a stored connector does not load on this host; it stays stored but is not available here");
                        continue;
                    }
                },
            };
            let policy = self.policy_of(connector.info());
            ready.push((connector, policy));
        }
        if !load_ahead.is_empty() {
            // One after the other (see `load_ahead`), skipping those replaced meanwhile.
            let within = self.runtime.limits().call_timeout.max(PRELOAD_WAIT);
            tokio::spawn(async move {
                for connector in load_ahead {
                    if let Some(connector) = connector.upgrade() {
                        connector.load_ahead(within).await;
                    }
                }
            });
        }
        ready
    }

    /// A stored connector put in place from its stored description, its component to be
    /// loaded ahead of first use (see [`InstalledConnector::load_ahead`]); `None` when it
    /// has no usable description.
    fn described(&self, record: &ConnectorRecord) -> Option<Arc<InstalledConnector>> {
        let mut info: Connector = serde_json::from_value(record.manifest.clone()?).ok()?;
        if record.bundled {
            info.source = SOURCE_BUNDLED.to_string();
        }
        if info.slug != record.slug
            || info.digest != record.digest
            || info.tool_namespace != record.namespace
        {
            return None;
        }
        InstalledConnector::described(info, self.loader(record))
            .ok()
            .map(Arc::new)
    }

    /// Loads the component of stored connector `record`: from the compiled-component cache
    /// by its digest, else from its stored bytes (compiled off the async threads).
    fn loader(&self, record: &ConnectorRecord) -> ComponentLoader {
        let state = Arc::downgrade(&self.state);
        let runtime = Arc::clone(&self.runtime);
        let (slug, digest) = (record.slug.clone(), record.digest.clone());
        Arc::new(move |lane| {
            let (state, runtime) = (state.clone(), Arc::clone(&runtime));
            let (slug, digest) = (slug.clone(), digest.clone());
            Box::pin(async move {
                if let Some(cached) = runtime.load_cached(&digest, lane).await {
                    return Ok(cached?);
                }
                let state = state.upgrade().ok_or(LoadFailure::ShuttingDown)?;
                let bytes = state
                    .stored_component(&slug, &digest)
                    .await?
                    .ok_or_else(|| LoadFailure::NoLongerStored {
                        digest: digest.clone(),
                    })?;
                Ok(runtime
                    .load_off_thread(Arc::from(bytes), Some(&digest), lane)
                    .await?)
            })
        })
    }

    /// Prepares one stored connector now: from the cache by digest, else from its stored
    /// bytes.
    async fn prepare_record(
        &self,
        record: &ConnectorRecord,
    ) -> Result<InstalledConnector, UnpreparedRecord> {
        let mut prepared = self.prepare_record_component(record).await?;
        let stored: Option<Connector> = record
            .manifest
            .clone()
            .and_then(|m| serde_json::from_value(m).ok());
        match stored {
            _ if record.bundled => prepared.set_provenance(SOURCE_BUNDLED.to_string(), None),
            Some(info) => prepared.set_provenance(info.source, info.signed_by),
            None => {}
        }
        Ok(prepared)
    }

    /// The component of stored connector `record`, described.
    async fn prepare_record_component(
        &self,
        record: &ConnectorRecord,
    ) -> Result<InstalledConnector, UnpreparedRecord> {
        let registry = self.state.registry();
        if let Some(cached) = registry.prepare_cached(&record.digest).await {
            return Ok(cached?);
        }
        let bytes = self
            .state
            .stored_component(&record.slug, &record.digest)
            .await?
            .ok_or_else(|| UnpreparedRecord::Replaced {
                digest: record.digest.clone(),
            })?;
        Ok(registry
            .prepare_known(Arc::from(bytes), &record.digest)
            .await?)
    }

    /// Prepares an install (a new slug) or a rotation of an installed one (same slug, new
    /// digest): the component is compiled off the async threads (or read back from the
    /// cache) and describes itself. [`Catalog::finish_install`] then writes it.
    ///
    /// `bundled` is the digest of a connector bundled into the host (known from the
    /// build, so its bytes are not hashed again); `None` for an operator's component.
    pub(crate) async fn prepare_install(
        &self,
        bytes: Arc<[u8]>,
        bundled: Option<&str>,
        provenance: Provenance,
        options: InstallOptions,
    ) -> HostResult<PendingInstall> {
        let registry = self.state.registry();
        let mut prepared = match bundled {
            Some(digest) => registry.prepare_known(bytes.clone(), digest).await,
            None => registry.prepare(&bytes).await,
        }
        .map_err(install_error)?;
        match bundled {
            Some(_) => prepared.set_provenance(SOURCE_BUNDLED.to_string(), None),
            None => prepared.set_provenance(provenance.source, provenance.signed_by),
        }
        let policy = self.policy_of(prepared.info());
        Ok(PendingInstall {
            manifest: serde_json::to_value(prepared.info()).ok(),
            prepared: Arc::new(prepared),
            component: bytes,
            bundled: bundled.is_some(),
            policy,
            verdicts: BindVerdicts::new(),
            options,
        })
    }

    /// Writes a prepared install or rotation. A rotation keeps bindings, re-checks each
    /// binding's config against the new connector (its schema, then its own `bind`) and
    /// refuses with `409 rotation_breaks_bindings` if any fails, unless `force` (then the
    /// failing bindings are unbound).
    ///
    /// Nothing slow runs under the write lock: the guest's `bind` runs for each binding
    /// (a few at once, each under the call deadline) before the lock is taken. Under the
    /// lock the rotation checks that every binding is still the one it checked; bindings
    /// added or changed meanwhile are checked in another round, up to
    /// [`ROTATION_ATTEMPTS`] (then `409 state_changed`). What was checked is kept in
    /// `pending`, so a caller that refreshes after a `409 state_changed` from another
    /// replica's write and calls again checks only what changed.
    pub(crate) async fn finish_install(
        &self,
        audit: &Audit,
        pending: &mut PendingInstall,
    ) -> HostResult<Installed> {
        let registry = self.state.registry();
        let slug = pending.prepared.info().slug.clone();
        for _ in 0..ROTATION_ATTEMPTS {
            let previous = registry
                .check_conflicts(pending.prepared.info())
                .map_err(install_error)?;
            let unchanged = previous
                .as_ref()
                .is_some_and(|p| p.info().digest == pending.prepared.info().digest);
            if let Some(previous) = previous.as_ref().filter(|_| !unchanged) {
                // Refused before any binding is asked: the pin does not need the guest.
                let changes = tool_changes(previous.info(), pending.prepared.info());
                check_pinned(
                    &self.config.trust,
                    &slug,
                    &changes,
                    pending.options.accept_tool_changes,
                )?;
            }
            if !unchanged {
                self.check_bindings(&pending.prepared, &pending.policy, &mut pending.verdicts)
                    .await;
            }
            let plan = &*pending;
            if let Some(installed) = self
                .state
                .write(audit, |dir| self.plan_install(dir, plan))
                .await?
            {
                return Ok(installed);
            }
        }
        Err(HostError::new(
            ErrorCode::StateChanged,
            format!(
                "the bindings of `{slug}` kept changing while the new version checked them ({ROTATION_ATTEMPTS} rounds); nothing was installed: try again"
            ),
        ))
    }

    /// Asks the new version about every binding of its slug whose config it has not
    /// checked yet (a few at once).
    async fn check_bindings(
        &self,
        prepared: &InstalledConnector,
        policy: &Arc<OutboundPolicy>,
        verdicts: &mut BindVerdicts,
    ) {
        use futures::StreamExt;
        let unchecked: Vec<BindingRecord> = self
            .state
            .directory()
            .bindings_of_connector(&prepared.info().slug)
            .filter(|b| {
                verdicts
                    .get(&b.unit_id)
                    .is_none_or(|(config, _)| *config != b.config)
            })
            .cloned()
            .collect();
        let checked: Vec<(BindingRecord, BindVerdict)> = futures::stream::iter(unchecked)
            .map(|b| async move {
                let verdict = self.bind_verdict(prepared, policy, &b).await;
                (b, verdict)
            })
            .buffer_unordered(BIND_CHECKS_AT_ONCE)
            .collect()
            .await;
        for (b, verdict) in checked {
            verdicts.insert(b.unit_id, (b.config, verdict));
        }
    }

    /// What the new version says of binding `b`: its routing keys, or why it refuses it.
    async fn bind_verdict(
        &self,
        prepared: &InstalledConnector,
        policy: &Arc<OutboundPolicy>,
        b: &BindingRecord,
    ) -> BindVerdict {
        if let Err(v) = prepared.check_config(&b.config) {
            return Err(json!({"unitId": b.unit_id, "violations": violations_json(&v)}));
        }
        let sandbox = self
            .capabilities(prepared.info())
            .sandbox(Some(b), policy.clone());
        let bound = match prepared.component(self.runtime.limits().call_timeout).await {
            Ok(component) => {
                self.runtime
                    .bind(component, &sandbox, &b.config.to_string())
                    .await
            }
            Err(e) => Err(e),
        };
        match bound {
            Ok(Ok(keys)) => Ok(keys),
            Ok(Err(msg)) => Err(json!({"unitId": b.unit_id, "message": msg})),
            Err(e) => Err(json!({"unitId": b.unit_id, "message": e.to_string()})),
        }
    }

    /// Decides an install or rotation under the write lock: conflicts with installed
    /// connectors, and every binding of the slug as the new version judged it. `None`
    /// (and nothing written) when a binding is not the one that was checked.
    fn plan_install(
        &self,
        dir: &Working<'_>,
        pending: &PendingInstall,
    ) -> HostResult<(StateChange, Option<Installed>)> {
        let PendingInstall {
            prepared,
            component,
            bundled,
            policy,
            manifest,
            verdicts,
            options,
        } = pending;
        let force = &options.force;
        let previous = self
            .state
            .registry()
            .check_conflicts(prepared.info())
            .map_err(install_error)?;
        let slug = prepared.info().slug.clone();
        if let Some(previous) = &previous {
            if previous.info().digest == prepared.info().digest {
                let unchanged = Installed {
                    connector: previous.info().clone(),
                    written: Written::Updated,
                    tool_changes: Vec::new(),
                };
                return Ok((StateChange::Nothing, Some(unchanged)));
            }
        }
        let changes = match &previous {
            Some(previous) => tool_changes(previous.info(), prepared.info()),
            None => Vec::new(),
        };
        check_pinned(
            &self.config.trust,
            &slug,
            &changes,
            options.accept_tool_changes,
        )?;
        let mut kept = Vec::new();
        let mut broken = Vec::new();
        for b in dir.bindings_of_connector(&slug) {
            match verdicts.get(&b.unit_id) {
                Some((config, verdict)) if *config == b.config => match verdict {
                    Ok(keys) => kept.push(BindingRecord {
                        routing_keys: keys.clone(),
                        ..b.clone()
                    }),
                    Err(why) => broken.push((b.clone(), why.clone())),
                },
                // Bound or re-configured since it was checked: check it first.
                _ => return Ok((StateChange::CheckAgain, None)),
            }
        }
        if !broken.is_empty() && !*force {
            return Err(HostError::new(ErrorCode::RotationBreaksBindings,
                format!(
                    "the new version of `{slug}` rejects the configuration of {} existing binding(s); fix them or install with ?force=true to unbind them",
                    broken.len()
                ),
            )
            .with_details(json!({"bindings": broken.iter().map(|(_, why)| why.clone()).collect::<Vec<_>>()})));
        }
        let record = ConnectorRecord {
            slug: slug.to_string(),
            namespace: prepared.info().tool_namespace.clone(),
            digest: prepared.info().digest.clone(),
            bundled: *bundled,
            installed_at: now_rfc3339(),
            manifest: manifest.clone(),
        };
        let namespace = record.namespace.clone();
        let kept: Vec<(BindingRecord, GrantRecord)> = kept
            .into_iter()
            .map(|b| {
                let unit = Subject::Unit(b.unit_id.clone());
                let grant = binding_grant(dir.grants_of(&unit), &b.unit_id, &slug, &namespace);
                (b, grant)
            })
            .collect();
        let removed: Vec<String> = broken.iter().map(|(b, _)| b.unit_id.clone()).collect();
        let installed = Installed {
            connector: prepared.info().clone(),
            written: Written::from_existing(previous.as_ref()),
            tool_changes: changes,
        };
        // Connector, re-derived grants, dropped and re-keyed bindings: one transaction.
        let change = StateChange::InstallConnector {
            record,
            component: component.clone(),
            prepared: prepared.clone(),
            policy: policy.clone(),
            kept,
            removed,
        };
        Ok((change, Some(installed)))
    }

    /// Removes a connector; while bound it is refused (`409 connector_in_use`) unless
    /// `force`, which unbinds it everywhere first.
    pub(crate) async fn remove(&self, audit: &Audit, slug: &str, force: bool) -> HostResult<()> {
        self.state
            .write(audit, |dir| {
                self.get(slug)?;
                let bound: Vec<String> = dir
                    .bindings_of_connector(slug)
                    .into_iter()
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
}

/// The `<namespace>.*` grant a binding of `slug` on `unit` carries (keeping the creation
/// time of the one it replaces among `held`, the unit's grants).
pub(crate) fn binding_grant(
    held: &[GrantRecord],
    unit: &str,
    slug: &Slug,
    namespace: &str,
) -> GrantRecord {
    let existing = held
        .iter()
        .find(|g| g.provenance.connector() == Some(slug.as_str()))
        .map(|g| g.created_at.clone());
    GrantRecord::of_binding(unit, slug, namespace, existing.unwrap_or_else(now_rfc3339))
}

pub(crate) fn violations_json(v: &[SchemaViolation]) -> Value {
    serde_json::to_value(v).unwrap_or(Value::Null)
}

/// A guest failure as the contract's error (`504 connector_timeout` or `502 connector_trapped`).
pub(crate) fn guest_error(err: GuestError) -> HostError {
    HostError::new(err.code(), err.to_string()).with_source(err)
}

fn install_error(err: InstallError) -> HostError {
    if let InstallError::SlugConflict { other, .. } = &err {
        let details = json!({"rule": err.rule(), "conflictsWith": other});
        return HostError::new(ErrorCode::SlugConflict, err.to_string()).with_details(details);
    }
    let mut details = json!({"rule": err.rule()});
    if let Some(id) = err.offending_id() {
        details["id"] = Value::String(id.to_string());
    }
    HostError::new(ErrorCode::InvalidComponent, err.to_string()).with_details(details)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::grants::Directory;

    #[test]
    fn a_binding_grant_keeps_the_time_of_the_one_it_replaces() {
        let mut dir = Directory::default();
        let acme = Slug::parse("acme").expect("a slug");
        let u = Subject::Unit("u".into());
        let first = binding_grant(dir.grants_of(&u), "u", &acme, "acme");
        assert_eq!(first.tool, "acme.*");
        assert_eq!(
            first.provenance,
            "connector:acme".parse().expect("a provenance")
        );
        let old = GrantRecord {
            created_at: "2020-01-01T00:00:00Z".into(),
            ..first
        };
        dir.put_grant(old);
        let again = binding_grant(dir.grants_of(&u), "u", &acme, "acme2");
        assert_eq!(again.created_at, "2020-01-01T00:00:00Z");
        assert_eq!(again.tool, "acme2.*");
    }
}
