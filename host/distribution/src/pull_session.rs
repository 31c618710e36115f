//! A pull's requests to one registry, each answer read with a size limit.
//!
//! `oci-client` reads a manifest and a token endpoint's answer whole before looking at
//! their size, so a registry (or the token service it names) that answers without end
//! would make the host hold that answer in memory until the pull's deadline. A pull
//! therefore speaks to the registry itself, with the same few requests the distribution
//! specification defines, and reads every answer through
//! [`connector_remote_answer::read_at_most`]:
//!
//! - the authorization, once per pull: `GET /v2/`; a `Bearer` challenge is answered by a
//!   token from its realm (the registry's credentials as Basic, scope
//!   `repository:<name>:pull`), a `Basic` one by the credentials; the token must be a
//!   valid header value;
//! - manifests (`GET /v2/<name>/manifests/<reference>`), at most [`MAX_MANIFEST_BYTES`]
//!   (the size the specification asks registries to accept), their digest computed from
//!   the bytes read and compared with the one a pinned reference names;
//! - blobs (`GET /v2/<name>/blobs/<digest>`), as a stream the caller bounds.
//!
//! `oci-client` stays the client of pushes, which the operator's command line makes to a
//! registry it names.

use std::time::Duration;

use connector_remote_answer::{error_chain, read_at_most, AnswerError};
use oci_client::manifest::OciManifest;
use oci_client::Reference;
use reqwest::header::{HeaderValue, ACCEPT, AUTHORIZATION, WWW_AUTHENTICATE};
use reqwest::StatusCode;
use sha2::{Digest, Sha256};

use crate::registry::{clip, DistributionError, OciReference, RegistryAccess};

/// Largest manifest read (the OCI distribution specification's size registries accept).
pub const MAX_MANIFEST_BYTES: u64 = 4 * 1024 * 1024;
/// Largest token answer read.
pub const MAX_TOKEN_BYTES: u64 = 64 * 1024;
/// Largest error answer read (for its message).
const MAX_ERROR_BYTES: u64 = 16 * 1024;

/// The manifest media types a pull asks for.
const MANIFEST_ACCEPT: &str = "application/vnd.oci.image.manifest.v1+json, \
    application/vnd.docker.distribution.manifest.v2+json, \
    application/vnd.oci.image.index.v1+json, \
    application/vnd.docker.distribution.manifest.list.v2+json";

/// One pull's requests to one registry.
pub(crate) struct PullSession {
    http: reqwest::Client,
    /// `http(s)://<registry>/v2/<repository>/`.
    base: String,
    registry: String,
    authorization: Option<HeaderValue>,
}

impl PullSession {
    /// Opens a session with the registry of `reference`: finds how it wants to be
    /// authorized and obtains that authorization.
    pub(crate) async fn open(
        reference: &OciReference,
        access: &RegistryAccess,
        timeout: Duration,
    ) -> Result<Self, DistributionError> {
        let image = reference.image();
        let plain = access.insecure || reference.is_loopback();
        let scheme = if plain { "http" } else { "https" };
        let registry = reference.registry().to_string();
        let http = reqwest::Client::builder()
            .connect_timeout(timeout.min(Duration::from_secs(10)))
            .read_timeout(timeout)
            .https_only(!plain)
            .build()
            .map_err(|e| DistributionError::Registry {
                registry: registry.clone(),
                message: format!("cannot make an HTTP client: {e}"),
            })?;
        let resolved = image.resolve_registry();
        let mut session = Self {
            http,
            base: format!("{scheme}://{resolved}/v2/{}/", image.repository()),
            registry,
            authorization: None,
        };
        session.authorization = session
            .authorize(&format!("{scheme}://{resolved}/v2/"), image, access, plain)
            .await?;
        Ok(session)
    }

    /// What requests to the registry carry: nothing, Basic credentials, or a bearer
    /// token from the realm its challenge names.
    async fn authorize(
        &self,
        version_url: &str,
        image: &Reference,
        access: &RegistryAccess,
        plain: bool,
    ) -> Result<Option<HeaderValue>, DistributionError> {
        let basic = match (&access.username, &access.password) {
            (Some(user), Some(password)) => Some((user.as_str(), password.as_str())),
            _ => None,
        };
        let answer = self.send(self.http.get(version_url)).await?;
        if answer.status() != StatusCode::UNAUTHORIZED {
            return Ok(basic.map(|(user, password)| basic_header(user, password)));
        }
        let challenge = answer
            .headers()
            .get_all(WWW_AUTHENTICATE)
            .iter()
            .filter_map(|value| value.to_str().ok())
            .find_map(bearer_challenge);
        let Some((realm, service)) = challenge else {
            // A Basic challenge (or none this client understands): the credentials, if any.
            return Ok(basic.map(|(user, password)| basic_header(user, password)));
        };
        let realm_url = reqwest::Url::parse(&realm).map_err(|_| {
            self.error(format!("its token service `{}` is not a URL", clip(&realm)))
        })?;
        if realm_url.scheme() != "https" && !(plain && realm_url.scheme() == "http") {
            return Err(self.error(format!(
                "its token service `{}` is not HTTPS; credentials and tokens go over HTTPS only",
                clip(&realm)
            )));
        }
        let scope = format!("repository:{}:pull", image.repository());
        let mut query = vec![("scope", scope.as_str())];
        if let Some(service) = &service {
            query.push(("service", service));
        }
        let mut request = self.http.get(realm_url).query(&query);
        if let Some((user, password)) = basic {
            request = request.basic_auth(user, Some(password));
        }
        let answer = self.send(request).await?;
        let status = answer.status();
        if !status.is_success() {
            return Err(self.error(format!(
                "its token service answered {status}{}",
                if basic.is_some() {
                    ": it refused the credentials (check registries.<host>.username and password_env)"
                } else {
                    ": it wants credentials (set registries.<host>.username and password_env)"
                }
            )));
        }
        let body = read_at_most(answer, MAX_TOKEN_BYTES)
            .await
            .map_err(|e| self.error(format!("its token service's answer: {e}")))?;
        #[derive(serde::Deserialize)]
        struct TokenAnswer {
            token: Option<String>,
            access_token: Option<String>,
        }
        let token = serde_json::from_slice::<TokenAnswer>(&body)
            .ok()
            .and_then(|t| t.token.or(t.access_token))
            .filter(|t| !t.is_empty())
            .ok_or_else(|| self.error("its token service answered without a token".into()))?;
        let mut header = HeaderValue::from_str(&format!("Bearer {token}")).map_err(|_| {
            self.error("its token service answered a token that cannot be sent in a header".into())
        })?;
        header.set_sensitive(true);
        Ok(Some(header))
    }

    /// The manifest `reference` (a tag or a digest) names and its digest, or `None` when
    /// the registry does not have it.
    pub(crate) async fn manifest(
        &self,
        reference: &str,
    ) -> Result<Option<(OciManifest, String)>, DistributionError> {
        let url = format!("{}manifests/{reference}", self.base);
        let answer = self
            .send(
                self.authorized(self.http.get(&url))
                    .header(ACCEPT, MANIFEST_ACCEPT),
            )
            .await?;
        let status = answer.status();
        if status == StatusCode::NOT_FOUND {
            return Ok(None);
        }
        if !status.is_success() {
            return Err(self.refused(answer).await);
        }
        let body = read_at_most(answer, MAX_MANIFEST_BYTES)
            .await
            .map_err(|e| self.read_error("the manifest", e))?;
        let digest = format!("sha256:{}", hex::encode(Sha256::digest(&body)));
        if reference.starts_with("sha256:") && !reference.eq_ignore_ascii_case(&digest) {
            return Err(DistributionError::Artifact(format!(
                "the registry {} answered a manifest with digest {digest} for {}: refused",
                self.registry,
                clip(reference)
            )));
        }
        let manifest = serde_json::from_slice::<OciManifest>(&body).map_err(|e| {
            DistributionError::Artifact(format!(
                "the manifest {} of {} is not an OCI manifest: {}",
                clip(reference),
                self.registry,
                clip(&e.to_string())
            ))
        })?;
        Ok(Some((manifest, digest)))
    }

    /// The answer to `GET` of blob `digest`, its status checked; the caller reads its body
    /// within its own limit.
    pub(crate) async fn blob(&self, digest: &str) -> Result<reqwest::Response, DistributionError> {
        let url = format!("{}blobs/{digest}", self.base);
        let answer = self.send(self.authorized(self.http.get(&url))).await?;
        if !answer.status().is_success() {
            return Err(self.refused(answer).await);
        }
        Ok(answer)
    }

    fn authorized(&self, request: reqwest::RequestBuilder) -> reqwest::RequestBuilder {
        match &self.authorization {
            Some(value) => request.header(AUTHORIZATION, value.clone()),
            None => request,
        }
    }

    async fn send(
        &self,
        request: reqwest::RequestBuilder,
    ) -> Result<reqwest::Response, DistributionError> {
        request.send().await.map_err(|e| {
            // reqwest's message names the URL, never a header.
            self.error(format!("cannot reach it: {}", clip(&error_chain(&e))))
        })
    }

    /// A failed answer as an error that quotes the registry's own message, if short.
    async fn refused(&self, answer: reqwest::Response) -> DistributionError {
        let status = answer.status();
        if status == StatusCode::UNAUTHORIZED || status == StatusCode::FORBIDDEN {
            return self.error(format!(
                "it answered {status}: it wants credentials (set registries.<host>.username and password_env) or refused them"
            ));
        }
        let text = read_at_most(answer, MAX_ERROR_BYTES)
            .await
            .map(|body| String::from_utf8_lossy(&body).into_owned())
            .unwrap_or_default();
        self.error(format!("it answered {status}: {}", clip(text.trim())))
    }

    fn read_error(&self, what: &str, e: AnswerError) -> DistributionError {
        match e {
            AnswerError::TooLarge { limit } => DistributionError::Artifact(format!(
                "the registry {} sent {what} larger than {}: refused",
                self.registry,
                connector_remote_answer::size(limit)
            )),
            AnswerError::Failed { .. } => self.error(format!("reading {what} failed: {e}")),
        }
    }

    fn error(&self, message: String) -> DistributionError {
        DistributionError::Registry {
            registry: self.registry.clone(),
            message,
        }
    }
}

/// `realm` and `service` of a `Bearer` challenge in a `WWW-Authenticate` value.
fn bearer_challenge(value: &str) -> Option<(String, Option<String>)> {
    http_auth::parser::ChallengeParser::new(value)
        .filter_map(Result::ok)
        .find(|c| c.scheme.eq_ignore_ascii_case("bearer"))
        .and_then(|c| {
            let param = |name: &str| {
                c.params
                    .iter()
                    .find(|(k, _)| k.eq_ignore_ascii_case(name))
                    .map(|(_, v)| v.to_unescaped())
            };
            Some((param("realm")?, param("service")))
        })
}

fn basic_header(user: &str, password: &str) -> HeaderValue {
    let encoded = base64::Engine::encode(
        &base64::engine::general_purpose::STANDARD,
        format!("{user}:{password}"),
    );
    // Base64 is always a valid header value.
    let mut value = HeaderValue::from_str(&format!("Basic {encoded}"))
        .unwrap_or_else(|_| HeaderValue::from_static("Basic"));
    value.set_sensitive(true);
    value
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bearer_challenge_names_its_realm_and_service() {
        let (realm, service) = bearer_challenge(
            r#"Bearer realm="https://auth.example/token",service="registry.example",scope="x""#,
        )
        .unwrap();
        assert_eq!(realm, "https://auth.example/token");
        assert_eq!(service.as_deref(), Some("registry.example"));
        assert_eq!(bearer_challenge(r#"Basic realm="registry""#), None);
        assert_eq!(bearer_challenge(r#"Bearer service="no-realm""#), None);
    }
}
