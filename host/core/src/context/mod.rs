//! The runtime context of an agent's container: env vars and files from every connector
//! bound to the agent's units.
//!
//! Each bound connector (its closest binding, primary unit chain first) contributes
//! through its `runtime-context` export. The host, not the connector, enforces who may
//! write what: env names only under `SPRING_CONNECTOR_<SLUG>_` and files only under
//! `.spring/connectors/<slug>/`, so one connector can never overwrite another's context or
//! the container's own variables. The GitHub connector alone is granted one name outside
//! its prefix, `GITHUB_TOKEN`, because `gh` and `git` read it. A breach or a collision
//! fails the whole request: a half-built context is worse than none.

use std::collections::{BTreeMap, HashSet};

use serde::Serialize;
use serde_json::json;

use crate::catalog::{guest_error, Catalog};
use crate::state::State;
use connector_model::error::{ErrorCode, HostError, HostResult};
use connector_model::ids::AgentId;
use connector_model::records::{BindingRecord, Subject};
use connector_runtime::wit;

/// One file of the context.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ContextFile {
    /// Where it goes, relative to the context directory.
    pub path: String,
    /// What it holds.
    pub content: String,
}

/// What an agent's container starts with.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct RuntimeContext {
    /// Environment variables (`SPRING_CONNECTOR_<SLUG>_*`).
    pub env: BTreeMap<String, String>,
    /// Files to place in the container.
    pub files: Vec<ContextFile>,
}

/// The env prefix of connector `slug`: `SPRING_CONNECTOR_<SLUG>_`.
pub fn env_prefix(slug: &str) -> String {
    format!("SPRING_CONNECTOR_{}_", crate::registry::env_spelling(slug))
}

/// Env names outside the prefix that the host grants a connector.
fn granted_names(slug: &str) -> &'static [&'static str] {
    match slug {
        "github" => &["GITHUB_TOKEN"],
        _ => &[],
    }
}

fn conflict(message: String, details: serde_json::Value) -> HostError {
    HostError::new(ErrorCode::ContextConflict, message).with_details(details)
}

fn check_env_name(slug: &str, name: &str) -> HostResult<()> {
    let prefix = env_prefix(slug);
    let valid_chars = !name.is_empty()
        && name
            .bytes()
            .all(|b| b.is_ascii_uppercase() || b.is_ascii_digit() || b == b'_');
    if valid_chars
        && (name.starts_with(&prefix) && name.len() > prefix.len()
            || granted_names(slug).contains(&name))
    {
        Ok(())
    } else {
        Err(conflict(
            format!("connector `{slug}` wrote env var `{name}`, outside its prefix `{prefix}`"),
            json!({"connectors": [slug], "name": name}),
        ))
    }
}

/// A control character as the contract counts them (U+0000–U+001F, U+007F).
fn is_control(c: char) -> bool {
    c <= '\u{1f}' || c == '\u{7f}'
}

fn invalid(message: String, details: serde_json::Value) -> HostError {
    HostError::new(ErrorCode::ContextInvalid, message).with_details(details)
}

/// An env value may hold no control character: printed as a line, it could start another
/// variable.
fn check_env_value(slug: &str, name: &str, value: &str) -> HostResult<()> {
    if value.chars().any(is_control) {
        return Err(invalid(
            format!(
                "connector `{slug}` wrote env var `{name}` with a control character in its value"
            ),
            json!({"connector": slug, "name": name}),
        ));
    }
    Ok(())
}

fn check_file_path(slug: &str, path: &str) -> HostResult<()> {
    let folder = format!(".spring/connectors/{slug}/");
    if !path.starts_with(&folder) || path.contains('\\') {
        return Err(conflict(
            format!("connector `{slug}` wrote file `{path}`, outside its folder `{folder}`"),
            json!({"connectors": [slug], "path": path}),
        ));
    }
    let well_formed = path.len() > folder.len()
        && !path.chars().any(is_control)
        && path
            .split('/')
            .all(|seg| !seg.is_empty() && seg != "." && seg != "..");
    if well_formed {
        Ok(())
    } else {
        Err(invalid(
            format!(
                "connector `{slug}` wrote file `{}`: paths may hold no control character and no empty, `.` or `..` segment",
                path.escape_default()
            ),
            json!({"connector": slug, "path": path}),
        ))
    }
}

/// A file that is also another file's folder (`a` and `a/b`) cannot be written.
fn check_no_file_is_a_folder(
    files: &[ContextFile],
    owner: &BTreeMap<String, String>,
) -> HostResult<()> {
    let paths: HashSet<&str> = files.iter().map(|f| f.path.as_str()).collect();
    for file in files {
        let path = file.path.as_str();
        let folder = path
            .match_indices('/')
            .map(|(i, _)| &path[..i])
            .find(|folder| paths.contains(folder));
        if let Some(folder) = folder {
            let slug = owner.get(path).cloned().unwrap_or_default();
            return Err(invalid(
                format!(
                    "connector `{slug}` wrote file `{path}` inside `{folder}`, which is a file"
                ),
                json!({"connector": slug, "path": path, "file": folder}),
            ));
        }
    }
    Ok(())
}

/// The env vars and files the container of `agent` starts with: what the connectors
/// bound to its units (closest binding per connector) contribute, checked.
pub(crate) async fn build(
    state: &State,
    catalog: &Catalog,
    agent: &AgentId,
) -> HostResult<RuntimeContext> {
    let bindings: Vec<BindingRecord> = {
        let dir = state.directory();
        if dir.agent(agent).is_none() {
            return Err(HostError::not_found(format!(
                "agent `{agent}` does not exist"
            )));
        }
        let units =
            crate::grants::unit_order(&dir, &Subject::Agent(agent.to_string())).unwrap_or_default();
        let mut seen = HashSet::new();
        let mut closest = Vec::new();
        for unit in units {
            for b in dir.bindings_of(&unit) {
                if seen.insert(b.connector.clone()) {
                    closest.push(b.clone());
                }
            }
        }
        closest
    };

    let calls =
        bindings.iter().filter_map(|b| {
            let connector = state.registry().get(&b.connector)?;
            // Counted against the agent's share, like its tool calls.
            let sandbox = catalog.sandbox(&b.connector, Some(b)).for_caller(
                connector_runtime::Caller::Agent(std::sync::Arc::from(agent.as_str())),
            );
            let binding = wit::Binding {
                unit: b.unit_id.clone(),
                config: b.config.to_string(),
            };
            let runtime = catalog.runtime().clone();
            Some(async move {
                let result = match connector.component(runtime.limits().call_timeout).await {
                    Ok(component) => runtime.runtime_context(component, &sandbox, binding).await,
                    Err(e) => Err(e),
                };
                (connector.slug().to_string(), result)
            })
        });
    let results = futures::future::join_all(calls).await;

    let mut context = RuntimeContext::default();
    let mut env_owner: BTreeMap<String, String> = BTreeMap::new();
    let mut file_owner: BTreeMap<String, String> = BTreeMap::new();
    for (slug, result) in results {
        let contributed = match result {
            Ok(Ok(ctx)) => ctx,
            Ok(Err(message)) => {
                return Err(HostError::new(
                    ErrorCode::ContextFailed,
                    format!("connector `{slug}` could not build its runtime context: {message}"),
                )
                .with_details(json!({"connector": slug})))
            }
            Err(e) => {
                let mut err = guest_error(e);
                err.message = format!("connector `{slug}`: {}", err.message);
                return Err(err);
            }
        };
        for (name, value) in contributed.env {
            check_env_name(&slug, &name)?;
            check_env_value(&slug, &name, &value)?;
            if let Some(other) = env_owner.insert(name.clone(), slug.clone()) {
                return Err(conflict(
                    format!("connectors `{other}` and `{slug}` both wrote env var `{name}`"),
                    json!({"connectors": [other, slug], "name": name}),
                ));
            }
            context.env.insert(name, value);
        }
        for (path, content) in contributed.files {
            check_file_path(&slug, &path)?;
            if let Some(other) = file_owner.insert(path.clone(), slug.clone()) {
                return Err(conflict(
                    format!("connectors `{other}` and `{slug}` both wrote file `{path}`"),
                    json!({"connectors": [other, slug], "path": path}),
                ));
            }
            context.files.push(ContextFile { path, content });
        }
    }
    context.files.sort_by(|a, b| a.path.cmp(&b.path));
    check_no_file_is_a_folder(&context.files, &file_owner)?;
    Ok(context)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefixes_and_folders_are_enforced() {
        assert_eq!(env_prefix("my-conn"), "SPRING_CONNECTOR_MY_CONN_");
        assert!(check_env_name("acme", "SPRING_CONNECTOR_ACME_X").is_ok());
        assert!(check_env_name("acme", "SPRING_CONNECTOR_ACME_").is_err());
        assert!(check_env_name("acme", "SPRING_CONNECTOR_OTHER_X").is_err());
        assert!(check_env_name("acme", "PATH").is_err());
        assert!(check_env_name("acme", "GITHUB_TOKEN").is_err());
        assert!(check_env_name("github", "GITHUB_TOKEN").is_ok());
        assert!(check_env_name("acme", "SPRING_CONNECTOR_ACME_lower").is_err());
        assert!(check_file_path("acme", ".spring/connectors/acme/a.json").is_ok());
        assert!(check_file_path("acme", ".spring/connectors/acme/sub/a.json").is_ok());
        for bad in [
            ".spring/connectors/other/a",
            ".spring/connectors/acme/../other/a",
            "/etc/passwd",
            ".spring/connectors/acme/",
            ".spring/connectors/acme//a",
            ".spring/connectors/acmex/a",
        ] {
            assert!(check_file_path("acme", bad).is_err(), "{bad}");
        }
        let err = check_env_name("acme", "HOME").unwrap_err();
        assert_eq!(err.code, ErrorCode::ContextConflict);
    }

    #[test]
    fn control_characters_and_files_used_as_folders_are_invalid() {
        assert!(check_env_value("acme", "SPRING_CONNECTOR_ACME_X", "a b=c 'q'").is_ok());
        for bad in ["a\nLD_PRELOAD=/x.so", "a\r", "\u{0}", "a\u{7f}", "\t"] {
            let err = check_env_value("acme", "SPRING_CONNECTOR_ACME_X", bad).expect_err(bad);
            assert_eq!(err.code, ErrorCode::ContextInvalid);
        }
        let err = check_file_path("acme", ".spring/connectors/acme/a\nb").unwrap_err();
        assert_eq!(err.code, ErrorCode::ContextInvalid);
        let files = |paths: &[&str]| -> Vec<ContextFile> {
            paths
                .iter()
                .map(|p| ContextFile {
                    path: p.to_string(),
                    content: String::new(),
                })
                .collect()
        };
        let owner = BTreeMap::new();
        let ok = files(&[
            ".spring/connectors/acme/a",
            ".spring/connectors/acme/a.b",
            ".spring/connectors/acme/ab/c",
        ]);
        assert!(check_no_file_is_a_folder(&ok, &owner).is_ok());
        let bad = files(&[
            ".spring/connectors/acme/a",
            ".spring/connectors/acme/a.b",
            ".spring/connectors/acme/a/b",
        ]);
        let err = check_no_file_is_a_folder(&bad, &owner).unwrap_err();
        assert_eq!(err.code, ErrorCode::ContextInvalid);
    }
}
