//! Building TypeScript and Python connectors for the tests and benches, with the SDKs in
//! `sdk/js` and `sdk/python` and the toolchains `.ci/run` installs under `target/`:
//! Node with `componentize-js`, esbuild and zod in `target/js-sdk/node_modules`, and a
//! venv with `componentize-py` and pydantic in `target/py-sdk-venv`.
//!
//! A build takes 15-40 s, so its output is kept under `target/langs/`, named by a digest
//! of everything that goes into it (the SDK's files and the connector's source): a test
//! run rebuilds only what changed. Of each connector's builds in each language the
//! [`KEPT_BUILDS`] used last are kept, the older removed. A missing toolchain skips the
//! test, or fails it under `CI=true` ([`crate::harness::skip_or_fail`]).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Mutex;

use sha2::{Digest, Sha256};

/// A connector language with an SDK in this repository.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lang {
    TypeScript,
    Python,
}

impl Lang {
    /// The name used in file names and messages.
    pub fn name(self) -> &'static str {
        match self {
            Lang::TypeScript => "typescript",
            Lang::Python => "python",
        }
    }
}

/// The workspace's root directory.
pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_else(|| PathBuf::from(".."))
}

/// The workspace's `target/` directory (where `.ci/run` installs the toolchains).
pub fn target_dir() -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| repo_root().join("target"))
}

/// `target/node/bin/node` and `target/js-sdk/node_modules`, or why they are unusable.
pub fn js_toolchain() -> Result<(PathBuf, PathBuf), String> {
    let node = target_dir().join("node/bin/node");
    let modules = target_dir().join("js-sdk/node_modules");
    if !node.is_file() {
        return Err(format!(
            "{} is missing (.ci/run installs Node)",
            node.display()
        ));
    }
    for package in ["@bytecodealliance/componentize-js", "esbuild", "zod"] {
        if !modules.join(package).join("package.json").is_file() {
            return Err(format!(
                "{package} is missing from {} (.ci/run installs it)",
                modules.display()
            ));
        }
    }
    Ok((node, modules))
}

/// `target/py-sdk-venv/bin/python` with componentize-py and pydantic, or why not.
pub fn python_toolchain() -> Result<PathBuf, String> {
    let python = target_dir().join("py-sdk-venv/bin/python");
    let componentize = target_dir().join("py-sdk-venv/bin/componentize-py");
    if !python.is_file() || !componentize.is_file() {
        return Err(format!(
            "{} with componentize-py is missing (.ci/run creates it)",
            python.display()
        ));
    }
    let pydantic = Command::new(&python)
        .args(["-c", "import pydantic"])
        .output()
        .map_err(|e| format!("{}: {e}", python.display()))?;
    if !pydantic.status.success() {
        return Err(format!("pydantic is not installed in {}", python.display()));
    }
    Ok(python)
}

fn hash_tree(hasher: &mut Sha256, dir: &Path) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    let mut paths: Vec<PathBuf> = entries.filter_map(|e| e.ok().map(|e| e.path())).collect();
    paths.sort();
    for path in paths {
        let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
        if matches!(name, "node_modules" | "__pycache__" | ".venv") || name.ends_with(".wasm") {
            continue;
        }
        if path.is_dir() {
            hash_tree(hasher, &path);
        } else if let Ok(bytes) = std::fs::read(&path) {
            hasher.update(path.to_string_lossy().as_bytes());
            hasher.update(&bytes);
        }
    }
}

static BUILDING: Mutex<()> = Mutex::new(());

/// The component built from `entry` (a `.ts` module or a `.py` file, relative to the
/// repository's root) in `lang`: from `target/langs/` when nothing changed since it was
/// built. `None` (after a skip notice) when the toolchain is missing; panics when the
/// build fails.
pub fn component(lang: Lang, entry: &str) -> Option<PathBuf> {
    let root = repo_root();
    let entry = root.join(entry);
    let sdk = root.join(match lang {
        Lang::TypeScript => "sdk/js",
        Lang::Python => "sdk/python",
    });
    let toolchain = match lang {
        Lang::TypeScript => js_toolchain().map(|_| ()),
        Lang::Python => python_toolchain().map(|_| ()),
    };
    crate::harness::required(&format!("the {} toolchain", lang.name()), toolchain)?;

    let mut hasher = Sha256::new();
    hash_tree(&mut hasher, &sdk);
    hash_tree(&mut hasher, &root.join("wit"));
    hash_tree(
        &mut hasher,
        entry.parent().expect("the entry lies in a directory"),
    );
    let digest = hex::encode(&hasher.finalize()[..8]);
    let stem = entry
        .ancestors()
        .skip(1)
        .filter_map(|d| d.file_name().and_then(|n| n.to_str()))
        .find(|n| *n != "src")
        .unwrap_or("connector");
    let out_dir = target_dir().join("langs");
    let out = out_dir.join(format!("{stem}-{}-{digest}.wasm", lang.name()));

    // One build at a time: two tests wanting the same component build it once.
    let _one = BUILDING.lock().unwrap_or_else(|e| e.into_inner());
    if out.is_file() {
        mark_used(&out);
        return Some(out);
    }
    std::fs::create_dir_all(&out_dir).expect("target/langs");
    let partial = out.with_extension("partial.wasm");
    let mut command = match lang {
        Lang::TypeScript => {
            let (node, modules) = js_toolchain().ok()?;
            let mut c = Command::new(node);
            c.arg(sdk.join("bin/build.mjs"))
                .env("SPRING_CONNECTOR_NODE_MODULES", modules);
            c
        }
        Lang::Python => {
            let mut c = Command::new(python_toolchain().ok()?);
            c.args(["-m", "spring_connector.build"])
                .env("PYTHONPATH", &sdk)
                .env("PYTHONDONTWRITEBYTECODE", "1");
            c
        }
    };
    let done = command
        .arg(&entry)
        .arg("-o")
        .arg(&partial)
        .output()
        .unwrap_or_else(|e| panic!("building {}: {e}", entry.display()));
    assert!(
        done.status.success(),
        "building {} failed:\n{}\n{}",
        entry.display(),
        String::from_utf8_lossy(&done.stdout),
        String::from_utf8_lossy(&done.stderr)
    );
    // The TypeScript build goes on, with a warning, when it cannot warm up the bindings
    // componentize-js generates (a componentize-js that moved its splicer): its
    // components would work, only slower to call.
    let stderr = String::from_utf8_lossy(&done.stderr);
    assert!(
        !stderr.contains("not warmed up"),
        "building {}: {stderr}",
        entry.display()
    );
    std::fs::rename(&partial, &out).expect("rename the built component");
    prune_builds(&out_dir, &format!("{stem}-{}-", lang.name()));
    Some(out)
}

/// Builds of one connector in one language kept under `target/langs/`.
pub const KEPT_BUILDS: usize = 3;

/// Marks a kept build used now (its modification time).
fn mark_used(path: &Path) {
    if let Ok(file) = std::fs::OpenOptions::new().write(true).open(path) {
        let _ = file.set_modified(std::time::SystemTime::now());
    }
}

/// Removes the builds named `<prefix><digest>.wasm` in `dir` beyond the [`KEPT_BUILDS`]
/// used last (sources since changed; kept a while for a branch switched back to).
fn prune_builds(dir: &Path, prefix: &str) {
    let Ok(listing) = std::fs::read_dir(dir) else {
        return;
    };
    let mut builds: Vec<(std::time::SystemTime, PathBuf)> = listing
        .filter_map(|e| {
            let e = e.ok()?;
            let name = e.file_name().into_string().ok()?;
            let digest = name.strip_prefix(prefix)?.strip_suffix(".wasm")?;
            if digest.contains('.') || digest.contains('-') {
                return None;
            }
            Some((e.metadata().ok()?.modified().ok()?, e.path()))
        })
        .collect();
    builds.sort_by_key(|b| std::cmp::Reverse(b.0));
    for (_, stale) in builds.into_iter().skip(KEPT_BUILDS) {
        let _ = std::fs::remove_file(stale);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, SystemTime};

    #[test]
    fn only_the_builds_used_last_are_kept() {
        let dir = tempfile::tempdir().unwrap();
        let now = SystemTime::now();
        let write = |name: &str, ago: u64| {
            let path = dir.path().join(name);
            std::fs::write(&path, "wasm").unwrap();
            let file = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
            file.set_modified(now - Duration::from_secs(ago)).unwrap();
        };
        for (i, digest) in ["aa", "bb", "cc", "dd", "ee"].iter().enumerate() {
            write(&format!("acme-js-typescript-{digest}.wasm"), 100 * i as u64);
        }
        // Another connector, another language, a build in progress: not this one's builds.
        write("acme-js-python-ff.wasm", 1000);
        write("acme-js-typescript-00.partial.wasm", 1000);
        write("acme-typescript-11.wasm", 1000);
        // An old build used again is kept over newer ones.
        mark_used(&dir.path().join("acme-js-typescript-ee.wasm"));
        prune_builds(dir.path(), "acme-js-typescript-");
        let mut left: Vec<String> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        left.sort();
        assert_eq!(
            left,
            [
                "acme-js-python-ff.wasm",
                "acme-js-typescript-00.partial.wasm",
                "acme-js-typescript-aa.wasm",
                "acme-js-typescript-bb.wasm",
                "acme-js-typescript-ee.wasm",
                "acme-typescript-11.wasm",
            ]
        );
    }
}
