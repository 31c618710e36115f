//! `connector-host pack TOOL.yaml -o TOOL.wasm`: compiles a declarative tool manifest into
//! a connector component (see [`connector_pack`]).

use std::io::Write;
use std::path::{Path, PathBuf};

use clap::Args;
use sha2::{Digest, Sha256};

use super::CliError;
use connector_pack::{pack_file, PackError, PackErrorKind, PackOptions, Packed};

pub(crate) const HELP: &str = "\
Reads a `commonagents.info/v1beta2/tool` manifest, checks it, and writes an ordinary connector
component that installs, binds and rotates like any other (`connector-host connectors install`).

What it becomes: `name` is the slug and `namespace` the tool namespace; `settings` become
operator-only binding config (secret-like ones write-only); parameters with
`require_binding: true` become binding config and leave the tools' inputs; each action is one
tool `<namespace>.<action>` (`stateless_http`, `openapi`, `mcp`); `events` become webhooks
(verified with X-Hub-Signature-256 against connectors.<slug>.webhook_secrets), their `filter`
decides per binding. `auth.github()` adds a required `installationId` to the binding config.

Everything is checked before anything is written: unknown keys, `{…}` references to undeclared
names, CEL syntax and functions, the OpenAPI operation (its document must be inside the
manifest's folder), the MCP server's tools (listed now, over the network).
Every problem is printed as FILE:LINE:COLUMN: FIELD: MESSAGE, and nothing is written.

Outbound hosts are the hosts of literal URLs, of the `default`/`enum` of settings used as a URL's
host, of --mcp-url, and every --allow-host (a bare host: no scheme, port or path). The version
defaults to 0.0.0+<digest of the compiled result>, so it changes when the manifest, an OpenAPI
document it reads or an MCP server's tool list changes what the component does.

Examples:
  connector-host pack github-pr.yaml
  connector-host pack tools/weather.yaml -o build/weather.wasm --version 1.2.0
  connector-host pack remote.yaml --mcp-url http://127.0.0.1:8000/mcp
  connector-host pack crm.yaml --allow-host api.crm.example.com

Exit codes: 0 packed, 1 the manifest is invalid (every problem listed) or the output could not
be written, 2 the manifest could not be read or a flag is malformed.";

/// `pack`.
#[derive(Debug, Args)]
pub struct PackArgs {
    /// The tool manifest (YAML). OpenAPI `spec` paths are relative to its folder, and must
    /// stay inside it.
    #[arg(value_name = "TOOL.yaml")]
    pub manifest: PathBuf,

    /// Where to write the component (its folder is created when missing) [default: the
    /// manifest's path with `.wasm`].
    #[arg(short = 'o', long, value_name = "TOOL.wasm")]
    pub output: Option<PathBuf>,

    /// The connector version [default: 0.0.0+<first 12 hex digits of the sha256 of the
    /// compiled plan>].
    #[arg(long = "version", value_name = "VERSION")]
    pub version: Option<String>,

    /// The MCP server to list tools from when an `mcp` block's `url` is a setting
    /// (`{settings.<key>}`); its host is allowed too.
    #[arg(long = "mcp-url", value_name = "URL")]
    pub mcp_url: Option<String>,

    /// Also allow outbound requests to HOST (repeatable; a bare host, no port): for URLs
    /// whose host is a setting without a default.
    #[arg(long = "allow-host", value_name = "HOST")]
    pub allow_host: Vec<String>,
}

impl PackArgs {
    /// The options `pack` takes from the flags.
    pub fn options(&self) -> PackOptions {
        PackOptions {
            version: self.version.clone(),
            mcp_url: self.mcp_url.clone(),
            allow_hosts: self.allow_host.clone(),
        }
    }

    /// The output path: `-o`, else the manifest's path with `.wasm`.
    pub fn output_path(&self) -> PathBuf {
        self.output
            .clone()
            .unwrap_or_else(|| self.manifest.with_extension("wasm"))
    }
}

/// Runs `pack`.
pub fn run(args: PackArgs) -> Result<(), CliError> {
    let output = args.output_path();
    if output == args.manifest {
        return Err(CliError::usage(format!(
            "the output {} is the manifest itself; pass -o FILE.wasm",
            output.display()
        )));
    }
    let packed = pack_file(&args.manifest, &args.options()).map_err(cli_error)?;
    write_atomically(&output, &packed.component)
        .map_err(|e| CliError::failed(format!("could not write {}: {e}", output.display())))?;
    let summary = summary(&args.manifest, &output, &packed);
    super::print_err(summary.strip_suffix('\n').unwrap_or(&summary));
    Ok(())
}

fn cli_error(e: PackError) -> CliError {
    match e.kind {
        PackErrorKind::Unreadable | PackErrorKind::Options => CliError::usage(e.to_string()),
        PackErrorKind::Invalid => {
            let file = e
                .problems
                .first()
                .map(|p| p.file.clone())
                .unwrap_or_default();
            let n = e.problems.len();
            CliError::failed(format!(
                "{file} is not a valid tool manifest ({n} problem{}); nothing was written:\n{e}",
                if n == 1 { "" } else { "s" }
            ))
        }
        PackErrorKind::Build => CliError::failed(e.to_string()),
    }
}

/// Writes `bytes` to `path` through a temporary file in the same folder and a rename, so
/// `path` is never left half-written.
fn write_atomically(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
        _ => PathBuf::from("."),
    };
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "component.wasm".into());
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    let tmp = dir.join(format!(".{name}.{}.{nanos}.tmp", std::process::id()));
    // `-o build/x.wasm` makes `build/`, as a compiler's output flag would.
    std::fs::create_dir_all(&dir)?;
    let result = (|| {
        let mut file = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&tmp)?;
        file.write_all(bytes)?;
        file.sync_all()?;
        drop(file);
        std::fs::rename(&tmp, path)
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result
}

/// What was packed, for stderr.
fn summary(manifest: &Path, output: &Path, packed: &Packed) -> String {
    let plan = &packed.plan;
    let digest = hex::encode(Sha256::digest(&packed.component));
    let none = |v: Vec<String>| {
        if v.is_empty() {
            "(none)".to_string()
        } else {
            v.join(", ")
        }
    };
    let mut out = format!(
        "packed {} into {} ({} bytes, sha256:{digest})\n",
        manifest.display(),
        output.display(),
        packed.component.len()
    );
    out.push_str(&format!(
        "  slug:          {} (version {})\n",
        plan.slug, plan.version
    ));
    out.push_str(&format!("  namespace:     {}\n", plan.namespace));
    out.push_str(&format!(
        "  tools:         {}\n",
        none(plan.tools.iter().map(|t| t.id.clone()).collect())
    ));
    let mut events = none(plan.events.iter().map(|e| e.name.clone()).collect());
    if plan.webhooks {
        events.push_str(&format!(
            " (webhooks verified with X-Hub-Signature-256 against connectors.{}.webhook_secrets)",
            plan.slug
        ));
    }
    out.push_str(&format!("  events:        {events}\n"));
    out.push_str(&format!(
        "  allowed hosts: {}\n",
        none(plan.allowed_hosts.clone())
    ));
    if let Some(key) = &plan.github_installation_key {
        out.push_str(&format!(
            "  github:        auth.github() tokens for the installation in config `{key}` \
             (needs connectors.{}.github_app = true)\n",
            plan.slug
        ));
    }
    for w in &packed.warnings {
        out.push_str(&format!("warning: {w}\n"));
    }
    if let Some(bundled) = bundled_conflict(&plan.slug) {
        out.push_str(&format!("warning: {bundled}\n"));
    }
    out
}

/// Why a host with the bundled connectors would refuse `slug` (`slug_conflict` or an
/// owned slug), if it would: said at pack time, since the slug is the manifest's `name:`.
fn bundled_conflict(slug: &str) -> Option<String> {
    let bundled = connector_bundled::components();
    let conflicts = |s: &str| {
        bundled
            .iter()
            .map(|c| c.name)
            .find(|name| *name == s || connector_core::registry::slugs_conflict(s, name))
    };
    let other = conflicts(slug)?;
    let why = if other == slug {
        "the slug is taken"
    } else {
        "slug_conflict: their SPRING_CONNECTOR_<SLUG>_ prefixes overlap"
    };
    // A prefix keeps the name recognisable and moves it off the other's prefix.
    let suggestion = ["my-", "x-", "own-"]
        .iter()
        .map(|p| format!("{p}{slug}"))
        .find(|s| connector_model::ids::Slug::parse(s).is_ok() && conflicts(s).is_none());
    let mut text = format!(
        "the slug `{slug}` (the manifest's `name:`) conflicts with the bundled connector \
         `{other}`: a host that installs the bundled connectors (`connector-host serve` \
         does) refuses it ({why}); give the manifest another `name:`"
    );
    if let Some(s) = suggestion {
        text.push_str(&format!(", e.g. `{s}`"));
    }
    Some(text)
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::{run, PackArgs};

    const GITHUB_FILE: &str = include_str!("../../pack/fixtures/github.yaml");

    fn slot_plan(component: &[u8]) -> serde_json::Value {
        let slot = declarative_plan::embedded(component).expect("the component has a filled slot");
        let plan = declarative_plan::decode(slot).expect("the slot holds a plan");
        serde_json::to_value(plan).expect("a plan is JSON")
    }

    #[test]
    fn a_slug_a_bundled_connector_conflicts_with_is_warned_about() {
        let warning = super::bundled_conflict("github-file").expect("conflicts with github");
        assert!(
            warning.contains("`github`") && warning.contains("name:"),
            "{warning}"
        );
        assert!(warning.contains("`my-github-file`"), "{warning}");
        assert!(super::bundled_conflict("github").is_some());
        assert!(super::bundled_conflict("acme").is_some());
        assert!(super::bundled_conflict("gh-file").is_none());
        assert!(super::bundled_conflict("pets").is_none());
    }

    #[test]
    fn the_cli_writes_the_component_whole_or_not_at_all() {
        let dir = tempfile::tempdir().expect("tempdir");
        let manifest = dir.path().join("gh.yaml");
        std::fs::write(&manifest, GITHUB_FILE).expect("write");
        let args = |manifest: &Path| PackArgs {
            manifest: manifest.to_path_buf(),
            output: None,
            version: Some("2.0.0".into()),
            mcp_url: None,
            allow_host: vec![],
        };
        run(args(&manifest)).expect("packs");
        let out = std::fs::read(dir.path().join("gh.wasm")).expect("written next to the manifest");
        assert_eq!(slot_plan(&out)["version"], "2.0.0");

        let bad = dir.path().join("bad.yaml");
        std::fs::write(
            &bad,
            GITHUB_FILE.replace("description: \"Reads the", "descr: \"Reads the"),
        )
        .expect("write");
        let e = run(args(&bad)).expect_err("refused");
        assert_eq!(e.code, 1);
        assert!(
            e.message
                .contains("bad.yaml:29:5: actions[0].descr: unknown key"),
            "{}",
            e.message
        );
        let names: Vec<_> = std::fs::read_dir(dir.path())
            .expect("list")
            .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
            .collect();
        assert!(
            !names
                .iter()
                .any(|n| n.starts_with("bad.") && n != "bad.yaml"),
            "{names:?}"
        );
        assert!(!names.iter().any(|n| n.ends_with(".tmp")), "{names:?}");
        let e = run(args(&dir.path().join("missing.yaml"))).expect_err("unreadable");
        assert_eq!(e.code, 2);
    }
}
