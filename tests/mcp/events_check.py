"""Drives connector-host's events as MCP resources (CONTRACT.md §5) with the official MCP
Python SDK (PyPI `mcp` 2.x, `mcp.Client`): a signed webhook routed to the agent's unit
reaches the client as `notifications/resources/updated`, in a session (`legacy` mode,
2025-11-25: `subscribe_resource` and the message handler) and at 2026-07-28
(`Client.listen(resource_subscriptions=...)`); `resources/read` with `?after=<next>` hands
each message over exactly once, also from a new connection (a reconnect); another unit's
inbox is refused (`-32602`).

Run by tests/all/mcp_events.rs; by hand (the venv from `.ci/run`):

    target/mcp-venv/bin/python tests/mcp/events_check.py --url http://127.0.0.1:8787 \
        --agent ada --token AGENT_TOKEN --connector hostile --secret whsec_... \
        --route r1 --unit u1 --foreign-unit u2

The connector must be bound to --unit with routing key --route (Standard Webhooks, signed
with --secret), and the agent must not be in --foreign-unit. Prints one line per check;
exits non-zero on failure.
"""

import argparse
import asyncio
import base64
import contextlib
import hashlib
import hmac
import json
import sys
import time
import urllib.request
import uuid

NOTIFY_TIMEOUT_S = 10


def log(msg):
    print(f"[events_check] {msg}", flush=True)


def deliver(a, route):
    """Sends one signed Standard Webhooks delivery with a message for `route`; returns its
    id and when its 202 arrived."""
    delivery = f"py-{uuid.uuid4().hex[:12]}"
    body = json.dumps({"messages": [{"route": route, "kind": "issue.opened", "threadKey": delivery,
                                     "payload": {"delivery": delivery}}]}).encode()
    timestamp = str(int(time.time()))
    key = base64.b64decode(a.secret.removeprefix("whsec_"))
    signed = f"{delivery}.{timestamp}.".encode() + body
    signature = base64.b64encode(hmac.new(key, signed, hashlib.sha256).digest()).decode()
    req = urllib.request.Request(f"{a.rest}/api/v1/webhooks/{a.connector}", data=body, method="POST")
    req.add_header("content-type", "application/json")
    req.add_header("webhook-id", delivery)
    req.add_header("webhook-timestamp", timestamp)
    req.add_header("webhook-signature", f"v1,{signature}")
    with urllib.request.urlopen(req, timeout=30) as resp:
        assert resp.status == 202, resp.status
    return delivery, time.monotonic()


def transport(a):
    from mcp.client.streamable_http import streamable_http_client
    from mcp.shared._httpx_utils import create_mcp_http_client

    @contextlib.asynccontextmanager
    async def with_token():
        async with create_mcp_http_client(headers={"Authorization": f"Bearer {a.token}"}) as client:
            async with streamable_http_client(a.endpoint, http_client=client) as streams:
                yield streams[0], streams[1]

    return with_token()


def page(result):
    """(messages, next) of a `resources/read` result."""
    contents = result.contents[0]
    assert contents.mime_type == "application/json", contents
    data = json.loads(contents.text)
    return data["messages"], data["next"]


async def read_ids(client, uri):
    messages, next_cursor = page(await client.read_resource(uri))
    return [m["deliveryId"] for m in messages], next_cursor


async def session_leg(a, uri, foreign):
    """2025-11-25: resources/subscribe, the update through the session's stream."""
    import warnings

    from mcp import Client
    from mcp.shared.exceptions import MCPError

    updated = asyncio.Queue()

    async def on_message(message):
        root = getattr(message, "root", message)
        if getattr(root, "method", None) == "notifications/resources/updated":
            updated.put_nowait(str(root.params.uri))

    async with Client(transport(a), mode="legacy", message_handler=on_message) as client:
        assert client.protocol_version == "2025-11-25", client.protocol_version
        listed = [str(r.uri) for r in (await client.list_resources()).resources]
        assert listed == [uri], listed
        for attempt in ("read_resource", "subscribe_resource"):
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    await getattr(client, attempt)(foreign)
            except MCPError as e:
                assert e.error.code == -32602, e.error
            else:
                raise AssertionError(f"{attempt} of another unit's inbox succeeded")
        _, cursor = await read_ids(client, uri)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            await client.subscribe_resource(uri)
        # The session's GET stream opens after `initialize`; let it connect.
        await asyncio.sleep(0.3)
        delivery, sent = deliver(a, a.route)
        got = await asyncio.wait_for(updated.get(), NOTIFY_TIMEOUT_S)
        log(f"session: resources/updated {1000 * (time.monotonic() - sent):.1f} ms after the webhook's 202")
        assert got == uri, got
        ids, cursor = await read_ids(client, f"{uri}?after={cursor}")
        assert ids == [delivery], ids
        ids, _ = await read_ids(client, f"{uri}?after={cursor}")
        assert ids == [], ids
    return cursor


async def stateless_leg(a, uri, cursor):
    """2026-07-28: Client.listen with the inbox; a new connection reads from the cursor."""
    from mcp import Client
    from mcp.client.subscriptions import ResourceUpdated

    async with Client(transport(a), mode="2026-07-28") as client:
        assert client.protocol_version == "2026-07-28", client.protocol_version
        async with client.listen(resource_subscriptions=[uri]) as sub:
            delivery, sent = deliver(a, a.route)

            async def first_update():
                async for event in sub:
                    if isinstance(event, ResourceUpdated):
                        return event

            event = await asyncio.wait_for(first_update(), NOTIFY_TIMEOUT_S)
            log(f"2026-07-28: resources/updated {1000 * (time.monotonic() - sent):.1f} ms after the webhook's 202")
            assert str(event.uri) == uri, event
        ids, cursor = await read_ids(client, f"{uri}?after={cursor}")
        assert ids == [delivery], ids
    # A reconnect: a new client, the same cursor: nothing again, then only what is new.
    async with Client(transport(a), mode="2026-07-28") as client:
        ids, _ = await read_ids(client, f"{uri}?after={cursor}")
        assert ids == [], ids
        delivery, _ = deliver(a, a.route)
        ids, _ = await read_ids(client, f"{uri}?after={cursor}")
        assert ids == [delivery], ids
    log("2026-07-28: each message read once across reconnects")


async def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--url", required=True)
    ap.add_argument("--agent", required=True)
    ap.add_argument("--token", required=True)
    ap.add_argument("--connector", required=True)
    ap.add_argument("--secret", required=True)
    ap.add_argument("--route", required=True)
    ap.add_argument("--unit", required=True)
    ap.add_argument("--foreign-unit", required=True)
    a = ap.parse_args()
    a.rest = a.url.rstrip("/")
    a.endpoint = f"{a.rest}/mcp/agents/{a.agent}"
    uri = f"spring://units/{a.unit}/messages"
    foreign = f"spring://units/{a.foreign_unit}/messages"
    cursor = await session_leg(a, uri, foreign)
    await stateless_leg(a, uri, cursor)
    log("all checks passed")


if __name__ == "__main__":
    try:
        asyncio.run(main())
    except Exception as e:  # noqa: BLE001 - report any failure and exit non-zero
        import traceback

        traceback.print_exc()
        print(f"[events_check] FAILED: {e}", file=sys.stderr, flush=True)
        sys.exit(1)
