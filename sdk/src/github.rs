//! GitHub App credentials minted by the host.
//!
//! The App's private key never enters guest memory: the guest asks the host for a
//! short-lived installation token, and the host answers only for an installation named by
//! the binding of the current call.

/// A short-lived credential minted by the host.
#[derive(Clone, PartialEq, Eq)]
pub struct AccessToken {
    /// The bearer token.
    pub token: String,
    /// When it stops working, RFC 3339.
    pub expires_at: String,
}

impl std::fmt::Debug for AccessToken {
    // Never print the token itself.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AccessToken")
            .field("token", &"***")
            .field("expires_at", &self.expires_at)
            .finish()
    }
}

/// An installation access token for `installation_id`, or the host's reason for refusing.
pub fn installation_token(installation_id: u64) -> Result<AccessToken, String> {
    #[cfg(target_arch = "wasm32")]
    {
        crate::bindings::spring::connector::host::github_installation_token(installation_id).map(
            |t| AccessToken {
                token: t.token,
                expires_at: t.expires_at,
            },
        )
    }
    #[cfg(not(target_arch = "wasm32"))]
    {
        Err(format!(
            "no GitHub installation token for {installation_id}: tokens exist only inside \
             connector-host (wasm32)"
        ))
    }
}
