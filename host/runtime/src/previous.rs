//! Components built against `spring:connector@0.1.0`, the first world.
//!
//! Every component ever installed keeps loading and working on every later host (the
//! contract says so), so the host links the first world beside the current one and
//! speaks to a 0.1.0 component through it. Only this module knows that world: what a
//! 0.1.0 guest returns is turned into the current world's types at once (a JSON tool
//! result becomes a `tool-output` with only `structured`; its tools declare no output
//! schema), and what the host passes in is turned back. The host interface is the same
//! in every world: its `spring:connector/host@0.1.0` import is answered by the current
//! world's implementation (see `link_host_interfaces`), so the `with` below reuses the
//! current bindings for it instead of generating a second trait.

use super::wit;

pub(super) mod bindings {
    wasmtime::component::bindgen!({
        path: "../../wit/previous/connector-0.1.0.wit",
        world: "connector",
        imports: { default: async },
        exports: { default: async },
        with: {
            "spring:connector/host": crate::bindings::spring::connector::host,
        },
    });
}

/// The 0.1.0 world's types.
pub(super) use bindings::spring::connector::types as old;

/// The world's name, as `inspect` and the API show it.
pub(super) const WORLD: &str = "spring:connector@0.1.0";

pub(super) fn manifest(m: old::Manifest) -> wit::Manifest {
    wit::Manifest {
        slug: m.slug,
        tool_namespace: m.tool_namespace,
        display_name: m.display_name,
        description: m.description,
        version: m.version,
        config_schema: m.config_schema,
        tools: m
            .tools
            .into_iter()
            .map(|t| wit::Tool {
                name: t.name,
                description: t.description,
                input_schema: t.input_schema,
                annotations: wit::Annotations {
                    read_only: t.annotations.read_only,
                    destructive: t.annotations.destructive,
                    idempotent: t.annotations.idempotent,
                    open_world: t.annotations.open_world,
                },
                output_schema: None,
            })
            .collect(),
        webhook: m.webhook.map(|w| match w {
            old::WebhookScheme::GithubHmacSha256 => wit::WebhookScheme::GithubHmacSha256,
            old::WebhookScheme::StandardWebhooks => wit::WebhookScheme::StandardWebhooks,
        }),
        allowed_hosts: m.allowed_hosts,
    }
}

pub(super) fn binding(b: wit::Binding) -> old::Binding {
    old::Binding {
        unit: b.unit,
        config: b.config,
    }
}

pub(super) fn call_context(c: wit::CallContext) -> old::CallContext {
    old::CallContext {
        binding: binding(c.binding),
        agent: c.agent,
        call_id: c.call_id,
    }
}

/// A 0.1.0 tool result: its JSON is the structured result; there are no content blocks.
pub(super) fn tool_result(
    r: Result<String, old::ToolError>,
) -> Result<wit::ToolOutput, wit::ToolError> {
    match r {
        Ok(json) => Ok(wit::ToolOutput {
            structured: Some(json),
            content: Vec::new(),
        }),
        Err(old::ToolError::InvalidArguments(m)) => Err(wit::ToolError::InvalidArguments(m)),
        Err(old::ToolError::Failed(m)) => Err(wit::ToolError::Failed(m)),
        Err(old::ToolError::Unauthorized(m)) => Err(wit::ToolError::Unauthorized(m)),
    }
}

pub(super) fn webhook(w: wit::Webhook) -> old::Webhook {
    old::Webhook {
        headers: w.headers,
        body: w.body,
    }
}

pub(super) fn message_in(m: wit::Message) -> old::Message {
    old::Message {
        route: m.route,
        kind: m.kind,
        thread_key: m.thread_key,
        payload: m.payload,
    }
}

pub(super) fn message_out(m: old::Message) -> wit::Message {
    wit::Message {
        route: m.route,
        kind: m.kind,
        thread_key: m.thread_key,
        payload: m.payload,
    }
}

pub(super) fn agent_context(c: old::AgentContext) -> wit::AgentContext {
    wit::AgentContext {
        env: c.env,
        files: c.files,
    }
}
