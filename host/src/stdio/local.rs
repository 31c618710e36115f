//! The transport behind `connector-host mcp --local`: the host's own MCP endpoint,
//! opened in this process on the host's data, for the stdio server of [`super`].
//!
//! # Why
//!
//! The bridge to a running host costs two HTTP hops per message (stdio → HTTP → host →
//! HTTP → stdio). When the MCP client runs on the machine that holds the host's data,
//! this process can answer itself: it opens the host's state ([`Host::open_tool_server`])
//! and hands each message to the very handlers `connector-host serve` routes
//! `/mcp/agents/{agent}` to (POST, GET, DELETE of `connector_http::mcp::http`), in memory, without a
//! socket. One implementation of MCP semantics, two transports: same revisions, same
//! `tools/list`, same `tools/call` results and errors, same authentication, sessions and
//! notifications; and the stdio framing (sessions, stateless headers, cancellation, the
//! notification stream) is the bridge's own. Only the HTTP router's own layers are not
//! passed: routing (the path is fixed), CORS (no browser `Origin` here) and the `Host`
//! header check (no socket to rebind).
//!
//! # Freshness
//!
//! `serve` (or the API and CLI through it) keeps writing the database. Like
//! `refresh_first` in the HTTP server, every message is preceded by [`Host::refresh`],
//! which in a tool server checks the state version even on SQLite (one small query) and
//! reloads when another process changed it: a grant or bind committed through `serve`
//! before a message is written to stdin is seen by that message (read-your-writes). The
//! same check runs every 200 ms in the background, so `notifications/tools/list_changed`
//! reaches an open session without a message of its own.
//!
//! On SQLite that check is a query on the blocking pool: two thread hand-overs per
//! message, the largest part of a call's cost here. So a `CommitWatch` asks first, on
//! the event loop, whether anyone committed to the file at all since the last completed
//! check (`PRAGMA data_version` on a read-only connection of its own: a few microseconds,
//! exact, not a guess from file times), and if so, whether the file's state version has
//! moved past the one this host's memory reflects (one row). Only then does the full
//! check run. Most commits are not state changes: every tool call commits its audit
//! record, so without the second question every message after a call would pay the
//! hand-overs. A message costs none unless the state changed.
//!
//! # Cost
//!
//! Where a message's time goes against the Python floor, and which steps paid:
//! `docs/decisions/2026-11-23-mcp-local-cost.md`.
//!
//! # What it does not do
//!
//! It listens on no socket, writes nothing at start (it adopts the connectors `serve`
//! stored: no bundled or directory installs), and runs no webhook work (no delivery
//! resume, no sweep): those stay with `serve`.
//!
//! # Authorization
//!
//! Reading the data directory is operator-level access. The process still serves one
//! agent only: it requires the agent to exist, and authenticates each message with a
//! token of that agent minted here (the same check a remote client's token passes), so
//! only that agent's effective tools are listed and callable, and a deleted agent gets
//! nothing. The token is minted again when it is refused (revoked tokens) or a day old.

use std::time::{Duration, Instant};

use std::sync::Arc;

use axum::body::Body;
use axum::http::{header, HeaderMap, HeaderValue, Method, StatusCode};
use axum::response::Response;
use bytes::Bytes;
use parking_lot::Mutex;
use serde_json::Value;

use connector_core::config::HostConfig;
use connector_core::host::Host;
use connector_http::mcp::jsonrpc::{INTERNAL_ERROR, NOT_FOUND};
use connector_model::error::ErrorCode;
use connector_model::ids::AgentId;
use connector_store::sqlite::FileWatch;

/// How long a minted token is valid (the most a host issues).
const TOKEN_TTL_SECONDS: u64 = 30 * 24 * 3600;
/// A token older than this is replaced before its next use.
const TOKEN_RENEW_AFTER: Duration = Duration::from_secs(24 * 3600);

/// The MCP endpoint of one agent, served by a host opened in this process.
pub struct Local {
    host: Host,
    agent: AgentId,
    /// The endpoint served: the agent's tools, named as asked.
    endpoint: connector_http::mcp::Endpoint,
    /// The endpoint's sessions (this process's own: a session lives in the process that
    /// opened it, as with any host).
    sessions: Arc<connector_http::mcp::session::Sessions>,
    auth: Mutex<(HeaderValue, Instant)>,
    /// On SQLite: whether anything was committed since the last full check.
    watch: Option<CommitWatch>,
}

impl Local {
    /// Opens the host's state on `config` as a tool server and checks that `agent`
    /// exists; its tools are named as `naming` says.
    pub async fn open(
        mut config: HostConfig,
        agent: &AgentId,
        naming: connector_http::mcp::Naming,
    ) -> Result<Local, OpenError> {
        config.bundled = connector_bundled::components();
        let data_dir = config.data_dir.clone();
        // Opened before the host loads its state: nothing committed in between can be
        // missed (the first message runs the full check either way).
        let watch = sqlite_file(&config).and_then(|file| CommitWatch::open(&file));
        let host = Host::open_tool_server(config)
            .await
            .map_err(|e| OpenError::Data {
                dir: data_dir.clone(),
                source: e.into(),
            })?;
        let auth = mint(&host, agent).await.map_err(|e| match e {
            Minting::NoAgent => OpenError::NoAgent {
                agent: agent.to_string(),
                dir: data_dir,
            },
            Minting::Failed(reason) => OpenError::Unauthorized {
                agent: agent.to_string(),
                reason,
            },
        })?;
        Ok(Local {
            sessions: Arc::new(connector_http::mcp::session::Sessions::new(host.clone())),
            host,
            agent: agent.clone(),
            endpoint: connector_http::mcp::Endpoint {
                agent: agent.as_str().into(),
                naming,
            },
            auth: Mutex::new((auth, Instant::now())),
            watch,
        })
    }

    /// The agent served.
    pub fn agent(&self) -> &str {
        &self.agent
    }

    /// Sends one request to the endpoint, after catching up with other processes'
    /// writes, and returns its answer (a JSON-RPC error with status `503` when the
    /// database cannot be asked, `404` when the agent no longer exists).
    pub async fn send(&self, method: Method, headers: HeaderMap, body: Bytes) -> Response {
        if let Err(e) = self.catch_up().await {
            return rpc_error(
                StatusCode::SERVICE_UNAVAILABLE,
                INTERNAL_ERROR,
                &format!(
                    "the host's database did not answer ({}); retry shortly",
                    e.message
                ),
            );
        }
        let renew = self.auth.lock().1.elapsed() > TOKEN_RENEW_AFTER;
        if renew {
            if let Ok(fresh) = mint(&self.host, &self.agent).await {
                *self.auth.lock() = (fresh, Instant::now());
            }
        }
        let auth = self.auth.lock().0.clone();
        let response = self
            .call(method.clone(), headers.clone(), body.clone(), auth)
            .await;
        if response.status() != StatusCode::UNAUTHORIZED {
            return response;
        }
        // The token was refused: the agent's tokens were revoked, or the agent is gone.
        match mint(&self.host, &self.agent).await {
            Ok(fresh) => {
                *self.auth.lock() = (fresh.clone(), Instant::now());
                self.call(method, headers, body, fresh).await
            }
            Err(Minting::NoAgent) => rpc_error(
                StatusCode::NOT_FOUND,
                NOT_FOUND,
                &format!(
                    "agent `{}` no longer exists in the host's data; its tools are gone",
                    self.agent
                ),
            ),
            Err(Minting::Failed(_)) => response,
        }
    }

    /// Makes every change committed before this call visible to the host in this
    /// process ([`Host::refresh`]), skipping the full check when the SQLite file has had
    /// no commit since the last one completed, or none that moved its state version.
    async fn catch_up(&self) -> connector_model::error::HostResult<()> {
        let Some(watch) = &self.watch else {
            return self.host.refresh().await;
        };
        let version = watch.file.commits();
        if version.is_some() && version == *watch.checked.lock() {
            return Ok(());
        }
        // Something was committed. Read after `version`, a state version equal to the
        // one in memory means none of it (audit records, deliveries, messages) changed
        // the state.
        let unchanged = version.is_some()
            && watch.file.state_version() == Some(self.host.applied_state_version());
        if !unchanged {
            self.host.refresh().await?;
        }
        if let Some(version) = version {
            // The check started after `version` was read, so it covers every commit
            // that `version` counts.
            let mut checked = watch.checked.lock();
            if checked.is_none_or(|c| c < version) {
                *checked = Some(version);
            }
        }
        Ok(())
    }

    async fn call(
        &self,
        method: Method,
        mut headers: HeaderMap,
        body: Bytes,
        auth: HeaderValue,
    ) -> Response {
        headers.insert(header::AUTHORIZATION, auth);
        let (sessions, endpoint) = (&self.sessions, &self.endpoint);
        match method {
            Method::POST => {
                connector_http::mcp::http::post_to(sessions, endpoint, headers, Body::from(body))
                    .await
            }
            Method::GET => connector_http::mcp::http::get_from(sessions, endpoint, headers).await,
            Method::DELETE => {
                connector_http::mcp::http::delete_at(sessions, endpoint, headers).await
            }
            _ => rpc_error(
                StatusCode::METHOD_NOT_ALLOWED,
                INTERNAL_ERROR,
                "the MCP endpoint takes POST, GET and DELETE",
            ),
        }
    }
}

/// Why the host's data could not be served for an agent.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum OpenError {
    /// The host's data could not be opened.
    #[error("cannot open the host's data in {}", dir.display())]
    Data {
        /// The data directory.
        dir: std::path::PathBuf,
        /// Why.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync + 'static>,
    },
    /// The data holds no such agent.
    #[error(
        "there is no agent `{agent}` in the host's data in {}: create it (`connector-host \
         agents put {agent} --unit UNIT`), or point --data-dir / --config at the host that \
         has it",
        dir.display()
    )]
    NoAgent {
        /// The agent asked for.
        agent: String,
        /// The data directory.
        dir: std::path::PathBuf,
    },
    /// A token for the agent could not be made.
    #[error("cannot authorize agent `{agent}`: {}", reason.message)]
    Unauthorized {
        /// The agent asked for.
        agent: String,
        /// Why.
        reason: connector_model::error::HostError,
    },
}

enum Minting {
    NoAgent,
    Failed(connector_model::error::HostError),
}

/// `Authorization: Bearer <a token of agent>`.
async fn mint(host: &Host, agent: &AgentId) -> Result<HeaderValue, Minting> {
    let issued = host
        .issue_agent_token(agent, Some(TOKEN_TTL_SECONDS))
        .await
        .map_err(|e| {
            if e.code == ErrorCode::NotFound {
                Minting::NoAgent
            } else {
                Minting::Failed(e)
            }
        })?;
    let mut value = HeaderValue::from_str(&format!("Bearer {}", issued.token)).map_err(|e| {
        Minting::Failed(
            connector_model::error::HostError::internal(
                "the minted token is not a valid header value",
            )
            .with_source(e),
        )
    })?;
    value.set_sensitive(true);
    Ok(value)
}

fn rpc_error(status: StatusCode, code: i64, message: &str) -> Response {
    connector_http::mcp::http::rpc_error(status, &Value::Null, code, message)
}

/// The SQLite file the configuration names, if its database is one.
pub fn sqlite_file(config: &HostConfig) -> Option<std::path::PathBuf> {
    let Some(url) = &config.database_url else {
        return Some(config.data_dir.join("host.db"));
    };
    let rest = url.strip_prefix("sqlite:")?;
    let path = rest.strip_prefix("//").unwrap_or(rest);
    (!path.is_empty() && path != ":memory:" && !path.contains('?'))
        .then(|| std::path::PathBuf::from(path))
}

/// Watches an SQLite file for commits by any connection, this process's own writer
/// included ([`FileWatch`]), and remembers up to which it has checked.
struct CommitWatch {
    file: FileWatch,
    /// The newest `data_version` a completed full check began after.
    checked: Mutex<Option<i64>>,
}

impl CommitWatch {
    /// A read-only connection to `file`; `None` (every message runs the full check) when
    /// it cannot be had.
    fn open(file: &std::path::Path) -> Option<CommitWatch> {
        match FileWatch::open(file) {
            Ok(file) => Some(CommitWatch {
                file,
                checked: Mutex::new(None),
            }),
            Err(e) => {
                tracing::debug!(file = %file.display(), error = %e, "no commit watch: every message runs the full state check");
                None
            }
        }
    }
}
