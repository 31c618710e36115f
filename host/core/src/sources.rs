//! Where an installed component comes from: bytes an operator uploaded, or an OCI
//! registry (feature `oci`, through `connector-distribution`), and what its signatures
//! say under the operator's policy ([`crate::trust`]). What this returns is then installed
//! exactly as uploaded bytes are.

use std::sync::Arc;

#[cfg(feature = "oci")]
use anyhow::Context as _;

use crate::catalog::{InstallOptions, Provenance};
use crate::config::HostConfig;
use crate::trust::{check_signatures, Signatures};
use connector_model::error::{HostError, HostResult};

/// Largest component installed, uploaded or pulled.
pub const MAX_COMPONENT_BYTES: usize = 64 * 1024 * 1024;

/// What to install.
#[derive(Debug, Clone)]
pub enum ComponentSource {
    /// A component's bytes, as uploaded.
    Upload(Arc<[u8]>),
    /// `oci://registry/repository:tag` or `…@sha256:<hex>`.
    Registry(String),
}

/// What to install, and how.
#[derive(Debug, Clone)]
pub struct InstallRequest {
    /// Where the component comes from.
    pub source: ComponentSource,
    /// How to install it (force, accept tool changes, ...).
    pub options: InstallOptions,
}

impl InstallRequest {
    /// Uploaded bytes, unbinding what the new version rejects when `force`.
    pub fn upload(bytes: &[u8], force: bool) -> Self {
        Self {
            source: ComponentSource::Upload(Arc::from(bytes)),
            options: InstallOptions {
                force,
                accept_tool_changes: false,
            },
        }
    }
}

/// Fetches components and applies the signature policy.
pub(crate) struct Sources {
    config: Arc<HostConfig>,
    #[cfg(feature = "oci")]
    keys: Arc<[connector_distribution::TrustedKey]>,
}

impl Sources {
    /// Reads the trusted keys (`trust.keys`): a key file that cannot be read fails here,
    /// at start-up, not at the first install.
    pub(crate) fn open(config: Arc<HostConfig>) -> anyhow::Result<Self> {
        #[cfg(feature = "oci")]
        {
            let mut keys = Vec::new();
            for path in &config.trust.keys {
                let text = std::fs::read_to_string(path)
                    .with_context(|| format!("trust.keys: cannot read {}", path.display()))?;
                let key = connector_distribution::TrustedKey::from_pem(&text)
                    .with_context(|| format!("trust.keys: {}", path.display()))?;
                tracing::info!(key = %key.id(), file = %path.display(), "trusting signatures by this key");
                keys.push(key);
            }
            Ok(Self {
                config,
                keys: keys.into(),
            })
        }
        #[cfg(not(feature = "oci"))]
        {
            if !config.trust.keys.is_empty() {
                tracing::warn!("trust.keys is set but this build has no registry support (feature `oci`): no component can be signed");
            }
            Ok(Self { config })
        }
    }

    /// The component `source` names, with where it came from and who signed it; refused
    /// when the signature policy refuses it.
    pub(crate) async fn fetch(
        &self,
        source: ComponentSource,
    ) -> HostResult<(Arc<[u8]>, Provenance)> {
        match source {
            ComponentSource::Upload(bytes) => {
                check_signatures(
                    &self.config.trust,
                    "an uploaded component",
                    Signatures::None,
                )?;
                Ok((bytes, Provenance::upload()))
            }
            ComponentSource::Registry(reference) => self.pull(&reference).await,
        }
    }

    #[cfg(feature = "oci")]
    async fn pull(&self, reference: &str) -> HostResult<(Arc<[u8]>, Provenance)> {
        use connector_distribution::{
            pull, DistributionError, OciReference, PullLimits, SignatureCheck,
        };
        use connector_model::error::ErrorCode;
        let parsed = OciReference::parse(reference)
            .map_err(|e| HostError::invalid_request(e.to_string()))?;
        let access = self.access(parsed.registry())?;
        let limits = PullLimits {
            max_component_bytes: MAX_COMPONENT_BYTES as u64,
            ..PullLimits::default()
        };
        let pulled = pull(&parsed, &access, limits, &self.keys)
            .await
            .map_err(|e| match e {
                DistributionError::Artifact(_) => {
                    HostError::new(ErrorCode::InvalidComponent, e.to_string())
                        .with_details(serde_json::json!({"rule": "oci_artifact"}))
                }
                DistributionError::Reference(_) => HostError::invalid_request(e.to_string()),
                DistributionError::Registry { .. } | DistributionError::Timeout { .. } => {
                    HostError::new(ErrorCode::RegistryFailed, e.to_string())
                }
            })?;
        let signatures = match pulled.signature {
            SignatureCheck::SignedBy(key) => Signatures::SignedBy(key),
            SignatureCheck::Unsigned | SignatureCheck::NotChecked => Signatures::None,
            SignatureCheck::Invalid(why) => Signatures::Invalid(why),
        };
        let what = format!("the component at {}", pulled.source);
        let signed_by = check_signatures(&self.config.trust, &what, signatures)?;
        tracing::info!(source = %pulled.source, signed_by = ?signed_by, "pulled a component");
        Ok((
            Arc::from(pulled.bytes),
            Provenance {
                source: pulled.source,
                signed_by,
            },
        ))
    }

    /// How to reach `registry`: `registries.<registry>`, its password read from the
    /// variable it names (never logged, never in an error).
    #[cfg(feature = "oci")]
    fn access(&self, registry: &str) -> HostResult<connector_distribution::RegistryAccess> {
        let Some(settings) = self.config.registries.get(registry) else {
            return Ok(connector_distribution::RegistryAccess::default());
        };
        let password = match &settings.password_env {
            Some(var) => Some(std::env::var(var).map_err(|_| {
                HostError::new(
                    connector_model::error::ErrorCode::RegistryFailed,
                    format!("registries.\"{registry}\".password_env names the variable {var}, which is not set in the host's environment"),
                )
            })?),
            None => None,
        };
        Ok(connector_distribution::RegistryAccess {
            username: settings.username.clone(),
            password,
            insecure: settings.insecure,
        })
    }

    #[cfg(not(feature = "oci"))]
    async fn pull(&self, _reference: &str) -> HostResult<(Arc<[u8]>, Provenance)> {
        Err(HostError::invalid_request(
            "this build cannot pull from OCI registries: build connector-core with its `oci` feature (the connector-host binary has it)",
        ))
    }
}
