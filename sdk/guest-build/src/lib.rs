//! Compiles connector guest crates into WebAssembly components from a build script.
//!
//! The host embeds its bundled connectors and the integration tests load test guests, so
//! both need `.wasm` files built for `wasm32-wasip2` as part of an ordinary
//! `cargo build`. A build script cannot ask its own cargo for another target, so this
//! crate runs a *nested* cargo:
//!
//! - in a separate target directory (`<workspace>/target/guests`), so it never waits on
//!   the lock the outer build holds;
//! - with the outer build's leaked environment removed (rustflags, wrappers such as
//!   clippy-driver or sccache, the jobserver, and the build-script variables), which
//!   would otherwise change or break the nested build;
//! - with `--profile guest` (small, fast-instantiating code) and a 64 KiB guest stack,
//!   which makes instantiation cheaper: every host call instantiates afresh.
//!
//! Each result is copied to a stable file name under `target/guests/components/`, since
//! one crate built with different features produces the same cargo artifact name.
//!
//! ```no_run
//! // build.rs
//! use connector_guest_build::{build_components, GuestSpec};
//! let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
//! let built = build_components(&root, &[GuestSpec::new("acme")]).unwrap();
//! ```

use std::ffi::OsString;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, SystemTime};

use anyhow::{anyhow, bail, Context, Result};

/// The target every guest is built for.
pub const GUEST_TARGET: &str = "wasm32-wasip2";
/// The cargo profile guests are built with (defined in the workspace `Cargo.toml`).
pub const GUEST_PROFILE: &str = "guest";
/// The guest's stack: 64 KiB instead of rustc's 1 MiB default.
pub const GUEST_RUSTFLAGS: &str = "-C link-arg=-zstack-size=65536";

/// One component to build.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GuestSpec {
    /// The cargo package (`-p`).
    pub package: String,
    /// Cargo features to enable.
    pub features: Vec<String>,
    /// The stable output name: the file becomes `<output_name>.wasm`.
    pub output_name: String,
}

impl GuestSpec {
    /// Builds `package` with default features into `<package>.wasm`.
    pub fn new(package: &str) -> Self {
        GuestSpec {
            package: package.to_owned(),
            features: Vec::new(),
            output_name: package.to_owned(),
        }
    }

    /// Enables `features`.
    pub fn features(mut self, features: &[&str]) -> Self {
        self.features = features.iter().map(|f| (*f).to_owned()).collect();
        self
    }

    /// Names the output `<name>.wasm`.
    pub fn output_name(mut self, name: &str) -> Self {
        self.output_name = name.to_owned();
        self
    }
}

/// Environment variables of the outer build that must not reach the nested cargo.
const REMOVED_VARS: &[&str] = &[
    "CARGO_ENCODED_RUSTFLAGS",
    "RUSTFLAGS",
    "CARGO_BUILD_RUSTFLAGS",
    "CARGO_ENCODED_RUSTDOCFLAGS",
    "RUSTDOCFLAGS",
    "CARGO_TARGET_DIR",
    "CARGO_BUILD_TARGET_DIR",
    "CARGO_BUILD_TARGET",
    "RUSTC_WRAPPER",
    "RUSTC_WORKSPACE_WRAPPER",
    "CARGO_BUILD_RUSTC_WRAPPER",
    "CARGO_BUILD_RUSTC_WORKSPACE_WRAPPER",
    "CARGO_MAKEFLAGS",
    "MAKEFLAGS",
    "MFLAGS",
    "CARGO_PRIMARY_PACKAGE",
    "CARGO_CRATE_NAME",
    "CARGO_BIN_NAME",
    "CARGO_RUSTC_CURRENT_DIR",
    "OUT_DIR",
    "TARGET",
    "HOST",
    "PROFILE",
    "OPT_LEVEL",
    "DEBUG",
    "NUM_JOBS",
    "RUSTC_LINKER",
];

/// Prefixes of build-script variables that must not reach the nested cargo.
const REMOVED_PREFIXES: &[&str] = &[
    "CARGO_PKG_",
    "CARGO_CFG_",
    "CARGO_FEATURE_",
    "CARGO_MANIFEST_",
    "DEP_",
];

fn is_removed(name: &str) -> bool {
    REMOVED_VARS.contains(&name) || REMOVED_PREFIXES.iter().any(|p| name.starts_with(p))
}

/// Where components end up: `<workspace>/target/guests`.
pub fn guest_target_dir(workspace_root: &Path) -> PathBuf {
    workspace_root.join("target").join("guests")
}

/// Builds every spec (in order) and returns `(output_name, path)` for each, the path
/// being `<workspace>/target/guests/components/<output_name>.wasm`.
///
/// Prints `cargo:rerun-if-changed` lines for `wit/`, the SDK, each guest crate and each
/// output, so it is meant to be called from a build script.
pub fn build_components(
    workspace_root: &Path,
    specs: &[GuestSpec],
) -> Result<Vec<(String, PathBuf)>> {
    let root = workspace_root
        .canonicalize()
        .with_context(|| format!("workspace root {}", workspace_root.display()))?;
    let started = SystemTime::now();
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| OsString::from("cargo"));
    ensure_target_installed(&guest_target_dir(&root))?;

    let mut rerun: Vec<PathBuf> = vec![
        root.join("wit"),
        root.join("sdk").join("src"),
        root.join("sdk").join("Cargo.toml"),
        root.join("Cargo.toml"),
        root.join("Cargo.lock"),
    ];
    let target_dir = guest_target_dir(&root);
    let out_dir = target_dir.join("components");
    std::fs::create_dir_all(&out_dir).with_context(|| format!("creating {}", out_dir.display()))?;

    let mut built = Vec::with_capacity(specs.len());
    for spec in specs {
        let artifact = build_one(&cargo, &root, &target_dir, spec, &mut rerun)?;
        let dest = out_dir.join(format!("{}.wasm", spec.output_name));
        copy_if_changed(&artifact, &dest, started)?;
        rerun.push(dest.clone());
        built.push((spec.output_name.clone(), dest));
    }

    let mut stdout = std::io::stdout().lock();
    for path in rerun {
        writeln!(stdout, "cargo:rerun-if-changed={}", path.display())?;
    }
    Ok(built)
}

/// Makes sure the rust std for `wasm32-wasip2` exists for the compiler in use (`$RUSTC`,
/// else `rustc`): when it is missing, installs it with `rustup target add` (saying so on
/// stderr), or fails naming the one command to run when rustup is absent or fails.
/// Returns the toolchain it installed the target for, if it did. `lock_dir` holds the
/// lock that lets one of several concurrent callers install.
///
/// A `rust-toolchain.toml` listing the target is not enough on its own: rustup installs
/// it only where its auto-install is on.
pub fn ensure_wasm_target(lock_dir: &Path) -> Result<Option<String>> {
    let rustc = std::env::var_os("RUSTC").unwrap_or_else(|| OsString::from("rustc"));
    let rustup = std::env::var_os("RUSTUP").unwrap_or_else(|| OsString::from("rustup"));
    Ok(match ensure_target(&rustc, &rustup, lock_dir)? {
        TargetState::Present => None,
        TargetState::Installed { toolchain } => Some(toolchain),
    })
}

/// [`ensure_wasm_target`] from a build script: an install is also a cargo warning.
fn ensure_target_installed(lock_dir: &Path) -> Result<()> {
    if let Some(toolchain) = ensure_wasm_target(lock_dir)? {
        println!("cargo:warning=installed the {GUEST_TARGET} target for toolchain `{toolchain}` (rustup target add)");
    }
    Ok(())
}

/// What [`ensure_target`] found or did.
#[derive(Debug, PartialEq, Eq)]
enum TargetState {
    Present,
    Installed { toolchain: String },
}

fn ensure_target(rustc: &OsString, rustup: &OsString, lock_dir: &Path) -> Result<TargetState> {
    let sysroot = sysroot_of(rustc)?;
    let lib = sysroot.join("lib").join("rustlib").join(GUEST_TARGET);
    if lib.is_dir() {
        return Ok(TargetState::Present);
    }
    // rustup names a toolchain by its directory under `$RUSTUP_HOME/toolchains`.
    let toolchain = sysroot
        .parent()
        .filter(|p| p.file_name().is_some_and(|n| n == "toolchains"))
        .and_then(|_| sysroot.file_name())
        .map(|n| n.to_string_lossy().into_owned());
    let command = match &toolchain {
        Some(t) => format!("rustup target add {GUEST_TARGET} --toolchain {t}"),
        None => format!("rustup target add {GUEST_TARGET}"),
    };
    let Some(toolchain) = toolchain else {
        bail!(
            "the {GUEST_TARGET} target is not installed for the compiler at {} and it is not a rustup toolchain: install the target's standard library (with rustup: `{command}`)",
            sysroot.display()
        );
    };
    // Build scripts of several packages may get here at once: one installs.
    std::fs::create_dir_all(lock_dir)
        .with_context(|| format!("creating {}", lock_dir.display()))?;
    let lock_path = lock_dir.join("rustup-target.lock");
    // Opened without truncating: the lock's content does not matter, and an existing
    // file is never emptied.
    let lock = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&lock_path)
        .with_context(|| format!("opening {}", lock_path.display()))?;
    lock.lock()
        .with_context(|| format!("locking {}", lock_path.display()))?;
    if lib.is_dir() {
        return Ok(TargetState::Present);
    }
    eprintln!("the {GUEST_TARGET} target is missing: running `{command}`");
    let out = Command::new(rustup)
        .args(["target", "add", GUEST_TARGET, "--toolchain", &toolchain])
        .output();
    match out {
        Err(e) => bail!(
            "the {GUEST_TARGET} target is not installed and rustup could not be run ({e}): run `{command}`, or install the target's standard library another way"
        ),
        Ok(out) if !out.status.success() => bail!(
            "the {GUEST_TARGET} target is not installed and `{command}` failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        ),
        Ok(_) if !lib.is_dir() => bail!(
            "`{command}` succeeded but {} is still missing: check that rustup manages the compiler at {}",
            lib.display(),
            sysroot.display()
        ),
        Ok(_) => Ok(TargetState::Installed { toolchain }),
    }
}

fn sysroot_of(rustc: &OsString) -> Result<PathBuf> {
    let out = Command::new(rustc)
        .args(["--print", "sysroot"])
        .env_remove("RUSTC_WRAPPER")
        .output()
        .with_context(|| format!("running {} --print sysroot", rustc.to_string_lossy()))?;
    if !out.status.success() {
        bail!(
            "{} --print sysroot failed: {}",
            rustc.to_string_lossy(),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(PathBuf::from(String::from_utf8_lossy(&out.stdout).trim()))
}

fn build_one(
    cargo: &OsString,
    root: &Path,
    target_dir: &Path,
    spec: &GuestSpec,
    rerun: &mut Vec<PathBuf>,
) -> Result<PathBuf> {
    let mut cmd = Command::new(cargo);
    cmd.current_dir(root)
        .arg("build")
        .arg("--manifest-path")
        .arg(root.join("Cargo.toml"))
        .args(["-p", &spec.package])
        .args(["--target", GUEST_TARGET])
        .args(["--profile", GUEST_PROFILE])
        .arg("--message-format=json-render-diagnostics");
    if !spec.features.is_empty() {
        cmd.arg("--features").arg(spec.features.join(","));
    }
    for (name, _) in std::env::vars_os() {
        if name.to_str().is_some_and(is_removed) {
            cmd.env_remove(&name);
        }
    }
    cmd.env("CARGO_TARGET_DIR", target_dir)
        .env("RUSTFLAGS", GUEST_RUSTFLAGS);

    let what = if spec.features.is_empty() {
        format!("guest `{}`", spec.package)
    } else {
        format!(
            "guest `{}` (features {})",
            spec.package,
            spec.features.join(",")
        )
    };
    let out = cmd
        .output()
        .with_context(|| format!("running cargo to build {what}"))?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    if !out.status.success() {
        eprintln!("{stderr}");
        bail!(
            "building {what} for {GUEST_TARGET} failed ({}):\n{stderr}",
            out.status
        );
    }

    let mut wasm = Vec::new();
    for line in stdout.lines() {
        let Ok(msg) = serde_json::from_str::<serde_json::Value>(line) else {
            continue;
        };
        if msg["reason"] != "compiler-artifact" {
            continue;
        }
        // Every crate of this workspace the guest is built from (the guest's own, and
        // path dependencies such as a protocol crate it shares with the host).
        if let Some(dir) = msg["manifest_path"]
            .as_str()
            .map(Path::new)
            .filter(|p| p.starts_with(root))
            .and_then(Path::parent)
        {
            if !rerun.iter().any(|seen| seen == dir) {
                rerun.push(dir.to_path_buf());
            }
        }
        let kinds = msg["target"]["kind"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        if !kinds.iter().any(|k| k == "cdylib" || k == "bin") {
            continue;
        }
        let files = msg["filenames"].as_array().cloned().unwrap_or_default();
        wasm.extend(
            files
                .iter()
                .filter_map(|f| f.as_str())
                .filter(|f| f.ends_with(".wasm"))
                .map(PathBuf::from),
        );
    }
    match wasm.as_slice() {
        [one] => Ok(one.clone()),
        [] => Err(anyhow!(
            "building {what} produced no .wasm file: is it a cdylib or bin crate?\n{stderr}"
        )),
        many => Err(anyhow!(
            "building {what} produced several .wasm files ({many:?}); give it one cdylib or bin"
        )),
    }
}

/// Copies `from` to `to` unless `to` already has the same bytes. The copy's mtime is set
/// just before `started`, so the `rerun-if-changed` on it does not make cargo rerun the
/// build script a second time for our own write.
fn copy_if_changed(from: &Path, to: &Path, started: SystemTime) -> Result<()> {
    let bytes = std::fs::read(from).with_context(|| format!("reading {}", from.display()))?;
    if std::fs::read(to).ok().as_deref() == Some(bytes.as_slice()) {
        return Ok(());
    }
    std::fs::write(to, &bytes).with_context(|| format!("writing {}", to.display()))?;
    let earlier = started
        .checked_sub(Duration::from_secs(1))
        .unwrap_or(started);
    let file = std::fs::File::options()
        .write(true)
        .open(to)
        .with_context(|| format!("opening {}", to.display()))?;
    file.set_modified(earlier)
        .with_context(|| format!("setting the mtime of {}", to.display()))?;
    Ok(())
}

/// A Rust string literal for `path`, for `include_bytes!` in generated code.
pub fn rust_path_literal(path: &Path) -> Result<String> {
    let s = path
        .to_str()
        .ok_or_else(|| anyhow!("path {} is not UTF-8", path.display()))?;
    Ok(format!("{s:?}"))
}

/// Writes `contents` to `path` unless it already holds exactly that.
pub fn write_if_changed(path: &Path, contents: &str) -> Result<()> {
    if std::fs::read_to_string(path).ok().as_deref() == Some(contents) {
        return Ok(());
    }
    std::fs::write(path, contents).with_context(|| format!("writing {}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn removes_leaking_vars() {
        for v in [
            "CARGO_ENCODED_RUSTFLAGS",
            "RUSTC_WORKSPACE_WRAPPER",
            "CARGO_MAKEFLAGS",
            "CARGO_PKG_NAME",
            "CARGO_CFG_TARGET_OS",
            "CARGO_FEATURE_STD",
            "CARGO_MANIFEST_DIR",
            "OUT_DIR",
            "TARGET",
            "DEBUG",
        ] {
            assert!(is_removed(v), "{v}");
        }
        for v in [
            "CARGO",
            "CARGO_HOME",
            "RUSTUP_TOOLCHAIN",
            "PATH",
            "RUSTC",
            "HOME",
        ] {
            assert!(!is_removed(v), "{v}");
        }
    }

    #[test]
    fn spec_builder() {
        let s = GuestSpec::new("bad-manifest")
            .features(&["sv-namespace"])
            .output_name("bad-manifest-sv-namespace");
        assert_eq!(s.package, "bad-manifest");
        assert_eq!(s.features, ["sv-namespace"]);
        assert_eq!(s.output_name, "bad-manifest-sv-namespace");
        assert_eq!(GuestSpec::new("acme").output_name, "acme");
    }

    #[test]
    fn path_literals_are_escaped() {
        assert_eq!(
            rust_path_literal(Path::new("/a/b \"c\"/x.wasm")).unwrap(),
            r#""/a/b \"c\"/x.wasm""#
        );
    }

    /// An executable shell script at `path`.
    #[cfg(unix)]
    fn script(path: &Path, body: &str) {
        use std::os::unix::fs::PermissionsExt;
        std::fs::write(path, format!("#!/bin/sh\n{body}\n")).unwrap();
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).unwrap();
    }

    /// A rustup toolchain without the guest target, a `rustc` printing its sysroot and a
    /// `rustup` that installs the target there (recording how it was called).
    #[cfg(unix)]
    #[test]
    fn a_missing_target_is_installed_through_rustup_once() {
        let dir = tempfile_dir("target-install");
        let sysroot = dir.join("rustup").join("toolchains").join("1.95.0-test");
        std::fs::create_dir_all(sysroot.join("lib").join("rustlib")).unwrap();
        let (rustc, rustup, calls) = (dir.join("rustc"), dir.join("rustup-bin"), dir.join("calls"));
        script(&rustc, &format!("echo '{}'", sysroot.display()));
        script(
            &rustup,
            &format!(
                "echo \"$@\" >> '{}'\nmkdir -p '{}/lib/rustlib/{GUEST_TARGET}'",
                calls.display(),
                sysroot.display()
            ),
        );
        let (rustc, rustup) = (rustc.into_os_string(), rustup.into_os_string());
        assert_eq!(
            ensure_target(&rustc, &rustup, &dir).unwrap(),
            TargetState::Installed {
                toolchain: "1.95.0-test".into()
            }
        );
        assert_eq!(
            std::fs::read_to_string(&calls).unwrap(),
            format!("target add {GUEST_TARGET} --toolchain 1.95.0-test\n")
        );
        // Present now: rustup is not run again.
        assert_eq!(
            ensure_target(&rustc, &rustup, &dir).unwrap(),
            TargetState::Present
        );
        assert_eq!(std::fs::read_to_string(&calls).unwrap().lines().count(), 1);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[cfg(unix)]
    #[test]
    fn without_rustup_the_error_names_the_command() {
        let dir = tempfile_dir("target-no-rustup");
        let sysroot = dir.join("toolchains").join("stable-test");
        std::fs::create_dir_all(&sysroot).unwrap();
        let rustc = dir.join("rustc");
        script(&rustc, &format!("echo '{}'", sysroot.display()));
        let missing = dir.join("no-such-rustup").into_os_string();
        let err = ensure_target(&rustc.into_os_string(), &missing, &dir)
            .unwrap_err()
            .to_string();
        assert!(
            err.contains(&format!(
                "run `rustup target add {GUEST_TARGET} --toolchain stable-test`"
            )),
            "{err}"
        );
        // A compiler rustup does not manage: the error says so.
        let other = dir.join("custom");
        std::fs::create_dir_all(&other).unwrap();
        let rustc = dir.join("rustc-custom");
        script(&rustc, &format!("echo '{}'", other.display()));
        let err = ensure_target(&rustc.into_os_string(), &missing, &dir)
            .unwrap_err()
            .to_string();
        assert!(err.contains("not a rustup toolchain"), "{err}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    fn tempfile_dir(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("guest-build-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    #[test]
    fn copy_keeps_identical_files_and_backdates_new_ones() {
        let dir = std::env::temp_dir().join(format!("guest-build-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let (a, b) = (dir.join("a.wasm"), dir.join("b.wasm"));
        std::fs::write(&a, b"one").unwrap();
        let started = SystemTime::now();
        copy_if_changed(&a, &b, started).unwrap();
        assert_eq!(std::fs::read(&b).unwrap(), b"one");
        let mtime = std::fs::metadata(&b).unwrap().modified().unwrap();
        assert!(mtime < started);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
