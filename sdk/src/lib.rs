//! Write connectors for `connector-host` as WebAssembly components.
//!
//! A connector is a component exporting the `spring:connector/connector` world
//! (`wit/connector.wit`, `spring:connector@0.3.0`). This crate hides the wit-bindgen
//! plumbing: an author implements one trait, [`Connector`], and invokes one macro,
//! [`export!`]. Build the crate as a `cdylib` for `wasm32-wasip2`.
//!
//! The host runs every operation in a **fresh instance**, so nothing survives between
//! calls and [`Connector::manifest`] is rebuilt on each one. It is cheap to rebuild: tool
//! input schemas are derived from typed argument structs with `schemars` (so they cannot
//! drift from the code), but only when the host asks for the manifest, never when a tool
//! is called.
//!
//! ```
//! use connector_sdk::{CallContext, Connector, Manifest, NoArgs, Tool, ToolError};
//! use serde::Deserialize;
//! use schemars::JsonSchema;
//!
//! /// Arguments of `hello.greet`.
//! #[derive(Deserialize, JsonSchema)]
//! struct GreetArgs {
//!     /// Who to greet.
//!     name: String,
//! }
//!
//! /// The binding configuration.
//! #[derive(Deserialize, JsonSchema)]
//! #[serde(deny_unknown_fields)]
//! struct Config {
//!     /// Greeting to use instead of "Hello".
//!     greeting: Option<String>,
//! }
//!
//! struct Hello;
//!
//! impl Connector for Hello {
//!     fn manifest() -> Manifest {
//!         Manifest::new("hello")
//!             .display_name("Hello")
//!             .description("Greets people.")
//!             .version(env!("CARGO_PKG_VERSION"))
//!             .config::<Config>()
//!             // Relative name: becomes `hello.greet`.
//!             .tool(
//!                 Tool::new("greet", "Greets someone by name", greet)
//!                     .read_only()
//!                     .idempotent(),
//!             )
//!             // A full id works too.
//!             .tool(Tool::new("hello.ping", "Answers pong", |_: &CallContext, _: NoArgs| {
//!                 Ok::<_, ToolError>("pong")
//!             }))
//!     }
//! }
//!
//! fn greet(ctx: &CallContext, args: GreetArgs) -> Result<serde_json::Value, ToolError> {
//!     if args.name.is_empty() {
//!         return Err(ToolError::invalid_arguments("name is empty"));
//!     }
//!     let config: Config = ctx.binding.config_as().map_err(ToolError::failed)?;
//!     let greeting = config.greeting.as_deref().unwrap_or("Hello");
//!     connector_sdk::log::info(format!("greeting {}", args.name));
//!     Ok(serde_json::json!({ "text": format!("{greeting}, {}!", args.name) }))
//! }
//!
//! connector_sdk::export!(Hello);
//! # fn main() {
//! #     assert!(Hello::manifest().validate().is_ok());
//! #     assert_eq!(Hello::manifest().tool_ids(), ["hello.greet", "hello.ping"]);
//! # }
//! ```
//!
//! Other pieces:
//! - [`log`]: log lines into the host's log, tagged with the connector and call.
//! - [`http`]: a blocking outbound HTTP client over `wasi:http` (only the hosts the
//!   manifest allows are reachable).
//! - [`github`]: GitHub App installation tokens minted by the host.
//!
//! Everything except `http` and `github` also works natively, so manifests and tool
//! handlers can be unit-tested with a plain `cargo test`.

#![warn(missing_docs)]

pub mod github;
pub mod http;
pub mod log;
mod manifest;
mod output;
pub mod secrets;
mod types;

pub use manifest::{
    is_id_segment, is_slug, is_tool_id, schema_of, Annotations, Manifest, ManifestError, NoArgs,
    Tool, WebhookScheme, RESERVED_NAMESPACE,
};
pub use output::{Content, IntoToolOutput, ResourceContents, ResourceLink, ToolOutput};
pub use types::{AgentContext, Binding, CallContext, Message, ToolError, Webhook};

pub use schemars;
pub use serde_json;

use serde_json::Value;

/// The wit-bindgen bindings of the `connector` world. Not a stable API: use the types at
/// the crate root instead.
#[doc(hidden)]
#[allow(missing_docs, clippy::all)]
pub mod bindings {
    wit_bindgen::generate!({
        path: "../wit",
        world: "connector",
        pub_export_macro: true,
        default_bindings_module: "connector_sdk::bindings",
        export_macro_name: "__export_connector_world",
    });
}

/// What a connector implements. Only [`manifest`](Connector::manifest) is required.
///
/// All functions are associated functions (no `self`): every call runs in a fresh
/// instance, so there is no state to keep.
pub trait Connector {
    /// Declares the connector: identity, tools (with their handlers), config schema,
    /// webhook scheme, outbound hosts. Called on every operation; keep it cheap.
    fn manifest() -> Manifest;

    /// Validates a binding's configuration beyond its JSON Schema and returns the routing
    /// keys under which webhook messages reach this binding. `Err` rejects the binding;
    /// its text reaches the operator.
    fn bind(config: &Value) -> Result<Vec<String>, String> {
        let _ = config;
        Ok(Vec::new())
    }

    /// Turns a verified webhook into messages; an empty list means nothing to deliver.
    fn translate_webhook(hook: &Webhook) -> Result<Vec<Message>, String> {
        let _ = hook;
        Ok(Vec::new())
    }

    /// The per-binding filter: whether `message` should reach the unit of `binding`.
    fn accept(binding: &Binding, message: &Message) -> bool {
        let _ = (binding, message);
        true
    }

    /// The env vars and files an agent under the bound unit starts with.
    fn runtime_context(binding: &Binding) -> Result<AgentContext, String> {
        let _ = binding;
        Ok(AgentContext::default())
    }
}

/// Exports a [`Connector`] implementation as the component's `connector` world.
///
/// Use it once, at the top level of the connector's `cdylib` crate:
///
/// ```
/// struct MyConnector;
///
/// impl connector_sdk::Connector for MyConnector {
///     fn manifest() -> connector_sdk::Manifest {
///         connector_sdk::Manifest::new("mine")
///     }
/// }
///
/// connector_sdk::export!(MyConnector);
/// # fn main() {}
/// ```
#[macro_export]
macro_rules! export {
    ($connector:ty) => {
        const _: () = {
            type __ConnectorSdkExport = $crate::__private::Adapter<$connector>;
            $crate::bindings::__export_connector_world!(
                __ConnectorSdkExport with_types_in $crate::bindings
            );
        };
    };
}

#[doc(hidden)]
pub mod __private {
    //! The glue between wit-bindgen's `Guest` trait and [`Connector`](crate::Connector):
    //! converts WIT records into the SDK's types and dispatches tool calls by id.

    use std::marker::PhantomData;

    use serde_json::Value;

    use crate::bindings::spring::connector::types as wit;
    use crate::bindings::Guest;
    use crate::{AgentContext, Binding, CallContext, Connector, Message, ToolError, Webhook};

    /// Implements the world's `Guest` trait for any [`Connector`].
    pub struct Adapter<C>(PhantomData<C>);

    fn binding_from_wit(b: wit::Binding) -> Result<Binding, String> {
        let config = serde_json::from_str(&b.config)
            .map_err(|e| format!("the binding configuration is not valid JSON: {e}"))?;
        Ok(Binding {
            unit: b.unit,
            config,
        })
    }

    fn message_from_wit(m: wit::Message) -> Result<Message, String> {
        let payload = serde_json::from_str(&m.payload)
            .map_err(|e| format!("the message payload is not valid JSON: {e}"))?;
        Ok(Message {
            route: m.route,
            kind: m.kind,
            thread_key: m.thread_key,
            payload,
        })
    }

    fn message_to_wit(m: Message) -> wit::Message {
        wit::Message {
            route: m.route,
            kind: m.kind,
            thread_key: m.thread_key,
            payload: m.payload.to_string(),
        }
    }

    fn context_to_wit(c: AgentContext) -> wit::AgentContext {
        wit::AgentContext {
            env: c.env,
            files: c.files,
        }
    }

    pub fn tool_error_to_wit(e: ToolError) -> wit::ToolError {
        match e {
            ToolError::InvalidArguments(m) => wit::ToolError::InvalidArguments(m),
            ToolError::Failed(m) => wit::ToolError::Failed(m),
            ToolError::Unauthorized(m) => wit::ToolError::Unauthorized(m),
        }
    }

    pub fn output_to_wit(o: crate::ToolOutput) -> wit::ToolOutput {
        use crate::{Content, ResourceContents};
        let block = |c: Content| match c {
            Content::Text(t) => wit::ContentBlock::Text(t),
            Content::Image { data, mime_type } => {
                wit::ContentBlock::Image(wit::Media { data, mime_type })
            }
            Content::Audio { data, mime_type } => {
                wit::ContentBlock::Audio(wit::Media { data, mime_type })
            }
            Content::ResourceLink(l) => wit::ContentBlock::ResourceLink(wit::ResourceLink {
                uri: l.uri,
                name: l.name,
                title: l.title,
                description: l.description,
                mime_type: l.mime_type,
                size: l.size,
            }),
            Content::Resource {
                uri,
                mime_type,
                contents,
            } => wit::ContentBlock::Resource(wit::EmbeddedResource {
                uri,
                mime_type,
                contents: match contents {
                    ResourceContents::Text(t) => wit::ResourceContents::Text(t),
                    ResourceContents::Blob(b) => wit::ResourceContents::Blob(b),
                },
            }),
        };
        wit::ToolOutput {
            structured: o.structured,
            content: o.content.into_iter().map(block).collect(),
        }
    }

    fn manifest_to_wit(m: crate::Manifest) -> wit::Manifest {
        let tools = m
            .tools
            .iter()
            .map(|t| wit::Tool {
                name: m.tool_id(t).into_owned(),
                description: t.description.to_string(),
                input_schema: (t.schema)().to_string(),
                annotations: wit::Annotations {
                    read_only: t.annotations.read_only,
                    destructive: t.annotations.destructive,
                    idempotent: t.annotations.idempotent,
                    open_world: t.annotations.open_world,
                },
                output_schema: t.output_schema.map(|schema| schema().to_string()),
            })
            .collect();
        wit::Manifest {
            display_name: m.display_name.as_deref().unwrap_or(&m.slug).to_owned(),
            slug: m.slug.into_owned(),
            tool_namespace: m.namespace.map(|n| n.into_owned()),
            description: m.description.into_owned(),
            version: m.version.into_owned(),
            config_schema: (m.config_schema)().to_string(),
            tools,
            webhook: m.webhook.map(|w| match w {
                crate::WebhookScheme::GithubHmacSha256 => wit::WebhookScheme::GithubHmacSha256,
                crate::WebhookScheme::StandardWebhooks => wit::WebhookScheme::StandardWebhooks,
            }),
            allowed_hosts: m
                .allowed_hosts
                .into_iter()
                .map(|h| h.into_owned())
                .collect(),
        }
    }

    impl<C: Connector> Guest for Adapter<C> {
        fn describe_connector() -> wit::Manifest {
            let manifest = C::manifest();
            if !manifest.unchecked {
                if let Err(e) = manifest.validate() {
                    // A trap in `describe` is an install error on the host side, with this
                    // message on the guest's stderr.
                    panic!("invalid connector manifest: {e}");
                }
            }
            manifest_to_wit(manifest)
        }

        fn validate_binding(config: String) -> Result<Vec<String>, String> {
            let config: Value = serde_json::from_str(&config)
                .map_err(|e| format!("the configuration is not valid JSON: {e}"))?;
            C::bind(&config)
        }

        fn call_tool(
            ctx: wit::CallContext,
            tool: String,
            arguments: String,
        ) -> Result<wit::ToolOutput, wit::ToolError> {
            let manifest = C::manifest();
            let Some(handler) = manifest.find_tool(&tool) else {
                return Err(wit::ToolError::Failed(format!(
                    "connector `{}` has no tool `{tool}`",
                    manifest.slug()
                )));
            };
            let ctx = CallContext {
                binding: binding_from_wit(ctx.binding).map_err(wit::ToolError::Failed)?,
                agent: ctx.agent,
                call_id: ctx.call_id,
            };
            (handler.handler)(&ctx, &arguments)
                .map(output_to_wit)
                .map_err(tool_error_to_wit)
        }

        fn translate_webhook(hook: wit::Webhook) -> Result<Vec<wit::Message>, String> {
            let hook = Webhook {
                headers: hook.headers,
                body: hook.body,
            };
            let messages = C::translate_webhook(&hook)?;
            Ok(messages.into_iter().map(message_to_wit).collect())
        }

        fn accepts_message(binding: wit::Binding, message: wit::Message) -> bool {
            match (binding_from_wit(binding), message_from_wit(message)) {
                (Ok(binding), Ok(message)) => C::accept(&binding, &message),
                (Err(e), _) | (_, Err(e)) => {
                    crate::log::warn(format!("message not accepted: {e}"));
                    false
                }
            }
        }

        fn runtime_context(binding: wit::Binding) -> Result<wit::AgentContext, String> {
            let binding = binding_from_wit(binding)?;
            C::runtime_context(&binding).map(context_to_wit)
        }
    }
}

#[cfg(test)]
mod tests;
