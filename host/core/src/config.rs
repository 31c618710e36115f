//! The host's configuration: `connector-host serve` flags, `CONNECTOR_HOST_*` environment
//! variables, a TOML file and defaults, in that order of precedence (CONTRACT.md §2).

use std::collections::BTreeMap;
use std::fmt;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;

use crate::registry::env_spelling;
use connector_model::bundled::BundledComponent;
use connector_runtime::GuestLimits;

/// Settings of one connector (`[connectors.<slug>]`). Its `Debug` masks every secret.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct ConnectorSettings {
    /// Accepted webhook secrets, newest first.
    pub webhook_secrets: Vec<String>,
    /// Outbound hosts the operator allows (`None`: whatever the component declares).
    pub allowed_hosts: Option<Vec<String>>,
    /// Whether the connector may reach private, loopback and link-local addresses.
    pub allow_private_networks: bool,
    /// Named secrets (for example personal access tokens) bindings may refer to.
    pub secrets: BTreeMap<String, String>,
    /// Whether the connector may ask for GitHub App installation tokens (`None`: the
    /// default, which is yes for the bundled `github` connector only).
    pub github_app: Option<bool>,
    /// This connector's guest memory bound in MiB instead of `limits.memory_mib` (an
    /// interpreter may need more); the total budget still applies.
    pub memory_mib: Option<u64>,
}

/// The GitHub App the host mints installation tokens for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GithubAppSettings {
    /// App id or Client ID, used as the JWT `iss`.
    pub app_id: String,
    /// Path of the App's PEM private key.
    pub private_key_path: PathBuf,
    /// GitHub REST base URL.
    pub api_url: String,
}

/// Everything `connector-host serve` (or an embedding platform) configures. Its `Debug`
/// masks the operator token and every connector secret.
#[derive(Clone, PartialEq)]
pub struct HostConfig {
    /// Where `serve` listens.
    pub listen: SocketAddr,
    /// Where the host keeps its database, caches and generated secrets.
    pub data_dir: PathBuf,
    /// `sqlite://<path>` (default `sqlite://<data_dir>/host.db`) or `postgres://…` (replicas).
    pub database_url: Option<String>,
    /// Components installed at start (`*.wasm`), if any.
    pub connectors_dir: Option<PathBuf>,
    /// `None`: generated on first start into `<data_dir>/operator-token`.
    pub operator_token: Option<String>,
    /// Bounds of every guest call.
    pub limits: GuestLimits,
    /// Largest webhook body accepted.
    pub max_webhook_bytes: usize,
    /// Per-connector settings (`connectors.<slug>`).
    pub connectors: BTreeMap<String, ConnectorSettings>,
    /// Webhook secrets given only as `CONNECTOR_HOST_<SLUG>_WEBHOOK_SECRET` for a slug the
    /// file does not configure, by `<SLUG>` (the environment cannot tell `-` from `_`).
    pub env_webhook_secrets: BTreeMap<String, String>,
    /// The GitHub App whose installation tokens guests may ask for.
    pub github_app: Option<GithubAppSettings>,
    /// `Host` header names the server answers (`server.allowed_host_names`); `None`: the
    /// listen address, `localhost`, `127.0.0.1` and `[::1]`. A `*` entry allows any.
    pub allowed_host_names: Option<Vec<String>>,
    /// How long the server waits for a client, and how many it serves at once.
    pub server: ServerLimits,
    /// Browser origins (`https://app.example.com`) allowed to call the MCP endpoint
    /// (`server.cors_origins`); `*` allows any. Empty: none, only same-origin pages.
    pub cors_origins: Vec<String>,
    /// Connectors shipped with the program that runs the host, installed at every start
    /// (the `connector-host` binary passes `connector_bundled::components()`; a file or
    /// the environment never sets them). Empty by default: an embedder ships its own or
    /// none.
    pub bundled: Vec<BundledComponent>,
    /// Signatures and pinned tool definitions (`trust.*`, CONTRACT.md §10).
    pub trust: TrustSettings,
    /// OCI registries by `host[:port]` as references name them (`registries.*`).
    pub registries: BTreeMap<String, RegistrySettings>,
    /// The audit log (`audit.*`, CONTRACT.md §9).
    pub audit: AuditSettings,
}

/// `audit.*`: how long records are kept, and whether tool calls keep their arguments.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AuditSettings {
    /// Records older than this many days are pruned (`audit.retention_days`).
    pub retention_days: u32,
    /// Tool-call records also keep the call's arguments (`audit.record_arguments`).
    pub record_arguments: bool,
}

impl Default for AuditSettings {
    fn default() -> Self {
        AuditSettings {
            retention_days: 90,
            record_arguments: false,
        }
    }
}

/// `trust.*`: whose signatures count, and what a rotation may change.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TrustSettings {
    /// PEM public keys (cosign format) whose signatures the host accepts.
    pub keys: Vec<PathBuf>,
    /// Every component but the bundled ones must carry a valid signature.
    pub require_signatures: bool,
    /// A rotation that changes a tool's definition needs `acceptToolChanges`.
    pub pin_tool_definitions: bool,
}

/// `registries.<host>`: how to reach one OCI registry. Holds the name of the variable
/// with the password, never the password.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RegistrySettings {
    /// The user name sent to the registry (`None`: anonymous).
    pub username: Option<String>,
    /// The environment variable holding the password.
    pub password_env: Option<String>,
    /// Plain HTTP is allowed (a loopback registry is reached over HTTP anyway).
    pub insecure: bool,
}

/// The HTTP server's bounds on its clients (`server.*`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ServerLimits {
    /// A request whose headers are not complete this long after the connection opened
    /// (or after the previous response) is dropped; a request body that stops arriving
    /// for this long is answered `408`.
    pub header_timeout: Duration,
    /// A keep-alive connection with no request for this long is closed.
    pub idle_timeout: Duration,
    /// Connections served at once; at it, the least recently active idle connection is
    /// closed to make room for a new one (or, when none is idle, the new one is answered
    /// `503` and closed).
    pub max_connections: usize,
    /// Connections one remote address may hold (`None`: a sixteenth of the connections
    /// served at once, at least 1); past it, its own least recently active idle connection
    /// is closed to make room (or, when none is idle, the new one is answered `503`).
    pub max_connections_per_peer: Option<usize>,
}

impl ServerLimits {
    /// Connections one remote address may hold when `cap` connections are served at once.
    pub fn per_peer(&self, cap: usize) -> usize {
        self.max_connections_per_peer
            .unwrap_or(cap / 16)
            .clamp(1, cap.max(1))
    }
}

impl Default for ServerLimits {
    fn default() -> Self {
        Self {
            header_timeout: Duration::from_millis(10_000),
            idle_timeout: Duration::from_millis(60_000),
            max_connections: 4096,
            max_connections_per_peer: None,
        }
    }
}

impl Default for HostConfig {
    fn default() -> Self {
        Self {
            listen: SocketAddr::from(([127, 0, 0, 1], 8787)),
            data_dir: PathBuf::from("./data"),
            database_url: None,
            connectors_dir: None,
            operator_token: None,
            limits: GuestLimits::default(),
            max_webhook_bytes: 25 * 1024 * 1024,
            connectors: BTreeMap::new(),
            env_webhook_secrets: BTreeMap::new(),
            github_app: None,
            allowed_host_names: None,
            server: ServerLimits::default(),
            cors_origins: Vec::new(),
            trust: TrustSettings::default(),
            registries: BTreeMap::new(),
            bundled: Vec::new(),
            audit: AuditSettings::default(),
        }
    }
}

impl HostConfig {
    /// Whether `digest` is the build of `slug` the program ships ([`HostConfig::bundled`]),
    /// not an operator's own.
    pub fn ships(&self, slug: &str, digest: &str) -> bool {
        self.bundled
            .iter()
            .any(|c| c.name == slug && c.digest == digest)
    }

    /// The database URL in force.
    /// Whether the server answers a request whose `Host` header is `host` (port and case
    /// ignored): the DNS-rebinding defence of `server.allowed_host_names`.
    pub fn allows_host_name(&self, host: &str) -> bool {
        let name = host_name_of(host);
        match &self.allowed_host_names {
            Some(names) => names
                .iter()
                .any(|n| n == "*" || host_name_of(n).eq_ignore_ascii_case(name)),
            None => {
                ["localhost", "127.0.0.1", "[::1]"]
                    .iter()
                    .any(|n| n.eq_ignore_ascii_case(name))
                    || name
                        .trim_start_matches('[')
                        .trim_end_matches(']')
                        .parse::<std::net::IpAddr>()
                        .is_ok_and(|ip| ip == self.listen.ip())
            }
        }
    }

    /// The database URL in force.
    pub fn database_url(&self) -> String {
        self.database_url
            .clone()
            .unwrap_or_else(|| format!("sqlite://{}", self.data_dir.join("host.db").display()))
    }

    /// The operator's `[connectors.<slug>]` entry of exactly `slug` (empty when there is
    /// none), borrowed: what a connector may do is read from it on every call.
    pub fn settings_of(&self, slug: &str) -> &ConnectorSettings {
        const NONE: &ConnectorSettings = &ConnectorSettings {
            webhook_secrets: Vec::new(),
            allowed_hosts: None,
            allow_private_networks: false,
            secrets: BTreeMap::new(),
            github_app: None,
            memory_mib: None,
        };
        self.connectors.get(slug).unwrap_or(NONE)
    }

    /// The settings of exactly connector `slug` (defaults when none are configured):
    /// never those of another slug, however alike their spellings.
    ///
    /// The one exception is a webhook secret given only through
    /// `CONNECTOR_HOST_<SLUG>_WEBHOOK_SECRET` for a slug the file does not configure: the
    /// environment cannot tell `-` from `_`, so it serves the slug spelt either way (two
    /// installed slugs never share a spelling: such an install is a `slug_conflict`).
    pub fn connector(&self, slug: &str) -> ConnectorSettings {
        if let Some(found) = self.connectors.get(slug) {
            return found.clone();
        }
        let mut settings = ConnectorSettings::default();
        if let Some(secret) = self.env_webhook_secrets.get(&env_spelling(slug)) {
            settings.webhook_secrets.push(secret.clone());
        }
        settings
    }
}

/// Checks every `connectors.<slug>.memory_mib`: at least 1, at most the total budget.
fn connector_memory(config: &HostConfig) -> Result<(), ConfigError> {
    let total_mib = config.limits.total_memory_bytes as u64 / MIB;
    for (slug, settings) in &config.connectors {
        if let Some(mib) = settings.memory_mib {
            if mib == 0 || mib > total_mib {
                return Err(invalid(
                    format!("connectors.{slug}.memory_mib"),
                    format!("between 1 and limits.guest_memory_total_mib ({total_mib} MiB)"),
                    Some(&mib.to_string()),
                ));
            }
        }
    }
    Ok(())
}

impl HostConfig {
    /// The runtime's limits: `limits`, with instance slots sized for the largest
    /// `connectors.<slug>.memory_mib` (capped at the total budget).
    pub fn runtime_limits(&self) -> connector_runtime::GuestLimits {
        let largest = self
            .connectors
            .values()
            .filter_map(|s| s.memory_mib)
            .map(|mib| (mib.saturating_mul(MIB) as usize).min(self.limits.total_memory_bytes))
            .max()
            .unwrap_or(0);
        connector_runtime::GuestLimits {
            largest_connector_memory_bytes: largest,
            ..self.limits
        }
    }
}

// ---------------------------------------------------------------------------------------
// Debug without secrets
// ---------------------------------------------------------------------------------------

/// Stands in for a secret in `Debug` output.
struct Masked;

impl fmt::Debug for Masked {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("\"***\"")
    }
}

impl fmt::Debug for ConnectorSettings {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let webhook_secrets: Vec<Masked> = self.webhook_secrets.iter().map(|_| Masked).collect();
        let secrets: BTreeMap<&str, Masked> =
            self.secrets.keys().map(|k| (k.as_str(), Masked)).collect();
        f.debug_struct("ConnectorSettings")
            .field("webhook_secrets", &webhook_secrets)
            .field("allowed_hosts", &self.allowed_hosts)
            .field("allow_private_networks", &self.allow_private_networks)
            .field("secrets", &secrets)
            .field("github_app", &self.github_app)
            .field("memory_mib", &self.memory_mib)
            .finish()
    }
}

impl fmt::Debug for HostConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HostConfig")
            .field("listen", &self.listen)
            .field("data_dir", &self.data_dir)
            .field(
                "database_url",
                &self.database_url.as_deref().map(redact_credentials),
            )
            .field("connectors_dir", &self.connectors_dir)
            .field(
                "operator_token",
                &self.operator_token.as_ref().map(|_| Masked),
            )
            .field("limits", &self.limits)
            .field("max_webhook_bytes", &self.max_webhook_bytes)
            .field("connectors", &self.connectors)
            .field(
                "env_webhook_secrets",
                &self
                    .env_webhook_secrets
                    .keys()
                    .map(|k| (k.as_str(), Masked))
                    .collect::<BTreeMap<_, _>>(),
            )
            .field("github_app", &self.github_app)
            .field("allowed_host_names", &self.allowed_host_names)
            .field("server", &self.server)
            .field("cors_origins", &self.cors_origins)
            .field("trust", &self.trust)
            .field("audit", &self.audit)
            .field("registries", &self.registries)
            .field(
                "bundled",
                &self.bundled.iter().map(|c| c.name).collect::<Vec<_>>(),
            )
            .finish()
    }
}

// ---------------------------------------------------------------------------------------
// Loading: flags > environment > TOML file > defaults
// ---------------------------------------------------------------------------------------

/// Prefix of every environment variable the host reads.
pub const ENV_PREFIX: &str = "CONNECTOR_HOST_";
/// `listen`.
pub const ENV_LISTEN: &str = "CONNECTOR_HOST_LISTEN";
/// `data_dir`.
pub const ENV_DATA_DIR: &str = "CONNECTOR_HOST_DATA_DIR";
/// `database_url`.
pub const ENV_DATABASE_URL: &str = "CONNECTOR_HOST_DATABASE_URL";
/// `connectors_dir`.
pub const ENV_CONNECTORS_DIR: &str = "CONNECTOR_HOST_CONNECTORS_DIR";
/// `operator_token` (also read by the operator commands of the CLI).
pub const ENV_OPERATOR_TOKEN: &str = "CONNECTOR_HOST_OPERATOR_TOKEN";
/// `limits.call_timeout_ms`.
pub const ENV_CALL_TIMEOUT_MS: &str = "CONNECTOR_HOST_CALL_TIMEOUT_MS";
/// `limits.memory_mib`.
pub const ENV_MEMORY_MIB: &str = "CONNECTOR_HOST_MEMORY_MIB";
/// `audit.retention_days`.
pub const ENV_AUDIT_RETENTION_DAYS: &str = "CONNECTOR_HOST_AUDIT_RETENTION_DAYS";
/// `limits.max_webhook_bytes`.
pub const ENV_MAX_WEBHOOK_BYTES: &str = "CONNECTOR_HOST_MAX_WEBHOOK_BYTES";
/// `github_app.app_id`.
pub const ENV_GITHUB_APP_ID: &str = "CONNECTOR_HOST_GITHUB_APP_ID";
/// `github_app.private_key_path`.
pub const ENV_GITHUB_PRIVATE_KEY_PATH: &str = "CONNECTOR_HOST_GITHUB_PRIVATE_KEY_PATH";
/// `github_app.api_url`.
pub const ENV_GITHUB_API_URL: &str = "CONNECTOR_HOST_GITHUB_API_URL";
/// The base URL the CLI's operator commands talk to (not a `serve` setting).
pub const ENV_URL: &str = "CONNECTOR_HOST_URL";
/// The agent token the CLI's `mcp` bridge presents (not a `serve` setting).
pub const ENV_AGENT_TOKEN: &str = "CONNECTOR_HOST_AGENT_TOKEN";
/// The compiled-component cache of the CLI's local commands (not a `serve` setting).
pub const ENV_CACHE_DIR: &str = "CONNECTOR_HOST_CACHE_DIR";
/// Suffix of `CONNECTOR_HOST_<SLUG>_WEBHOOK_SECRET`.
const ENV_WEBHOOK_SECRET_SUFFIX: &str = "_WEBHOOK_SECRET";

/// `server.allowed_host_names` (comma-separated).
pub const ENV_ALLOWED_HOST_NAMES: &str = "CONNECTOR_HOST_ALLOWED_HOST_NAMES";
/// `limits.max_concurrent_calls_per_agent`.
pub const ENV_MAX_CONCURRENT_CALLS_PER_AGENT: &str =
    "CONNECTOR_HOST_MAX_CONCURRENT_CALLS_PER_AGENT";
/// `limits.guest_memory_total_mib`.
pub const ENV_GUEST_MEMORY_TOTAL_MIB: &str = "CONNECTOR_HOST_GUEST_MEMORY_TOTAL_MIB";
/// `server.header_timeout_ms`.
pub const ENV_HEADER_TIMEOUT_MS: &str = "CONNECTOR_HOST_HEADER_TIMEOUT_MS";
/// `server.idle_timeout_ms`.
pub const ENV_IDLE_TIMEOUT_MS: &str = "CONNECTOR_HOST_IDLE_TIMEOUT_MS";
/// `server.max_connections`.
pub const ENV_MAX_CONNECTIONS: &str = "CONNECTOR_HOST_MAX_CONNECTIONS";
/// `server.max_connections_per_peer`.
pub const ENV_MAX_CONNECTIONS_PER_PEER: &str = "CONNECTOR_HOST_MAX_CONNECTIONS_PER_PEER";
/// `server.cors_origins` (comma-separated).
pub const ENV_CORS_ORIGINS: &str = "CONNECTOR_HOST_CORS_ORIGINS";
/// `trust.keys` (comma-separated paths).
pub const ENV_TRUST_KEYS: &str = "CONNECTOR_HOST_TRUST_KEYS";
/// `trust.require_signatures`.
pub const ENV_REQUIRE_SIGNATURES: &str = "CONNECTOR_HOST_REQUIRE_SIGNATURES";

/// The host name of a `Host` header value (`[::1]:80` → `[::1]`, `a.example:8080` →
/// `a.example`), without a trailing dot; compare it ignoring ASCII case.
fn host_name_of(host: &str) -> &str {
    let host = host.trim();
    let name = if host.starts_with('[') {
        host.find(']').map_or(host, |i| &host[..=i])
    } else {
        host.rsplit_once(':').map_or(host, |(name, _)| name)
    };
    name.trim_end_matches('.')
}

/// The default GitHub REST base URL.
pub const DEFAULT_GITHUB_API_URL: &str = "https://api.github.com";

const KNOWN_ENV: &[&str] = &[
    ENV_LISTEN,
    ENV_DATA_DIR,
    ENV_DATABASE_URL,
    ENV_CONNECTORS_DIR,
    ENV_OPERATOR_TOKEN,
    ENV_CALL_TIMEOUT_MS,
    ENV_MEMORY_MIB,
    ENV_MAX_WEBHOOK_BYTES,
    ENV_AUDIT_RETENTION_DAYS,
    ENV_GITHUB_APP_ID,
    ENV_GITHUB_PRIVATE_KEY_PATH,
    ENV_GITHUB_API_URL,
    ENV_URL,
    ENV_AGENT_TOKEN,
    ENV_CACHE_DIR,
    ENV_ALLOWED_HOST_NAMES,
    ENV_MAX_CONCURRENT_CALLS_PER_AGENT,
    ENV_GUEST_MEMORY_TOTAL_MIB,
    ENV_HEADER_TIMEOUT_MS,
    ENV_IDLE_TIMEOUT_MS,
    ENV_MAX_CONNECTIONS,
    ENV_MAX_CONNECTIONS_PER_PEER,
    ENV_CORS_ORIGINS,
    ENV_TRUST_KEYS,
    ENV_REQUIRE_SIGNATURES,
];

/// A whole-number setting: its TOML key and variable, its range, and where it goes.
struct WholeSetting {
    key: &'static str,
    env: &'static str,
    max: u64,
    unit: &'static str,
    example: &'static str,
    set: fn(&mut HostConfig, u64),
}

const MIB: u64 = 1024 * 1024;

/// Every whole-number setting (all from 1 to `max`), read the same way from the file
/// and the environment.
const WHOLE_SETTINGS: &[WholeSetting] = &[
    WholeSetting {
        key: "limits.call_timeout_ms",
        env: ENV_CALL_TIMEOUT_MS,
        max: 3_600_000,
        unit: "milliseconds",
        example: "10000",
        set: |c, v| c.limits.call_timeout = Duration::from_millis(v),
    },
    WholeSetting {
        key: "limits.memory_mib",
        env: ENV_MEMORY_MIB,
        max: 4096,
        unit: "MiB",
        example: "64",
        set: |c, v| c.limits.memory_bytes = (v * MIB) as usize,
    },
    WholeSetting {
        key: "limits.max_webhook_bytes",
        env: ENV_MAX_WEBHOOK_BYTES,
        max: 1 << 30,
        unit: "bytes",
        example: "26214400 (25 MiB)",
        set: |c, v| c.max_webhook_bytes = v as usize,
    },
    WholeSetting {
        key: "audit.retention_days",
        env: ENV_AUDIT_RETENTION_DAYS,
        max: 36_500,
        unit: "days",
        example: "90",
        set: |c, v| c.audit.retention_days = v as u32,
    },
    WholeSetting {
        key: "limits.max_concurrent_calls_per_agent",
        env: ENV_MAX_CONCURRENT_CALLS_PER_AGENT,
        max: 65_536,
        unit: "calls",
        example: "64",
        set: |c, v| c.limits.calls_per_agent = Some(v as u32),
    },
    WholeSetting {
        key: "limits.guest_memory_total_mib",
        env: ENV_GUEST_MEMORY_TOTAL_MIB,
        max: 1 << 20,
        unit: "MiB",
        example: "2048",
        set: |c, v| c.limits.total_memory_bytes = (v * MIB) as usize,
    },
    WholeSetting {
        key: "server.header_timeout_ms",
        env: ENV_HEADER_TIMEOUT_MS,
        max: 3_600_000,
        unit: "milliseconds",
        example: "10000",
        set: |c, v| c.server.header_timeout = Duration::from_millis(v),
    },
    WholeSetting {
        key: "server.idle_timeout_ms",
        env: ENV_IDLE_TIMEOUT_MS,
        max: 86_400_000,
        unit: "milliseconds",
        example: "60000",
        set: |c, v| c.server.idle_timeout = Duration::from_millis(v),
    },
    WholeSetting {
        key: "server.max_connections",
        env: ENV_MAX_CONNECTIONS,
        max: 1_000_000,
        unit: "connections",
        example: "4096",
        set: |c, v| c.server.max_connections = v as usize,
    },
    WholeSetting {
        key: "server.max_connections_per_peer",
        env: ENV_MAX_CONNECTIONS_PER_PEER,
        max: 1_000_000,
        unit: "connections",
        example: "256",
        set: |c, v| c.server.max_connections_per_peer = Some(v as usize),
    },
];

impl WholeSetting {
    fn form(&self) -> String {
        format!(
            "a whole number of {} from 1 to {}, e.g. {}",
            self.unit, self.max, self.example
        )
    }

    /// Checks `value` (from setting `name`) and stores it in `config`.
    fn apply(&self, name: String, value: u64, config: &mut HostConfig) -> Result<(), ConfigError> {
        if value == 0 || value > self.max {
            return Err(invalid(name, self.form(), Some(&value.to_string())));
        }
        (self.set)(config, value);
        Ok(())
    }
}

/// The name of the environment variable holding connector `slug`'s webhook secret.
pub fn webhook_secret_env(slug: &str) -> String {
    format!(
        "{ENV_PREFIX}{}{ENV_WEBHOOK_SECRET_SUFFIX}",
        env_spelling(slug)
    )
}

/// Settings given on the `connector-host serve` command line; they beat everything else.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ServeFlags {
    /// `--listen ADDR`.
    pub listen: Option<String>,
    /// `--data-dir DIR`.
    pub data_dir: Option<PathBuf>,
}

/// Why the configuration could not be loaded. Every message names the file, key, variable
/// or flag at fault and, for a bad value, the form that is expected.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The TOML file could not be read.
    #[error("could not read the config file {}: {source}", path.display())]
    Read {
        /// The config file.
        path: PathBuf,
        #[source]
        /// Why it could not be read.
        source: std::io::Error,
    },
    /// The TOML file is not valid TOML, has an unknown key or a value of the wrong type.
    #[error("the config file {} is not valid: {message}", path.display())]
    Parse {
        /// The config file.
        path: PathBuf,
        /// What the TOML parser said.
        message: String,
    },
    /// A setting has a value the host cannot use.
    #[error("invalid {setting}: expected {expected}{}", got.as_ref().map(|g| format!(", got `{g}`")).unwrap_or_default())]
    Invalid {
        /// Which setting, and where it came from (``"`limits.memory_mib` in host.toml"``,
        /// `"environment variable CONNECTOR_HOST_MEMORY_MIB"`, `"--listen"`).
        setting: String,
        /// The accepted form.
        expected: String,
        /// The offending value (never set for secrets).
        got: Option<String>,
    },
}

impl ConfigError {
    /// The setting an [`ConfigError::Invalid`] is about.
    pub fn setting(&self) -> Option<&str> {
        match self {
            ConfigError::Invalid { setting, .. } => Some(setting),
            _ => None,
        }
    }
}

/// Where a value came from, for error messages.
#[derive(Clone, Copy)]
enum Origin<'a> {
    File(&'a Path),
    Env,
    Flag,
}

impl Origin<'_> {
    /// The human name of setting `name` (a TOML key, a variable or a flag) from here.
    fn name(&self, name: &str) -> String {
        match self {
            Origin::File(path) => format!("`{name}` in {}", path.display()),
            Origin::Env => format!("environment variable {name}"),
            Origin::Flag => name.to_string(),
        }
    }
}

fn invalid(setting: String, expected: impl Into<String>, got: Option<&str>) -> ConfigError {
    ConfigError::Invalid {
        setting,
        expected: expected.into(),
        got: got.map(str::to_string),
    }
}

/// The `[..]` layout of the TOML file.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileConfig {
    listen: Option<String>,
    data_dir: Option<PathBuf>,
    database_url: Option<String>,
    connectors_dir: Option<PathBuf>,
    operator_token: Option<String>,
    #[serde(default)]
    limits: FileLimits,
    #[serde(default)]
    connectors: BTreeMap<String, FileConnector>,
    github_app: Option<FileGithubApp>,
    #[serde(default)]
    server: FileServer,
    #[serde(default)]
    trust: FileTrust,
    #[serde(default)]
    registries: BTreeMap<String, FileRegistry>,
    #[serde(default)]
    audit: FileAudit,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileAudit {
    retention_days: Option<toml::Value>,
    #[serde(default)]
    record_arguments: bool,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileTrust {
    #[serde(default)]
    keys: Vec<PathBuf>,
    #[serde(default)]
    require_signatures: bool,
    #[serde(default)]
    pin_tool_definitions: bool,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileRegistry {
    username: Option<String>,
    password_env: Option<String>,
    #[serde(default)]
    insecure: bool,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileServer {
    allowed_host_names: Option<Vec<String>>,
    cors_origins: Option<Vec<String>>,
    header_timeout_ms: Option<toml::Value>,
    idle_timeout_ms: Option<toml::Value>,
    max_connections: Option<toml::Value>,
    max_connections_per_peer: Option<toml::Value>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileLimits {
    call_timeout_ms: Option<toml::Value>,
    memory_mib: Option<toml::Value>,
    max_webhook_bytes: Option<toml::Value>,
    max_concurrent_calls_per_agent: Option<toml::Value>,
    guest_memory_total_mib: Option<toml::Value>,
}

impl FileConfig {
    /// The file's value of whole-number setting `key` (see [`WHOLE_SETTINGS`]).
    fn whole(&self, key: &str) -> Option<&toml::Value> {
        let (l, s) = (&self.limits, &self.server);
        match key {
            "limits.call_timeout_ms" => l.call_timeout_ms.as_ref(),
            "limits.memory_mib" => l.memory_mib.as_ref(),
            "limits.max_webhook_bytes" => l.max_webhook_bytes.as_ref(),
            "limits.max_concurrent_calls_per_agent" => l.max_concurrent_calls_per_agent.as_ref(),
            "limits.guest_memory_total_mib" => l.guest_memory_total_mib.as_ref(),
            "server.header_timeout_ms" => s.header_timeout_ms.as_ref(),
            "server.idle_timeout_ms" => s.idle_timeout_ms.as_ref(),
            "server.max_connections" => s.max_connections.as_ref(),
            "server.max_connections_per_peer" => s.max_connections_per_peer.as_ref(),
            "audit.retention_days" => self.audit.retention_days.as_ref(),
            _ => None,
        }
    }
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileConnector {
    #[serde(default)]
    webhook_secrets: Vec<String>,
    allowed_hosts: Option<Vec<String>>,
    #[serde(default)]
    allow_private_networks: bool,
    #[serde(default)]
    secrets: BTreeMap<String, String>,
    github_app: Option<bool>,
    memory_mib: Option<u64>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileGithubApp {
    app_id: Option<toml::Value>,
    private_key_path: Option<PathBuf>,
    api_url: Option<String>,
}

/// The GitHub App settings seen so far, with the name of the setting each came from.
#[derive(Default)]
struct GithubParts {
    app_id: Option<(String, String)>,
    private_key_path: Option<(PathBuf, String)>,
    api_url: Option<(String, String)>,
}

impl HostConfig {
    /// Loads the configuration of `connector-host serve` from the process environment,
    /// the TOML file `file` (if any) and `flags`.
    pub fn load_from_process(
        file: Option<&Path>,
        flags: &ServeFlags,
    ) -> Result<HostConfig, ConfigError> {
        let mut env = Vec::new();
        for (name, value) in std::env::vars_os() {
            let Some(name) = name.to_str() else { continue };
            if !name.starts_with(ENV_PREFIX) {
                continue;
            }
            let Some(value) = value.to_str() else {
                return Err(invalid(Origin::Env.name(name), "valid UTF-8", None));
            };
            env.push((name.to_string(), value.to_string()));
        }
        Self::load(file, env, flags)
    }

    /// Builds the configuration: `flags` beat the environment `env` (name, value pairs;
    /// only `CONNECTOR_HOST_*` names are looked at, empty values count as unset) beats the
    /// TOML file `file` beats the defaults (CONTRACT.md §2).
    ///
    /// Relative paths are relative to the working directory, wherever they are given.
    pub fn load<I, K, V>(
        file: Option<&Path>,
        env: I,
        flags: &ServeFlags,
    ) -> Result<HostConfig, ConfigError>
    where
        I: IntoIterator<Item = (K, V)>,
        K: AsRef<str>,
        V: AsRef<str>,
    {
        let env: BTreeMap<String, String> = env
            .into_iter()
            .filter(|(k, v)| k.as_ref().starts_with(ENV_PREFIX) && !v.as_ref().is_empty())
            .map(|(k, v)| (k.as_ref().to_string(), v.as_ref().to_string()))
            .collect();
        let mut config = HostConfig::default();
        let mut github = GithubParts::default();

        if let Some(path) = file {
            let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
                path: path.to_path_buf(),
                source,
            })?;
            let parsed: FileConfig = toml::from_str(&text).map_err(|e| ConfigError::Parse {
                path: path.to_path_buf(),
                message: e.to_string().trim_end().to_string(),
            })?;
            apply_file(parsed, path, &mut config, &mut github)?;
        }
        apply_env(&env, &mut config, &mut github)?;
        if let Some(listen) = &flags.listen {
            config.listen = parse_listen(Origin::Flag.name("--listen"), listen)?;
        }
        if let Some(dir) = &flags.data_dir {
            config.data_dir = non_empty_path(Origin::Flag.name("--data-dir"), dir)?;
        }
        config.github_app = finish_github(github)?;
        if config.limits.total_memory_bytes < config.limits.memory_bytes {
            return Err(invalid(
                "limits.guest_memory_total_mib".into(),
                format!(
                    "at least limits.memory_mib ({} MiB): one guest may use that much",
                    config.limits.memory_bytes as u64 / MIB
                ),
                Some(&(config.limits.total_memory_bytes as u64 / MIB).to_string()),
            ));
        }
        connector_memory(&config)?;
        if let Some(per_peer) = config.server.max_connections_per_peer {
            if per_peer > config.server.max_connections {
                return Err(invalid(
                    "server.max_connections_per_peer".into(),
                    format!(
                        "at most server.max_connections ({}): one address cannot hold more connections than are served at once",
                        config.server.max_connections
                    ),
                    Some(&per_peer.to_string()),
                ));
            }
        }
        Ok(config)
    }
}

fn parse_host_names<'a>(
    name: String,
    names: impl Iterator<Item = &'a str>,
) -> Result<Vec<String>, ConfigError> {
    let names: Vec<String> = names.map(|n| n.trim().to_string()).collect();
    if names.is_empty()
        || names
            .iter()
            .any(|n| n.is_empty() || n.contains(['/', ' ', '@']))
    {
        return Err(invalid(
            name,
            "host names such as `connectors.example.com` or `*` (comma-separated in the environment)",
            None,
        ));
    }
    Ok(names)
}

/// Browser origins: `scheme://host[:port]` (no path), or `*`; kept lower-cased.
fn parse_origins<'a>(
    name: String,
    origins: impl Iterator<Item = &'a str>,
) -> Result<Vec<String>, ConfigError> {
    let mut out = Vec::new();
    for given in origins.map(str::trim).filter(|o| !o.is_empty()) {
        let origin = given.to_ascii_lowercase();
        let valid = origin == "*"
            || origin.split_once("://").is_some_and(|(scheme, rest)| {
                matches!(scheme, "http" | "https")
                    && !rest.is_empty()
                    && !rest.contains(['/', ' ', '@', '?', '#'])
            });
        if !valid {
            return Err(invalid(
                name,
                "browser origins such as `https://app.example.com` or `http://localhost:6274` (scheme, host and port; no path), or `*`",
                Some(given),
            ));
        }
        out.push(origin);
    }
    Ok(out)
}

fn apply_file(
    file: FileConfig,
    path: &Path,
    config: &mut HostConfig,
    github: &mut GithubParts,
) -> Result<(), ConfigError> {
    let origin = Origin::File(path);
    config.audit.record_arguments = file.audit.record_arguments;
    config.trust = TrustSettings {
        keys: file.trust.keys.clone(),
        require_signatures: file.trust.require_signatures,
        pin_tool_definitions: file.trust.pin_tool_definitions,
    };
    for (host, registry) in &file.registries {
        if host.is_empty() || host.contains(['/', ' ', '@']) {
            return Err(invalid(
                origin.name(&format!("registries.{host}")),
                "a registry as references name it: `host` or `host:port` (TOML: [registries.\"127.0.0.1:5000\"])",
                None,
            ));
        }
        if registry.username.is_some() != registry.password_env.is_some() {
            return Err(invalid(
                origin.name(&format!("registries.{host}")),
                "both `username` and `password_env` (the variable holding the password), or neither",
                None,
            ));
        }
        config.registries.insert(
            host.clone(),
            RegistrySettings {
                username: registry.username.clone(),
                password_env: registry.password_env.clone(),
                insecure: registry.insecure,
            },
        );
    }
    if let Some(origins) = &file.server.cors_origins {
        config.cors_origins = parse_origins(
            origin.name("server.cors_origins"),
            origins.iter().map(String::as_str),
        )?;
    }
    if let Some(names) = &file.server.allowed_host_names {
        config.allowed_host_names = Some(parse_host_names(
            origin.name("server.allowed_host_names"),
            names.iter().map(String::as_str),
        )?);
    }
    if let Some(listen) = &file.listen {
        config.listen = parse_listen(origin.name("listen"), listen)?;
    }
    if let Some(dir) = &file.data_dir {
        config.data_dir = non_empty_path(origin.name("data_dir"), dir)?;
    }
    if let Some(url) = &file.database_url {
        config.database_url = Some(parse_database_url(origin.name("database_url"), url)?);
    }
    if let Some(dir) = &file.connectors_dir {
        config.connectors_dir = Some(non_empty_path(origin.name("connectors_dir"), dir)?);
    }
    if let Some(token) = &file.operator_token {
        config.operator_token = Some(parse_token(origin.name("operator_token"), token)?);
    }
    for setting in WHOLE_SETTINGS {
        if let Some(v) = file.whole(setting.key) {
            let name = origin.name(setting.key);
            let value = toml_number(name.clone(), v, &setting.form())?;
            setting.apply(name, value, config)?;
        }
    }
    for (slug, settings) in file.connectors {
        let key = format!("connectors.{slug}");
        if !connector_model::connector::is_slug(&slug) {
            return Err(invalid(
                origin.name(&key),
                format!(
                    "a connector slug matching {}",
                    connector_model::connector::SLUG_RULE
                ),
                Some(&slug),
            ));
        }
        for (i, secret) in settings.webhook_secrets.iter().enumerate() {
            if secret.trim().is_empty() {
                return Err(invalid(
                    origin.name(&format!("{key}.webhook_secrets[{i}]")),
                    "a non-empty secret",
                    None,
                ));
            }
        }
        if let Some(hosts) = &settings.allowed_hosts {
            for (i, host) in hosts.iter().enumerate() {
                let host = host.trim();
                if host.is_empty() || host.contains(['/', ':', ' ']) {
                    return Err(invalid(
                        origin.name(&format!("{key}.allowed_hosts[{i}]")),
                        "a host name such as `api.github.com` or `*.example.com` (no scheme, port or path)",
                        Some(host),
                    ));
                }
            }
        }
        for name in settings.secrets.keys() {
            if name.trim().is_empty() {
                return Err(invalid(
                    origin.name(&format!("{key}.secrets")),
                    "non-empty secret names",
                    Some(name),
                ));
            }
        }
        config.connectors.insert(
            slug,
            ConnectorSettings {
                webhook_secrets: settings.webhook_secrets,
                allowed_hosts: settings
                    .allowed_hosts
                    .map(|h| h.into_iter().map(|h| h.trim().to_string()).collect()),
                allow_private_networks: settings.allow_private_networks,
                secrets: settings.secrets,
                github_app: settings.github_app,
                memory_mib: settings.memory_mib,
            },
        );
    }
    if let Some(app) = file.github_app {
        if let Some(id) = &app.app_id {
            let name = origin.name("github_app.app_id");
            let id = match id {
                toml::Value::Integer(n) if *n > 0 => n.to_string(),
                toml::Value::String(s) if !s.trim().is_empty() => s.trim().to_string(),
                other => return Err(invalid(name, app_id_form(), Some(&other.to_string()))),
            };
            github.app_id = Some((id, name));
        }
        if let Some(key) = &app.private_key_path {
            let name = origin.name("github_app.private_key_path");
            github.private_key_path = Some((non_empty_path(name.clone(), key)?, name));
        }
        if let Some(url) = &app.api_url {
            let name = origin.name("github_app.api_url");
            github.api_url = Some((parse_http_url(name.clone(), url)?, name));
        }
    }
    Ok(())
}

fn apply_env(
    env: &BTreeMap<String, String>,
    config: &mut HostConfig,
    github: &mut GithubParts,
) -> Result<(), ConfigError> {
    let var = |name: &str| env.get(name).map(String::as_str);
    let origin = Origin::Env;
    if let Some(v) = var(ENV_TRUST_KEYS) {
        config.trust.keys = v
            .split(',')
            .map(str::trim)
            .filter(|p| !p.is_empty())
            .map(PathBuf::from)
            .collect();
    }
    if let Some(v) = var(ENV_REQUIRE_SIGNATURES) {
        config.trust.require_signatures = match v.trim() {
            "true" | "1" => true,
            "false" | "0" => false,
            other => {
                return Err(invalid(
                    origin.name(ENV_REQUIRE_SIGNATURES),
                    "true or false",
                    Some(other),
                ))
            }
        };
    }
    if let Some(v) = var(ENV_CORS_ORIGINS) {
        config.cors_origins = parse_origins(origin.name(ENV_CORS_ORIGINS), v.split(','))?;
    }
    if let Some(v) = var(ENV_ALLOWED_HOST_NAMES) {
        config.allowed_host_names = Some(parse_host_names(
            origin.name(ENV_ALLOWED_HOST_NAMES),
            v.split(','),
        )?);
    }
    if let Some(v) = var(ENV_LISTEN) {
        config.listen = parse_listen(origin.name(ENV_LISTEN), v)?;
    }
    if let Some(v) = var(ENV_DATA_DIR) {
        config.data_dir = non_empty_path(origin.name(ENV_DATA_DIR), Path::new(v))?;
    }
    if let Some(v) = var(ENV_DATABASE_URL) {
        config.database_url = Some(parse_database_url(origin.name(ENV_DATABASE_URL), v)?);
    }
    if let Some(v) = var(ENV_CONNECTORS_DIR) {
        config.connectors_dir = Some(non_empty_path(
            origin.name(ENV_CONNECTORS_DIR),
            Path::new(v),
        )?);
    }
    if let Some(v) = var(ENV_OPERATOR_TOKEN) {
        config.operator_token = Some(parse_token(origin.name(ENV_OPERATOR_TOKEN), v)?);
    }
    for setting in WHOLE_SETTINGS {
        if let Some(v) = var(setting.env) {
            let name = origin.name(setting.env);
            let value = str_number(name.clone(), v, &setting.form())?;
            setting.apply(name, value, config)?;
        }
    }
    if let Some(v) = var(ENV_GITHUB_APP_ID) {
        github.app_id = Some((v.trim().to_string(), origin.name(ENV_GITHUB_APP_ID)));
    }
    if let Some(v) = var(ENV_GITHUB_PRIVATE_KEY_PATH) {
        github.private_key_path =
            Some((PathBuf::from(v), origin.name(ENV_GITHUB_PRIVATE_KEY_PATH)));
    }
    if let Some(v) = var(ENV_GITHUB_API_URL) {
        let name = origin.name(ENV_GITHUB_API_URL);
        github.api_url = Some((parse_http_url(name.clone(), v)?, name));
    }

    for (name, value) in env {
        if KNOWN_ENV.contains(&name.as_str()) {
            continue;
        }
        let Some(env_form) = name
            .strip_prefix(ENV_PREFIX)
            .and_then(|rest| rest.strip_suffix(ENV_WEBHOOK_SECRET_SUFFIX))
            .filter(|rest| !rest.is_empty())
        else {
            tracing::warn!(variable = %name, "ignoring an unknown CONNECTOR_HOST_* environment variable");
            continue;
        };
        let matching: Vec<&String> = config
            .connectors
            .keys()
            .filter(|slug| env_spelling(slug) == env_form)
            .collect();
        let slug = match matching.as_slice() {
            [one] => (*one).clone(),
            [] => {
                let slug = env_form.to_ascii_lowercase();
                if env_spelling(&slug) != env_form || !connector_model::connector::is_slug(&slug) {
                    return Err(invalid(
                        origin.name(name),
                        "CONNECTOR_HOST_<SLUG>_WEBHOOK_SECRET with <SLUG> a connector slug upper-cased and `-` written `_`",
                        None,
                    ));
                }
                // Only the webhook secret, never other settings, for the slug spelt
                // either way (see `HostConfig::connector`).
                config
                    .env_webhook_secrets
                    .insert(env_form.to_string(), value.clone());
                continue;
            }
            several => {
                return Err(invalid(
                    origin.name(name),
                    format!(
                        "a variable naming one connector, but it matches several configured slugs ({}); configure their secrets in the TOML file instead",
                        several.iter().map(|s| s.as_str()).collect::<Vec<_>>().join(", ")
                    ),
                    None,
                ))
            }
        };
        let secret = value.clone();
        let settings = config.connectors.entry(slug).or_default();
        settings.webhook_secrets.retain(|s| *s != secret);
        settings.webhook_secrets.insert(0, secret);
    }
    Ok(())
}

fn finish_github(parts: GithubParts) -> Result<Option<GithubAppSettings>, ConfigError> {
    match (parts.app_id, parts.private_key_path) {
        (None, None) => Ok(None),
        (Some((app_id, _)), Some((private_key_path, _))) => Ok(Some(GithubAppSettings {
            app_id,
            private_key_path,
            api_url: parts.api_url.map(|(u, _)| u).unwrap_or_else(|| DEFAULT_GITHUB_API_URL.to_string()),
        })),
        (Some((_, from)), None) => Err(invalid(
            from,
            format!(
                "`github_app.private_key_path` (or {ENV_GITHUB_PRIVATE_KEY_PATH}) as well: a GitHub App needs both its id and its private key"
            ),
            None,
        )),
        (None, Some((_, from))) => Err(invalid(
            from,
            format!("`github_app.app_id` (or {ENV_GITHUB_APP_ID}) as well: a GitHub App needs both its id and its private key"),
            None,
        )),
    }
}

fn app_id_form() -> &'static str {
    "a GitHub App id (a positive integer such as 123456) or Client ID string (such as \"Iv1.0123456789abcdef\")"
}

/// A non-negative integer from a TOML value (an integer, or a string of digits).
fn toml_number(setting: String, value: &toml::Value, expected: &str) -> Result<u64, ConfigError> {
    match value {
        toml::Value::Integer(n) if *n >= 0 => Ok(*n as u64),
        toml::Value::String(s) => str_number(setting, s, expected),
        other => Err(invalid(setting, expected, Some(&other.to_string()))),
    }
}

/// A non-negative integer written in decimal digits (`_` separators allowed).
fn str_number(setting: String, value: &str, expected: &str) -> Result<u64, ConfigError> {
    let digits: String = value.trim().chars().filter(|c| *c != '_').collect();
    if digits.is_empty() || !digits.chars().all(|c| c.is_ascii_digit()) {
        return Err(invalid(setting, expected, Some(value)));
    }
    digits
        .parse::<u64>()
        .map_err(|_| invalid(setting, expected, Some(value)))
}

/// `IP:PORT`, `[IPv6]:PORT` or `localhost:PORT`.
fn parse_listen(setting: String, value: &str) -> Result<SocketAddr, ConfigError> {
    let value = value.trim();
    if let Ok(addr) = value.parse::<SocketAddr>() {
        return Ok(addr);
    }
    if let Some(port) = value.strip_prefix("localhost:") {
        if let Ok(port) = port.parse::<u16>() {
            return Ok(SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), port));
        }
    }
    Err(invalid(
        setting,
        "an address and port such as 127.0.0.1:8787, 0.0.0.0:8787, [::1]:8787 or localhost:8787",
        Some(value),
    ))
}

fn non_empty_path(setting: String, path: &Path) -> Result<PathBuf, ConfigError> {
    if path.as_os_str().is_empty() {
        return Err(invalid(setting, "a directory or file path", Some("")));
    }
    Ok(path.to_path_buf())
}

/// `url` with any `user:password@` part replaced by `***@` and the value of any
/// `password=` option replaced by `***` (for logs and `Debug`).
pub fn redact_credentials(url: &str) -> String {
    let (base, query) = match url.split_once('?') {
        Some((base, query)) => (base, Some(query)),
        None => (url, None),
    };
    let mut out = match (base.split_once("://"), base.rfind('@')) {
        (Some((scheme, _)), Some(at)) if at > scheme.len() + 3 => {
            format!("{scheme}://***{}", &base[at..])
        }
        _ => base.to_string(),
    };
    if let Some(query) = query {
        let options: Vec<String> = query
            .split('&')
            .map(|option| match option.split_once('=') {
                Some((key, _)) if key.eq_ignore_ascii_case("password") => format!("{key}=***"),
                _ => option.to_string(),
            })
            .collect();
        out.push('?');
        out.push_str(&options.join("&"));
    }
    out
}

fn parse_database_url(setting: String, value: &str) -> Result<String, ConfigError> {
    let value = value.trim();
    if let Some(path) = value.strip_prefix("sqlite://") {
        if !path.is_empty() {
            return Ok(value.to_string());
        }
    }
    for scheme in ["postgres://", "postgresql://"] {
        if let Some(rest) = value.strip_prefix(scheme) {
            if !rest.is_empty() {
                return Ok(value.to_string());
            }
        }
    }
    // A PostgreSQL URL may carry a password: only the scheme is echoed back.
    let shown = value.split_once("://").map_or(value, |(scheme, _)| scheme);
    Err(invalid(
        setting,
        "a URL of the form sqlite://<path> (e.g. sqlite://./data/host.db) or \
         postgres://user:password@host:port/database",
        Some(shown),
    ))
}

fn parse_token(setting: String, value: &str) -> Result<String, ConfigError> {
    let token = value.trim();
    if token.is_empty() || token.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err(invalid(
            setting,
            "a non-empty token without whitespace",
            None,
        ));
    }
    if token.len() < 16 {
        tracing::warn!(
            "the configured operator token is shorter than 16 characters; use a long random token"
        );
    }
    Ok(token.to_string())
}

fn parse_http_url(setting: String, value: &str) -> Result<String, ConfigError> {
    let value = value.trim();
    let rest = value
        .strip_prefix("https://")
        .or_else(|| value.strip_prefix("http://"));
    match rest {
        Some(rest) if !rest.is_empty() && !rest.starts_with('/') => {
            Ok(value.trim_end_matches('/').to_string())
        }
        _ => Err(invalid(
            setting,
            "an http:// or https:// URL such as https://api.github.com",
            Some(value),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    fn no_env() -> Vec<(String, String)> {
        Vec::new()
    }

    fn toml_file(text: &str) -> tempfile::NamedTempFile {
        let mut file = tempfile::Builder::new()
            .suffix(".toml")
            .tempfile()
            .expect("temp file");
        std::io::Write::write_all(&mut file, text.as_bytes()).expect("write temp file");
        file
    }

    fn load(
        file: Option<&tempfile::NamedTempFile>,
        env: Vec<(String, String)>,
        flags: &ServeFlags,
    ) -> Result<HostConfig, ConfigError> {
        HostConfig::load(file.map(|f| f.path()), env, flags)
    }

    #[test]
    fn defaults_match_the_contract() {
        let config = load(None, no_env(), &ServeFlags::default()).expect("defaults load");
        assert_eq!(config.listen, "127.0.0.1:8787".parse().expect("addr"));
        assert_eq!(config.data_dir, PathBuf::from("./data"));
        assert_eq!(config.database_url(), "sqlite://./data/host.db");
        assert_eq!(config.connectors_dir, None);
        assert_eq!(config.operator_token, None);
        assert_eq!(config.limits.call_timeout, Duration::from_millis(10_000));
        assert_eq!(config.limits.memory_bytes, 64 * 1024 * 1024);
        assert_eq!(config.max_webhook_bytes, 26_214_400);
        assert!(config.connectors.is_empty());
        assert_eq!(config.github_app, None);
        assert_eq!(config, HostConfig::default());
    }

    /// The variables the command line reads for its other commands are not `serve`'s,
    /// but they are not unknown either: a shell that sets them for `mcp` or a local
    /// `call` must not make `serve` warn. A variable nobody reads is still named.
    #[test]
    fn only_variables_nobody_reads_are_warned_about() {
        #[derive(Clone, Default)]
        struct Log(std::sync::Arc<std::sync::Mutex<Vec<u8>>>);
        impl std::io::Write for Log {
            fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
                if let Ok(mut log) = self.0.lock() {
                    log.extend_from_slice(buf);
                }
                Ok(buf.len())
            }
            fn flush(&mut self) -> std::io::Result<()> {
                Ok(())
            }
        }
        let log = Log::default();
        let writer = log.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_writer(move || writer.clone())
            .with_ansi(false)
            .finish();
        tracing::subscriber::with_default(subscriber, || {
            load(
                None,
                env(&[
                    (ENV_AGENT_TOKEN, "an-agent-token"),
                    (ENV_CACHE_DIR, "/tmp/cache"),
                    (ENV_URL, "http://127.0.0.1:8787"),
                    ("CONNECTOR_HOST_NOTHING_READS_THIS", "1"),
                ]),
                &ServeFlags::default(),
            )
            .expect("loads");
        });
        let text = String::from_utf8(log.0.lock().expect("log").clone()).expect("utf-8");
        assert!(
            text.contains("CONNECTOR_HOST_NOTHING_READS_THIS"),
            "an unknown variable is named: {text}"
        );
        for known in [ENV_AGENT_TOKEN, ENV_CACHE_DIR, ENV_URL] {
            assert!(!text.contains(known), "{known} warned about: {text}");
        }
    }

    #[test]
    fn flags_beat_env_beat_file_beat_defaults() {
        let file = toml_file(
            r#"
listen = "127.0.0.1:1111"
data_dir = "/from/file"
connectors_dir = "/file/connectors"
operator_token = "file-token-0123456789"

[limits]
call_timeout_ms = 2000
memory_mib = 32
max_webhook_bytes = 1024
"#,
        );
        let flags = ServeFlags {
            listen: Some("0.0.0.0:3333".into()),
            data_dir: None,
        };
        let config = load(
            Some(&file),
            env(&[
                ("CONNECTOR_HOST_LISTEN", "127.0.0.1:2222"),
                ("CONNECTOR_HOST_DATA_DIR", "/from/env"),
                ("CONNECTOR_HOST_MEMORY_MIB", "128"),
                ("UNRELATED", "x"),
            ]),
            &flags,
        )
        .expect("loads");
        assert_eq!(
            config.listen,
            "0.0.0.0:3333".parse().expect("addr"),
            "flag beats env and file"
        );
        assert_eq!(
            config.data_dir,
            PathBuf::from("/from/env"),
            "env beats file"
        );
        assert_eq!(
            config.database_url(),
            "sqlite:///from/env/host.db",
            "database follows data_dir"
        );
        assert_eq!(
            config.connectors_dir,
            Some(PathBuf::from("/file/connectors")),
            "file beats default"
        );
        assert_eq!(
            config.operator_token.as_deref(),
            Some("file-token-0123456789")
        );
        assert_eq!(config.limits.call_timeout, Duration::from_millis(2000));
        assert_eq!(
            config.limits.memory_bytes,
            128 * 1024 * 1024,
            "env beats file"
        );
        assert_eq!(config.max_webhook_bytes, 1024);
        // Untouched limits keep their defaults.
        assert_eq!(
            config.limits.max_output_bytes,
            GuestLimits::default().max_output_bytes
        );

        let flags = ServeFlags {
            listen: None,
            data_dir: Some("/from/flag".into()),
        };
        let config = load(
            Some(&file),
            env(&[("CONNECTOR_HOST_DATA_DIR", "/from/env")]),
            &flags,
        )
        .expect("loads");
        assert_eq!(config.data_dir, PathBuf::from("/from/flag"));
        assert_eq!(
            config.listen,
            "127.0.0.1:1111".parse().expect("addr"),
            "file beats default"
        );
    }

    #[test]
    fn every_env_variable_is_read() {
        let config = load(
            None,
            env(&[
                ("CONNECTOR_HOST_LISTEN", "localhost:9000"),
                (
                    "CONNECTOR_HOST_DATABASE_URL",
                    "sqlite:///var/lib/ch/state.db",
                ),
                ("CONNECTOR_HOST_CONNECTORS_DIR", "/opt/connectors"),
                ("CONNECTOR_HOST_OPERATOR_TOKEN", "env-token-0123456789"),
                ("CONNECTOR_HOST_CALL_TIMEOUT_MS", "1_500"),
                ("CONNECTOR_HOST_MAX_WEBHOOK_BYTES", "2048"),
                ("CONNECTOR_HOST_GITHUB_APP_ID", "42"),
                ("CONNECTOR_HOST_GITHUB_PRIVATE_KEY_PATH", "/keys/app.pem"),
                ("CONNECTOR_HOST_GITHUB_API_URL", "http://127.0.0.1:9999/"),
                ("CONNECTOR_HOST_CONNECTORS_DIR_TYPO", "ignored"),
            ]),
            &ServeFlags::default(),
        )
        .expect("loads");
        assert_eq!(config.listen, "127.0.0.1:9000".parse().expect("addr"));
        assert_eq!(config.database_url(), "sqlite:///var/lib/ch/state.db");
        assert_eq!(
            config.connectors_dir,
            Some(PathBuf::from("/opt/connectors"))
        );
        assert_eq!(
            config.operator_token.as_deref(),
            Some("env-token-0123456789")
        );
        assert_eq!(config.limits.call_timeout, Duration::from_millis(1500));
        assert_eq!(config.max_webhook_bytes, 2048);
        assert_eq!(
            config.github_app,
            Some(GithubAppSettings {
                app_id: "42".into(),
                private_key_path: "/keys/app.pem".into(),
                api_url: "http://127.0.0.1:9999".into(),
            })
        );
    }

    #[test]
    fn share_and_server_bounds_from_file_and_environment() {
        let defaults = load(None, no_env(), &ServeFlags::default()).expect("defaults");
        assert_eq!(defaults.limits.calls_per_caller(), 64, "a quarter of 256");
        assert_eq!(defaults.limits.total_memory_bytes, 2048 * 1024 * 1024);
        assert_eq!(defaults.server.header_timeout, Duration::from_secs(10));
        assert_eq!(defaults.server.idle_timeout, Duration::from_secs(60));
        assert_eq!(defaults.server.max_connections, 4096);
        assert_eq!(defaults.server.max_connections_per_peer, None);
        assert_eq!(defaults.server.per_peer(4096), 256, "a sixteenth");
        assert_eq!(defaults.server.per_peer(10), 1, "at least one");

        let file = toml_file(
            r#"
[limits]
max_concurrent_calls_per_agent = 3
guest_memory_total_mib = 512

[server]
header_timeout_ms = 1500
idle_timeout_ms = 7000
max_connections = 100
max_connections_per_peer = 10
"#,
        );
        let config = load(
            Some(&file),
            env(&[
                ("CONNECTOR_HOST_MAX_CONCURRENT_CALLS_PER_AGENT", "5"),
                ("CONNECTOR_HOST_MAX_CONNECTIONS", "200"),
            ]),
            &ServeFlags::default(),
        )
        .expect("loads");
        assert_eq!(config.limits.calls_per_caller(), 5, "env beats file");
        assert_eq!(config.limits.total_memory_bytes, 512 * 1024 * 1024);
        assert_eq!(config.server.header_timeout, Duration::from_millis(1500));
        assert_eq!(config.server.idle_timeout, Duration::from_millis(7000));
        assert_eq!(config.server.max_connections, 200);
        assert_eq!(config.server.max_connections_per_peer, Some(10));
        assert_eq!(config.server.per_peer(200), 10);
        assert_eq!(
            config.server.per_peer(5),
            5,
            "never more than the cap in force"
        );
        let config = load(
            None,
            env(&[("CONNECTOR_HOST_MAX_CONNECTIONS_PER_PEER", "7")]),
            &ServeFlags::default(),
        )
        .expect("loads");
        assert_eq!(config.server.max_connections_per_peer, Some(7));
        for (value, expected) in [
            ("0", "CONNECTOR_HOST_MAX_CONNECTIONS_PER_PEER: expected a whole number of connections from 1 to 1000000"),
            ("many", "CONNECTOR_HOST_MAX_CONNECTIONS_PER_PEER: expected a whole number of connections"),
        ] {
            let err = load(
                None,
                env(&[("CONNECTOR_HOST_MAX_CONNECTIONS_PER_PEER", value)]),
                &ServeFlags::default(),
            )
            .expect_err("refused");
            assert!(err.to_string().contains(expected), "{value}: {err}");
        }
        let err = load(
            None,
            env(&[
                ("CONNECTOR_HOST_MAX_CONNECTIONS", "100"),
                ("CONNECTOR_HOST_MAX_CONNECTIONS_PER_PEER", "101"),
            ]),
            &ServeFlags::default(),
        )
        .expect_err("a share above the cap is refused");
        assert!(
            err.to_string()
                .contains("invalid server.max_connections_per_peer: expected at most server.max_connections (100)"),
            "{err}"
        );

        let err = load(
            None,
            env(&[("CONNECTOR_HOST_IDLE_TIMEOUT_MS", "0")]),
            &ServeFlags::default(),
        )
        .expect_err("zero is refused");
        assert!(
            err.to_string().contains(
                "CONNECTOR_HOST_IDLE_TIMEOUT_MS: expected a whole number of milliseconds"
            ),
            "{err}"
        );
        let err = load(
            None,
            env(&[
                ("CONNECTOR_HOST_GUEST_MEMORY_TOTAL_MIB", "32"),
                ("CONNECTOR_HOST_MEMORY_MIB", "64"),
            ]),
            &ServeFlags::default(),
        )
        .expect_err("a total below one guest's limit is refused");
        assert!(
            err.to_string().contains("at least limits.memory_mib"),
            "{err}"
        );
    }

    #[test]
    fn cors_origins_are_origins() {
        let file = toml_file(
            "[server]\ncors_origins = [\"HTTP://localhost:6274\", \"https://app.example.com\"]\n",
        );
        let config = load(Some(&file), no_env(), &ServeFlags::default()).expect("loads");
        assert_eq!(
            config.cors_origins,
            ["http://localhost:6274", "https://app.example.com"]
        );
        let config = load(
            None,
            env(&[("CONNECTOR_HOST_CORS_ORIGINS", "*")]),
            &ServeFlags::default(),
        )
        .expect("loads");
        assert_eq!(config.cors_origins, ["*"]);
        for bad in [
            "app.example.com",
            "https://a.example/path",
            "ftp://a.example",
        ] {
            let err = load(
                None,
                env(&[("CONNECTOR_HOST_CORS_ORIGINS", bad)]),
                &ServeFlags::default(),
            )
            .expect_err(bad);
            assert!(err.to_string().contains("browser origins"), "{err}");
        }
    }

    #[test]
    fn a_connector_memory_bound_sizes_the_slots_and_stays_within_the_total() {
        let file = toml_file("[connectors.probe-py]\nmemory_mib = 160\n[connectors.acme]\n");
        let config = load(Some(&file), env(&[]), &ServeFlags::default()).expect("loads");
        assert_eq!(config.connector("probe-py").memory_mib, Some(160));
        assert_eq!(config.connector("acme").memory_mib, None);
        let limits = config.runtime_limits();
        assert_eq!(limits.largest_connector_memory_bytes, 160 * 1024 * 1024);
        assert_eq!(limits.instance_memory_bytes(), 160 * 1024 * 1024);
        assert_eq!(limits.memory_bytes, config.limits.memory_bytes);
        for bad in ["0", "4096"] {
            let file = toml_file(&format!(
                "[limits]\nguest_memory_total_mib = 2048\n[connectors.x]\nmemory_mib = {bad}\n"
            ));
            let err = load(Some(&file), env(&[]), &ServeFlags::default()).expect_err(bad);
            assert!(err.to_string().contains("connectors.x.memory_mib"), "{err}");
        }
    }

    #[test]
    fn empty_env_values_count_as_unset() {
        let file = toml_file("listen = \"127.0.0.1:1111\"\n");
        let config = load(
            Some(&file),
            env(&[("CONNECTOR_HOST_LISTEN", "")]),
            &ServeFlags::default(),
        )
        .expect("loads");
        assert_eq!(config.listen, "127.0.0.1:1111".parse().expect("addr"));
    }

    #[test]
    fn connector_settings_and_env_webhook_secret_first() {
        let file = toml_file(
            r#"
[connectors.github]
webhook_secrets = ["new-secret", "old-secret"]
allowed_hosts = ["api.github.com"]
secrets = { pat = "ghp_x" }

[connectors.my-conn]
allow_private_networks = true
"#,
        );
        let config = load(
            Some(&file),
            env(&[
                ("CONNECTOR_HOST_GITHUB_WEBHOOK_SECRET", "env-secret"),
                ("CONNECTOR_HOST_MY_CONN_WEBHOOK_SECRET", "mine"),
                ("CONNECTOR_HOST_OTHER_WEBHOOK_SECRET", "other"),
            ]),
            &ServeFlags::default(),
        )
        .expect("loads");
        let github = config.connector("github");
        assert_eq!(
            github.webhook_secrets,
            vec!["env-secret", "new-secret", "old-secret"]
        );
        assert_eq!(
            github.allowed_hosts,
            Some(vec!["api.github.com".to_string()])
        );
        assert!(!github.allow_private_networks);
        assert_eq!(github.secrets.get("pat").map(String::as_str), Some("ghp_x"));

        let mine = config.connector("my-conn");
        assert!(mine.allow_private_networks);
        assert_eq!(
            mine.webhook_secrets,
            vec!["mine"],
            "the env form MY_CONN finds the slug my-conn"
        );

        // A connector configured only through the environment.
        assert_eq!(config.connector("other").webhook_secrets, vec!["other"]);
        // ... also when its slug is spelt with a dash.
        let config = load(
            None,
            env(&[("CONNECTOR_HOST_ACME_TEST_WEBHOOK_SECRET", "s")]),
            &ServeFlags::default(),
        )
        .expect("loads");
        assert_eq!(config.connector("acme-test").webhook_secrets, vec!["s"]);
        assert_eq!(config.connector("acme_test").webhook_secrets, vec!["s"]);
        assert_eq!(config.connector("nothing"), ConnectorSettings::default());

        // The env secret is not listed twice when the file has it too.
        let file = toml_file("[connectors.github]\nwebhook_secrets = [\"a\", \"b\"]\n");
        let config = load(
            Some(&file),
            env(&[("CONNECTOR_HOST_GITHUB_WEBHOOK_SECRET", "b")]),
            &ServeFlags::default(),
        )
        .expect("loads");
        assert_eq!(config.connector("github").webhook_secrets, vec!["b", "a"]);
    }

    #[test]
    fn github_app_needs_both_id_and_key() {
        let file = toml_file("[github_app]\napp_id = 123\nprivate_key_path = \"/keys/file.pem\"\n");
        let config = load(Some(&file), no_env(), &ServeFlags::default()).expect("loads");
        let app = config.github_app.expect("configured");
        assert_eq!(app.app_id, "123");
        assert_eq!(app.api_url, DEFAULT_GITHUB_API_URL);

        // Env beats file field by field.
        let config = load(
            Some(&file),
            env(&[("CONNECTOR_HOST_GITHUB_PRIVATE_KEY_PATH", "/keys/env.pem")]),
            &ServeFlags::default(),
        )
        .expect("loads");
        let app = config.github_app.expect("configured");
        assert_eq!(app.app_id, "123");
        assert_eq!(app.private_key_path, PathBuf::from("/keys/env.pem"));

        let err = load(
            None,
            env(&[("CONNECTOR_HOST_GITHUB_APP_ID", "Iv1.abc")]),
            &ServeFlags::default(),
        )
        .expect_err("half an app");
        assert_eq!(
            err.setting(),
            Some("environment variable CONNECTOR_HOST_GITHUB_APP_ID")
        );
        assert!(err.to_string().contains("private_key_path"), "{err}");

        let file = toml_file("[github_app]\nprivate_key_path = \"/k.pem\"\n");
        let err = load(Some(&file), no_env(), &ServeFlags::default()).expect_err("half an app");
        assert!(err.to_string().contains("github_app.app_id"), "{err}");
    }

    #[test]
    fn unknown_keys_are_named() {
        for (text, key) in [
            (
                "listen = \"127.0.0.1:1\"\nlisten_addr = \"x\"\n",
                "listen_addr",
            ),
            ("[limits]\ntimeout_ms = 5\n", "timeout_ms"),
            (
                "[connectors.github]\nwebhook_secret = \"x\"\n",
                "webhook_secret",
            ),
            ("[github_app]\nkey = \"x\"\n", "key"),
            ("[server]\nport = 1\n", "port"),
        ] {
            let file = toml_file(text);
            let err = load(Some(&file), no_env(), &ServeFlags::default()).expect_err(text);
            assert!(matches!(err, ConfigError::Parse { .. }), "{err:?}");
            let message = err.to_string();
            assert!(
                message.contains(&format!("unknown field `{key}`")),
                "{message}"
            );
            assert!(
                message.contains(&file.path().display().to_string()),
                "{message}"
            );
        }
    }

    #[test]
    fn database_urls_never_echo_credentials() {
        let err = load(
            None,
            env(&[("CONNECTOR_HOST_DATABASE_URL", "mysql://root:hunter2@db/x")]),
            &ServeFlags::default(),
        )
        .expect_err("mysql is not a supported database");
        assert!(!err.to_string().contains("hunter2"), "{err}");
        let config = load(
            None,
            env(&[(
                "CONNECTOR_HOST_DATABASE_URL",
                "postgres://host:hunter2@db.internal:5432/ch",
            )]),
            &ServeFlags::default(),
        )
        .expect("postgres URLs are accepted");
        let shown = format!("{config:?}");
        assert!(!shown.contains("hunter2"), "{shown}");
        assert!(shown.contains("db.internal:5432/ch"), "{shown}");
        let config = load(
            None,
            env(&[(
                "CONNECTOR_HOST_DATABASE_URL",
                "postgres://db.internal/ch?sslmode=disable&password=hunter2&user=ch",
            )]),
            &ServeFlags::default(),
        )
        .expect("postgres URLs with options are accepted");
        let shown = format!("{config:?}");
        assert!(!shown.contains("hunter2"), "{shown}");
        assert!(
            shown.contains("sslmode=disable&password=***&user=ch"),
            "{shown}"
        );
    }

    #[test]
    fn bad_values_name_the_setting_and_the_form() {
        // (TOML text, environment, flags, the setting named, the expected form mentioned)
        type Case<'a> = (
            Option<&'a str>,
            Vec<(String, String)>,
            ServeFlags,
            &'a str,
            &'a str,
        );
        let cases: Vec<Case> = vec![
            (
                None,
                no_env(),
                ServeFlags {
                    listen: Some("nonsense".into()),
                    data_dir: None,
                },
                "--listen",
                "127.0.0.1:8787",
            ),
            (
                None,
                env(&[("CONNECTOR_HOST_LISTEN", "127.0.0.1")]),
                ServeFlags::default(),
                "CONNECTOR_HOST_LISTEN",
                "address and port",
            ),
            (
                Some("listen = \"::1:80\"\n"),
                no_env(),
                ServeFlags::default(),
                "`listen`",
                "[::1]:8787",
            ),
            (
                None,
                env(&[("CONNECTOR_HOST_CALL_TIMEOUT_MS", "10s")]),
                ServeFlags::default(),
                "CONNECTOR_HOST_CALL_TIMEOUT_MS",
                "milliseconds",
            ),
            (
                Some("[limits]\ncall_timeout_ms = \"soon\"\n"),
                no_env(),
                ServeFlags::default(),
                "`limits.call_timeout_ms`",
                "milliseconds",
            ),
            (
                Some("[limits]\ncall_timeout_ms = 0\n"),
                no_env(),
                ServeFlags::default(),
                "`limits.call_timeout_ms`",
                "from 1",
            ),
            (
                Some("[limits]\ncall_timeout_ms = 1.5\n"),
                no_env(),
                ServeFlags::default(),
                "`limits.call_timeout_ms`",
                "whole number",
            ),
            (
                Some("[limits]\nmemory_mib = 0\n"),
                no_env(),
                ServeFlags::default(),
                "`limits.memory_mib`",
                "MiB",
            ),
            (
                None,
                env(&[("CONNECTOR_HOST_MEMORY_MIB", "0")]),
                ServeFlags::default(),
                "CONNECTOR_HOST_MEMORY_MIB",
                "MiB",
            ),
            (
                None,
                env(&[("CONNECTOR_HOST_MEMORY_MIB", "-5")]),
                ServeFlags::default(),
                "CONNECTOR_HOST_MEMORY_MIB",
                "MiB",
            ),
            (
                Some("[limits]\nmax_webhook_bytes = -1\n"),
                no_env(),
                ServeFlags::default(),
                "`limits.max_webhook_bytes`",
                "bytes",
            ),
            (
                None,
                env(&[("CONNECTOR_HOST_DATABASE_URL", "mysql://root:hunter2@db/x")]),
                ServeFlags::default(),
                "CONNECTOR_HOST_DATABASE_URL",
                "postgres://",
            ),
            (
                Some("[connectors.Bad_Slug]\n"),
                no_env(),
                ServeFlags::default(),
                "`connectors.Bad_Slug`",
                "slug",
            ),
            (
                Some("[connectors.github]\nwebhook_secrets = [\"\"]\n"),
                no_env(),
                ServeFlags::default(),
                "`connectors.github.webhook_secrets[0]`",
                "non-empty",
            ),
            (
                Some("[connectors.github]\nallowed_hosts = [\"https://api.github.com\"]\n"),
                no_env(),
                ServeFlags::default(),
                "`connectors.github.allowed_hosts[0]`",
                "host name",
            ),
            (
                None,
                env(&[("CONNECTOR_HOST_GITHUB_API_URL", "api.github.com")]),
                ServeFlags::default(),
                "CONNECTOR_HOST_GITHUB_API_URL",
                "https://",
            ),
            (
                Some("[github_app]\napp_id = true\nprivate_key_path = \"k\"\n"),
                no_env(),
                ServeFlags::default(),
                "`github_app.app_id`",
                "positive integer",
            ),
            (
                Some("operator_token = \"   \"\n"),
                no_env(),
                ServeFlags::default(),
                "`operator_token`",
                "non-empty",
            ),
            (
                None,
                env(&[("CONNECTOR_HOST_bad-slug_WEBHOOK_SECRET", "x")]),
                ServeFlags::default(),
                "CONNECTOR_HOST_bad-slug_WEBHOOK_SECRET",
                "<SLUG>",
            ),
        ];
        for (text, env, flags, setting, expected) in cases {
            let file = text.map(toml_file);
            let err = load(file.as_ref(), env, &flags).expect_err(setting);
            let message = err.to_string();
            assert!(
                matches!(err, ConfigError::Invalid { .. }),
                "{setting}: {err:?}"
            );
            assert!(
                message.contains(setting),
                "`{message}` should name {setting}"
            );
            assert!(
                message.contains(expected),
                "`{message}` should say {expected}"
            );
        }
    }

    #[test]
    fn wrongly_typed_values_are_parse_errors_naming_the_line() {
        let file = toml_file("listen = 8787\n");
        let err = load(Some(&file), no_env(), &ServeFlags::default()).expect_err("integer listen");
        let message = err.to_string();
        assert!(message.contains("listen = 8787"), "{message}");
    }

    #[test]
    fn missing_file_is_a_read_error() {
        let err = HostConfig::load(
            Some(Path::new("/definitely/not/here.toml")),
            no_env(),
            &ServeFlags::default(),
        )
        .expect_err("missing");
        assert!(matches!(err, ConfigError::Read { .. }));
        assert!(err.to_string().contains("/definitely/not/here.toml"));
    }

    #[test]
    fn secrets_are_not_in_debug_output() {
        let file = toml_file(
            r#"
operator_token = "op-token-very-secret"
[connectors.github]
webhook_secrets = ["hook-secret-1", "hook-secret-2"]
secrets = { pat = "named-secret-value" }
"#,
        );
        let config = load(
            Some(&file),
            env(&[("CONNECTOR_HOST_ACME_WEBHOOK_SECRET", "env-hook-secret")]),
            &ServeFlags::default(),
        )
        .expect("loads");
        let debug = format!("{config:?} {:#?}", config);
        for secret in [
            "op-token-very-secret",
            "hook-secret-1",
            "hook-secret-2",
            "named-secret-value",
            "env-hook-secret",
        ] {
            assert!(!debug.contains(secret), "{secret} leaked: {debug}");
        }
        assert!(debug.contains("***"));
        assert!(debug.contains("pat"), "secret names are fine to show");
    }

    #[test]
    fn secret_values_are_not_echoed_in_errors() {
        let err = load(
            None,
            env(&[("CONNECTOR_HOST_OPERATOR_TOKEN", "has space-in-it")]),
            &ServeFlags::default(),
        )
        .expect_err("bad token");
        assert!(!err.to_string().contains("space-in-it"), "{err}");
    }

    #[test]
    fn host_names_ignore_port_case_and_trailing_dot() {
        let config = HostConfig::default();
        for ok in ["127.0.0.1:8787", "localhost", "LocalHost.:1", "[::1]:8787"] {
            assert!(config.allows_host_name(ok), "{ok}");
        }
        for bad in [
            "evil.example.com",
            "127.0.0.2",
            "localhost.evil.com:80",
            "[::2]",
        ] {
            assert!(!config.allows_host_name(bad), "{bad}");
        }
        let config = load(
            None,
            env(&[("CONNECTOR_HOST_ALLOWED_HOST_NAMES", "a.example, b.example")]),
            &ServeFlags::default(),
        )
        .expect("loads");
        assert!(config.allows_host_name("a.example:443") && config.allows_host_name("B.example"));
        assert!(!config.allows_host_name("localhost"));
        assert!(load(
            None,
            env(&[("CONNECTOR_HOST_ALLOWED_HOST_NAMES", "a.example,,")]),
            &ServeFlags::default()
        )
        .is_err());
    }
}
