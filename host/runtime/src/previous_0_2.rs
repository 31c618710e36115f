//! Components built against `spring:connector@0.2.0`, the second world.
//!
//! 0.3.0 changed only the names of three exports (`describe`, `bind` and `accept` became
//! `describe-connector`, `validate-binding` and `accepts-message`, so that no export is
//! the name of a C function); every type is the same. The component model checks types
//! by their structure, not their package, so a 0.2.0 component is called with the
//! current world's Rust types (the `with` below maps its `types` interface onto them)
//! and needs no translation: only the export names differ ([`export_name`]). Its `host`
//! interface is imported under its own version and answered by the current world's
//! implementation (see `link_host_interfaces`).

pub(super) mod bindings {
    wasmtime::component::bindgen!({
        path: "../../wit/previous/connector-0.2.0.wit",
        world: "connector",
        imports: { default: async },
        exports: { default: async },
        with: {
            "spring:connector/types": crate::bindings::spring::connector::types,
            "spring:connector/host": crate::bindings::spring::connector::host,
        },
    });
}

/// The world's name, as `inspect` and the API show it.
pub(super) const WORLD: &str = "spring:connector@0.2.0";

/// The name a 0.2.0 component exports `current` (a 0.3.0 export name) under.
pub(super) fn export_name(current: &str) -> &str {
    match current {
        "describe-connector" => "describe",
        "validate-binding" => "bind",
        "accepts-message" => "accept",
        same => same,
    }
}

#[cfg(test)]
mod tests {
    /// Every export of the 0.3.0 world, with its 0.2.0 name: the two worlds differ in
    /// exactly these names, and every current name holds a `-` (no C symbol can).
    #[test]
    fn export_names_map_to_the_second_world() {
        let current = std::fs::read_to_string(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../wit/connector.wit"
        ))
        .expect("wit/connector.wit");
        let second = std::fs::read_to_string(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../wit/previous/connector-0.2.0.wit"
        ))
        .expect("wit/previous/connector-0.2.0.wit");
        let exports = |text: &str| -> Vec<String> {
            text.lines()
                .filter_map(|l| l.trim().strip_prefix("export "))
                .filter_map(|l| l.split(':').next())
                .map(str::to_owned)
                .collect()
        };
        let (now, before) = (exports(&current), exports(&second));
        assert_eq!(now.len(), 6, "{now:?}");
        for name in &now {
            assert!(name.contains('-'), "export `{name}` could be a C symbol");
        }
        let mapped: Vec<&str> = now.iter().map(|n| super::export_name(n)).collect();
        assert_eq!(mapped, before);
    }
}
