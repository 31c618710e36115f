//! What a connector declares about itself: identity, tools, configuration schema.
//!
//! The manifest is built by ordinary Rust code on every call (each call runs in a fresh
//! instance), so building one must stay cheap: names and descriptions are usually
//! `&'static str`, handlers are zero-sized closures, and JSON Schemas are *not* generated
//! here. Each tool keeps a function pointer that derives its schema with `schemars` only
//! when the host asks for the manifest (`describe`), never on the tool-call path.
//!
//! The rules of CONTRACT.md §1 (slug, namespace, tool ids) are checked here, by
//! [`Manifest::validate`], so that an author sees a broken id in a native unit test rather
//! than as a rejected component at install time.

use std::borrow::Cow;
use std::fmt;

use schemars::JsonSchema;
use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::output::{IntoToolOutput, ToolOutput};
use crate::types::{CallContext, ToolError};

/// A string that is usually a literal: no allocation when the manifest is rebuilt.
pub(crate) type Text = Cow<'static, str>;

/// The type-erased tool handler: raw JSON arguments in, the tool's output out.
pub(crate) type Handler = Box<dyn Fn(&CallContext, &str) -> Result<ToolOutput, ToolError>>;

/// The namespace reserved for the platform (CONTRACT.md §1).
pub const RESERVED_NAMESPACE: &str = "sv";

/// How the host authenticates inbound webhooks before the guest sees them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WebhookScheme {
    /// GitHub: `X-Hub-Signature-256: sha256=<hex HMAC-SHA256 of the body>`.
    GithubHmacSha256,
    /// Standard Webhooks: `webhook-id`, `webhook-timestamp`, `webhook-signature`.
    StandardWebhooks,
}

/// Behaviour hints for a tool (MCP `ToolAnnotations`). All default to `false`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Annotations {
    /// The tool does not change anything outside itself.
    pub read_only: bool,
    /// The tool may destroy or overwrite data.
    pub destructive: bool,
    /// Calling it twice with the same arguments has no further effect.
    pub idempotent: bool,
    /// The tool reaches an open world (the internet, a third-party API).
    pub open_world: bool,
}

impl Annotations {
    /// All hints `false`.
    pub const fn new() -> Self {
        Annotations {
            read_only: false,
            destructive: false,
            idempotent: false,
            open_world: false,
        }
    }

    /// Marks the tool read-only.
    pub const fn read_only(mut self) -> Self {
        self.read_only = true;
        self
    }

    /// Marks the tool destructive.
    pub const fn destructive(mut self) -> Self {
        self.destructive = true;
        self
    }

    /// Marks the tool idempotent.
    pub const fn idempotent(mut self) -> Self {
        self.idempotent = true;
        self
    }

    /// Marks the tool as reaching an open world.
    pub const fn open_world(mut self) -> Self {
        self.open_world = true;
        self
    }
}

/// Arguments of a tool that takes none: the schema is an object with no properties and
/// `additionalProperties: false`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NoArgs {}

// Written by hand so that this type's Rust docs do not become the schema's description.
impl JsonSchema for NoArgs {
    fn schema_name() -> Cow<'static, str> {
        Cow::Borrowed("NoArgs")
    }

    fn inline_schema() -> bool {
        true
    }

    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        schemars::json_schema!({
            "type": "object",
            "properties": {},
            "additionalProperties": false,
        })
    }
}

/// The JSON Schema of `T` as a JSON value, the way the SDK puts it into a manifest.
///
/// Uses JSON Schema draft 2020-12 and drops the top-level `title` (it is the Rust type's
/// name, which means nothing to a model). Doc comments on `T` and its fields become
/// `description`s.
pub fn schema_of<T: JsonSchema>() -> Value {
    let mut schema = schemars::generate::SchemaSettings::draft2020_12()
        .into_generator()
        .into_root_schema_for::<T>();
    schema.remove("title");
    schema.to_value()
}

/// The config schema used when a connector declares none: an object with no fields.
fn empty_config_schema() -> Value {
    serde_json::json!({
        "type": "object",
        "properties": {},
        "additionalProperties": false,
    })
}

/// One tool a connector offers.
///
/// The name is either relative (`"echo"`, no dot: it becomes `<namespace>.echo`) or a
/// full id (`"acme.echo"`, with a dot: it must then start with `<namespace>.`).
pub struct Tool {
    pub(crate) name: Text,
    pub(crate) description: Text,
    pub(crate) schema: fn() -> Value,
    pub(crate) output_schema: Option<fn() -> Value>,
    pub(crate) annotations: Annotations,
    pub(crate) handler: Handler,
}

impl fmt::Debug for Tool {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Tool")
            .field("name", &self.name)
            .field("description", &self.description)
            .field("annotations", &self.annotations)
            .finish_non_exhaustive()
    }
}

impl Tool {
    /// A tool with typed arguments and a typed result.
    ///
    /// The input schema is derived from `A` (only when the host asks for the manifest);
    /// the host validates every call against it before guest code runs. If the arguments
    /// still do not deserialize into `A`, the call fails with
    /// [`ToolError::InvalidArguments`] naming the problem. The result is any serializable
    /// value (serialized to JSON: the structured result) or a
    /// [`ToolOutput`](crate::ToolOutput) with content blocks (images, audio, resources).
    ///
    /// ```
    /// use connector_sdk::{CallContext, Tool, ToolError};
    ///
    /// #[derive(serde::Deserialize, schemars::JsonSchema)]
    /// struct AddArgs { a: i64, b: i64 }
    ///
    /// let tool = Tool::new("add", "Adds two integers", |_ctx: &CallContext, args: AddArgs| {
    ///     Ok::<_, ToolError>(args.a + args.b)
    /// })
    /// .read_only()
    /// .idempotent();
    /// assert_eq!(tool.name(), "add");
    /// ```
    pub fn new<A, R, F>(
        name: impl Into<Cow<'static, str>>,
        description: impl Into<Cow<'static, str>>,
        handler: F,
    ) -> Tool
    where
        A: JsonSchema + DeserializeOwned,
        R: IntoToolOutput,
        F: Fn(&CallContext, A) -> Result<R, ToolError> + 'static,
    {
        Tool {
            name: name.into(),
            description: description.into(),
            schema: schema_of::<A>,
            output_schema: None,
            annotations: Annotations::new(),
            handler: Box::new(move |ctx, raw| {
                let args: A = serde_json::from_str(raw).map_err(|e| {
                    ToolError::InvalidArguments(format!("the arguments do not fit: {e}"))
                })?;
                handler(ctx, args)?.into_tool_output()
            }),
        }
    }

    /// A tool that works on raw JSON: it receives the arguments document exactly as the
    /// host passed it (already valid against `schema`) and returns a JSON document.
    ///
    /// Use it when parsing would be wasted work (an echo, a pass-through) or when the
    /// schema is hand-written. `schema` is called only when the manifest is described;
    /// [`schema_of::<T>`](schema_of) derives one from a type. The returned string must be
    /// one complete JSON document.
    pub fn raw<F>(
        name: impl Into<Cow<'static, str>>,
        description: impl Into<Cow<'static, str>>,
        schema: fn() -> Value,
        handler: F,
    ) -> Tool
    where
        F: Fn(&CallContext, &str) -> Result<String, ToolError> + 'static,
    {
        Tool {
            name: name.into(),
            description: description.into(),
            schema,
            output_schema: None,
            annotations: Annotations::new(),
            handler: Box::new(move |ctx, raw| {
                handler(ctx, raw).map(|json| ToolOutput {
                    structured: Some(json),
                    content: Vec::new(),
                })
            }),
        }
    }

    /// Declares the structured result's schema, derived from `T` (an object type) when the
    /// host asks for the manifest. Clients see it as `outputSchema`; the host fails any
    /// call whose structured result is missing or does not fit it.
    ///
    /// ```
    /// use connector_sdk::{CallContext, NoArgs, Tool, ToolError};
    ///
    /// #[derive(serde::Serialize, schemars::JsonSchema)]
    /// struct Weather { celsius: f64 }
    ///
    /// let tool = Tool::new("now", "Current weather", |_: &CallContext, _: NoArgs| {
    ///     Ok::<_, ToolError>(Weather { celsius: 21.5 })
    /// })
    /// .output::<Weather>();
    /// assert_eq!(tool.output_schema().unwrap()["type"], "object");
    /// ```
    pub fn output<T: JsonSchema>(self) -> Self {
        self.output_schema_fn(schema_of::<T>)
    }

    /// Declares the structured result's schema from a function returning it (for a
    /// hand-written schema); see [`Tool::output`].
    pub fn output_schema_fn(mut self, schema: fn() -> Value) -> Self {
        self.output_schema = Some(schema);
        self
    }

    /// The output schema, if declared (generated now).
    pub fn output_schema(&self) -> Option<Value> {
        self.output_schema.map(|f| f())
    }

    /// The name as given (relative or full).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The description.
    pub fn description(&self) -> &str {
        &self.description
    }

    /// The behaviour hints.
    pub fn hints(&self) -> Annotations {
        self.annotations
    }

    /// The input schema (generated now).
    pub fn input_schema(&self) -> Value {
        (self.schema)()
    }

    /// Replaces all behaviour hints.
    pub fn annotations(mut self, annotations: Annotations) -> Self {
        self.annotations = annotations;
        self
    }

    /// Hint: the tool does not change anything outside itself.
    pub fn read_only(mut self) -> Self {
        self.annotations.read_only = true;
        self
    }

    /// Hint: the tool may destroy or overwrite data.
    pub fn destructive(mut self) -> Self {
        self.annotations.destructive = true;
        self
    }

    /// Hint: calling it twice with the same arguments has no further effect.
    pub fn idempotent(mut self) -> Self {
        self.annotations.idempotent = true;
        self
    }

    /// Hint: the tool reaches an open world (the internet, a third-party API).
    pub fn open_world(mut self) -> Self {
        self.annotations.open_world = true;
        self
    }

    /// Whether this tool answers to the canonical id `id` in `namespace`, without
    /// allocating (this runs on every call).
    fn answers_to(&self, namespace: &str, id: &str, verbatim: bool) -> bool {
        if verbatim || self.name.contains('.') {
            return self.name == id;
        }
        id.strip_prefix(namespace)
            .and_then(|rest| rest.strip_prefix('.'))
            .is_some_and(|rest| rest == self.name)
    }
}

/// Why a manifest breaks the rules of CONTRACT.md §1. The message names the offending
/// value and the rule.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ManifestError {
    /// The slug does not match `^[a-z][a-z0-9_-]{0,62}$`.
    InvalidSlug(String),
    /// The namespace is not one id segment `[a-z][a-z0-9_]*`.
    InvalidNamespace {
        /// The namespace.
        namespace: String,
        /// Whether it came from the slug because no namespace was set.
        from_slug: bool,
    },
    /// The namespace is reserved for the platform (`sv`).
    ReservedNamespace(String),
    /// A tool id does not match `^[a-z][a-z0-9_]*(\.[a-z][a-z0-9_]*)+$`.
    InvalidToolId(String),
    /// A tool id does not start with `<namespace>.`.
    ToolOutsideNamespace {
        /// The tool id.
        id: String,
        /// The connector's namespace.
        namespace: String,
    },
    /// Two tools have the same id.
    DuplicateToolId(String),
}

impl fmt::Display for ManifestError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ManifestError::InvalidSlug(slug) => write!(
                f,
                "slug `{slug}` is invalid: a slug must match ^[a-z][a-z0-9_-]{{0,62}}$"
            ),
            ManifestError::InvalidNamespace {
                namespace,
                from_slug,
            } => {
                write!(
                    f,
                    "tool namespace `{namespace}` is invalid: a namespace must be one id \
                     segment [a-z][a-z0-9_]*"
                )?;
                if *from_slug {
                    f.write_str(" (it defaults to the slug; set one with Manifest::namespace)")?;
                }
                Ok(())
            }
            ManifestError::ReservedNamespace(ns) => write!(
                f,
                "tool namespace `{ns}` is reserved for the platform and may not be claimed"
            ),
            ManifestError::InvalidToolId(id) => write!(
                f,
                "tool id `{id}` is invalid: a tool id must match \
                 ^[a-z][a-z0-9_]*(\\.[a-z][a-z0-9_]*)+$"
            ),
            ManifestError::ToolOutsideNamespace { id, namespace } => write!(
                f,
                "tool id `{id}` is outside the connector's namespace: every tool id must \
                 start with `{namespace}.`"
            ),
            ManifestError::DuplicateToolId(id) => {
                write!(
                    f,
                    "tool id `{id}` is declared twice: tool ids must be unique"
                )
            }
        }
    }
}

impl std::error::Error for ManifestError {}

/// Whether `s` is one id segment: `[a-z][a-z0-9_]*`.
pub fn is_id_segment(s: &str) -> bool {
    let mut bytes = s.bytes();
    matches!(bytes.next(), Some(b'a'..=b'z'))
        && bytes.all(|b| matches!(b, b'a'..=b'z' | b'0'..=b'9' | b'_'))
}

/// Whether `s` is a valid tool id: `^[a-z][a-z0-9_]*(\.[a-z][a-z0-9_]*)+$`.
pub fn is_tool_id(s: &str) -> bool {
    let mut segments = 0usize;
    for segment in s.split('.') {
        if !is_id_segment(segment) {
            return false;
        }
        segments += 1;
    }
    segments >= 2
}

/// Whether `s` is a valid slug: `^[a-z][a-z0-9_-]{0,62}$`.
pub fn is_slug(s: &str) -> bool {
    let mut bytes = s.bytes();
    s.len() <= 63
        && matches!(bytes.next(), Some(b'a'..=b'z'))
        && bytes.all(|b| matches!(b, b'a'..=b'z' | b'0'..=b'9' | b'_' | b'-'))
}

/// What a connector declares about itself. Build it with [`Manifest::new`] and the
/// builder methods; return it from [`Connector::manifest`](crate::Connector::manifest).
///
/// ```
/// use connector_sdk::{Manifest, NoArgs, Tool, ToolError};
///
/// let manifest = Manifest::new("acme")
///     .display_name("Acme")
///     .version("1.0.0")
///     .tool(Tool::new("ping", "Answers pong", |_, _: NoArgs| Ok::<_, ToolError>("pong")));
/// assert_eq!(manifest.tool_ids(), ["acme.ping"]);
/// assert!(manifest.validate().is_ok());
/// ```
#[derive(Debug)]
pub struct Manifest {
    pub(crate) slug: Text,
    pub(crate) namespace: Option<Text>,
    pub(crate) display_name: Option<Text>,
    pub(crate) description: Text,
    pub(crate) version: Text,
    pub(crate) config_schema: fn() -> Value,
    pub(crate) tools: Vec<Tool>,
    pub(crate) webhook: Option<WebhookScheme>,
    pub(crate) allowed_hosts: Vec<Text>,
    pub(crate) unchecked: bool,
}

impl Manifest {
    /// A manifest for the connector `slug`, with no tools, no configuration, no webhooks,
    /// no outbound hosts, and the slug as namespace and display name.
    pub fn new(slug: impl Into<Cow<'static, str>>) -> Self {
        Manifest {
            slug: slug.into(),
            namespace: None,
            display_name: None,
            description: Cow::Borrowed(""),
            version: Cow::Borrowed("0.0.0"),
            config_schema: empty_config_schema,
            tools: Vec::new(),
            webhook: None,
            allowed_hosts: Vec::new(),
            unchecked: false,
        }
    }

    /// Sets the tool namespace (default: the slug). It must be one id segment.
    pub fn namespace(mut self, namespace: impl Into<Cow<'static, str>>) -> Self {
        self.namespace = Some(namespace.into());
        self
    }

    /// Sets the human name shown to operators (default: the slug).
    pub fn display_name(mut self, name: impl Into<Cow<'static, str>>) -> Self {
        self.display_name = Some(name.into());
        self
    }

    /// Sets the one- or two-sentence description for operators.
    pub fn description(mut self, description: impl Into<Cow<'static, str>>) -> Self {
        self.description = description.into();
        self
    }

    /// Sets the connector's version (typically `env!("CARGO_PKG_VERSION")`).
    pub fn version(mut self, version: impl Into<Cow<'static, str>>) -> Self {
        self.version = version.into();
        self
    }

    /// Derives the binding configuration schema from `C`. Mark secret fields with
    /// `#[schemars(extend("writeOnly" = true))]` so the host masks them.
    pub fn config<C: JsonSchema>(mut self) -> Self {
        self.config_schema = schema_of::<C>;
        self
    }

    /// Sets a hand-written binding configuration schema (called only on `describe`).
    pub fn config_schema(mut self, schema: fn() -> Value) -> Self {
        self.config_schema = schema;
        self
    }

    /// Adds a tool. Tools keep their declaration order.
    pub fn tool(mut self, tool: Tool) -> Self {
        self.tools.push(tool);
        self
    }

    /// Adds several tools, in order.
    pub fn tools(mut self, tools: impl IntoIterator<Item = Tool>) -> Self {
        self.tools.extend(tools);
        self
    }

    /// Declares that the connector takes webhooks, authenticated with `scheme`.
    pub fn webhook(mut self, scheme: WebhookScheme) -> Self {
        self.webhook = Some(scheme);
        self
    }

    /// Adds a host name the connector may reach over outbound HTTP.
    pub fn allowed_host(mut self, host: impl Into<Cow<'static, str>>) -> Self {
        self.allowed_hosts.push(host.into());
        self
    }

    /// Test-only escape hatch: tool names are taken verbatim as ids (no namespace
    /// prefix) and `describe` skips validation, so a test component can present a
    /// broken manifest to the host. Never use it in a real connector.
    #[doc(hidden)]
    pub fn unchecked(mut self) -> Self {
        self.unchecked = true;
        self
    }

    /// The slug.
    pub fn slug(&self) -> &str {
        &self.slug
    }

    /// The effective tool namespace: the one set, or the slug.
    pub fn effective_namespace(&self) -> &str {
        self.namespace.as_deref().unwrap_or(&self.slug)
    }

    /// The tools, in declaration order.
    pub fn tool_list(&self) -> &[Tool] {
        &self.tools
    }

    /// The canonical id of `tool` in this manifest.
    pub fn tool_id<'a>(&self, tool: &'a Tool) -> Cow<'a, str> {
        if self.unchecked || tool.name.contains('.') {
            Cow::Borrowed(&tool.name)
        } else {
            Cow::Owned(format!("{}.{}", self.effective_namespace(), tool.name))
        }
    }

    /// The canonical ids of all tools, in declaration order.
    pub fn tool_ids(&self) -> Vec<String> {
        self.tools
            .iter()
            .map(|t| self.tool_id(t).into_owned())
            .collect()
    }

    /// The tool answering to the canonical id `id`.
    pub fn find_tool(&self, id: &str) -> Option<&Tool> {
        let namespace = self.effective_namespace();
        self.tools
            .iter()
            .find(|t| t.answers_to(namespace, id, self.unchecked))
    }

    /// Checks CONTRACT.md §1: slug, namespace (one segment, not `sv`), every tool id's
    /// grammar and namespace, no duplicate ids. Returns the first breach.
    pub fn validate(&self) -> Result<(), ManifestError> {
        if !is_slug(&self.slug) {
            return Err(ManifestError::InvalidSlug(self.slug.to_string()));
        }
        let namespace = self.effective_namespace();
        if !is_id_segment(namespace) {
            return Err(ManifestError::InvalidNamespace {
                namespace: namespace.to_owned(),
                from_slug: self.namespace.is_none(),
            });
        }
        if namespace == RESERVED_NAMESPACE {
            return Err(ManifestError::ReservedNamespace(namespace.to_owned()));
        }
        let ids = self.tool_ids();
        for (i, id) in ids.iter().enumerate() {
            if !is_tool_id(id) {
                return Err(ManifestError::InvalidToolId(id.clone()));
            }
            let inside = id
                .strip_prefix(namespace)
                .is_some_and(|rest| rest.starts_with('.'));
            if !inside {
                return Err(ManifestError::ToolOutsideNamespace {
                    id: id.clone(),
                    namespace: namespace.to_owned(),
                });
            }
            if ids[..i].contains(id) {
                return Err(ManifestError::DuplicateToolId(id.clone()));
            }
        }
        Ok(())
    }
}
