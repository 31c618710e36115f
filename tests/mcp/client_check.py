#!/usr/bin/env python3
"""Drives connector-host's MCP surface with the official MCP Python SDK (PyPI `mcp`).

A client nobody on this project wrote: whatever it does against the host must work
(CONTRACT.md §5). Run by `tests/mcp.rs`; by hand:

    python client_check.py --url http://127.0.0.1:8787 --agent ada --token AGENT_TOKEN \
        --operator-token OP --unit team --binary target/debug/connector-host

The agent must have `acme` and the `rich` test connector bound, and the `hostile` test
connector installed but not bound to --unit. Two legs, each over its own transport:

1. Streamable HTTP (`streamable_http_client`, or `streamablehttp_client` in SDK 1.x)
   with the agent token as a bearer header;
2. stdio, launching `connector-host mcp --agent ... --url ... --token ...`
   (`stdio_client`), or with --stdio-data-dir DIR `connector-host mcp --agent ...
   --data-dir DIR`, which answers from the host's data in its own process.

Each leg: initialize, list tools (acme.echo present), call acme.echo and check the
structured result, call a tool of the unbound `hostile` connector (error -32002), bind
`hostile` through the REST API mid-session and wait for
`notifications/tools/list_changed` (via a message handler), see the new tool listed and
callable, then unbind it again; rich results (image, audio, resource link, embedded
resources, mixed content, structured output with an output schema). With SDK 2.x, then `mcp.Client` in each negotiation mode
(`legacy`, `auto`, the `2026-07-28` pin) over both transports: the revision it lands on,
list, call, errors, and change notifications (`Client.listen` at 2026-07-28). Prints one
line per check; exits non-zero on failure.
"""

import argparse
import asyncio
import contextlib
import json
import os
import sys
import time
import urllib.request

import mcp
from mcp import ClientSession

try:  # SDK 2.x
    from mcp.shared.exceptions import MCPError as RpcError
except ImportError:  # SDK 1.x
    from mcp.shared.exceptions import McpError as RpcError

NOTIFY_TIMEOUT_S = 10.0
# tests/guests/rich's 1x1 PNG and WAV header, base64.
PNG_B64 = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAIAAACQd1PeAAAADElEQVQI12P4z8AAAAMBAQAY3Y2wAAAAAElFTkSuQmCC"
WAV_B64 = "UklGRiQAAABXQVZFZm10IBAAAAABAAEARKwAAIhYAQACABAAZGF0YQAAAAA="


def attr(obj, snake, camel):
    """An attribute under its SDK 2.x (snake_case) or 1.x (camelCase) name."""
    value = getattr(obj, snake, None)
    return getattr(obj, camel, None) if value is None else value


async def rich_checks(name, call_tool, list_tools):
    """The `rich` connector's content blocks and structured output, as this SDK parses them."""
    tools = (await list_tools()).tools
    weather = next(t for t in tools if t.name == "rich.weather")
    out_schema = attr(weather, "output_schema", "outputSchema")
    assert out_schema and out_schema["type"] == "object" and "celsius" in out_schema["properties"], weather

    image = await call_tool("rich.image", {})
    block = image.content[0]
    assert block.type == "image" and block.data == PNG_B64, block
    assert attr(block, "mime_type", "mimeType") == "image/png", block
    audio = (await call_tool("rich.audio", {})).content[0]
    assert audio.type == "audio" and audio.data == WAV_B64, audio
    assert attr(audio, "mime_type", "mimeType") == "audio/wav", audio
    link = (await call_tool("rich.resource_link", {})).content[0]
    assert link.type == "resource_link" and str(link.uri) == "https://example.com/report.pdf", link
    assert link.name == "report" and attr(link, "mime_type", "mimeType") == "application/pdf", link
    embedded = (await call_tool("rich.embedded_resource", {})).content[0]
    assert embedded.type == "resource", embedded
    assert str(embedded.resource.uri) == "test://embedded-resource", embedded
    assert embedded.resource.text == "This is an embedded resource content.", embedded
    mixed = (await call_tool("rich.mixed", {})).content
    assert [b.type for b in mixed] == ["text", "image", "resource"], mixed
    assert mixed[2].resource.blob == "AAEC/w==", mixed[2]

    result = await call_tool("rich.weather", {"city": "Oslo"})
    assert not attr(result, "is_error", "isError"), result
    assert attr(result, "structured_content", "structuredContent") == {"city": "Oslo", "celsius": 21.5}, result
    assert result.content[0].text == "Oslo: 21.5 °C", result
    broken = await call_tool("rich.broken_output", {})
    assert attr(broken, "is_error", "isError") and "output schema" in broken.content[0].text, broken
    log(f"{name}: rich results (image, audio, resource link, embedded and mixed content, structured output) as sent")


def log(msg):
    print(f"[client_check] {msg}", flush=True)


def rest(base, token, method, path, body=None):
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(base + path, data=data, method=method)
    req.add_header("authorization", f"Bearer {token}")
    if data is not None:
        req.add_header("content-type", "application/json")
    with urllib.request.urlopen(req, timeout=30) as resp:
        return resp.status


def method_of(message):
    for obj in (message, getattr(message, "root", None)):
        m = getattr(obj, "method", None)
        if isinstance(m, str):
            return m
    return None


@contextlib.asynccontextmanager
async def http_transport(url, token):
    headers = {"Authorization": f"Bearer {token}"}
    try:
        from mcp.client.streamable_http import streamable_http_client  # SDK 2.x
    except ImportError:
        streamable_http_client = None
    if streamable_http_client is not None:
        from mcp.shared._httpx_utils import create_mcp_http_client

        async with create_mcp_http_client(headers=headers) as client:
            async with streamable_http_client(url, http_client=client) as streams:
                yield streams[0], streams[1]
    else:
        from mcp.client.streamable_http import streamablehttp_client  # SDK 1.x

        async with streamablehttp_client(url, headers=headers) as (read, write, _):
            yield read, write


def stdio_args(a):
    """`connector-host mcp`'s arguments: local on --stdio-data-dir, else the bridge."""
    if a.stdio_data_dir:
        return ["mcp", "--agent", a.agent, "--data-dir", a.stdio_data_dir]
    return ["mcp", "--agent", a.agent, "--url", a.rest, "--token", a.token]


@contextlib.asynccontextmanager
async def stdio_transport(a):
    from mcp.client.stdio import StdioServerParameters, stdio_client

    params = StdioServerParameters(
        command=a.binary,
        args=stdio_args(a),
        env={"RUST_LOG": "warn"},
    )
    async with stdio_client(params) as streams:
        yield streams[0], streams[1]


async def leg(name, transport, a):
    changed = asyncio.Event()
    seen = []

    async def on_message(message):
        if isinstance(message, Exception):
            log(f"{name}: transport reported {message!r}")
            return
        method = method_of(message)
        seen.append(method)
        if method == "notifications/tools/list_changed":
            changed.set()

    async with transport as (read, write):
        async with ClientSession(read, write, message_handler=on_message) as session:
            init = await session.initialize()
            version = getattr(init, "protocol_version", None) or getattr(init, "protocolVersion", None)
            server = init.server_info if hasattr(init, "server_info") else init.serverInfo
            assert server.name == "connector-host", server
            caps = init.capabilities
            assert caps.tools is not None, caps
            list_changed = getattr(caps.tools, "list_changed", None)
            if list_changed is None:
                list_changed = getattr(caps.tools, "listChanged", None)
            assert list_changed is True, caps.tools
            log(f"{name}: initialized at protocol revision {version}")

            tools = await session.list_tools()
            names = [t.name for t in tools.tools]
            assert "acme.echo" in names, names
            assert not any(n.startswith("hostile.") for n in names), names
            echo = next(t for t in tools.tools if t.name == "acme.echo")
            schema = echo.input_schema if hasattr(echo, "input_schema") else echo.inputSchema
            assert schema["type"] == "object" and "message" in schema["properties"], schema
            hints = echo.annotations
            read_only = getattr(hints, "read_only_hint", None)
            if read_only is None:
                read_only = getattr(hints, "readOnlyHint", None)
            assert read_only is True, hints
            log(f"{name}: tools/list has {len(names)} tools, acme.echo among them")

            result = await session.call_tool("acme.echo", {"message": "hi"})
            is_error = getattr(result, "is_error", None)
            if is_error is None:
                is_error = getattr(result, "isError", None)
            structured = getattr(result, "structured_content", None)
            if structured is None:
                structured = getattr(result, "structuredContent", None)
            assert not is_error, result
            assert structured == {"message": "hi"}, result
            assert json.loads(result.content[0].text) == {"message": "hi"}, result
            log(f"{name}: acme.echo answered {structured}")

            try:
                await session.call_tool("hostile.counter", {})
            except RpcError as e:
                code = e.error.code
                assert code == -32002, f"expected -32002, got {code}: {e.error.message}"
                log(f"{name}: hostile.counter (unbound) refused with {code}")
            else:
                raise AssertionError("calling a tool of an unbound connector succeeded")

            # Mid-session: bind hostile through the REST API; the session must hear of it.
            changed.clear()
            started = time.monotonic()
            status = rest(a.rest, a.operator_token, "PUT",
                          f"/api/v1/units/{a.unit}/connectors/hostile", {"config": {}})
            assert status in (200, 201), status
            try:
                await asyncio.wait_for(changed.wait(), NOTIFY_TIMEOUT_S)
            except asyncio.TimeoutError:
                raise AssertionError(
                    f"no notifications/tools/list_changed within {NOTIFY_TIMEOUT_S}s after the bind; saw {seen}")
            log(f"{name}: notifications/tools/list_changed {1000 * (time.monotonic() - started):.0f} ms after the bind")

            tools = await session.list_tools()
            names = [t.name for t in tools.tools]
            assert "hostile.counter" in names, names
            result = await session.call_tool("hostile.counter", {})
            structured = getattr(result, "structured_content", None)
            if structured is None:
                structured = getattr(result, "structuredContent", None)
            assert structured == {"result": 1}, result
            log(f"{name}: hostile.counter now listed and callable")

            changed.clear()
            rest(a.rest, a.operator_token, "DELETE", f"/api/v1/units/{a.unit}/connectors/hostile")
            await asyncio.wait_for(changed.wait(), NOTIFY_TIMEOUT_S)
            log(f"{name}: unbinding announced too")

            await rich_checks(name, session.call_tool, session.list_tools)


def client_transport(kind, a, endpoint):
    """A fresh transport for `mcp.Client` (SDK 2.x): Streamable HTTP with the agent token,
    or the stdio bridge."""
    if kind == "http":
        from mcp.client.streamable_http import streamable_http_client
        from mcp.shared._httpx_utils import create_mcp_http_client

        @contextlib.asynccontextmanager
        async def with_token():
            async with create_mcp_http_client(headers={"Authorization": f"Bearer {a.token}"}) as client:
                async with streamable_http_client(endpoint, http_client=client) as streams:
                    yield streams

        return with_token()
    from mcp.client.stdio import StdioServerParameters, stdio_client

    return stdio_client(StdioServerParameters(
        command=a.binary,
        args=stdio_args(a),
        env={"RUST_LOG": "warn"},
    ))


class Transported:
    """Adapts an async context manager of (read, write, ...) streams to `mcp.Client`'s
    Transport (which yields exactly (read, write))."""

    def __init__(self, cm):
        self.cm = cm

    async def __aenter__(self):
        streams = await self.cm.__aenter__()
        return streams[0], streams[1]

    async def __aexit__(self, *exc):
        return await self.cm.__aexit__(*exc)


async def mode_leg(kind, mode, a, endpoint):
    """`mcp.Client` in negotiation mode `mode` ('legacy', 'auto', or the 2026-07-28 pin):
    the revision it lands on, list, call, errors, and change notifications (through
    `Client.listen` at 2026-07-28, through the session's stream before)."""
    from mcp import Client

    name = f"{kind}/{mode}"
    changed = asyncio.Event()

    async def on_message(message):
        if method_of(message) == "notifications/tools/list_changed":
            changed.set()

    client = Client(Transported(client_transport(kind, a, endpoint)), mode=mode, message_handler=on_message)
    async with client:
        version = client.protocol_version
        expected = "2025-11-25" if mode == "legacy" else "2026-07-28"
        assert version == expected, f"{name}: landed on {version}, expected {expected}"
        info = client.server_info
        assert info is None or info.name == "connector-host", info
        names = [t.name for t in (await client.list_tools()).tools]
        assert "acme.echo" in names and "hostile.counter" not in names, names
        result = await client.call_tool("acme.echo", {"message": mode})
        assert not result.is_error and result.structured_content == {"message": mode}, result
        bad = await client.call_tool("acme.echo", {"message": 5})
        assert bad.is_error and "/message" in bad.content[0].text, bad
        try:
            await client.call_tool("hostile.counter", {})
        except RpcError as e:
            # 2026-07-28 retired -32002: invalid params, with data.code saying why.
            if version == "2026-07-28":
                assert e.error.code == -32602, e.error
                assert (e.error.data or {}).get("code") == "tool_not_granted", e.error
            else:
                assert e.error.code == -32002, e.error
        else:
            raise AssertionError(f"{name}: a tool of an unbound connector ran")
        log(f"{name}: revision {version}; list, call, invalid arguments and the not-granted error as expected")
        await rich_checks(name, client.call_tool, client.list_tools)

        started = time.monotonic()
        if version == "2026-07-28":
            async with client.listen(tools_list_changed=True) as sub:
                assert sub.honored.tools_list_changed, sub.honored
                status = rest(a.rest, a.operator_token, "PUT",
                              f"/api/v1/units/{a.unit}/connectors/hostile", {"config": {}})
                assert status in (200, 201), status
                event = await asyncio.wait_for(sub.__anext__(), NOTIFY_TIMEOUT_S)
                log(f"{name}: listen delivered {type(event).__name__} "
                    f"{1000 * (time.monotonic() - started):.0f} ms after the bind")
        else:
            status = rest(a.rest, a.operator_token, "PUT",
                          f"/api/v1/units/{a.unit}/connectors/hostile", {"config": {}})
            assert status in (200, 201), status
            await asyncio.wait_for(changed.wait(), NOTIFY_TIMEOUT_S)
            log(f"{name}: list_changed {1000 * (time.monotonic() - started):.0f} ms after the bind")
        # The cached list was evicted by the notification: the new tool is there.
        names = [t.name for t in (await client.list_tools()).tools]
        assert "hostile.counter" in names, names
        result = await client.call_tool("hostile.counter", {})
        assert result.structured_content == {"result": 1}, result
        rest(a.rest, a.operator_token, "DELETE", f"/api/v1/units/{a.unit}/connectors/hostile")
        log(f"{name}: the bound tool listed and callable")


async def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--url", required=True, help="base URL of the host")
    ap.add_argument("--agent", required=True)
    ap.add_argument("--token", required=True, help="the agent's token")
    ap.add_argument("--operator-token", required=True)
    ap.add_argument("--unit", required=True, help="a unit of the agent, to bind hostile to")
    ap.add_argument("--binary", required=True, help="the connector-host binary (stdio leg)")
    ap.add_argument("--stdio-data-dir", help="the host's data directory: the stdio leg runs "
                    "`connector-host mcp --data-dir` (local) instead of the bridge")
    a = ap.parse_args()
    a.rest = a.url.rstrip("/")
    endpoint = f"{a.rest}/mcp/agents/{a.agent}"
    try:
        from importlib.metadata import version
        log(f"MCP Python SDK {version('mcp')}")
    except Exception:  # pragma: no cover
        log(f"MCP Python SDK {getattr(mcp, '__version__', '?')}")
    await leg("http", http_transport(endpoint, a.token), a)
    await leg("stdio", stdio_transport(a), a)
    if hasattr(mcp, "Client"):  # SDK 2.x: its negotiation modes, 2026-07-28 included
        for kind in ("http", "stdio"):
            for mode in ("legacy", "auto", "2026-07-28"):
                await mode_leg(kind, mode, a, endpoint)
    elif os.environ.get("CI") in ("true", "1"):
        raise AssertionError("this SDK has no negotiation modes (1.x): 2026-07-28 cannot be checked; install mcp>=2.3")
    else:
        log("this SDK has no negotiation modes (1.x): 2026-07-28 not checked")
    log("all checks passed")


if __name__ == "__main__":
    try:
        asyncio.run(main())
    except AssertionError as e:
        print(f"[client_check] FAILED: {e}", file=sys.stderr, flush=True)
        raise
