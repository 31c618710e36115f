"""Wires the agent frameworks people use to connector-host's MCP endpoint with flat tool
names (`?toolNames=flat`, CONTRACT.md §5), as the README shows, and checks that every tool
name each framework would hand to a model matches the model APIs' function-name rule
(`^[a-zA-Z0-9_-]{1,64}$`), then calls `acme__echo` through the framework's own tool wrapper.
No model is called: what a framework would send is read from its tool objects (openai-agents'
`FunctionTool`, LangChain's OpenAI tool form) or from pydantic-ai's `TestModel`, which records
the tool definitions a model would get and calls the tools itself.

Also checks the endpoint as a framework sees it without the option: the canonical names
(`acme.echo`) break that rule, which is why the option exists.

Run by tests/all/mcp_frameworks.rs with the frameworks' venv (`.ci/run` installs
tests/mcp/frameworks-requirements.txt into target/frameworks-venv):

    target/frameworks-venv/bin/python tests/mcp/frameworks_check.py \
        --url http://127.0.0.1:8787 --agent ada --token AGENT_TOKEN

The agent must have the `acme` connector bound. Prints one line per check; exits non-zero
on failure.
"""

import argparse
import asyncio
import json
import re
import sys

MODEL_API_NAME = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")


def log(message):
    print(f"[frameworks_check] {message}", flush=True)


def check_names(framework, names):
    assert names, f"{framework}: no tools"
    bad = [n for n in names if not MODEL_API_NAME.match(n)]
    assert not bad, f"{framework}: names a model API refuses: {bad}"
    assert "acme__echo" in names, f"{framework}: acme__echo missing from {names}"
    log(f"{framework}: {len(names)} tool names, all match ^[a-zA-Z0-9_-]{{1,64}}$")


def text_of(value):
    """The text a framework's tool wrapper returned, whatever its shape."""
    if isinstance(value, str):
        return value
    if isinstance(value, (list, tuple)):
        return " ".join(text_of(v) for v in value)
    if isinstance(value, dict):
        return value.get("text") or json.dumps(value)
    for attr in ("text", "content"):
        inner = getattr(value, attr, None)
        if inner is not None:
            return text_of(inner)
    return str(value)


async def openai_agents(endpoint, token):
    from agents import Agent, RunContextWrapper
    from agents.mcp import MCPServerStreamableHttp
    from agents.tool_context import ToolContext

    server = MCPServerStreamableHttp(
        params={"url": endpoint, "headers": {"Authorization": f"Bearer {token}"}},
        name="connector-host",
        cache_tools_list=True,
    )
    async with server:
        agent = Agent(name="wiring-check", mcp_servers=[server])
        tools = await agent.get_all_tools(RunContextWrapper(context=None))
        check_names("openai-agents", [t.name for t in tools])
        echo = next(t for t in tools if t.name == "acme__echo")
        arguments = json.dumps({"message": "from openai-agents"})
        context = ToolContext(
            context=None,
            tool_name=echo.name,
            tool_call_id="call-1",
            tool_arguments=arguments,
        )
        out = await echo.on_invoke_tool(context, arguments)
        assert "from openai-agents" in text_of(out), out
        log("openai-agents: acme__echo called through its FunctionTool")


async def langchain(endpoint, token):
    from langchain_core.utils.function_calling import convert_to_openai_tool
    from langchain_mcp_adapters.client import MultiServerMCPClient

    client = MultiServerMCPClient(
        {
            "connector-host": {
                "transport": "streamable_http",
                "url": endpoint,
                "headers": {"Authorization": f"Bearer {token}"},
            }
        }
    )
    tools = await client.get_tools()
    # What a chat model binding sends: the OpenAI function form of each tool.
    check_names("langchain-mcp-adapters", [convert_to_openai_tool(t)["function"]["name"] for t in tools])
    echo = next(t for t in tools if t.name == "acme__echo")
    out = await echo.ainvoke({"message": "from langchain"})
    assert "from langchain" in text_of(out), out
    log("langchain-mcp-adapters: acme__echo called through its StructuredTool")


async def pydantic_ai(endpoint, token):
    from pydantic_ai import Agent
    from pydantic_ai.mcp import MCPToolset
    from pydantic_ai.models.test import TestModel

    server = MCPToolset(endpoint, headers={"Authorization": f"Bearer {token}"})
    # TestModel stands in for the model: it records the tool definitions a model would get
    # and calls the tools it is told to, with arguments generated from their schemas.
    model = TestModel(call_tools=["acme__echo"])
    agent = Agent(model, toolsets=[server])
    async with agent:
        result = await agent.run("echo something")
    sent = model.last_model_request_parameters
    check_names("pydantic-ai", [t.name for t in sent.function_tools])
    assert "acme__echo" in str(result.output), result.output
    log("pydantic-ai: acme__echo called by its agent loop (TestModel)")


async def canonical_names_break_the_rule(url, agent, token):
    """Without the option, a framework hands `acme.echo` to the model, which refuses it."""
    from pydantic_ai import Agent
    from pydantic_ai.mcp import MCPToolset
    from pydantic_ai.models.test import TestModel

    server = MCPToolset(f"{url}/mcp/agents/{agent}", headers={"Authorization": f"Bearer {token}"})
    model = TestModel(call_tools=[])
    async with Agent(model, toolsets=[server]) as wired:
        await wired.run("nothing")
    names = [t.name for t in model.last_model_request_parameters.function_tools]
    assert "acme.echo" in names and not MODEL_API_NAME.match("acme.echo"), names
    log("canonical endpoint: the model would get acme.echo, which its name rule refuses")


async def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--url", required=True)
    parser.add_argument("--agent", required=True)
    parser.add_argument("--token", required=True)
    a = parser.parse_args()
    endpoint = f"{a.url.rstrip('/')}/mcp/agents/{a.agent}?toolNames=flat"
    await openai_agents(endpoint, a.token)
    await langchain(endpoint, a.token)
    await pydantic_ai(endpoint, a.token)
    await canonical_names_break_the_rule(a.url.rstrip("/"), a.agent, a.token)
    log("all frameworks wired")


if __name__ == "__main__":
    try:
        asyncio.run(main())
    except Exception as e:  # noqa: BLE001 - report any failure and exit non-zero
        import traceback

        traceback.print_exc()
        print(f"[frameworks_check] FAILED: {e}", file=sys.stderr, flush=True)
        sys.exit(1)
