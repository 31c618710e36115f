//! What can go wrong with the GitHub App, worded for an operator.
//!
//! No variant carries the App key, a JWT or an installation token: only paths, ids,
//! HTTP statuses and GitHub's own `message` field.

use std::path::PathBuf;
use std::time::Duration;

use super::KeyProblem;

/// Why the GitHub App could not be set up or could not mint an installation token.
///
/// `Clone` because one failed exchange answers every caller that was waiting for it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum GithubAppError {
    /// A `github_app` setting is unusable (empty App id, bad API URL).
    #[error("GitHub App setting `github_app.{setting}` is invalid: {reason}")]
    InvalidSetting {
        /// The setting, under `github_app.`.
        setting: &'static str,
        /// Why.
        reason: String,
    },

    /// The private key file could not be read.
    #[error("cannot read the GitHub App private key {}: {reason}", path.display())]
    KeyFile {
        /// The configured private key file.
        path: PathBuf,
        /// Why.
        reason: String,
    },

    /// The private key file was read but is not a usable RSA private key.
    #[error(
        "the GitHub App private key {} is unusable: {reason}. Expected the PEM file GitHub \
         generated for the App (`-----BEGIN RSA PRIVATE KEY-----`, PKCS#1) or its PKCS#8 form \
         (`-----BEGIN PRIVATE KEY-----`)",
        path.display()
    )]
    InvalidKey {
        /// The configured private key file.
        path: PathBuf,
        /// Why.
        reason: KeyProblem,
    },

    /// GitHub does not know the installation (404).
    #[error(
        "installation {installation_id} does not exist or the App is not installed there \
         (GitHub answered 404)"
    )]
    UnknownInstallation {
        /// The installation a token was asked for.
        installation_id: u64,
    },

    /// The installation is suspended (403).
    #[error(
        "installation {installation_id} has been suspended; GitHub mints no tokens for it \
         until it is unsuspended (403: {message})"
    )]
    Suspended {
        /// The installation a token was asked for.
        installation_id: u64,
        /// GitHub's own message.
        message: String,
    },

    /// GitHub refused the App's JWT for a reason other than its timestamps (401): usually
    /// a key that does not belong to the App, or a wrong App id.
    #[error(
        "GitHub rejected the App's JWT (401: {message}); check that github_app.app_id \
         ({app_id}) names the App whose private key is {}",
        key_path.display()
    )]
    JwtRejected {
        /// GitHub's own message.
        message: String,
        /// The configured App id.
        app_id: String,
        /// The configured private key file.
        key_path: PathBuf,
    },

    /// GitHub refused the JWT's `iat`/`exp` even after one retry corrected for the clock
    /// offset read from its `Date` header (or it sent no usable `Date`).
    #[error(
        "GitHub rejected the App's JWT timestamps (401: {message}) {detail}; check this \
         machine's clock (NTP)"
    )]
    ClockSkew {
        /// GitHub's own message.
        message: String,
        /// What the clock correction found.
        detail: String,
    },

    /// Any other answer than success.
    #[error(
        "GitHub answered {status} when minting a token for installation {installation_id}: \
         {message}"
    )]
    Status {
        /// The installation a token was asked for.
        installation_id: u64,
        /// GitHub's HTTP status.
        status: u16,
        /// GitHub's own message.
        message: String,
    },

    /// GitHub could not be reached, or the connection broke.
    #[error("cannot reach GitHub at {api_url} to mint a token for installation {installation_id}: {reason}")]
    Transport {
        /// The installation a token was asked for.
        installation_id: u64,
        /// The GitHub API the host asked.
        api_url: String,
        /// Why.
        reason: String,
    },

    /// GitHub did not answer in time.
    #[error(
        "GitHub at {api_url} did not answer within {} s when minting a token for \
         installation {installation_id}",
        after.as_secs_f64()
    )]
    Timeout {
        /// The installation a token was asked for.
        installation_id: u64,
        /// The GitHub API the host asked.
        api_url: String,
        /// How long the host waited.
        after: Duration,
    },

    /// GitHub answered success with something that is not `{token, expires_at}`.
    #[error("GitHub's answer for installation {installation_id} is not a token: {reason}")]
    InvalidResponse {
        /// The installation a token was asked for.
        installation_id: u64,
        /// Why.
        reason: String,
    },

    /// GitHub handed out a token that is already expired by its own clock.
    #[error(
        "GitHub returned a token for installation {installation_id} that expired at \
         {expires_at}; it is not handed out (check the clocks)"
    )]
    ExpiredToken {
        /// The installation a token was asked for.
        installation_id: u64,
        /// When GitHub says the token expired.
        expires_at: String,
    },

    /// A bug or a shutdown: the exchange task did not finish.
    #[error("minting a token for installation {installation_id} failed inside the host: {reason}")]
    Internal {
        /// The installation a token was asked for.
        installation_id: u64,
        /// Why.
        reason: String,
    },
}
