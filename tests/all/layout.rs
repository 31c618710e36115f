//! The shape of `host/src`, checked: no import cycles among its top-level modules, a
//! thin `Host` facade, and no `impl Host` outside `host.rs`.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

fn host_src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../host/src")
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("read host/src") {
        let path = entry.expect("dir entry").path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The top-level module a file belongs to (`store` for `store/sqlite.rs`).
fn module_of(root: &Path, file: &Path) -> String {
    let rel = file.strip_prefix(root).expect("under host/src");
    let first = rel.components().next().expect("a component");
    first
        .as_os_str()
        .to_string_lossy()
        .trim_end_matches(".rs")
        .to_string()
}

/// The code of a file without comments and without its `#[cfg(test)] mod tests`.
fn code_of(text: &str) -> String {
    let without_tests = match text.find("#[cfg(test)]\nmod tests") {
        Some(i) => &text[..i],
        None => text,
    };
    without_tests
        .lines()
        .filter(|l| !l.trim_start().starts_with("//"))
        .collect::<Vec<_>>()
        .join("\n")
}

/// Which top-level modules each top-level module names (`crate::x`, `use crate::{x, ..}`).
fn module_graph() -> BTreeMap<String, BTreeSet<String>> {
    let root = host_src();
    let mut files = Vec::new();
    rust_files(&root, &mut files);
    let modules: BTreeSet<String> = files
        .iter()
        .map(|f| module_of(&root, f))
        .filter(|m| m != "lib" && m != "main")
        .collect();
    let mut graph: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for file in &files {
        let from = module_of(&root, file);
        if !modules.contains(&from) {
            continue;
        }
        let code = code_of(&std::fs::read_to_string(file).expect("read a source file"));
        let mut named = BTreeSet::new();
        for (i, _) in code.match_indices("crate::") {
            let rest = &code[i + "crate::".len()..];
            if let Some(group) = rest.strip_prefix('{') {
                let group = &group[..group.find('}').unwrap_or(group.len())];
                for item in group.split(',') {
                    named.insert(item.trim().split("::").next().unwrap_or("").to_string());
                }
            } else {
                let name: String = rest
                    .chars()
                    .take_while(|c| c.is_alphanumeric() || *c == '_')
                    .collect();
                named.insert(name);
            }
        }
        let edges = graph.entry(from.clone()).or_default();
        for to in named {
            if to != from && modules.contains(&to) {
                edges.insert(to);
            }
        }
    }
    graph
}

/// A cycle through `start`, if there is one.
fn cycle_through(graph: &BTreeMap<String, BTreeSet<String>>, start: &str) -> Option<Vec<String>> {
    fn walk(
        graph: &BTreeMap<String, BTreeSet<String>>,
        start: &str,
        at: &str,
        path: &mut Vec<String>,
        seen: &mut BTreeSet<String>,
    ) -> bool {
        for next in graph.get(at).into_iter().flatten() {
            if next == start {
                path.push(next.clone());
                return true;
            }
            if seen.insert(next.clone()) {
                path.push(next.clone());
                if walk(graph, start, next, path, seen) {
                    return true;
                }
                path.pop();
            }
        }
        false
    }
    let mut path = vec![start.to_string()];
    walk(graph, start, start, &mut path, &mut BTreeSet::new()).then_some(path)
}

#[test]
fn host_modules_have_no_import_cycles() {
    let graph = module_graph();
    assert!(
        graph.len() > 10,
        "the scan found too few modules: {:?}",
        graph.keys()
    );
    assert!(
        graph["startup"].contains("state") && graph["webhooks"].contains("inbox"),
        "the scan misses imports: {graph:?}"
    );
    let cycles: Vec<String> = graph
        .keys()
        .filter_map(|m| cycle_through(&graph, m))
        .map(|c| c.join(" -> "))
        .collect();
    assert!(cycles.is_empty(), "import cycles: {cycles:#?}");
}

#[test]
fn host_is_a_thin_facade() {
    let root = host_src();
    let facade = std::fs::read_to_string(root.join("host.rs")).expect("host.rs");
    let lines = facade.lines().count();
    assert!(lines < 400, "host.rs has {lines} lines");
    let mut files = Vec::new();
    rust_files(&root, &mut files);
    for file in files.iter().filter(|f| !f.ends_with("host.rs")) {
        let code = code_of(&std::fs::read_to_string(file).expect("read a source file"));
        assert!(
            !code.contains("impl Host {") && !code.contains("impl Host<"),
            "{} adds methods to Host; give the concern its own part instead",
            file.display()
        );
    }
}

#[test]
fn the_cycle_check_finds_cycles() {
    let graph = |edges: &[(&str, &str)]| {
        let mut g: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
        for (a, b) in edges {
            g.entry(a.to_string()).or_default().insert(b.to_string());
        }
        g
    };
    let cyclic = graph(&[("a", "b"), ("b", "c"), ("c", "a"), ("c", "d")]);
    assert_eq!(
        cycle_through(&cyclic, "a"),
        Some(vec!["a".into(), "b".into(), "c".into(), "a".into()])
    );
    let acyclic = graph(&[("a", "b"), ("b", "c"), ("a", "c")]);
    assert_eq!(cycle_through(&acyclic, "a"), None);
}

/// The crates `cargo tree` lists for `connector-host` with `args` (normal dependencies).
fn dependency_names(args: &[&str]) -> BTreeSet<String> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR")).join("../Cargo.toml");
    let out = std::process::Command::new(cargo)
        .args([
            "tree",
            "-p",
            "connector-host",
            "-e",
            "normal",
            "--prefix",
            "none",
        ])
        .arg("--manifest-path")
        .arg(manifest)
        .args(args)
        .output()
        .expect("run cargo tree");
    assert!(
        out.status.success(),
        "cargo tree failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.split_whitespace().next().map(str::to_string))
        .collect()
}

#[test]
fn an_embedding_build_compiles_neither_the_cli_nor_postgres_nor_the_registry_client() {
    let cli_only = [
        "clap",
        "tracing-subscriber",
        "tokio-postgres",
        "deadpool-postgres",
        "connector-distribution",
        "oci-client",
        "scrypt",
    ];
    let full = dependency_names(&[]);
    for name in cli_only {
        assert!(full.contains(name), "the full binary should use {name}");
    }
    let lean = dependency_names(&["--no-default-features"]);
    for name in cli_only {
        assert!(!lean.contains(name), "an embedding build pulls in {name}");
    }
    assert!(lean.contains("wasmtime") && lean.contains("rusqlite"));
    assert!(lean.len() < full.len());
}
