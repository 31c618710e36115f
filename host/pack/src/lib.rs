//! `connector-host pack`: a `commonagents.info/v1beta2/tool` manifest (YAML) into an
//! ordinary connector component.
//!
//! Why a packer instead of a YAML-reading connector: everything that can be decided ahead
//! of time is decided here, once, with errors that point at a line of the manifest
//! (unknown keys, typos in `{settings.x}`, CEL syntax errors, the tools of a remote MCP
//! server, the operation of an OpenAPI document, the outbound hosts, the binding config
//! schema). The result, a [`declarative_plan::Plan`], is written into the prebuilt
//! interpreter component, which only evaluates it. The packed `.wasm` then installs,
//! binds, is granted and rotates like any other component; the host trusts nothing in it
//! for policy (hosts are intersected with the operator's list, GitHub tokens need the
//! operator's `github_app`, webhook secrets are the operator's).
//!
//! The pieces, one concern each: `yaml` (a YAML tree with positions), `schema` (the
//! JSON Schema blocks), `templates` (`{…}` references), `compile` and `actions` (the
//! mapping), `openapi` (documents and `$ref`s), `mcp` (tool discovery over Streamable
//! HTTP), `events` (webhooks and CEL filters).

mod actions;
mod compile;
mod error;
mod events;
mod mcp;
mod openapi;
mod schema;
mod templates;
mod yaml;

use std::path::Path;

use sha2::{Digest, Sha256};

pub use declarative_plan::Plan;
pub use error::{PackError, PackErrorKind, Problem};

use error::Problems;

/// How to pack.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PackOptions {
    /// The connector version; default `0.0.0+<first 12 hex digits of the sha256 of the
    /// compiled plan>` (see [`default_version`]).
    pub version: Option<String>,
    /// The MCP server to list tools from when an `mcp` block's URL is a setting
    /// (`url: "{settings.mcp_url}"`); its host is allowed too.
    pub mcp_url: Option<String>,
    /// Extra outbound hosts (for URLs whose host is a setting without a default).
    pub allow_hosts: Vec<String>,
}

/// A packed manifest.
#[derive(Debug, Clone)]
pub struct Packed {
    /// The component: the interpreter with the plan in its slot.
    pub component: Vec<u8>,
    /// What was packed.
    pub plan: Plan,
    /// Things worth telling the author that did not stop the pack.
    pub warnings: Vec<String>,
}

/// Packs the manifest at `path` (OpenAPI documents are found relative to its folder, and
/// only inside it).
pub fn pack_file(path: &Path, options: &PackOptions) -> Result<Packed, PackError> {
    let shown = path.display().to_string();
    let bytes = std::fs::read(path).map_err(|e| {
        PackError::whole(
            PackErrorKind::Unreadable,
            &shown,
            format!("could not read the manifest: {e}"),
        )
    })?;
    let text = String::from_utf8(bytes).map_err(|_| {
        PackError::whole(
            PackErrorKind::Unreadable,
            &shown,
            "the manifest is not UTF-8 text",
        )
    })?;
    // A bare file name (`pets.yaml`) has the empty path as its parent: its folder is
    // the current one.
    let base_dir = match path.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => dir,
        _ => Path::new("."),
    };
    pack_str(&text, &shown, base_dir, options)
}

/// Packs manifest text. `file_name` names it in problems; `base_dir` is where relative
/// paths (OpenAPI `spec`) are found, and the folder they must stay inside.
pub fn pack_str(
    yaml: &str,
    file_name: &str,
    base_dir: &Path,
    options: &PackOptions,
) -> Result<Packed, PackError> {
    check_options(file_name, options)?;
    let mut problems = Problems::new(file_name);
    let root = match yaml::parse(yaml) {
        Ok(root) => root,
        Err(e) => {
            problems.at(e.pos, "", format!("not valid YAML: {}", e.message));
            return Err(problems.into_error());
        }
    };
    // Without --version: derived from the plan below, once it is known.
    let version = options.version.clone().unwrap_or_default();
    let (plan, warnings) = compile::compile(&root, base_dir, options, version, &mut problems);
    let mut plan = match plan {
        Some(plan) if problems.is_empty() => plan,
        _ => {
            if problems.is_empty() {
                problems.at(
                    root.pos,
                    "",
                    "the manifest could not be compiled (no specific problem was found: please \
                     report this)",
                );
            }
            return Err(problems.into_error());
        }
    };
    let unserialisable = |e: serde_json::Error| {
        PackError::whole(
            PackErrorKind::Build,
            file_name,
            format!("could not serialise the plan: {e}"),
        )
    };
    if options.version.is_none() {
        plan.version = default_version(&serde_json::to_vec(&plan).map_err(unserialisable)?);
    }
    let slot = declarative_plan::encode(&plan).map_err(unserialisable)?;
    let component = declarative_plan::embed(connector_bundled::DECLARATIVE_INTERPRETER, &slot)
        .map_err(|e| PackError::whole(PackErrorKind::Build, file_name, e.to_string()))?;
    Ok(Packed {
        component,
        plan,
        warnings,
    })
}

/// The version of a plan packed without `--version`: `0.0.0+` and the first 12 hex digits
/// of the sha256 of its JSON (with an empty `version`). Everything the component does is
/// in the plan, so a changed OpenAPI document or MCP server tool list changes it too,
/// while a manifest edit that changes nothing (a comment) does not.
pub(crate) fn default_version(plan_json: &[u8]) -> String {
    let digest = hex::encode(Sha256::digest(plan_json));
    format!("0.0.0+{}", &digest[..12])
}

/// An `--allow-host` value as an allowed host (lower case, no trailing dot, an IPv6
/// address without brackets), or `None` when it is not a bare host name (a scheme, a
/// port, a path).
pub(crate) fn allow_host(flag: &str) -> Option<String> {
    let h = flag.trim().trim_end_matches('.').to_ascii_lowercase();
    let unbracketed = h
        .strip_prefix('[')
        .and_then(|x| x.strip_suffix(']'))
        .unwrap_or(&h);
    if unbracketed.parse::<std::net::Ipv6Addr>().is_ok() {
        return Some(unbracketed.to_string());
    }
    let bare = h.strip_prefix("*.").unwrap_or(&h);
    let ok = !bare.is_empty()
        && bare
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-'))
        && !bare.starts_with('.')
        && !bare.contains("..");
    ok.then_some(h)
}

/// Checks the options that do not depend on the manifest.
fn check_options(file: &str, options: &PackOptions) -> Result<(), PackError> {
    let mut problems = Vec::new();
    if let Some(v) = &options.version {
        if v.trim().is_empty() || v.chars().any(char::is_control) {
            problems.push("--version must be a non-empty version string like 1.2.0".to_string());
        }
    }
    if let Some(url) = &options.mcp_url {
        if let Err(e) = templates::host_of(url) {
            problems.push(format!("--mcp-url: {e}"));
        }
    }
    for h in &options.allow_hosts {
        if allow_host(h).is_some() {
            continue;
        }
        let bare = h.strip_prefix("*.").unwrap_or(h);
        let port = bare.rsplit_once(':').is_some_and(|(host, port)| {
            !host.is_empty() && !port.is_empty() && port.chars().all(|c| c.is_ascii_digit())
        });
        if port && !bare.contains("://") && !bare.contains('/') {
            problems.push(format!(
                "--allow-host `{h}` has a port, and hosts have none (an allowed host is \
                 allowed on any port): give the host alone, like api.example.com"
            ));
        } else {
            problems.push(format!(
                "--allow-host `{h}` is not a host name: give the bare host, like api.example.com \
                 or *.example.com (no scheme, port or path)"
            ));
        }
    }
    if problems.is_empty() {
        return Ok(());
    }
    Err(PackError {
        kind: PackErrorKind::Options,
        problems: problems
            .into_iter()
            .map(|message| Problem {
                file: file.to_string(),
                line: 0,
                column: 0,
                field: String::new(),
                message,
            })
            .collect(),
    })
}

#[cfg(test)]
pub(crate) mod tests;
