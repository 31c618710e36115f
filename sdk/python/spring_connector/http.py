"""Outbound HTTP through ``wasi:http/outgoing-handler``: the host's outbound policy (the
hosts the manifest declares, narrowed by the operator; no private addresses unless
allowed) decides every request. Blocking calls: a tool runs one request at a time."""

from __future__ import annotations

import json as _json
from dataclasses import dataclass
from typing import Any, Optional
from urllib.parse import urlsplit

_CHUNK = 65536

# Imported here, not in `request`: componentize-py keeps only the binding modules that are
# imported while it pre-initialises the component. Outside a component (the build's own
# Python) they do not exist, and nothing here is called.
try:
    from componentize_py_types import Err
    from wit_world.imports import outgoing_handler, streams
    from wit_world.imports import wasi_http_types as t
except ImportError:
    pass


class HttpError(Exception):
    """The request did not produce a response (refused by the host's policy, or a
    network error); the text says which."""


@dataclass
class Response:
    status: int
    headers: list[tuple[str, str]]
    body: bytes

    def text(self) -> str:
        return self.body.decode("utf-8", errors="replace")

    def json(self) -> Any:
        return _json.loads(self.body)


def get(url: str, headers: Optional[dict[str, str]] = None) -> Response:
    return request("GET", url, headers=headers)


def post(url: str, body: bytes | str, headers: Optional[dict[str, str]] = None) -> Response:
    return request("POST", url, headers=headers, body=body)


def request(method: str, url: str, headers: Optional[dict[str, str]] = None, body: bytes | str | None = None) -> Response:
    """Sends one request and reads the whole response."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise HttpError(f"{url} is not an http(s) URL")
    methods = {
        "GET": t.Method_Get,
        "HEAD": t.Method_Head,
        "POST": t.Method_Post,
        "PUT": t.Method_Put,
        "DELETE": t.Method_Delete,
        "PATCH": t.Method_Patch,
        "OPTIONS": t.Method_Options,
    }
    upper = method.upper()
    data = (body.encode() if isinstance(body, str) else body) if body else b""
    pairs = [(k.lower(), v.encode()) for k, v in (headers or {}).items()]
    # A known body length goes out as Content-Length: without it the host streams the body
    # chunked, which servers that need a length refuse (411) and some read as empty.
    framed = any(k in ("content-length", "transfer-encoding") for k, _ in pairs)
    if not framed and (data or upper not in ("GET", "HEAD", "DELETE", "OPTIONS")):
        pairs.append(("content-length", str(len(data)).encode()))
    fields = t.Fields.from_list(pairs)
    req = t.OutgoingRequest(fields)
    req.set_method(methods[upper]() if upper in methods else t.Method_Other(method))
    req.set_scheme(t.Scheme_Https() if parts.scheme == "https" else t.Scheme_Http())
    req.set_authority(parts.netloc)
    req.set_path_with_query((parts.path or "/") + (f"?{parts.query}" if parts.query else ""))
    outgoing = req.body()
    try:
        future = outgoing_handler.handle(req, None)
    except Err as e:
        raise HttpError(f"{method} {url} refused: {e.value}") from None
    if data:
        with outgoing.write() as stream:
            for i in range(0, len(data), 4096):
                stream.blocking_write_and_flush(data[i : i + 4096])
    t.OutgoingBody.finish(outgoing, None)
    with future:
        with future.subscribe() as ready:
            ready.block()
        answer = future.get()
    if answer is None:
        raise HttpError(f"{method} {url}: no response")
    if isinstance(answer, Err):
        raise HttpError(f"{method} {url}: the response was already taken")
    if isinstance(answer.value, Err):
        raise HttpError(f"{method} {url} failed: {answer.value.value}")
    response = answer.value.value
    with response:
        status = response.status()
        with response.headers() as h:
            got = [(k, v.decode("latin-1")) for k, v in h.entries()]
        incoming = response.consume()
        chunks = []
        with incoming.stream() as stream:
            while True:
                try:
                    chunks.append(stream.blocking_read(_CHUNK))
                except Err as e:
                    if isinstance(e.value, streams.StreamError_Closed):
                        break
                    raise HttpError(f"{method} {url}: reading the body failed") from None
        with t.IncomingBody.finish(incoming):
            pass
    return Response(status=status, headers=got, body=b"".join(chunks))
