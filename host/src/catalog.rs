//! The connector catalog: installing, rotating and removing connectors, and building the
//! sandbox every guest call runs in.
//!
//! Policy is decided here from operator data only: a connector's outbound hosts are what
//! its manifest declares narrowed by the operator's settings of its slug, its secrets are
//! the operator's secrets its binding names, and the GitHub App installations it may mint
//! tokens for are the ones its binding's routing keys name. Nothing a guest returns at
//! call time widens a sandbox.

use std::sync::Arc;

use serde_json::{json, Value};

use crate::capabilities::Capabilities;
use crate::config::HostConfig;
use crate::error::{ErrorCode, HostError, HostResult};
use crate::grants::{connector_provenance, Directory};
use crate::ids::{now_rfc3339, truncate};
use crate::registry::{Connector, InstallError, InstalledConnector, SchemaViolation};
use crate::runtime::{ConnectorRuntime, GuestError, OutboundPolicy, Sandbox};
use crate::state::{State, StateChange};
use crate::store::{BindingRecord, ConnectorRecord, GrantRecord, Snapshot, Subject};

/// Whether a write created something or replaced it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Written {
    Created,
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

/// The result of installing a component.
#[derive(Debug, Clone)]
pub struct Installed {
    pub connector: Connector,
    pub written: Written,
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
        Capabilities::new(info, self.config.settings_of(&info.slug))
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

    /// Checks a binding's config against connector `slug` (its schema, then its own
    /// `bind`) and returns the routing keys `bind` gave.
    pub(crate) async fn check_binding(
        &self,
        slug: &str,
        config: &Value,
    ) -> HostResult<Vec<String>> {
        let connector = self.get(slug)?;
        if let Err(v) = connector.check_config(config) {
            return Err(HostError::new(
                ErrorCode::InvalidConfig,
                format!("the configuration does not match the configSchema of `{slug}`"),
            )
            .with_details(json!({"violations": violations_json(&v)})));
        }
        let sandbox = self.sandbox(slug, None);
        let keys = match self
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
        // Decided from the operator's config, not from the keys the guest returned.
        let names_installation =
            !crate::capabilities::installation_ids(&connector.info().config_schema, config)
                .is_empty();
        if self.config.github_app.is_none() && names_installation {
            return Err(HostError::new(ErrorCode::GithubAppNotConfigured,
                "this binding names a GitHub App installation, but no GitHub App is configured on this host (set github_app.app_id and github_app.private_key_path, or use patSecret)",
            ));
        }
        Ok(keys)
    }

    /// Makes the installed connectors what `snapshot` stores: connectors whose digest
    /// changed are prepared (a compiled one comes from the cache), removed ones dropped.
    /// Used at start-up (nothing installed yet) and on every reload.
    pub(crate) async fn adopt(&self, snapshot: &Snapshot) {
        let registry = self.state.registry();
        for record in &snapshot.connectors {
            let current = registry.get(&record.slug);
            if current.is_some_and(|c| c.info().digest == record.digest) {
                continue;
            }
            match registry
                .prepare_known(&record.component, &record.digest)
                .await
            {
                Ok(prepared) => {
                    let policy = self.policy_of(prepared.info());
                    self.state.install_stored(prepared, policy);
                }
                Err(e) => {
                    tracing::error!(slug = %record.slug, error = %e, "a stored connector does not load on this host; it stays stored but is not available here")
                }
            }
        }
        for installed in registry.list() {
            if !snapshot
                .connectors
                .iter()
                .any(|c| c.slug == installed.slug())
            {
                self.state.forget_stored(installed.slug());
            }
        }
    }

    /// Installs a component (a new slug) or rotates an installed one (same slug, new
    /// digest). A rotation keeps bindings, re-checks each binding's config against the new
    /// connector and refuses with `409 rotation_breaks_bindings` if any fails, unless
    /// `force` (then the failing bindings are unbound).
    ///
    /// `bundled` is the digest of a connector bundled into the host (known from the
    /// build, so its bytes are not hashed again); `None` for an operator's component.
    pub(crate) async fn install(
        &self,
        bytes: &[u8],
        bundled: Option<&str>,
        force: bool,
    ) -> HostResult<Installed> {
        let registry = self.state.registry();
        let prepared = match bundled {
            Some(digest) => registry.prepare_known(bytes, digest).await,
            None => registry.prepare(bytes).await,
        }
        .map_err(install_error)?;
        let bundled = bundled.is_some();
        self.state
            .write(|| self.plan_install(prepared, bytes, bundled, force))
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
                };
                return Ok((StateChange::Nothing, unchanged));
            }
        }
        // Re-validate every binding of this slug against the new connector.
        let bindings: Vec<BindingRecord> = self
            .state
            .directory()
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
                    let sandbox = self
                        .capabilities(prepared.info())
                        .sandbox(Some(&b), policy.clone());
                    match self
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
            let dir = self.state.directory();
            kept.into_iter()
                .map(|b| {
                    let grant = binding_grant(&dir, &b.unit_id, &slug, &namespace);
                    (b, grant)
                })
                .collect()
        };
        let removed: Vec<String> = broken.iter().map(|(b, _)| b.unit_id.clone()).collect();
        let installed = Installed {
            connector: prepared.info().clone(),
            written: Written::from_existing(previous.as_ref()),
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

    /// Removes a connector; while bound it is refused (`409 connector_in_use`) unless
    /// `force`, which unbinds it everywhere first.
    pub(crate) async fn remove(&self, slug: &str, force: bool) -> HostResult<()> {
        self.state
            .write(|| async {
                self.get(slug)?;
                let bound: Vec<String> = self
                    .state
                    .directory()
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
}

/// The `<namespace>.*` grant a binding of `slug` on `unit` carries (keeping the creation
/// time of the one it replaces).
pub(crate) fn binding_grant(
    dir: &Directory,
    unit: &str,
    slug: &str,
    namespace: &str,
) -> GrantRecord {
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

pub(crate) fn violations_json(v: &[SchemaViolation]) -> Value {
    serde_json::to_value(v).unwrap_or(Value::Null)
}

/// A guest failure as the contract's error (`504 connector_timeout` or `502 connector_trapped`).
pub(crate) fn guest_error(err: GuestError) -> HostError {
    HostError::new(err.code(), err.to_string())
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

    #[test]
    fn a_binding_grant_keeps_the_time_of_the_one_it_replaces() {
        let mut dir = Directory::default();
        let first = binding_grant(&dir, "u", "acme", "acme");
        assert_eq!(first.tool, "acme.*");
        assert_eq!(first.provenance, "connector:acme");
        let old = GrantRecord {
            created_at: "2020-01-01T00:00:00Z".into(),
            ..first
        };
        dir.put_grant(old);
        let again = binding_grant(&dir, "u", "acme", "acme2");
        assert_eq!(again.created_at, "2020-01-01T00:00:00Z");
        assert_eq!(again.tool, "acme2.*");
    }
}
