//! Operator-configured secrets of this connector (`connectors.<slug>.secrets.<name>`).
//!
//! Secrets stay in the host's configuration; a binding refers to one by name (for example
//! `"patSecret": "ci-bot"`), and the host hands its value to the guest only during a call
//! whose binding names it.

/// The secret `name`, if the operator configured it and the current binding names it.
pub fn get(name: &str) -> Option<String> {
    #[cfg(target_arch = "wasm32")]
    {
        crate::bindings::spring::connector::host::secret(name)
    }
    #[cfg(not(target_arch = "wasm32"))]
    {
        let _ = name;
        None
    }
}
