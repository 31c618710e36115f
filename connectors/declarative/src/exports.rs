//! The component's exports: the `connector` world over the plan.

use connector_sdk::__private::{output_to_wit, tool_error_to_wit};
use connector_sdk::bindings::spring::connector::types as wit;
use connector_sdk::bindings::Guest;
use connector_sdk::ToolError;
use declarative_plan::Plan;
use serde_json::Value;

use crate::call;
use crate::redact::Redactor;
use crate::render::Scope;
use crate::{events, object, plan, slot, unreadable, with_defaults};

struct Interpreter;

fn manifest(plan: Plan) -> wit::Manifest {
    wit::Manifest {
        slug: plan.slug,
        tool_namespace: Some(plan.namespace),
        display_name: plan.display_name,
        description: plan.description,
        version: plan.version,
        config_schema: plan.config_schema.get().to_owned(),
        tools: plan
            .tools
            .into_iter()
            .map(|t| wit::Tool {
                name: t.id,
                description: t.description,
                input_schema: t.input_schema.get().to_owned(),
                annotations: wit::Annotations {
                    read_only: t.annotations.read_only,
                    destructive: t.annotations.destructive,
                    idempotent: t.annotations.idempotent,
                    open_world: t.annotations.open_world,
                },
                output_schema: None,
            })
            .collect(),
        webhook: plan
            .webhooks
            .then_some(wit::WebhookScheme::GithubHmacSha256),
        allowed_hosts: plan.allowed_hosts,
    }
}

fn call_tool(
    ctx: wit::CallContext,
    tool: &str,
    arguments: &str,
) -> Result<connector_sdk::ToolOutput, ToolError> {
    let slot = slot().map_err(ToolError::Failed)?;
    let Some(spec) = slot.tool(tool) else {
        return Err(ToolError::Failed(format!(
            "connector `{}` has no tool `{tool}`",
            slot.head.slug
        )));
    };
    let spec = spec.map_err(|e| ToolError::Failed(unreadable(e)))?;
    let plan = slot.head;
    let arguments = with_defaults(
        object(arguments)
            .map_err(|e| ToolError::InvalidArguments(format!("the arguments are {e}")))?,
        &spec.argument_defaults,
    );
    let config = with_defaults(
        object(&ctx.binding.config)
            .map_err(|e| ToolError::Failed(format!("the binding config is {e}")))?,
        &plan.config_defaults,
    );
    let mut redactor = Redactor::new(&plan.secret_keys, &config);
    let installation = plan
        .github_installation_key
        .as_ref()
        .and_then(|key| config.get(key))
        .and_then(Value::as_u64);
    let mint = || match installation {
        Some(id) => connector_sdk::github::installation_token(id).map(|t| t.token),
        None => Err("the binding names no installation".to_owned()),
    };
    let mut scope = Scope::new(&arguments, &config);
    scope.agent = ctx.agent.as_deref();
    scope.unit = Some(&ctx.binding.unit);
    scope.github_token = &mint;
    let result = call::run(tool, &spec.backend, &scope);
    if let Some(token) = scope.minted.borrow_mut().take() {
        redactor.add(token);
    }
    match result {
        Ok(answer) => redactor.answer(answer),
        Err(e) => Err(redactor.error(e)),
    }
}

impl Guest for Interpreter {
    fn describe_connector() -> wit::Manifest {
        match plan() {
            Ok(plan) => manifest(plan),
            // A trap in `describe` is an install error on the host, with this message.
            Err(e) => panic!("{e}"),
        }
    }

    fn validate_binding(config: String) -> Result<Vec<String>, String> {
        let plan = slot()?.head;
        let config = with_defaults(
            object(&config).map_err(|e| format!("the configuration is {e}"))?,
            &plan.config_defaults,
        );
        crate::bind(&plan, &config)
    }

    fn call_tool(
        ctx: wit::CallContext,
        tool: String,
        arguments: String,
    ) -> Result<wit::ToolOutput, wit::ToolError> {
        call_tool(ctx, &tool, &arguments)
            .map(output_to_wit)
            .map_err(tool_error_to_wit)
    }

    fn translate_webhook(hook: wit::Webhook) -> Result<Vec<wit::Message>, String> {
        let plan = slot()?.head;
        Ok(events::translate(&plan, &hook.body)?
            .into_iter()
            .map(|(kind, payload)| wit::Message {
                route: declarative_plan::EVENT_ROUTE.to_owned(),
                kind,
                thread_key: None,
                payload,
            })
            .collect())
    }

    fn accepts_message(binding: wit::Binding, message: wit::Message) -> bool {
        let (Ok(slot), Ok(config)) = (slot(), object(&binding.config)) else {
            return false;
        };
        events::accept(&slot.head, &config, &message.kind, &message.payload)
    }

    fn runtime_context(_binding: wit::Binding) -> Result<wit::AgentContext, String> {
        Ok(wit::AgentContext {
            env: Vec::new(),
            files: Vec::new(),
        })
    }
}

connector_sdk::bindings::__export_connector_world!(Interpreter with_types_in connector_sdk::bindings);
