//! A connector as the contract shows it (`Connector`, `Tool`), and the naming rules its
//! slug, namespace and tool ids follow. Checking a component's own description against
//! these rules is the registry's job; this is what every part of the host shares.

use std::sync::LazyLock;

use regex_lite::Regex;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::ids::Slug;

/// The namespace reserved for the platform's own tools.
pub const RESERVED_NAMESPACE: &str = "sv";

/// `^[a-z][a-z0-9_]*(\.[a-z][a-z0-9_]*)+$`
pub const TOOL_ID_RULE: &str = r"^[a-z][a-z0-9_]*(\.[a-z][a-z0-9_]*)+$";
/// `^[a-z][a-z0-9_-]{0,62}$`
pub const SLUG_RULE: &str = r"^[a-z][a-z0-9_-]{0,62}$";
/// One segment of a tool id.
pub const NAMESPACE_RULE: &str = r"^[a-z][a-z0-9_]*$";

static TOOL_ID: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(TOOL_ID_RULE).unwrap_or_else(|e| unreachable!("{e}")));
static SLUG: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(SLUG_RULE).unwrap_or_else(|e| unreachable!("{e}")));
static NAMESPACE: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(NAMESPACE_RULE).unwrap_or_else(|e| unreachable!("{e}")));

/// Whether `id` is a canonical tool id.
pub fn is_tool_id(id: &str) -> bool {
    TOOL_ID.is_match(id)
}

/// Whether `slug` is a valid connector slug.
pub fn is_slug(slug: &str) -> bool {
    SLUG.is_match(slug)
}

/// Whether `ns` is a valid namespace (one tool id segment).
pub fn is_namespace(ns: &str) -> bool {
    NAMESPACE.is_match(ns)
}

/// The contract's `Connector` object.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Connector {
    /// The connector's slug (`^[a-z][a-z0-9_-]{0,62}$`).
    pub slug: Slug,
    /// The first segment of every tool id it declares (default: the slug).
    pub tool_namespace: String,
    /// A name for people.
    pub display_name: String,
    /// What it does, for people.
    pub description: String,
    /// Its own version string.
    pub version: String,
    /// `sha256:<hex>` of the component's bytes.
    pub digest: String,
    /// The WIT world the component implements (`spring:connector@0.3.0`, or `@0.2.0`
    /// or `@0.1.0` for a component built against an earlier world); set from the loaded component.
    #[serde(default)]
    pub world: String,
    /// Its tools, in the component's order.
    pub tools: Vec<ToolInfo>,
    /// JSON Schema of a binding's config.
    pub config_schema: Value,
    /// The webhook scheme it takes deliveries with, if any.
    pub webhook: Option<WebhookInfo>,
    /// Outbound hosts the component declares (the operator may narrow them).
    pub allowed_hosts: Vec<String>,
    /// Where the installed component came from: `"upload"`, `"bundled"`, or the OCI
    /// reference pinned to its manifest digest (`oci://registry/repo@sha256:…`). Set by
    /// the install, not by the component.
    #[serde(default = "upload_source")]
    pub source: String,
    /// `sha256:<hex>` of the DER SubjectPublicKeyInfo of the trusted key whose signature
    /// covers it, if any.
    #[serde(default)]
    pub signed_by: Option<String>,
}

/// [`Connector::source`] of a component uploaded as bytes.
pub const SOURCE_UPLOAD: &str = "upload";
/// [`Connector::source`] of a connector bundled into the host.
pub const SOURCE_BUNDLED: &str = "bundled";

fn upload_source() -> String {
    SOURCE_UPLOAD.to_string()
}

/// The contract's `Tool` object.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ToolInfo {
    /// The canonical tool id (`<namespace>.<name>`).
    pub name: String,
    /// What the tool does, for the model.
    pub description: String,
    /// JSON Schema of its arguments.
    pub input_schema: Value,
    /// MCP tool annotations.
    pub annotations: ToolAnnotations,
    /// JSON Schema of the structured result (an object schema), when the tool declares
    /// one; every successful call is checked against it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_schema: Option<Value>,
}

/// MCP-style tool annotations.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ToolAnnotations {
    /// It does not change anything.
    pub read_only_hint: bool,
    /// It may destroy or overwrite something.
    pub destructive_hint: bool,
    /// Calling it again with the same arguments changes nothing more.
    pub idempotent_hint: bool,
    /// It reaches systems outside the host.
    pub open_world_hint: bool,
}

/// A connector's webhook scheme.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WebhookInfo {
    /// How deliveries are signed.
    pub scheme: WebhookSchemeName,
}

/// The schemes of the contract.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum WebhookSchemeName {
    /// GitHub's `X-Hub-Signature-256` HMAC.
    #[serde(rename = "github-hmac-sha256")]
    GithubHmacSha256,
    /// Standard Webhooks (`webhook-signature`).
    #[serde(rename = "standard-webhooks")]
    StandardWebhooks,
}
