//! Capabilities: what a guest call may do beyond computing (CONTRACT §6), decided in one
//! place from operator data only.
//!
//! Every host import beyond `log` consults the [`Sandbox`] built here, and nothing else:
//! - **GitHub installation tokens**: only for a connector the operator lets mint them
//!   (`connectors.<slug>.github_app`; by default only the bundled `github`), and only for
//!   installation ids the calling binding's operator-written config holds in a field the
//!   connector's `configSchema` marks `"x-github-installation": true`.
//! - **Secrets**: names listed in `connectors.<slug>.secrets` *and* named by the calling
//!   binding's config.
//! - **Outbound HTTP**: the component's declared hosts narrowed by
//!   `connectors.<slug>.allowed_hosts`; private networks only with
//!   `allow_private_networks` ([`OutboundPolicy`]).
//!
//! The inputs are the operator's settings of exactly this slug, the schema the installed
//! component declared and the binding as the operator wrote it. What a guest returns —
//! routing keys from `bind`, results, messages — never widens a sandbox.

use std::collections::BTreeMap;
use std::sync::Arc;

use serde_json::Value;

use crate::config::ConnectorSettings;
use connector_model::connector::Connector;
use connector_model::records::BindingRecord;
use connector_runtime::{Caller, OutboundPolicy, Sandbox};

/// The schema keyword that marks a config field holding a GitHub App installation id.
pub const INSTALLATION_FIELD: &str = "x-github-installation";

/// What the operator grants one installed connector.
pub(crate) struct Capabilities<'a> {
    connector: &'a Connector,
    settings: &'a ConnectorSettings,
    /// Whether `connector` is the build the program ships (`HostConfig::bundled`).
    shipped: bool,
}

impl<'a> Capabilities<'a> {
    /// The capabilities of `connector` under the operator's `settings` of its slug
    /// (`shipped`: it is the build the program running the host ships).
    pub(crate) fn new(
        connector: &'a Connector,
        settings: &'a ConnectorSettings,
        shipped: bool,
    ) -> Self {
        Self {
            connector,
            settings,
            shipped,
        }
    }

    /// The outbound policy: what the component declares, narrowed by the operator.
    pub(crate) fn outbound(&self) -> Arc<OutboundPolicy> {
        Arc::new(OutboundPolicy::new(
            &self.connector.allowed_hosts,
            self.settings.allowed_hosts.as_deref(),
            self.settings.allow_private_networks,
        ))
    }

    /// Whether the connector may ask for GitHub App installation tokens at all.
    pub(crate) fn mints_installation_tokens(&self) -> bool {
        self.settings
            .github_app
            .unwrap_or_else(|| self.connector.slug == "github" && self.shipped)
    }

    /// The sandbox of one call on behalf of `binding` (none: a call no binding makes,
    /// such as translating a webhook), with outbound policy `outbound`.
    pub(crate) fn sandbox(
        &self,
        binding: Option<&BindingRecord>,
        outbound: Arc<OutboundPolicy>,
    ) -> Sandbox {
        let config = binding.map(|b| &b.config);
        let installations = match config {
            Some(config) if self.mints_installation_tokens() => {
                installation_ids(&self.connector.config_schema, config)
            }
            _ => Vec::new(),
        };
        let secrets = match config {
            Some(config) => named_secrets(&self.settings.secrets, config),
            None => BTreeMap::new(),
        };
        Sandbox {
            connector: Arc::from(self.connector.slug.as_str()),
            outbound,
            installations: installations.into(),
            secrets: Arc::new(secrets),
            caller: Caller::Host,
            memory_bytes: self
                .settings
                .memory_mib
                .map(|mib| (mib as usize).saturating_mul(1024 * 1024)),
        }
    }
}

/// The installation ids `config` holds in fields `schema` marks
/// [`INSTALLATION_FIELD`], at any depth of nested objects.
pub(crate) fn installation_ids(schema: &Value, config: &Value) -> Vec<u64> {
    let mut ids = Vec::new();
    collect_installations(schema, config, &mut ids);
    ids.sort_unstable();
    ids.dedup();
    ids
}

fn collect_installations(schema: &Value, config: &Value, ids: &mut Vec<u64>) {
    let (Some(properties), Some(values)) = (
        schema.get("properties").and_then(Value::as_object),
        config.as_object(),
    ) else {
        return;
    };
    for (name, property) in properties {
        let Some(value) = values.get(name) else {
            continue;
        };
        if property.get(INSTALLATION_FIELD).and_then(Value::as_bool) == Some(true) {
            if let Some(id) = value.as_u64().filter(|id| *id > 0) {
                ids.push(id);
            }
        } else {
            collect_installations(property, value, ids);
        }
    }
}

/// The operator's secrets (`configured`) whose names the binding's config mentions.
fn named_secrets(
    configured: &BTreeMap<String, String>,
    config: &Value,
) -> BTreeMap<String, String> {
    let mut named = BTreeMap::new();
    if configured.is_empty() {
        return named;
    }
    strings_in(config, &mut |s| {
        if let Some(value) = configured.get(s) {
            named.insert(s.to_string(), value.clone());
        }
    });
    named
}

/// Calls `f` with every string value in `config` (at any depth).
fn strings_in(config: &Value, f: &mut impl FnMut(&str)) {
    match config {
        Value::String(s) => f(s),
        Value::Array(a) => a.iter().for_each(|v| strings_in(v, f)),
        Value::Object(o) => o.values().for_each(|v| strings_in(v, f)),
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn connector(slug: &str, schema: Value) -> Connector {
        Connector {
            slug: slug.parse().expect("a slug"),
            tool_namespace: slug.replace('-', "_"),
            display_name: slug.into(),
            description: String::new(),
            version: "1.0.0".into(),
            digest: "sha256:00".into(),
            world: String::new(),
            tools: Vec::new(),
            config_schema: schema,
            webhook: None,
            allowed_hosts: vec!["api.github.com".into()],
            source: connector_model::connector::SOURCE_UPLOAD.to_string(),
            signed_by: None,
        }
    }

    fn binding(config: Value) -> BindingRecord {
        BindingRecord {
            unit_id: "u".into(),
            connector: "c".into(),
            config,
            routing_keys: vec!["installation:4242".into()],
            bound_at: String::new(),
        }
    }

    fn schema() -> Value {
        json!({"type": "object", "properties": {
            "installationId": {"type": "integer", INSTALLATION_FIELD: true},
            "other": {"type": "integer"},
            "nested": {"type": "object", "properties": {"inst": {"type": "integer", INSTALLATION_FIELD: true}}}
        }})
    }

    #[test]
    fn installations_come_only_from_marked_fields_of_the_operators_config() {
        let config = json!({"installationId": 7, "other": 8, "nested": {"inst": 9}, "x": 10});
        assert_eq!(installation_ids(&schema(), &config), [7, 9]);
        // Wrong types, zero and unmarked fields name nothing.
        let config = json!({"installationId": "7", "other": 8, "nested": {"inst": 0}});
        assert!(installation_ids(&schema(), &config).is_empty());
        assert!(
            installation_ids(&json!({"type": "object"}), &json!({"installationId": 7})).is_empty()
        );
    }

    #[test]
    fn only_a_connector_the_operator_lets_mint_gets_installations() {
        let settings = |github_app| ConnectorSettings {
            github_app,
            ..ConnectorSettings::default()
        };
        let (unset, allowed, refused) =
            (settings(None), settings(Some(true)), settings(Some(false)));
        let b = binding(json!({"installationId": 7}));
        // What the guest's `bind` returned (`installation:4242`) never counts.
        let lookalike = connector("github-installation", schema());
        let caps = Capabilities::new(&lookalike, &unset, false);
        assert!(caps
            .sandbox(Some(&b), caps.outbound())
            .installations
            .is_empty());
        let caps = Capabilities::new(&lookalike, &allowed, false);
        assert_eq!(
            &*caps.sandbox(Some(&b), caps.outbound()).installations,
            &[7]
        );
        // A `github` that is not the bundled build mints nothing unless allowed.
        let own_github = connector("github", schema());
        let caps = Capabilities::new(&own_github, &unset, false);
        assert!(!caps.mints_installation_tokens());
        let caps = Capabilities::new(&own_github, &refused, false);
        assert!(caps
            .sandbox(Some(&b), caps.outbound())
            .installations
            .is_empty());
        // Without a binding there is nothing to mint for.
        let caps = Capabilities::new(&lookalike, &allowed, false);
        assert!(caps.sandbox(None, caps.outbound()).installations.is_empty());
        // The shipped `github` mints unless refused.
        assert!(Capabilities::new(&own_github, &unset, true).mints_installation_tokens());
        assert!(!Capabilities::new(&own_github, &refused, true).mints_installation_tokens());
    }

    #[test]
    fn secrets_are_the_operators_and_named_by_the_binding() {
        let c = connector("acme", json!({}));
        let mut settings = ConnectorSettings::default();
        settings.secrets.insert("pat".into(), "ghp_1".into());
        settings.secrets.insert("other".into(), "ghp_2".into());
        let caps = Capabilities::new(&c, &settings, false);
        let sandbox = caps.sandbox(
            Some(&binding(json!({"token": "pat", "list": ["nope"]}))),
            caps.outbound(),
        );
        assert_eq!(sandbox.secrets.len(), 1);
        assert_eq!(
            sandbox.secrets.get("pat").map(String::as_str),
            Some("ghp_1")
        );
        assert!(caps.sandbox(None, caps.outbound()).secrets.is_empty());
    }
}
