"""The six exports of ``spring:connector@0.3.0`` for the connector the component's module
declared (imported only inside the component, where ``wit_world`` exists)."""

import json

import wit_world
from componentize_py_types import Err
from wit_world.imports import spring_connector_types as wit

from . import _CONNECTORS, Binding, Block, CallContext, Message, ToolError, Webhook, log, to_json

_ERRORS = {
    "invalid-arguments": wit.ToolError_InvalidArguments,
    "failed": wit.ToolError_Failed,
    "unauthorized": wit.ToolError_Unauthorized,
}
_SCHEMES = {
    "github-hmac-sha256": wit.WebhookScheme.GITHUB_HMAC_SHA256,
    "standard-webhooks": wit.WebhookScheme.STANDARD_WEBHOOKS,
}


def _connector():
    if len(_CONNECTORS) != 1:
        raise RuntimeError(f"the module must declare exactly one Connector, not {len(_CONNECTORS)}")
    return _CONNECTORS[0]


def _binding(b):
    c = _connector()
    return Binding(unit=b.unit, config=c.config_value(json.loads(b.config)))


def _block(b: Block):
    f = b.fields
    if b.type == "text":
        return wit.ContentBlock_Text(f["text"])
    if b.type == "image":
        return wit.ContentBlock_Image(wit.Media(data=f["data"], mime_type=f["mime_type"]))
    if b.type == "audio":
        return wit.ContentBlock_Audio(wit.Media(data=f["data"], mime_type=f["mime_type"]))
    if b.type == "resource_link":
        return wit.ContentBlock_ResourceLink(wit.ResourceLink(**f))
    contents = wit.ResourceContents_Text(f["text"]) if f["text"] is not None else wit.ResourceContents_Blob(f["blob"])
    return wit.ContentBlock_Resource(wit.EmbeddedResource(uri=f["uri"], mime_type=f["mime_type"], contents=contents))


def _reason(e: BaseException) -> str:
    return str(e) or type(e).__name__


class WitWorld(wit_world.WitWorld):
    def describe_connector(self):
        m = _connector().manifest()
        return wit.Manifest(
            slug=m["slug"],
            tool_namespace=m["tool_namespace"],
            display_name=m["display_name"],
            description=m["description"],
            version=m["version"],
            config_schema=json.dumps(m["config_schema"]),
            tools=[
                wit.Tool(
                    name=t["name"],
                    description=t["description"],
                    input_schema=json.dumps(t["input_schema"]),
                    annotations=wit.Annotations(**t["annotations"]),
                    output_schema=None if t["output_schema"] is None else json.dumps(t["output_schema"]),
                )
                for t in m["tools"]
            ],
            webhook=None if m["webhook"] is None else _SCHEMES[m["webhook"]],
            allowed_hosts=m["allowed_hosts"],
        )

    def validate_binding(self, config):
        c = _connector()
        try:
            value = c.config_value(json.loads(config))
            return list(c.bind_hook(value)) if c.bind_hook else []
        except Exception as e:
            raise Err(_reason(e))

    def call_tool(self, ctx, tool, arguments):
        context = CallContext(binding=_binding(ctx.binding), agent=ctx.agent, call_id=ctx.call_id)
        try:
            answer = _connector().call(tool, json.loads(arguments), context)
            structured = None if answer.structured is None else json.dumps(to_json(answer.structured))
            return wit.ToolOutput(structured=structured, content=[_block(b) for b in answer.content])
        except ToolError as e:
            raise Err(_ERRORS.get(e.kind, wit.ToolError_Failed)(e.message))
        except MemoryError:
            # The host refused to grow memory past the limit: the instance traps and the
            # host reports the memory limit, as for a connector in any language.
            raise
        except Exception as e:
            raise Err(wit.ToolError_Failed(_reason(e)))

    def translate_webhook(self, hook):
        c = _connector()
        if c.translate_hook is None:
            return []
        try:
            messages = c.translate_hook(Webhook(headers=list(hook.headers), body=bytes(hook.body)))
            return [
                wit.Message(route=m.route, kind=m.kind, thread_key=m.thread_key, payload=json.dumps(to_json(m.payload)))
                for m in messages
            ]
        except Exception as e:
            raise Err(_reason(e))

    def accepts_message(self, binding, message):
        c = _connector()
        if c.accept_hook is None:
            return True
        try:
            m = Message(route=message.route, kind=message.kind, payload=json.loads(message.payload), thread_key=message.thread_key)
            return bool(c.accept_hook(_binding(binding), m))
        except Exception as e:
            log("warn", f"accept failed, so the message is dropped: {_reason(e)}")
            return False

    def runtime_context(self, binding):
        c = _connector()
        if c.context_hook is None:
            return wit.AgentContext(env=[], files=[])
        try:
            context = c.context_hook(_binding(binding)) or {}
        except Exception as e:
            raise Err(_reason(e))
        return wit.AgentContext(env=list(context.get("env", {}).items()), files=list(context.get("files", {}).items()))


def warm_up() -> None:
    """Runs the SDK's own part of a call a few times: a call of an unknown tool (the
    arguments' and context's conversion, the error's) and a result's conversion. The
    generated entry module runs this while componentize-py pre-initialises the component,
    so what CPython does the first times code runs (it specialises the bytecode and fills
    its lookup caches) is in the snapshot every call's fresh instance starts from instead
    of being redone in each of them. No tool of the connector runs."""
    world = WitWorld()
    context = wit.CallContext(binding=wit.Binding(unit="", config="{}"), agent=None, call_id="")
    for _ in range(3):
        try:
            world.call_tool(context, "", "{}")
        except Exception:
            pass  # Err, or a configuration type `{}` does not fit
        wit.ToolOutput(structured=json.dumps(to_json({"": [None]})), content=[])
