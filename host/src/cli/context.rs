//! `connector-host context AGENT`: what an agent's container starts with.

use std::path::{Component, Path, PathBuf};

use clap::Args;
use serde_json::Value;

use super::client::Client;
use super::CliError;

/// `context`.
#[derive(Debug, Args)]
#[command(
    after_help = "Examples:\n  connector-host context ada                 # the JSON answer\n  connector-host context ada --env           # KEY=value lines (for `env $(...)` or an env file)\n  connector-host context ada --write-files /work   # writes .spring/connectors/<slug>/... under /work"
)]
pub struct ContextArgs {
    /// The agent.
    #[arg(value_name = "AGENT")]
    pub agent: String,
    /// Print the env vars as KEY=value lines instead of JSON.
    #[arg(long)]
    pub env: bool,
    /// Write the files under DIR (created if missing) and print their paths.
    #[arg(long, value_name = "DIR")]
    pub write_files: Option<PathBuf>,
}

/// Runs `context`.
pub fn run(client: &Client, args: ContextArgs) -> Result<(), CliError> {
    let reply = client.get(&["agents", &args.agent, "runtime-context"], &[])?;
    let body = reply.body.unwrap_or(Value::Null);
    if !args.env && args.write_files.is_none() {
        super::print_json(&body);
        return Ok(());
    }
    if args.env {
        if let Some(env) = body["env"].as_object() {
            for (k, v) in env {
                println!("{k}={}", v.as_str().unwrap_or_default());
            }
        }
    }
    if let Some(dir) = args.write_files {
        for file in body["files"].as_array().into_iter().flatten() {
            let rel = file["path"].as_str().unwrap_or_default();
            let target = safe_join(&dir, rel).ok_or_else(|| {
                CliError::failed(format!(
                    "refusing to write `{rel}`: not a relative path inside {}",
                    dir.display()
                ))
            })?;
            if let Some(parent) = target.parent() {
                std::fs::create_dir_all(parent).map_err(|e| {
                    CliError::failed(format!("cannot create {}: {e}", parent.display()))
                })?;
            }
            std::fs::write(&target, file["content"].as_str().unwrap_or_default())
                .map_err(|e| CliError::failed(format!("cannot write {}: {e}", target.display())))?;
            eprintln!("wrote {}", target.display());
        }
    }
    Ok(())
}

/// `dir/rel` when `rel` is a plain relative path (no `..`, not absolute).
fn safe_join(dir: &Path, rel: &str) -> Option<PathBuf> {
    let rel = Path::new(rel);
    if rel.components().all(|c| matches!(c, Component::Normal(_))) && !rel.as_os_str().is_empty() {
        Some(dir.join(rel))
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::safe_join;
    use std::path::Path;

    #[test]
    fn only_relative_paths_are_written() {
        assert!(safe_join(Path::new("/w"), ".spring/connectors/github/binding.json").is_some());
        assert!(safe_join(Path::new("/w"), "../x").is_none());
        assert!(safe_join(Path::new("/w"), "/etc/passwd").is_none());
        assert!(safe_join(Path::new("/w"), "").is_none());
    }
}
