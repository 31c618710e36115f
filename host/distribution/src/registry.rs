//! Pulling and pushing a component in an OCI registry with `oci-client`.
//!
//! The layout is the one `wkg` and `wasm-pkg-tools` publish: an OCI image manifest with
//! config media type [`WASM_CONFIG_MEDIA_TYPE`] and exactly one layer of media type
//! [`WASM_LAYER_MEDIA_TYPE`]. A pull checks the layer's declared size against its limit
//! before reading, reads it as a stream that stops at the declared size, and checks the
//! digest of what it read; the whole pull has one deadline. A pull's requests are its
//! own ([`crate::pull_session`]: every answer read with a limit); pushes go through
//! `oci-client`.

use std::collections::BTreeMap;
use std::str::FromStr;
use std::time::Duration;

use oci_client::client::{ClientConfig, ClientProtocol};
use oci_client::errors::{OciDistributionError, OciErrorCode};
use oci_client::manifest::{OciDescriptor, OciImageManifest, OciManifest, OCI_IMAGE_MEDIA_TYPE};
use oci_client::secrets::RegistryAuth;
use oci_client::{Client, Reference};
use sha2::{Digest, Sha256};

use crate::keys::{SignatureKey, TrustedKey};
use crate::pull_session::PullSession;
use crate::signature::{self, Rejected, SIGNATURE_ANNOTATION, SIMPLE_SIGNING_MEDIA_TYPE};

/// The config media type of a wasm component artifact.
pub const WASM_CONFIG_MEDIA_TYPE: &str = "application/vnd.wasm.config.v0+json";
/// The media type of the component layer.
pub const WASM_LAYER_MEDIA_TYPE: &str = "application/wasm";
/// The scheme of a source naming a registry.
pub const SCHEME: &str = "oci://";
/// Largest signature payload read.
const MAX_SIGNATURE_PAYLOAD: i64 = 64 * 1024;
/// Most signature layers looked at.
const MAX_SIGNATURES: usize = 16;

/// Credentials and transport for one registry.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct RegistryAccess {
    /// `None`: anonymous.
    pub username: Option<String>,
    /// The password (or token) sent with `username`.
    pub password: Option<String>,
    /// Plain HTTP allowed (always for a loopback registry).
    pub insecure: bool,
}

impl std::fmt::Debug for RegistryAccess {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RegistryAccess")
            .field("username", &self.username)
            .field("password", &self.password.as_ref().map(|_| "***"))
            .field("insecure", &self.insecure)
            .finish()
    }
}

/// Bounds of one pull.
#[derive(Debug, Clone, Copy)]
pub struct PullLimits {
    /// Largest component layer read.
    pub max_component_bytes: u64,
    /// Deadline of the whole pull, signatures included.
    pub timeout: Duration,
}

impl Default for PullLimits {
    fn default() -> Self {
        Self {
            max_component_bytes: 64 * 1024 * 1024,
            timeout: Duration::from_secs(120),
        }
    }
}

/// A parsed `oci://registry/repository(:tag|@sha256:…)`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OciReference(Reference);

impl OciReference {
    /// Parses `oci://…` (the scheme is required; the registry must be named).
    pub fn parse(source: &str) -> Result<Self, DistributionError> {
        // Errors quote the reference, but never a user name or password written into it.
        let source = &without_userinfo(source);
        let rest = source.strip_prefix(SCHEME).ok_or_else(|| {
            DistributionError::Reference(format!("`{}` does not start with {SCHEME}", clip(source)))
        })?;
        let first = rest.split('/').next().unwrap_or("");
        if !rest.contains('/')
            || !(first.contains('.') || first.contains(':') || first == "localhost")
        {
            return Err(DistributionError::Reference(format!(
                "`{}` must name its registry: oci://<registry>/<repository>:<tag>",
                clip(source)
            )));
        }
        let reference = Reference::from_str(rest)
            .map_err(|e| DistributionError::Reference(format!("`{}`: {e}", clip(source))))?;
        Ok(Self(reference))
    }

    /// The registry as the reference names it (`host[:port]`): the key of its settings.
    pub fn registry(&self) -> &str {
        self.0.registry()
    }

    /// The parsed reference.
    pub(crate) fn image(&self) -> &Reference {
        &self.0
    }

    /// The tag or `sha256:` digest the reference names (`latest` when it names neither).
    pub(crate) fn tag_or_digest(&self) -> String {
        match (self.0.digest(), self.0.tag()) {
            (Some(digest), _) => digest.to_string(),
            (None, Some(tag)) => tag.to_string(),
            (None, None) => "latest".to_string(),
        }
    }

    /// `registry/repository`.
    pub fn repository(&self) -> String {
        format!("{}/{}", self.0.registry(), self.0.repository())
    }

    /// `oci://registry/repository@<digest>`.
    pub fn pinned(&self, manifest_digest: &str) -> String {
        format!("{SCHEME}{}@{manifest_digest}", self.repository())
    }

    /// Whether the registry is on a loopback address (reached over plain HTTP).
    pub fn is_loopback(&self) -> bool {
        let host = registry_host(self.0.registry());
        host == "localhost"
            || host
                .trim_matches(['[', ']'])
                .parse::<std::net::IpAddr>()
                .is_ok_and(|ip| ip.is_loopback())
    }
}

impl std::fmt::Display for OciReference {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{SCHEME}{}", self.0.whole())
    }
}

/// `host` of `host[:port]` (an IPv6 literal keeps its brackets).
fn registry_host(registry: &str) -> &str {
    if registry.starts_with('[') {
        return registry
            .split(']')
            .next()
            .map_or(registry, |h| &registry[..h.len() + 1]);
    }
    registry.split(':').next().unwrap_or(registry)
}

/// What a component's signatures say, against the trusted keys.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SignatureCheck {
    /// Signed by this trusted key (`sha256:<hex>` of its DER SubjectPublicKeyInfo).
    SignedBy(String),
    /// No signature at all.
    Unsigned,
    /// Signatures, none of them by a trusted key for this manifest; why, for people.
    Invalid(String),
    /// Not looked at: no key is trusted.
    NotChecked,
}

/// A component pulled from a registry.
#[derive(Debug, Clone)]
pub struct PulledComponent {
    /// The component's bytes (their digest checked).
    pub bytes: Vec<u8>,
    /// `sha256:<hex>` of the bytes (the layer's digest).
    pub digest: String,
    /// The manifest's digest (what signatures cover).
    pub manifest_digest: String,
    /// `oci://registry/repository@<manifest digest>`.
    pub source: String,
    /// What its signatures say.
    pub signature: SignatureCheck,
}

/// What a push wrote.
#[derive(Debug, Clone)]
pub struct Pushed {
    /// The manifest's digest.
    pub manifest_digest: String,
    /// `oci://registry/repository@<manifest digest>`.
    pub source: String,
    /// The tag of the signature manifest, when signed.
    pub signature_tag: Option<String>,
}

/// Why a pull or push failed.
#[derive(Debug, thiserror::Error)]
pub enum DistributionError {
    /// The reference cannot be used.
    #[error("invalid OCI reference: {0}")]
    Reference(String),
    /// The registry could not be reached, refused, or does not have it.
    #[error("registry {registry}: {message}")]
    Registry {
        /// The registry, as the reference names it.
        registry: String,
        /// What went wrong.
        message: String,
    },
    /// The artifact is not a component as this host takes them (layout, size, digest).
    #[error("{0}")]
    Artifact(String),
    /// The pull took longer than its deadline.
    #[error("the pull from {registry} took longer than {seconds} s; nothing was installed")]
    Timeout {
        /// The registry, as the reference names it.
        registry: String,
        /// The deadline.
        seconds: u64,
    },
}

impl DistributionError {
    /// The rule an [`DistributionError::Artifact`] broke, for details.
    pub fn is_artifact(&self) -> bool {
        matches!(self, DistributionError::Artifact(_))
    }
}

/// Makes sure rustls has a process-wide crypto provider (ring, as the rest of the host
/// uses), since reqwest is built here without one of its own.
fn ensure_crypto_provider() {
    if rustls::crypto::CryptoProvider::get_default().is_none() {
        let _ = rustls::crypto::ring::default_provider().install_default();
    }
}

fn client(reference: &OciReference, access: &RegistryAccess, timeout: Duration) -> Client {
    ensure_crypto_provider();
    let protocol = if access.insecure || reference.is_loopback() {
        ClientProtocol::Http
    } else {
        ClientProtocol::Https
    };
    Client::new(ClientConfig {
        protocol,
        platform_resolver: None,
        connect_timeout: Some(timeout.min(Duration::from_secs(10))),
        read_timeout: Some(timeout),
        ..Default::default()
    })
}

fn auth(access: &RegistryAccess) -> RegistryAuth {
    match (&access.username, &access.password) {
        (Some(user), Some(password)) => RegistryAuth::Basic(user.clone(), password.clone()),
        _ => RegistryAuth::Anonymous,
    }
}

/// Pulls the component `reference` names, and (with `keys`) checks its signatures.
pub async fn pull(
    reference: &OciReference,
    access: &RegistryAccess,
    limits: PullLimits,
    keys: &[TrustedKey],
) -> Result<PulledComponent, DistributionError> {
    let registry = reference.registry().to_string();
    match tokio::time::timeout(limits.timeout, pull_within(reference, access, limits, keys)).await {
        Ok(result) => result,
        Err(_) => Err(DistributionError::Timeout {
            registry,
            seconds: limits.timeout.as_secs(),
        }),
    }
}

async fn pull_within(
    reference: &OciReference,
    access: &RegistryAccess,
    limits: PullLimits,
    keys: &[TrustedKey],
) -> Result<PulledComponent, DistributionError> {
    let session = PullSession::open(reference, access, limits.timeout).await?;
    let Some((manifest, manifest_digest)) = session.manifest(&reference.tag_or_digest()).await?
    else {
        return Err(DistributionError::Registry {
            registry: reference.registry().to_string(),
            message: format!("it has no manifest {reference}"),
        });
    };
    let manifest = match manifest {
        OciManifest::Image(m) => m,
        OciManifest::ImageIndex(_) => {
            return Err(DistributionError::Artifact(format!(
                "{reference} is an image index, not a component: a component is one manifest with one `{WASM_LAYER_MEDIA_TYPE}` layer"
            )))
        }
    };
    let layer = component_layer(reference, &manifest)?;
    if layer.size < 0 || layer.size as u64 > limits.max_component_bytes {
        return Err(DistributionError::Artifact(format!(
            "the component layer of {reference} is {} bytes; the limit is {} bytes",
            layer.size, limits.max_component_bytes
        )));
    }
    let bytes = read_layer(&session, reference, layer).await?;
    let signature = if keys.is_empty() {
        SignatureCheck::NotChecked
    } else {
        check_signatures(&session, reference, &manifest_digest, keys).await?
    };
    Ok(PulledComponent {
        bytes,
        digest: layer.digest.clone(),
        source: reference.pinned(&manifest_digest),
        manifest_digest,
        signature,
    })
}

/// The one `application/wasm` layer of a component manifest.
fn component_layer<'m>(
    reference: &OciReference,
    manifest: &'m OciImageManifest,
) -> Result<&'m OciDescriptor, DistributionError> {
    match manifest.layers.as_slice() {
        [layer] if layer.media_type == WASM_LAYER_MEDIA_TYPE => Ok(layer),
        [layer] => Err(DistributionError::Artifact(format!(
            "the layer of {reference} has media type `{}`; a component's one layer is `{WASM_LAYER_MEDIA_TYPE}`",
            clip(&layer.media_type)
        ))),
        layers => Err(DistributionError::Artifact(format!(
            "{reference} has {} layers; a component is exactly one `{WASM_LAYER_MEDIA_TYPE}` layer",
            layers.len()
        ))),
    }
}

/// Reads a layer as a stream: never more than its declared size, its digest checked.
async fn read_layer(
    session: &PullSession,
    reference: &OciReference,
    layer: &OciDescriptor,
) -> Result<Vec<u8>, DistributionError> {
    let Some(expected) = layer.digest.strip_prefix("sha256:") else {
        return Err(DistributionError::Artifact(format!(
            "the layer digest of {reference} is `{}`; only sha256 digests are accepted",
            clip(&layer.digest)
        )));
    };
    let declared = layer.size as u64;
    let mut answer = session.blob(&layer.digest).await?;
    if answer.content_length().is_some_and(|n| n > declared) {
        return Err(DistributionError::Artifact(format!(
            "the registry sends more than the {declared} bytes the manifest of {reference} declares for its layer"
        )));
    }
    let mut bytes = Vec::with_capacity(declared.min(16 * 1024 * 1024) as usize);
    let mut hasher = Sha256::new();
    loop {
        let chunk = match answer.chunk().await {
            Ok(Some(chunk)) => chunk,
            Ok(None) => break,
            Err(e) => {
                return Err(DistributionError::Registry {
                    registry: reference.registry().to_string(),
                    message: format!(
                        "reading the component layer failed: {}",
                        clip(&connector_remote_answer::error_chain(&e))
                    ),
                })
            }
        };
        if bytes.len() as u64 + chunk.len() as u64 > declared {
            return Err(DistributionError::Artifact(format!(
                "the registry sent more than the {declared} bytes the manifest of {reference} declares for its layer"
            )));
        }
        hasher.update(&chunk);
        bytes.extend_from_slice(&chunk);
    }
    if bytes.len() as u64 != declared {
        return Err(DistributionError::Artifact(format!(
            "the registry sent {} bytes of the layer of {reference}; its manifest declares {declared}",
            bytes.len()
        )));
    }
    let actual = hex::encode(hasher.finalize());
    if actual != expected.to_ascii_lowercase() {
        return Err(DistributionError::Artifact(format!(
            "the layer of {reference} has digest sha256:{actual}, not the sha256:{expected} its manifest names: refused"
        )));
    }
    Ok(bytes)
}

/// The signatures stored under `sha256-<hex>.sig` beside `manifest_digest`.
async fn check_signatures(
    session: &PullSession,
    reference: &OciReference,
    manifest_digest: &str,
    keys: &[TrustedKey],
) -> Result<SignatureCheck, DistributionError> {
    let tag = signature_tag(manifest_digest)?;
    let manifest = match session.manifest(&tag).await? {
        None => return Ok(SignatureCheck::Unsigned),
        Some((OciManifest::Image(manifest), _)) => manifest,
        Some((OciManifest::ImageIndex(_), _)) => {
            return Ok(SignatureCheck::Invalid(format!(
                "the signature manifest {tag} is an image index, not cosign's signature manifest"
            )))
        }
    };
    let mut reasons: Vec<String> = Vec::new();
    let layers: Vec<&OciDescriptor> = manifest
        .layers
        .iter()
        .filter(|l| l.media_type == SIMPLE_SIGNING_MEDIA_TYPE)
        .take(MAX_SIGNATURES)
        .collect();
    if layers.is_empty() {
        return Ok(SignatureCheck::Unsigned);
    }
    for layer in layers {
        let Some(sig) = layer
            .annotations
            .as_ref()
            .and_then(|a| a.get(SIGNATURE_ANNOTATION))
        else {
            reasons.push("a signature layer without a signature".into());
            continue;
        };
        if layer.size < 0 || layer.size > MAX_SIGNATURE_PAYLOAD {
            reasons.push(format!("a signature payload of {} bytes", layer.size));
            continue;
        }
        let payload = read_layer(session, reference, layer).await;
        let payload = match payload {
            Ok(p) => p,
            Err(e) => {
                reasons.push(format!("an unreadable signature payload ({e})"));
                continue;
            }
        };
        match signature::verify(&payload, sig, manifest_digest, keys) {
            Ok(key) => return Ok(SignatureCheck::SignedBy(key)),
            Err(Rejected::NotByTrustedKey) => {
                reasons.push("a signature by no trusted key (or a corrupted one)".into())
            }
            Err(other) => reasons.push(format!("a signature that {other}")),
        }
    }
    Ok(SignatureCheck::Invalid(format!(
        "{manifest_digest} has {} signature(s) and none verifies with a trusted key: {}",
        reasons.len(),
        reasons.join("; ")
    )))
}

/// The tag cosign stores the signatures of `manifest_digest` under: `sha256-<hex>.sig`.
fn signature_tag(manifest_digest: &str) -> Result<String, DistributionError> {
    let hex = manifest_digest.strip_prefix("sha256:").ok_or_else(|| {
        DistributionError::Artifact(format!(
            "manifest digest `{}` is not sha256",
            clip(manifest_digest)
        ))
    })?;
    Ok(format!("sha256-{hex}.sig"))
}

fn signature_reference(
    reference: &OciReference,
    manifest_digest: &str,
) -> Result<Reference, DistributionError> {
    Ok(Reference::with_tag(
        reference.0.registry().to_string(),
        reference.0.repository().to_string(),
        signature_tag(manifest_digest)?,
    ))
}

fn is_not_found(e: &OciDistributionError) -> bool {
    match e {
        OciDistributionError::ImageManifestNotFoundError(_) => true,
        OciDistributionError::RegistryError { envelope, .. } => envelope.errors.iter().any(|e| {
            matches!(
                e.code,
                OciErrorCode::ManifestUnknown | OciErrorCode::NameUnknown
            )
        }),
        OciDistributionError::ServerError { code, .. } => *code == 404,
        _ => false,
    }
}

/// A client error as a sentence that names the registry and never the credentials
/// (`oci-client` errors quote URLs and registry messages, neither of which holds them).
fn registry_error(reference: &OciReference, e: OciDistributionError) -> DistributionError {
    let message = match &e {
        OciDistributionError::RegistryError { envelope, .. } => {
            let codes: Vec<String> = envelope
                .errors
                .iter()
                .map(|e| format!("{:?}: {}", e.code, clip(&e.message)))
                .collect();
            codes.join("; ")
        }
        OciDistributionError::AuthenticationFailure(_) => {
            "the registry refused the credentials (set registries.<host>.username and password_env)".into()
        }
        OciDistributionError::ServerError { code: 401, .. } => {
            "the registry wants credentials (set registries.<host>.username and password_env) or refused them".into()
        }
        other => clip(&other.to_string()),
    };
    DistributionError::Registry {
        registry: reference.registry().to_string(),
        message: format!("{message} ({reference})"),
    }
}

/// Pushes `component` as `reference` and, with `signer`, a cosign signature of its
/// manifest beside it (added to the signatures already there).
pub async fn push(
    component: &[u8],
    reference: &OciReference,
    access: &RegistryAccess,
    signer: Option<&SignatureKey>,
) -> Result<Pushed, DistributionError> {
    let limits = PullLimits::default();
    let client = client(reference, access, limits.timeout);
    let auth = auth(access);
    let image = &reference.0;
    client
        .auth(image, &auth, oci_client::RegistryOperation::Push)
        .await
        .map_err(|e| registry_error(reference, e))?;
    let layer_digest = sha256(component);
    let config = serde_json::to_vec(&serde_json::json!({
        "architecture": "wasm",
        "os": "wasip2",
        "layerDigests": [layer_digest],
    }))
    .unwrap_or_default();
    let config_digest = sha256(&config);
    push_blob(&client, reference, component.to_vec(), &layer_digest).await?;
    push_blob(&client, reference, config.clone(), &config_digest).await?;
    let manifest = OciImageManifest {
        schema_version: 2,
        media_type: Some(OCI_IMAGE_MEDIA_TYPE.to_string()),
        config: descriptor(WASM_CONFIG_MEDIA_TYPE, &config_digest, config.len(), None),
        layers: vec![descriptor(
            WASM_LAYER_MEDIA_TYPE,
            &layer_digest,
            component.len(),
            None,
        )],
        ..Default::default()
    };
    let manifest_digest = push_manifest(&client, image, &manifest, reference).await?;
    let signature_tag = match signer {
        Some(key) => Some(push_signature(&client, &auth, reference, &manifest_digest, key).await?),
        None => None,
    };
    Ok(Pushed {
        source: reference.pinned(&manifest_digest),
        manifest_digest,
        signature_tag,
    })
}

/// Adds a cosign signature of `manifest_digest` to the `sha256-<hex>.sig` manifest.
async fn push_signature(
    client: &Client,
    auth: &RegistryAuth,
    reference: &OciReference,
    manifest_digest: &str,
    key: &SignatureKey,
) -> Result<String, DistributionError> {
    let sig_ref = signature_reference(reference, manifest_digest)?;
    let payload = signature::payload(&reference.repository(), manifest_digest);
    let signature = signature::sign(key, &payload);
    let payload_digest = sha256(&payload);
    push_blob(client, reference, payload.clone(), &payload_digest).await?;
    let mut layers = match client.pull_image_manifest(&sig_ref, auth).await {
        Ok((existing, _)) => existing.layers,
        Err(e) if is_not_found(&e) => Vec::new(),
        Err(e) => return Err(registry_error(reference, e)),
    };
    let annotations = BTreeMap::from([(SIGNATURE_ANNOTATION.to_string(), signature)]);
    layers.retain(|l| l.digest != payload_digest || l.annotations.as_ref() != Some(&annotations));
    layers.push(descriptor(
        SIMPLE_SIGNING_MEDIA_TYPE,
        &payload_digest,
        payload.len(),
        Some(annotations),
    ));
    let diff_ids: Vec<&str> = layers.iter().map(|l| l.digest.as_str()).collect();
    let config = serde_json::to_vec(&serde_json::json!({
        "architecture": "",
        "os": "",
        "config": {},
        "rootfs": {"type": "layers", "diff_ids": diff_ids},
    }))
    .unwrap_or_default();
    let config_digest = sha256(&config);
    push_blob(client, reference, config.clone(), &config_digest).await?;
    let manifest = OciImageManifest {
        schema_version: 2,
        media_type: Some(OCI_IMAGE_MEDIA_TYPE.to_string()),
        config: descriptor(
            "application/vnd.oci.image.config.v1+json",
            &config_digest,
            config.len(),
            None,
        ),
        layers,
        ..Default::default()
    };
    push_manifest(client, &sig_ref, &manifest, reference).await?;
    Ok(sig_ref.tag().unwrap_or_default().to_string())
}

async fn push_blob(
    client: &Client,
    reference: &OciReference,
    data: Vec<u8>,
    digest: &str,
) -> Result<(), DistributionError> {
    if client
        .blob_exists(&reference.0, digest)
        .await
        .unwrap_or(false)
    {
        return Ok(());
    }
    client
        .push_blob(&reference.0, data, digest)
        .await
        .map(|_| ())
        .map_err(|e| registry_error(reference, e))
}

/// Pushes `manifest` under `image` and returns the digest of the exact bytes sent.
async fn push_manifest(
    client: &Client,
    image: &Reference,
    manifest: &OciImageManifest,
    reference: &OciReference,
) -> Result<String, DistributionError> {
    let body =
        serde_json::to_vec(manifest).map_err(|e| DistributionError::Artifact(e.to_string()))?;
    let digest = sha256(&body);
    client
        .push_manifest_raw(image, body, http_header(OCI_IMAGE_MEDIA_TYPE))
        .await
        .map_err(|e| registry_error(reference, e))?;
    Ok(digest)
}

fn http_header(value: &'static str) -> http::HeaderValue {
    http::HeaderValue::from_static(value)
}

fn descriptor(
    media_type: &str,
    digest: &str,
    size: usize,
    annotations: Option<BTreeMap<String, String>>,
) -> OciDescriptor {
    OciDescriptor {
        media_type: media_type.to_string(),
        digest: digest.to_string(),
        size: size as i64,
        annotations,
        ..Default::default()
    }
}

/// `sha256:<hex>` of `data`.
pub fn sha256(data: &[u8]) -> String {
    format!("sha256:{}", hex::encode(Sha256::digest(data)))
}

/// `source` with what stands before an `@` in its first part after any `scheme://`
/// (`user:password@` of `oci://user:password@registry/…`) replaced by `…@`; the rest as
/// it is.
fn without_userinfo(source: &str) -> String {
    let (prefix, rest) = match source.find("://") {
        Some(i) => source.split_at(i + 3),
        None => ("", source),
    };
    let (authority, path) = match rest.find('/') {
        Some(i) => rest.split_at(i),
        None => (rest, ""),
    };
    match authority.rfind('@') {
        Some(i) => format!("{prefix}…{}{path}", &authority[i..]),
        None => source.to_string(),
    }
}

/// At most 200 characters of something a registry or a user wrote.
pub(crate) fn clip(text: &str) -> String {
    let mut out: String = text.chars().take(200).collect();
    if out.len() < text.len() {
        out.push('…');
    }
    out.chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reference_error_never_quotes_a_password() {
        for source in [
            "oci://reader:secret-pw@127.0.0.1:9/team/weather:1.0",
            "oci://reader:secret-pw@registry.example",
            "https://reader:secret-pw@ghcr.io/team/weather",
        ] {
            let err = OciReference::parse(source).expect_err(source).to_string();
            assert!(!err.contains("secret-pw"), "{source}: {err}");
        }
        // A digest's `@` is not user information.
        let pinned = format!(
            "oci://127.0.0.1:5000/team/weather@sha256:{}",
            "a".repeat(64)
        );
        assert_eq!(
            OciReference::parse(&pinned).expect("parses").to_string(),
            pinned
        );
    }

    #[test]
    fn references_name_their_registry() {
        let r = OciReference::parse("oci://127.0.0.1:5000/acme/echo:v1").unwrap();
        assert_eq!(r.registry(), "127.0.0.1:5000");
        assert!(r.is_loopback());
        assert_eq!(
            r.pinned("sha256:ab"),
            "oci://127.0.0.1:5000/acme/echo@sha256:ab"
        );
        assert!(!OciReference::parse("oci://ghcr.io/acme/echo:v1")
            .unwrap()
            .is_loopback());
        assert!(OciReference::parse("oci://localhost/x:1")
            .unwrap()
            .is_loopback());
        for bad in [
            "ghcr.io/acme/echo:v1",
            "oci://echo:v1",
            "oci://acme/echo:v1",
            "oci://",
        ] {
            assert!(OciReference::parse(bad).is_err(), "{bad}");
        }
    }
}
