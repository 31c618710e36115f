//! Where the local commands (`inspect`, a local `call`, `dev` without `--live`) keep
//! compiled components between runs.
//!
//! Compiling a component is what a local command spends its time on: an interpreter
//! component (a JavaScript or Python connector, 12 to 40 MB) takes Cranelift tens of
//! seconds, a Rust one a fraction of a second. The runtime's compiled-component cache,
//! which `serve` keeps under its data directory, turns every later run on the same bytes
//! into a read of machine code. The cache is keyed by the component's digest and the
//! engine's settings, so a rebuilt component or another host version never loads stale
//! code. The runtime keeps it within the default `CacheBound` (2 GiB, entries unused for
//! 30 days removed, the least recently used first), so the builds of a dev loop do not
//! pile up.

use std::path::PathBuf;

use connector_core::config::ENV_CACHE_DIR;

/// The cache directory: `$CONNECTOR_HOST_CACHE_DIR` (`off`: none), else
/// `$XDG_CACHE_HOME/connector-host/components`, else
/// `$HOME/.cache/connector-host/components`; `None` when none of them is set.
pub(crate) fn local_cache_dir() -> Option<PathBuf> {
    dir_from(|name| std::env::var_os(name).filter(|v| !v.is_empty()))
}

fn dir_from(var: impl Fn(&str) -> Option<std::ffi::OsString>) -> Option<PathBuf> {
    if let Some(dir) = var(ENV_CACHE_DIR) {
        return (dir != "off").then(|| PathBuf::from(dir));
    }
    let base = var("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .or_else(|| var("HOME").map(|home| PathBuf::from(home).join(".cache")))?;
    Some(base.join("connector-host").join("components"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::ffi::OsString;

    fn with(vars: &[(&str, &str)]) -> Option<PathBuf> {
        dir_from(|name| {
            vars.iter()
                .find(|(n, _)| *n == name)
                .map(|(_, v)| OsString::from(v))
        })
    }

    #[test]
    fn the_variable_wins_then_xdg_then_home() {
        assert_eq!(
            with(&[(ENV_CACHE_DIR, "/c"), ("HOME", "/h")]),
            Some(PathBuf::from("/c"))
        );
        assert_eq!(with(&[(ENV_CACHE_DIR, "off"), ("HOME", "/h")]), None);
        assert_eq!(
            with(&[("XDG_CACHE_HOME", "/x"), ("HOME", "/h")]),
            Some(PathBuf::from("/x/connector-host/components"))
        );
        assert_eq!(
            with(&[("HOME", "/h")]),
            Some(PathBuf::from("/h/.cache/connector-host/components"))
        );
        assert_eq!(with(&[]), None);
    }
}
