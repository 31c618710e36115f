#!/usr/bin/env python3
"""`acme.echo` on the official MCP Python SDK (PyPI `mcp`), as its README has a user write it:
an `MCPServer` with one tool, served over Streamable HTTP with `stateless_http=True` and
`json_response=True` (uvicorn, as `MCPServer.run` starts it). A peer `bench/table.py` measures
this host's MCP endpoint against.

    target/mcp-venv/bin/python bench/peers/python_echo_server.py --port 8791   # POST /mcp

Logging is at WARNING (uvicorn's access log off) so that the figure is the SDK's, not the
terminal's; the host is measured with RUST_LOG=warn alike.
"""

import argparse
from typing import TypedDict

from mcp.server.mcpserver import MCPServer


class Echoed(TypedDict):
    """What `acme.echo` answers: its arguments (a structured result, as the host's)."""

    message: str


server = MCPServer("python-echo", log_level="WARNING")


@server.tool(name="acme.echo", description="Echo the arguments back unchanged.")
def echo(message: str) -> Echoed:
    return {"message": message}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, required=True)
    a = ap.parse_args()
    server.run("streamable-http", host=a.host, port=a.port, stateless_http=True,
               json_response=True)


if __name__ == "__main__":
    main()
