//! `connector-host new SLUG`: scaffolds a connector crate that builds as is, passes
//! `inspect`, and has one typed tool with a native unit test.

use std::path::{Path, PathBuf};

use anyhow::Context as _;
use clap::Args;

use super::CliError;
use connector_model::connector::{is_namespace, is_slug};

pub(crate) const HELP: &str = "\
Writes a new connector crate into DIR (default ./SLUG): Cargo.toml, .gitignore, README.md and
src/lib.rs with one typed tool `<namespace>.hello` and native unit tests. DIR must not exist
or be empty. Then builds it once (unless --no-build), installing the wasm32-wasip2 target
through rustup if it is missing, and prints where the component is and the next commands:

  cd DIR && cargo build --target wasm32-wasip2 --release   # what the build runs
  connector-host dev COMPONENT --live --call hello '{\"name\": \"Ada\"}'

CARGO_TARGET_DIR (or a cargo config's target-dir) is respected: the path printed is the one
cargo reported (with --no-build: CARGO_TARGET_DIR if set, else DIR/target).

The slug must match ^[a-z][a-z0-9_-]{0,62}$. The tool namespace defaults to the slug and must
be one id segment [a-z][a-z0-9_]*, so a slug containing `-` needs --namespace.

Examples:
  connector-host new weather
  connector-host new acme-crm --namespace acme_crm --dir ~/src/acme-crm";

/// `new`.
#[derive(Debug, Args)]
pub struct NewArgs {
    /// The connector's slug, e.g. `weather` (also the crate's package name).
    #[arg(value_name = "SLUG")]
    pub slug: String,

    /// Directory to create the crate in [default: ./SLUG]. Must not exist or be empty.
    #[arg(long, value_name = "DIR")]
    pub dir: Option<PathBuf>,

    /// The tool namespace [default: the slug]. Required when the slug contains `-`.
    #[arg(long, value_name = "NS")]
    pub namespace: Option<String>,

    /// Only write the crate; print the build command instead of running it.
    #[arg(long)]
    pub no_build: bool,

    /// The connector's language: a Rust crate, or a TypeScript or Python project
    /// (see `new_lang`).
    #[arg(long, value_enum, default_value = "rust")]
    pub lang: super::new_lang::Lang,
}

/// The `sdk/` folder of the checkout this binary was built from.
const SDK_DIR: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../sdk");

/// Runs `new`.
pub fn run(args: NewArgs) -> Result<(), CliError> {
    let namespace = check_names(&args.slug, args.namespace.as_deref())?;
    let dir = args
        .dir
        .clone()
        .unwrap_or_else(|| PathBuf::from(&args.slug));
    check_dir(&dir)?;
    if args.lang != super::new_lang::Lang::Rust {
        return super::new_lang::run(args, namespace, dir);
    }

    let sdk = sdk_dependency();
    let files = scaffold(&args.slug, &namespace, &sdk);
    write_files(&dir, &files)?;

    let shown = dir.display();
    super::print_out(&format!(
        "Created connector `{slug}` (tool namespace `{namespace}`) in {shown}\n",
        slug = args.slug
    ));
    if let SdkDependency::Version = sdk {
        super::print_out(&format!(
            "\nNote: {SDK_DIR} does not exist, so Cargo.toml depends on connector-sdk = \"0.1\";\n\
             point it at a checkout of connector-host (path or git dependency), see the comment there.\n"
        ));
    }
    let build = format!("cd {shown} && cargo build --target wasm32-wasip2 --release");
    let wasm = if args.no_build {
        expected_wasm(&dir, &args.slug)
    } else {
        let wasm = build_once(&dir, &args.slug).map_err(|e| {
            CliError::failed(format!(
                "{e:#}\nThe crate is written; once that is fixed, build it with:\n  {build}"
            ))
        })?;
        display_path(&wasm)
    };
    let mut steps = String::from("\nNext steps:\n");
    // The build command is printed once: first when nothing is built yet, else as what
    // to run after each edit.
    let (build_first, build_after) = if args.no_build {
        (
            format!("  {build}   # build it; again after each edit\n"),
            String::new(),
        )
    } else {
        (
            String::new(),
            format!("  {build}   # in another terminal, after each edit\n"),
        )
    };
    steps.push_str(&build_first);
    steps.push_str(&format!(
        "  connector-host dev {wasm} --live --call hello '{{\"name\": \"Ada\"}}'\n  \
         \x20   # with a host running (connector-host serve): installs, binds on unit `dev`,\n  \
         \x20   # calls as agent `dev`; again on every rebuild\n\
         {build_after}\
         \n\
         Also:\n  \
           connector-host inspect {wasm}\n  \
           connector-host call {wasm} hello '{{\"name\": \"Ada\"}}'   # a local call, no host needed\n  \
           (cd {shown} && cargo test)                    # native unit tests of the manifest and the tool\n\
         \n\
         The guide: docs/writing-a-connector.md in the connector-host repository.\n"
    ));
    super::print_out(&steps);
    Ok(())
}

/// Builds the new crate for `wasm32-wasip2` (cargo's progress on stderr); returns the
/// component cargo reported.
fn build_once(dir: &Path, slug: &str) -> anyhow::Result<PathBuf> {
    let started = std::time::Instant::now();
    // The lock lives in the new crate (the user's own directory), never in a shared one.
    connector_guest_build::ensure_wasm_target(&dir.join("target"))?;
    super::print_err(&format!(
        "Building {} for wasm32-wasip2 (the first build compiles the SDK: about a minute)...",
        dir.display()
    ));
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let out = std::process::Command::new(&cargo)
        .current_dir(dir)
        .args([
            "build",
            "--target",
            "wasm32-wasip2",
            "--release",
            "--message-format=json-render-diagnostics",
        ])
        .stderr(std::process::Stdio::inherit())
        .output()
        .with_context(|| format!("could not run cargo ({})", cargo.to_string_lossy()))?;
    if !out.status.success() {
        anyhow::bail!(
            "building the crate failed ({}); cargo's messages are above",
            out.status
        );
    }
    let artifact = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|line| serde_json::from_str::<serde_json::Value>(line).ok())
        .filter(|m| {
            m["reason"] == "compiler-artifact" && m["target"]["name"] == slug.replace('-', "_")
        })
        .flat_map(|m| m["filenames"].as_array().cloned().unwrap_or_default())
        .filter_map(|f| f.as_str().map(PathBuf::from))
        .find(|f| f.extension().is_some_and(|e| e == "wasm"));
    let wasm = artifact.context("cargo built the crate but reported no .wasm file for it")?;
    super::print_err(&format!(
        "Built {} in {:.1} s",
        display_path(&wasm),
        started.elapsed().as_secs_f64()
    ));
    Ok(wasm)
}

/// Where the component will be once built: under `CARGO_TARGET_DIR` when it is set, else
/// the crate's own `target/`.
fn expected_wasm(dir: &Path, slug: &str) -> String {
    let file = wasm_path(slug);
    match std::env::var_os("CARGO_TARGET_DIR") {
        Some(target) => {
            let rest = file.trim_start_matches("target/");
            display_path(&PathBuf::from(target).join(rest))
        }
        None => display_path(&dir.join(file)),
    }
}

/// `path` relative to the working directory when it is under it, else as is.
fn display_path(path: &Path) -> String {
    let shown = std::env::current_dir()
        .ok()
        .and_then(|cwd| path.strip_prefix(&cwd).ok().map(Path::to_path_buf))
        .unwrap_or_else(|| path.to_path_buf());
    shown.display().to_string()
}

/// Checks the slug and the namespace against the registry's rules; returns the namespace.
pub fn check_names(slug: &str, namespace: Option<&str>) -> Result<String, CliError> {
    if !is_slug(slug) {
        return Err(CliError::usage(format!(
            "slug `{slug}` is invalid: a slug must match ^[a-z][a-z0-9_-]{{0,62}}$ \
             (lowercase letters, digits, `_` and `-`, starting with a letter)"
        )));
    }
    match namespace {
        Some("sv") => Err(CliError::usage(
            "tool namespace `sv` is reserved for the platform and may not be claimed",
        )),
        Some(ns) if !is_namespace(ns) => Err(CliError::usage(format!(
            "tool namespace `{ns}` is invalid: a namespace must be one id segment [a-z][a-z0-9_]*"
        ))),
        Some(ns) => Ok(ns.to_string()),
        None if slug == "sv" => Err(CliError::usage(
            "tool namespace `sv` is reserved for the platform and may not be claimed \
             (it defaults to the slug; choose another with --namespace NS)",
        )),
        None if !is_namespace(slug) => Err(CliError::usage(format!(
            "slug `{slug}` cannot be the tool namespace: the namespace defaults to the slug and \
             must be one id segment [a-z][a-z0-9_]* (no `-`); pass --namespace {}",
            slug.replace('-', "_")
        ))),
        None => Ok(slug.to_string()),
    }
}

/// Refuses a directory that exists and is not empty (or is not a directory).
fn check_dir(dir: &Path) -> Result<(), CliError> {
    match std::fs::read_dir(dir) {
        Ok(mut entries) => {
            if entries.next().is_some() {
                return Err(CliError::usage(format!(
                    "{} exists and is not empty: refusing to overwrite it (choose another --dir)",
                    dir.display()
                )));
            }
            Ok(())
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(CliError::usage(format!(
            "{} cannot be used: {e}",
            dir.display()
        ))),
    }
}

/// How the scaffold depends on `connector-sdk`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SdkDependency {
    /// A path dependency on a checkout (absolute path of its `sdk/` folder).
    Path(String),
    /// `connector-sdk = "0.1"`, with a comment on how to point it at a checkout.
    Version,
}

fn sdk_dependency() -> SdkDependency {
    match std::fs::canonicalize(SDK_DIR) {
        Ok(path) if path.join("Cargo.toml").is_file() => {
            SdkDependency::Path(path.to_string_lossy().into_owned())
        }
        _ => SdkDependency::Version,
    }
}

/// The artifact `cargo build --target wasm32-wasip2 --release` produces (relative to the
/// crate; cargo writes the library name, with `-` as `_`).
pub fn wasm_path(slug: &str) -> String {
    format!(
        "target/wasm32-wasip2/release/{}.wasm",
        slug.replace('-', "_")
    )
}

/// `demo_conn` → `DemoConn`.
fn type_name(slug: &str) -> String {
    let mut name: String = slug
        .split(['_', '-'])
        .filter(|p| !p.is_empty())
        .map(|p| {
            let mut c = p.chars();
            match c.next() {
                Some(first) => first.to_ascii_uppercase().to_string() + c.as_str(),
                None => String::new(),
            }
        })
        .collect();
    if name.is_empty() || name == "Connector" || name == "Manifest" || name == "Tool" {
        name.push_str("Impl");
    }
    name
}

/// `demo_conn` → `Demo Conn`.
fn display_name(slug: &str) -> String {
    slug.split(['_', '-'])
        .filter(|p| !p.is_empty())
        .map(|p| {
            let mut c = p.chars();
            match c.next() {
                Some(first) => first.to_ascii_uppercase().to_string() + c.as_str(),
                None => String::new(),
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// The files of the scaffold, by relative path.
pub fn scaffold(slug: &str, namespace: &str, sdk: &SdkDependency) -> Vec<(&'static str, String)> {
    let sdk_line = match sdk {
        SdkDependency::Path(path) => format!(
            "# The SDK of the connector-host checkout this crate was created from.\n\
             connector-sdk = {{ path = \"{}\" }}",
            path.replace('\\', "/")
        ),
        SdkDependency::Version => {
            "# connector-sdk is not on crates.io yet: point this at a checkout of\n\
             # connector-host, e.g. { path = \"/path/to/connector-host/sdk\" } or\n\
             # { git = \"<connector-host repository URL>\" }.\n\
             connector-sdk = \"0.1\""
                .to_string()
        }
    };
    let cargo_toml = format!(
        r#"[package]
name = "{slug}"
version = "0.1.0"
edition = "2021"
publish = false

[lib]
# A WebAssembly component: build with `cargo build --target wasm32-wasip2 --release`.
crate-type = ["cdylib"]

[dependencies]
{sdk_line}
serde = {{ version = "1", features = ["derive"] }}
serde_json = "1"
schemars = "1"

# A workspace of its own, so the crate builds even when created inside another workspace.
[workspace]
"#
    );

    let ty = type_name(slug);
    let display = display_name(slug);
    let namespace_line = if namespace == slug {
        String::new()
    } else {
        format!("\n            .namespace(\"{namespace}\")")
    };
    let lib_rs = format!(
        r#"//! The `{slug}` connector: a WebAssembly component for connector-host.
//!
//! Build: `cargo build --target wasm32-wasip2 --release`
//! Check: `connector-host inspect target/wasm32-wasip2/release/{file}.wasm`

use connector_sdk::{{CallContext, Connector, Manifest, Tool, ToolError}};
use schemars::JsonSchema;
use serde::{{Deserialize, Serialize}};

// Doc comments on the struct and its fields become descriptions in the tool's inputSchema.
/// Arguments of `{namespace}.hello`.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct HelloArgs {{
    /// Who to greet.
    pub name: String,
}}

/// Result of `{namespace}.hello`.
#[derive(Debug, Serialize, PartialEq, Eq)]
pub struct Greeting {{
    /// The greeting.
    pub greeting: String,
}}

/// The connector.
pub struct {ty};

impl Connector for {ty} {{
    fn manifest() -> Manifest {{
        Manifest::new("{slug}"){namespace_line}
            .display_name("{display}")
            .description("Describe what {slug} connects to.")
            .version(env!("CARGO_PKG_VERSION"))
            // A relative name: the tool id is `{namespace}.hello`.
            .tool(
                Tool::new("hello", "Greets someone by name.", hello)
                    .read_only()
                    .idempotent(),
            )
    }}
}}

fn hello(_ctx: &CallContext, args: HelloArgs) -> Result<Greeting, ToolError> {{
    if args.name.trim().is_empty() {{
        return Err(ToolError::invalid_arguments("name is empty"));
    }}
    Ok(Greeting {{
        greeting: format!("Hello, {{}}!", args.name),
    }})
}}

connector_sdk::export!({ty});

#[cfg(test)]
mod tests {{
    use super::*;
    use connector_sdk::Binding;

    fn ctx() -> CallContext {{
        CallContext {{
            binding: Binding {{
                unit: "test".into(),
                config: serde_json::json!({{}}),
            }},
            agent: None,
            call_id: "test-call".into(),
        }}
    }}

    #[test]
    fn manifest_is_valid() {{
        let manifest = {ty}::manifest();
        assert_eq!(manifest.validate(), Ok(()));
        assert_eq!(manifest.tool_ids(), ["{namespace}.hello"]);
    }}

    #[test]
    fn hello_greets() {{
        let args = HelloArgs {{
            name: "Ada".into(),
        }};
        assert_eq!(hello(&ctx(), args).unwrap().greeting, "Hello, Ada!");
        let empty = HelloArgs {{ name: " ".into() }};
        assert!(matches!(
            hello(&ctx(), empty),
            Err(ToolError::InvalidArguments(_))
        ));
    }}
}}
"#,
        file = slug.replace('-', "_"),
    );

    let wasm = wasm_path(slug);
    let readme = format!(
        r#"# {display}

A connector for connector-host, scaffolded by `connector-host new`.

```sh
cargo test                                       # native unit tests
cargo build --target wasm32-wasip2 --release     # build the component
connector-host inspect {wasm}
connector-host call {wasm} hello '{{"name": "Ada"}}'
```

Against a running host (`connector-host serve`), keep it live: every rebuild is installed,
bound on unit `dev` and called as agent `dev` (both created when missing):

```sh
connector-host dev {wasm} --live --call hello '{{"name": "Ada"}}'
```

Without `--live`, `dev` reloads the component on every rebuild, prints what changed in its
manifest and runs the call locally. The same steps by hand:

```sh
connector-host connectors install {wasm}
connector-host units put demo
connector-host agents put ada --unit demo
connector-host bind demo {slug}
connector-host call ada {namespace}.hello '{{"name": "Ada"}}'
```

See docs/writing-a-connector.md in the connector-host repository.
"#
    );

    vec![
        ("Cargo.toml", cargo_toml),
        (".gitignore", "/target\nCargo.lock.bak\n".to_string()),
        ("README.md", readme),
        ("src/lib.rs", lib_rs),
    ]
}

/// Writes a scaffold's `(relative path, content)` files under `dir`, creating folders.
pub(super) fn write_files(dir: &Path, files: &[(&str, String)]) -> Result<(), CliError> {
    for (name, content) in files {
        let path = dir.join(name);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).map_err(|e| {
                CliError::failed(format!("could not create {}: {e}", parent.display()))
            })?;
        }
        std::fs::write(&path, content)
            .map_err(|e| CliError::failed(format!("could not write {}: {e}", path.display())))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_follow_the_registry_rules() {
        assert_eq!(check_names("demo_conn", None).unwrap(), "demo_conn");
        assert_eq!(check_names("my-conn", Some("my_conn")).unwrap(), "my_conn");
        let e = check_names("my-conn", None).unwrap_err();
        assert_eq!(e.code, 2);
        assert!(e.message.contains("--namespace my_conn"), "{}", e.message);
        assert!(check_names("Demo", None).is_err());
        assert!(check_names("9lives", None).is_err());
        assert!(check_names(&"a".repeat(64), None).is_err());
        assert!(check_names("ok", Some("not-ok")).is_err());
        assert!(check_names("sv", None).is_err());
        assert!(check_names("ok", Some("sv")).is_err());
    }

    #[test]
    fn names_of_the_generated_code() {
        assert_eq!(type_name("demo_conn"), "DemoConn");
        assert_eq!(type_name("a-b_c"), "ABC");
        assert_eq!(type_name("connector"), "ConnectorImpl");
        assert_eq!(display_name("demo_conn"), "Demo Conn");
        assert_eq!(
            wasm_path("my-conn"),
            "target/wasm32-wasip2/release/my_conn.wasm"
        );
    }

    #[test]
    fn writes_a_crate_and_refuses_a_non_empty_dir() {
        let dir = tempfile::tempdir().unwrap();
        let target = dir.path().join("x");
        run(NewArgs {
            slug: "my-conn".into(),
            dir: Some(target.clone()),
            namespace: Some("mine".into()),
            no_build: true,
            lang: crate::cli::new_lang::Lang::Rust,
        })
        .unwrap();
        let lib = std::fs::read_to_string(target.join("src/lib.rs")).unwrap();
        assert!(lib.contains(".namespace(\"mine\")") && lib.contains("pub struct MyConn;"));
        let cargo = std::fs::read_to_string(target.join("Cargo.toml")).unwrap();
        assert!(cargo.contains("name = \"my-conn\"") && cargo.contains("\n[workspace]\n"));
        assert!(cargo.contains("connector-sdk = { path = "), "{cargo}");
        let again = run(NewArgs {
            slug: "my-conn".into(),
            dir: Some(target),
            namespace: Some("mine".into()),
            no_build: true,
            lang: crate::cli::new_lang::Lang::Rust,
        })
        .unwrap_err();
        assert!(again.message.contains("not empty"), "{}", again.message);
    }

    #[test]
    fn version_dependency_explains_itself() {
        let files = scaffold("x", "x", &SdkDependency::Version);
        assert!(files[0].1.contains("connector-sdk = \"0.1\""));
        assert!(files[0].1.contains("git = "));
    }
}
