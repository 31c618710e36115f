//! Installed connectors and the rules a component must pass to be installed.
//!
//! Installing is: load the component in the sandbox, ask it to describe itself, check
//! the manifest against the contract's naming rules ([`manifest`]), check it does not
//! claim a slug or namespace another connector owns, and compile the JSON Schemas it
//! declares so every later call is validated without recompiling them. The registry is
//! an in-memory index; persisting what is installed is the store's job.

pub mod manifest;

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use parking_lot::RwLock;
use serde::Serialize;
use serde_json::Value;

use connector_model::connector::{Connector, ToolInfo};
use connector_model::ids::Slug;
use connector_model::tool_output::ToolOutput;
use connector_runtime::{wit, ConnectorRuntime, GuestError, LoadError, LoadLane, LoadedComponent};
use connector_store::StoreError;

pub use manifest::ManifestError;
pub use output::{MalformedBlock, MalformedOutput};

pub mod output;

/// One place where a JSON document breaks its schema.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SchemaViolation {
    /// JSON pointer into the document (`""` is the whole document).
    pub pointer: String,
    /// What is wrong there.
    pub message: String,
}

impl fmt::Display for SchemaViolation {
    /// `<pointer>: <message>`, with `(root)` for the whole document.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let pointer = if self.pointer.is_empty() {
            "(root)"
        } else {
            &self.pointer
        };
        write!(f, "{pointer}: {}", self.message)
    }
}

/// Why a tool's successful output was refused (the connector's mistake, never the
/// caller's). Its [`connector_remote_answer::error_chain`] is the sentence callers get.
#[derive(Debug, thiserror::Error)]
pub enum OutputRefused {
    /// Not well formed: JSON that does not parse, a bad media type or URI, ...
    #[error("a malformed result")]
    Malformed(#[source] MalformedOutput),
    /// The structured result is missing or breaks the tool's output schema.
    #[error(
        "a result that breaks the output schema of `{tool}`:{}",
        list_violations(violations)
    )]
    BreaksSchema {
        /// The tool.
        tool: String,
        /// Each place the result breaks the schema.
        violations: Vec<SchemaViolation>,
    },
}

/// ` a; b; c`: the violations after a colon.
fn list_violations(violations: &[SchemaViolation]) -> String {
    let mut text = String::new();
    for (i, v) in violations.iter().enumerate() {
        text.push_str(if i == 0 { " " } else { "; " });
        text.push_str(&v.to_string());
    }
    text
}

impl OutputRefused {
    /// The contract's error code: `connector_trapped` for a malformed result,
    /// `tool_failed` for one that breaks the output schema.
    pub fn code(&self) -> connector_model::error::ErrorCode {
        match self {
            OutputRefused::Malformed(_) => connector_model::error::ErrorCode::ConnectorTrapped,
            OutputRefused::BreaksSchema { .. } => connector_model::error::ErrorCode::ToolFailed,
        }
    }
}

/// Why a component was not installed.
#[derive(Debug)]
pub enum InstallError {
    /// Not a loadable component of the right world.
    Load(LoadError),
    /// `describe` trapped, timed out or answered too much.
    Describe(GuestError),
    /// The manifest broke a naming rule.
    Manifest(ManifestError),
    /// The slug or namespace is owned by another installed connector.
    Conflict {
        /// The slug or namespace.
        claimed: String,
        /// The installed connector that owns it.
        owner: String,
    },
    /// The slug shares its env spelling or its context prefix with an installed one's.
    SlugConflict {
        /// The new connector's slug.
        slug: String,
        /// The installed connector's slug.
        other: String,
    },
}

impl fmt::Display for InstallError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            InstallError::Load(e) => write!(f, "{e}"),
            InstallError::Describe(e) => write!(f, "describing the component failed: {e}"),
            InstallError::Manifest(e) => write!(f, "{e}"),
            InstallError::Conflict { claimed, owner } => write!(
                f,
                "`{claimed}` is already owned by the installed connector `{owner}`: slugs and namespaces are unique across connectors"
            ),
            InstallError::SlugConflict { slug, other } => write!(
                f,
                "slug `{slug}` conflicts with the installed connector `{other}`: their environment spellings or their runtime-context prefixes (SPRING_CONNECTOR_<SLUG>_) overlap, so one could read or write the other's settings and variables; choose another slug"
            ),
        }
    }
}

/// A slug as environment variable names spell it: upper-cased, `-` written `_`.
pub fn env_spelling(slug: &str) -> String {
    slug.to_ascii_uppercase().replace('-', "_")
}

/// Whether two different slugs conflict (CONTRACT §1): the same env spelling (`a-b`,
/// `a_b`), or one's context prefix `SPRING_CONNECTOR_<SLUG>_` a prefix of the other's
/// (`github`, `github-installation`).
pub fn slugs_conflict(a: &str, b: &str) -> bool {
    let prefix = |slug: &str| format!("{}_", env_spelling(slug));
    let (a, b) = (prefix(a), prefix(b));
    a.starts_with(&b) || b.starts_with(&a)
}

impl std::error::Error for InstallError {}

impl InstallError {
    /// A short machine-readable name of the broken rule.
    pub fn rule(&self) -> &'static str {
        match self {
            InstallError::Load(LoadError::NotAComponent(_)) => "not_a_component",
            InstallError::Load(LoadError::WrongWorld(_)) => "wrong_world",
            InstallError::Load(LoadError::Cache(_)) => "cache",
            InstallError::Load(LoadError::DigestMismatch { .. }) => "digest_mismatch",
            InstallError::Load(LoadError::MalformedDigest(_)) => "malformed_digest",
            InstallError::Describe(_) => "describe_failed",
            InstallError::Manifest(m) => m.rule(),
            InstallError::Conflict { .. } => "name_taken",
            InstallError::SlugConflict { .. } => "slug_conflict",
        }
    }

    /// The id the error is about, when there is one.
    pub fn offending_id(&self) -> Option<&str> {
        match self {
            InstallError::Manifest(m) => Some(m.offending_id()),
            InstallError::Conflict { claimed, .. } => Some(claimed),
            _ => None,
        }
    }
}

/// A connector ready to run: its validated description, its linked component and its
/// compiled schemas.
///
/// A connector prepared here (an install, a start) has its component at once. One that
/// another replica installed is put in place from the description that replica stored
/// ([`InstalledConnector::described`]): its tools are served at once and its component is
/// loaded by a [`ComponentLoader`] on first use (and ahead of it, in the background), so
/// catching up with another replica's install never makes this replica's requests wait for
/// a compilation; only calls into that connector wait for it, within their deadline.
pub struct InstalledConnector {
    info: Connector,
    /// The linked component once loaded; a failure that retrying cannot mend is kept.
    component: tokio::sync::OnceCell<Result<LoadedComponent, LoadFailure>>,
    loader: Option<ComponentLoader>,
    tool_schemas: HashMap<String, jsonschema::Validator>,
    output_schemas: HashMap<String, jsonschema::Validator>,
    config_schema: jsonschema::Validator,
    sorted_tools: Vec<usize>,
}

impl fmt::Debug for InstalledConnector {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("InstalledConnector")
            .field("slug", &self.info.slug)
            .field("digest", &self.info.digest)
            .finish()
    }
}

/// Most violations reported for one document.
const MAX_VIOLATIONS: usize = 50;
/// Longest violation message kept: a message quotes the offending value, which may be
/// megabytes (a guest's whole result), and one value can break several keywords.
const MAX_VIOLATION_CHARS: usize = 300;

fn violations(
    validator: &jsonschema::Validator,
    value: &Value,
) -> Result<(), Vec<SchemaViolation>> {
    let found: Vec<SchemaViolation> = validator
        .iter_errors(value)
        .take(MAX_VIOLATIONS)
        .map(|e| SchemaViolation {
            pointer: connector_model::ids::truncate(
                &e.instance_path.to_string(),
                MAX_VIOLATION_CHARS,
            ),
            message: connector_model::ids::truncate(&e.to_string(), MAX_VIOLATION_CHARS),
        })
        .collect();
    if found.is_empty() {
        Ok(())
    } else {
        Err(found)
    }
}

fn compile(owner: &str, schema: &Value) -> Result<jsonschema::Validator, ManifestError> {
    jsonschema::validator_for(schema).map_err(|e| ManifestError::InvalidSchema {
        owner: owner.to_string(),
        reason: e.to_string(),
    })
}

/// Loads the component of a connector known by its stored description (see
/// [`InstalledConnector::described`]), its blocking work on the lane given.
pub type ComponentLoader = Arc<
    dyn Fn(
            LoadLane,
        ) -> std::pin::Pin<
            Box<dyn std::future::Future<Output = Result<LoadedComponent, LoadFailure>> + Send>,
        > + Send
        + Sync,
>;

/// Why a component could not be loaded (by a [`ComponentLoader`], or checked against the
/// description it was loaded for).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LoadFailure {
    /// The bytes are not a component this host runs (kept: retrying cannot help).
    #[error(transparent)]
    Load(#[from] LoadError),
    /// The database did not answer (passing).
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The host is shutting down (passing).
    #[error("the host is shutting down")]
    ShuttingDown,
    /// The stored bytes are gone (kept).
    #[error("its component ({digest}) is no longer stored")]
    NoLongerStored {
        /// The digest the description names.
        digest: String,
    },
    /// The loaded component is not the one the description names (kept).
    #[error("the loaded component is {loaded}, the description names {described}")]
    OtherDigest {
        /// The digest of what was loaded.
        loaded: String,
        /// The digest of the description.
        described: String,
    },
    /// The loaded component implements another world than the description says (kept).
    #[error("the component implements {loaded}, its description says {described}")]
    OtherWorld {
        /// The world of what was loaded.
        loaded: String,
        /// The world of the description.
        described: String,
    },
    /// The connector has neither a component nor a loader (kept).
    #[error("no way to load it is known")]
    NoLoader,
}

impl LoadFailure {
    /// Whether trying again cannot help (damaged bytes, a component this host cannot run)
    /// rather than a passing failure (the database did not answer).
    pub fn is_lasting(&self) -> bool {
        !matches!(self, LoadFailure::Store(_) | LoadFailure::ShuttingDown)
    }
}

impl InstalledConnector {
    /// Assembles a connector from an already validated description and its component,
    /// compiling the schemas it declares.
    pub fn from_parts(info: Connector, component: LoadedComponent) -> Result<Self, ManifestError> {
        Self::assemble(
            info,
            tokio::sync::OnceCell::new_with(Some(Ok(component))),
            None,
        )
    }

    /// A connector from the description its installing host stored (validated there, from
    /// the component itself), whose component `loader` loads on first use. The
    /// description's tools are served at once.
    pub fn described(info: Connector, loader: ComponentLoader) -> Result<Self, ManifestError> {
        Self::assemble(info, tokio::sync::OnceCell::new(), Some(loader))
    }

    fn assemble(
        info: Connector,
        component: tokio::sync::OnceCell<Result<LoadedComponent, LoadFailure>>,
        loader: Option<ComponentLoader>,
    ) -> Result<Self, ManifestError> {
        let mut tool_schemas = HashMap::with_capacity(info.tools.len());
        let mut output_schemas = HashMap::new();
        for tool in &info.tools {
            tool_schemas.insert(tool.name.clone(), compile(&tool.name, &tool.input_schema)?);
            if let Some(schema) = &tool.output_schema {
                output_schemas.insert(tool.name.clone(), compile(&tool.name, schema)?);
            }
        }
        let config_schema = compile("configSchema", &info.config_schema)?;
        let mut sorted_tools: Vec<usize> = (0..info.tools.len()).collect();
        sorted_tools.sort_by(|&a, &b| info.tools[a].name.cmp(&info.tools[b].name));
        Ok(InstalledConnector {
            sorted_tools,
            info,
            component,
            loader,
            tool_schemas,
            output_schemas,
            config_schema,
        })
    }

    /// Records where the component came from and who signed it (see
    /// [`Connector::source`]).
    pub fn set_provenance(&mut self, source: String, signed_by: Option<String>) {
        self.info.source = source;
        self.info.signed_by = signed_by;
    }

    /// The contract's `Connector` object.
    pub fn info(&self) -> &Connector {
        &self.info
    }

    /// The slug.
    pub fn slug(&self) -> &str {
        &self.info.slug
    }

    /// The linked component, loading it first if it is not yet (waiting at most
    /// `within`: a call's deadline). Fails when it cannot be loaded on this host, or
    /// is still being loaded after `within`. A load ahead of first use that is under way
    /// is waited for; one only queued is not (see [`load_ahead`](Self::load_ahead)).
    pub async fn component(&self, within: Duration) -> Result<&LoadedComponent, GuestError> {
        self.component_on(LoadLane::Waited, within).await
    }

    /// Loads the component ahead of its first use, if it is not loaded yet, on the
    /// runtime's thread for such loads ([`LoadLane::Ahead`]): after the loads queued
    /// before, at a lower priority than the threads serving requests. A failure is logged
    /// by the loader, once; each call tries again and says why. Load many connectors ahead
    /// one after the other: a call into one whose load is queued but not started loads it
    /// itself, while one started is waited for.
    pub async fn load_ahead(&self, within: Duration) {
        let _ = self.component_on(LoadLane::Ahead, within).await;
    }

    async fn component_on(
        &self,
        lane: LoadLane,
        within: Duration,
    ) -> Result<&LoadedComponent, GuestError> {
        let loaded = match self.component.get() {
            Some(loaded) => loaded,
            None => {
                let init = self.component.get_or_try_init(|| self.load(lane));
                match tokio::time::timeout(within, init).await {
                    Ok(Ok(loaded)) => loaded,
                    Ok(Err(passing)) => {
                        return Err(GuestError::Instantiate {
                            message: format!(
                                "the component of `{}` could not be loaded on this host ({passing}); retry shortly",
                                self.info.slug
                            ),
                        })
                    }
                    Err(_) => {
                        return Err(GuestError::HostBusy {
                            message: format!(
                                "the component of `{}` is still being compiled on this host; retry shortly",
                                self.info.slug
                            ),
                        })
                    }
                }
            }
        };
        loaded.as_ref().map_err(|lasting| GuestError::Instantiate {
            message: format!(
                "the component of `{}` cannot be loaded on this host: {lasting}",
                self.info.slug
            ),
        })
    }

    /// The linked component if it is loaded (always, for a connector prepared here).
    pub fn loaded(&self) -> Option<&LoadedComponent> {
        self.component.get().and_then(|loaded| loaded.as_ref().ok())
    }

    /// Whether the component is loaded (or known not to load).
    pub fn is_loaded(&self) -> bool {
        self.component.initialized()
    }

    /// Runs the loader: `Ok(Err)` for a lasting failure (kept), `Err` for a passing one.
    async fn load(
        &self,
        lane: LoadLane,
    ) -> Result<Result<LoadedComponent, LoadFailure>, LoadFailure> {
        let Some(loader) = &self.loader else {
            return Ok(Err(LoadFailure::NoLoader));
        };
        match loader(lane).await {
            Ok(component) if component.digest() != self.info.digest => {
                Ok(Err(LoadFailure::OtherDigest {
                    loaded: component.digest().to_string(),
                    described: self.info.digest.clone(),
                }))
            }
            Ok(component) if component.world() != self.info.world => {
                Ok(Err(LoadFailure::OtherWorld {
                    loaded: component.world().to_string(),
                    described: self.info.world.clone(),
                }))
            }
            Ok(component) => Ok(Ok(component)),
            Err(failure) if failure.is_lasting() => {
                tracing::error!(slug = %self.info.slug, digest = %self.info.digest, error = %failure, "a stored connector does not load on this host; its calls fail");
                Ok(Err(failure))
            }
            Err(failure) => Err(failure),
        }
    }

    /// Indices into `info().tools`, sorted by tool id.
    pub fn sorted_tool_indices(&self) -> &[usize] {
        &self.sorted_tools
    }

    /// A tool by canonical id.
    pub fn tool(&self, id: &str) -> Option<&ToolInfo> {
        self.info.tools.iter().find(|t| t.name == id)
    }

    /// Checks `arguments` against the tool's input schema.
    pub fn check_arguments(
        &self,
        tool: &str,
        arguments: &Value,
    ) -> Result<(), Vec<SchemaViolation>> {
        match self.tool_schemas.get(tool) {
            Some(v) => violations(v, arguments),
            None => Err(vec![SchemaViolation {
                pointer: String::new(),
                message: format!("`{tool}` is not a tool of connector `{}`", self.info.slug),
            }]),
        }
    }

    /// Checks and converts what a guest returned from `tool`: a well-formed output
    /// ([`ToolOutput::from_guest`]) whose structured result fits the tool's output schema,
    /// if it declares one (a declared schema makes a structured result mandatory).
    pub fn tool_output(
        &self,
        tool: &str,
        output: wit::ToolOutput,
    ) -> Result<ToolOutput, OutputRefused> {
        let output = output::from_guest(output).map_err(OutputRefused::Malformed)?;
        let Some(validator) = self.output_schemas.get(tool) else {
            return Ok(output);
        };
        let checked = match &output.structured {
            Some(value) => violations(validator, value),
            None => Err(vec![SchemaViolation {
                pointer: String::new(),
                message: "no structured result, but the tool declares an output schema".into(),
            }]),
        };
        match checked {
            Ok(()) => Ok(output),
            Err(violations) => Err(OutputRefused::BreaksSchema {
                tool: tool.to_string(),
                violations,
            }),
        }
    }

    /// Checks a binding configuration against the config schema.
    pub fn check_config(&self, config: &Value) -> Result<(), Vec<SchemaViolation>> {
        violations(&self.config_schema, config)
    }
}

/// The connectors installed in one host, by slug.
pub struct ConnectorRegistry {
    runtime: Arc<ConnectorRuntime>,
    /// Replaced as a whole by every change, so a reader sees every connector of one
    /// moment, by slug and by namespace alike.
    installed: RwLock<Arc<Installed>>,
}

/// The installed connectors of one moment.
#[derive(Default)]
struct Installed {
    by_slug: BTreeMap<Slug, Arc<InstalledConnector>>,
    by_namespace: Arc<BTreeMap<String, Arc<InstalledConnector>>>,
}

impl Installed {
    fn of(by_slug: BTreeMap<Slug, Arc<InstalledConnector>>) -> Arc<Self> {
        let by_namespace = by_slug
            .values()
            .map(|c| (c.info.tool_namespace.clone(), c.clone()))
            .collect();
        Arc::new(Installed {
            by_slug,
            by_namespace: Arc::new(by_namespace),
        })
    }
}

impl ConnectorRegistry {
    /// An empty registry running components in `runtime`.
    pub fn new(runtime: Arc<ConnectorRuntime>) -> Self {
        Self {
            runtime,
            installed: RwLock::new(Arc::default()),
        }
    }

    /// The runtime components run in.
    pub fn runtime(&self) -> &Arc<ConnectorRuntime> {
        &self.runtime
    }

    /// Loads, describes and validates a component without installing it (what
    /// `connector-host inspect` shows). Clashes with installed connectors are not checked.
    /// Compiling happens off the async threads (see [`ConnectorRuntime::load_off_thread`]).
    pub async fn prepare(&self, bytes: &[u8]) -> Result<InstalledConnector, InstallError> {
        let component = self
            .runtime
            .load_off_thread(Arc::from(bytes), None, LoadLane::Waited)
            .await
            .map_err(InstallError::Load)?;
        self.describe(component).await
    }

    /// [`prepare`](Self::prepare) for bytes whose `sha256:<hex>` digest is already known
    /// from the host's own records: a stored or bundled connector. Never for a digest
    /// that came with the bytes (see [`ConnectorRuntime::load_known`]).
    pub async fn prepare_known(
        &self,
        bytes: Arc<[u8]>,
        digest: &str,
    ) -> Result<InstalledConnector, InstallError> {
        let component = self
            .runtime
            .load_off_thread(bytes, Some(digest), LoadLane::Waited)
            .await
            .map_err(InstallError::Load)?;
        self.describe(component).await
    }

    /// [`prepare_known`](Self::prepare_known) from the compiled-component cache alone:
    /// `None` when the digest's code is not cached (then its bytes are needed).
    pub async fn prepare_cached(
        &self,
        digest: &str,
    ) -> Option<Result<InstalledConnector, InstallError>> {
        Some(
            match self.runtime.load_cached(digest, LoadLane::Waited).await? {
                Ok(component) => self.describe(component).await,
                Err(e) => Err(InstallError::Load(e)),
            },
        )
    }

    /// Asks a loaded component to describe itself and validates what it says.
    async fn describe(
        &self,
        component: LoadedComponent,
    ) -> Result<InstalledConnector, InstallError> {
        let manifest = self
            .runtime
            .describe(&component)
            .await
            .map_err(InstallError::Describe)?;
        let mut info =
            manifest::validate(manifest, component.digest()).map_err(InstallError::Manifest)?;
        info.world = component.world().to_string();
        InstalledConnector::from_parts(info, component).map_err(InstallError::Manifest)
    }

    /// Refuses `candidate` if it claims a slug or namespace another connector owns.
    /// Returns the connector it would replace (same slug: a rotation), if any.
    pub fn check_conflicts(
        &self,
        candidate: &Connector,
    ) -> Result<Option<Arc<InstalledConnector>>, InstallError> {
        let installed = self.snapshot();
        for other in installed.by_slug.values() {
            if other.info.slug == candidate.slug {
                continue;
            }
            if slugs_conflict(&candidate.slug, &other.info.slug) {
                return Err(InstallError::SlugConflict {
                    slug: candidate.slug.to_string(),
                    other: other.info.slug.to_string(),
                });
            }
            let owned = [other.info.slug.as_str(), &other.info.tool_namespace];
            for claimed in [candidate.slug.as_str(), &candidate.tool_namespace] {
                if owned.contains(&claimed) {
                    return Err(InstallError::Conflict {
                        claimed: claimed.to_string(),
                        owner: other.info.slug.to_string(),
                    });
                }
            }
        }
        Ok(installed.by_slug.get(candidate.slug.as_str()).cloned())
    }

    fn snapshot(&self) -> Arc<Installed> {
        self.installed.read().clone()
    }

    /// Applies `change` to the installed set, as one step for readers.
    fn change<T>(
        &self,
        change: impl FnOnce(&mut BTreeMap<Slug, Arc<InstalledConnector>>) -> T,
    ) -> T {
        let mut installed = self.installed.write();
        let mut by_slug = installed.by_slug.clone();
        let out = change(&mut by_slug);
        *installed = Installed::of(by_slug);
        out
    }

    /// Puts a prepared connector in place (replacing one with the same slug) and returns
    /// the one it replaced.
    pub fn insert(
        &self,
        connector: Arc<InstalledConnector>,
    ) -> (Arc<InstalledConnector>, Option<Arc<InstalledConnector>>) {
        let previous =
            self.change(|by_slug| by_slug.insert(connector.info.slug.clone(), connector.clone()));
        (connector, previous)
    }

    /// Replaces every installed connector with `connectors` at once.
    pub fn replace_all(&self, connectors: impl IntoIterator<Item = Arc<InstalledConnector>>) {
        let by_slug = connectors
            .into_iter()
            .map(|c| (c.info.slug.clone(), c))
            .collect();
        *self.installed.write() = Installed::of(by_slug);
    }

    /// Prepares, checks and inserts in one step.
    pub async fn install(
        &self,
        bytes: &[u8],
    ) -> Result<(Arc<InstalledConnector>, Option<Arc<InstalledConnector>>), InstallError> {
        let prepared = self.prepare(bytes).await?;
        self.check_conflicts(&prepared.info)?;
        Ok(self.insert(Arc::new(prepared)))
    }

    /// An installed connector.
    pub fn get(&self, slug: &str) -> Option<Arc<InstalledConnector>> {
        self.installed.read().by_slug.get(slug).cloned()
    }

    /// The connector owning tool namespace `namespace`.
    pub fn by_namespace(&self, namespace: &str) -> Option<Arc<InstalledConnector>> {
        self.installed.read().by_namespace.get(namespace).cloned()
    }

    /// Every installed connector keyed by tool namespace (a cheap shared snapshot).
    pub fn namespaces(&self) -> Arc<BTreeMap<String, Arc<InstalledConnector>>> {
        self.installed.read().by_namespace.clone()
    }

    /// All installed connectors, sorted by slug.
    pub fn list(&self) -> Vec<Arc<InstalledConnector>> {
        self.snapshot().by_slug.values().cloned().collect()
    }

    /// Removes a connector; returns it if it was installed.
    pub fn remove(&self, slug: &str) -> Option<Arc<InstalledConnector>> {
        self.change(|by_slug| by_slug.remove(slug))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn violations_quote_at_most_a_bounded_part_of_the_value() {
        let schema = serde_json::json!({"type": "object", "minProperties": 2, "required": ["a"]});
        let validator = jsonschema::validator_for(&schema).unwrap();
        let huge = serde_json::json!({"b": "x".repeat(1 << 20)});
        let found = violations(&validator, &huge).unwrap_err();
        assert_eq!(found.len(), 2, "{found:?}");
        for v in &found {
            assert!(
                v.message.chars().count() <= MAX_VIOLATION_CHARS + 1,
                "{}",
                v.message.len()
            );
        }
    }

    #[test]
    fn slugs_conflict_by_env_spelling_or_context_prefix() {
        for (a, b) in [
            ("a-b", "a_b"),
            ("github", "github-installation"),
            ("github", "github_app"),
            ("my-conn", "my_conn_x"),
        ] {
            assert!(slugs_conflict(a, b), "{a} / {b}");
            assert!(slugs_conflict(b, a), "{b} / {a}");
        }
        for (a, b) in [("github", "git-hub"), ("acme", "acmex"), ("arxiv", "acme")] {
            assert!(!slugs_conflict(a, b), "{a} / {b}");
        }
    }
}
