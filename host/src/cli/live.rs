//! `connector-host dev --live`: keeps a running host in step with the component being
//! developed. After every successful load, the component is installed (or rotated) into
//! the host at `--url`; a unit and an agent for trying it are created when missing and
//! the connector is bound on the unit; then the `--call` tool runs as that agent over
//! HTTP, exactly as an agent's call would.
//!
//! Talks to the host with the blocking operator client, so [`Live::sync`] runs (and
//! makes and drops its client) on a blocking thread.

use serde_json::{json, Value};

use super::client::{Body, Client};
use super::dev::indent;
use super::{CliError, RemoteArgs};

/// The host, unit and agent of a live session.
pub struct Live {
    remote: RemoteArgs,
    unit: String,
    agent: String,
}

/// One round of a live session, with its client.
struct Round<'a> {
    client: Client,
    unit: &'a str,
    agent: &'a str,
}

/// One rebuild to bring into the host.
pub struct Rebuild {
    /// The component's bytes.
    pub bytes: Vec<u8>,
    /// The binding configuration.
    pub config: Value,
    /// The tool to call (a bare name or `<namespace>.<name>`) and its arguments.
    pub call: Option<(String, Value)>,
}

impl Live {
    /// A session against the host at `remote` (checked now), keeping `unit` and `agent`.
    pub fn new(remote: &RemoteArgs, unit: String, agent: String) -> Result<Self, CliError> {
        super::client::parse_base_url(&remote.url)?;
        Ok(Self {
            remote: remote.clone(),
            unit,
            agent,
        })
    }

    /// Installs, binds and calls (blocking); returns the lines to print. A step the host
    /// refuses is reported in the lines and ends this round (the loop goes on with the
    /// next build).
    ///
    /// A host that does not answer (not started yet, restarting) is waited for: `say`
    /// is told at once, then asked again with a backoff that doubles up to
    /// [`MAX_WAIT`], until it answers.
    pub fn sync(&self, rebuild: Rebuild, say: &dyn Fn(&str)) -> Vec<String> {
        let mut lines = Vec::new();
        let round = Client::new(&self.remote).map(|client| Round {
            client,
            unit: &self.unit,
            agent: &self.agent,
        });
        match round {
            Ok(round) => {
                round.wait_for_host(say);
                if let Err(e) = round.steps(rebuild, &mut lines) {
                    lines.push(e.to_string());
                }
            }
            Err(e) => lines.push(format!("live: {}", e.message)),
        }
        lines
    }
}

/// Why a round stopped: each names the step and quotes the host's refusal, indented.
#[derive(Debug, thiserror::Error)]
enum RoundFailed {
    #[error(
        "live: {base} refused the new version: it would break bindings (they stay on the \
         previous version; fix the config schema or `bind`, or unbind them):\n{}",
        indent(&refused.message)
    )]
    BreaksBindings { base: String, refused: CliError },
    #[error(
        "live: {base} pins tool definitions and the new version changes them (the previous \
         version stays; accept with `connector-host connectors install FILE.wasm \
         --accept-tool-changes`):\n{}",
        indent(&refused.message)
    )]
    ToolsPinned { base: String, refused: CliError },
    #[error("live: installing into {base} failed:\n{}", indent(&refused.message))]
    Install { base: String, refused: CliError },
    #[error("live: preparing the {what} failed:\n{}", indent(&refused.message))]
    Prepare {
        what: &'static str,
        refused: CliError,
    },
    #[error("live: binding `{slug}` on unit `{unit}` failed:\n{}", indent(&refused.message))]
    Bind {
        slug: String,
        unit: String,
        refused: CliError,
    },
}

/// The first wait for a host that does not answer, and the longest.
const FIRST_WAIT: std::time::Duration = std::time::Duration::from_millis(500);
const MAX_WAIT: std::time::Duration = std::time::Duration::from_secs(5);

impl Round<'_> {
    /// Returns once the host answers at all (any status: a refusal is for the steps to
    /// report), saying so while it does not.
    fn wait_for_host(&self, say: &dyn Fn(&str)) {
        let mut wait = FIRST_WAIT;
        let mut waited = false;
        loop {
            match self.client.get(&["connectors"], &[]) {
                Err(e) if super::client::is_unreachable(&e) => {
                    say(&format!(
                        "live: waiting for host at {} (not answering; next attempt in {:.1} s)",
                        self.client.base().as_str().trim_end_matches('/'),
                        wait.as_secs_f64()
                    ));
                    std::thread::sleep(wait);
                    wait = (wait * 2).min(MAX_WAIT);
                    waited = true;
                }
                _ => {
                    if waited {
                        say("live: the host answers");
                    }
                    return;
                }
            }
        }
    }

    fn steps(&self, rebuild: Rebuild, lines: &mut Vec<String>) -> Result<(), RoundFailed> {
        let base = self
            .client
            .base()
            .as_str()
            .trim_end_matches('/')
            .to_string();
        let installed = match self.client.post(&["connectors"], Body::Wasm(rebuild.bytes)) {
            Ok(reply) => reply,
            Err(e) if e.message.starts_with("rotation_breaks_bindings") => {
                return Err(RoundFailed::BreaksBindings { base, refused: e });
            }
            Err(e) if e.message.starts_with("tool_definitions_changed") => {
                return Err(RoundFailed::ToolsPinned { base, refused: e });
            }
            Err(e) => return Err(RoundFailed::Install { base, refused: e }),
        };
        let info = installed.body.unwrap_or(Value::Null);
        let slug = info["slug"].as_str().unwrap_or_default().to_string();
        let namespace = info["toolNamespace"]
            .as_str()
            .unwrap_or(slug.as_str())
            .to_string();
        lines.push(format!(
            "live: {} `{slug}` {} into {base} (digest {})",
            if installed.status == reqwest::StatusCode::CREATED {
                "installed"
            } else {
                "rotated"
            },
            info["version"].as_str().unwrap_or("?"),
            info["digest"].as_str().unwrap_or("?"),
        ));
        for change in info["toolChanges"].as_array().into_iter().flatten() {
            let side = |v: &Value| match v {
                Value::Null => "-".to_string(),
                Value::String(s) => format!("{s:?}"),
                other => other.to_string(),
            };
            lines.push(format!(
                "live:   tool change {} {}: {} -> {}",
                change["tool"].as_str().unwrap_or("?"),
                change["field"].as_str().unwrap_or("?"),
                side(&change["before"]),
                side(&change["after"]),
            ));
        }

        let created = self.ensure_unit().map_err(|refused| RoundFailed::Prepare {
            what: "unit",
            refused,
        })?;
        let agent = self
            .ensure_agent()
            .map_err(|refused| RoundFailed::Prepare {
                what: "agent",
                refused,
            })?;
        let bound = self
            .client
            .put(
                &["units", self.unit, "connectors", &slug],
                json!({"config": rebuild.config}),
            )
            .map_err(|refused| RoundFailed::Bind {
                slug: slug.clone(),
                unit: self.unit.to_string(),
                refused,
            })?;
        lines.push(format!(
            "live: unit `{}`{}, agent `{}`{}, `{slug}` {} on `{}`",
            self.unit,
            if created { " (created)" } else { "" },
            self.agent,
            agent,
            if bound.status == reqwest::StatusCode::CREATED {
                "bound"
            } else {
                "rebound"
            },
            self.unit,
        ));

        if let Some((tool, arguments)) = rebuild.call {
            let tool = if tool.contains('.') {
                tool
            } else {
                format!("{namespace}.{tool}")
            };
            let answer = self.client.post(
                &["agents", self.agent, "tool-calls"],
                Body::Json(json!({"tool": tool, "arguments": arguments})),
            );
            match answer {
                Ok(reply) => {
                    let body = reply.body.unwrap_or(Value::Null);
                    let result = super::call::shown_result(&body);
                    let text =
                        serde_json::to_string_pretty(result).unwrap_or_else(|_| result.to_string());
                    lines.push(format!(
                        "live: call {tool} as agent `{}`:\n{}",
                        self.agent,
                        indent(&text)
                    ));
                }
                Err(e) => lines.push(format!(
                    "live: call {tool} as agent `{}` failed:\n{}",
                    self.agent,
                    indent(&e.message)
                )),
            }
        }
        Ok(())
    }

    /// Creates the unit when it does not exist (`true`); never changes an existing one.
    fn ensure_unit(&self) -> Result<bool, CliError> {
        match self.client.get(&["units", self.unit], &[]) {
            Ok(_) => Ok(false),
            Err(e) if e.message.starts_with("not_found") => {
                self.client.put(
                    &["units", self.unit],
                    json!({"parent": null, "displayName": "connector-host dev"}),
                )?;
                Ok(true)
            }
            Err(e) => Err(e),
        }
    }

    /// Creates the agent in the unit when it does not exist (`" (created)"`); an existing
    /// agent must already be in the unit (`""`): the loop never grants an agent that was
    /// not made for it the connector under development.
    fn ensure_agent(&self) -> Result<&'static str, CliError> {
        match self.client.get(&["agents", self.agent], &[]) {
            Ok(reply) => {
                let agent = reply.body.unwrap_or(Value::Null);
                let units = agent["units"].as_array().cloned().unwrap_or_default();
                if units.iter().any(|u| u.as_str() == Some(self.unit)) {
                    return Ok("");
                }
                Err(CliError::usage(format!(
                    "agent `{}` exists and is not in unit `{}`: `dev --live` does not change an existing agent; pass --agent with a new id (it is created), or add the unit to that agent yourself",
                    self.agent, self.unit
                )))
            }
            Err(e) if e.message.starts_with("not_found") => {
                self.client
                    .put(&["agents", self.agent], json!({"units": [self.unit]}))?;
                Ok(" (created)")
            }
            Err(e) => Err(e),
        }
    }
}
