"""The sample connector `acme` in Python: the same tools, configuration and runtime
context as the Rust one (connectors/acme), tested the same way (tests/all/languages.rs)."""

import time
from typing import Annotated, Any, Optional, TypedDict

from spring_connector import Binding, Connector


class AcmeConfig(TypedDict, total=False):
    greeting: Annotated[str, "A greeting handed to agents as SPRING_CONNECTOR_ACME_GREETING."]


acme = Connector(
    "acme",
    display_name="Acme",
    description="Sample connector: echoes arguments and tells the time.",
    version="0.1.0",
    config=AcmeConfig,
)


@acme.tool(read_only=True, idempotent=True)
def echo(message: Annotated[str, "Text to echo back."], **extra: Any) -> dict:
    """Echo the arguments back unchanged."""
    return {"message": message, **extra}


class Timestamp(TypedDict):
    timestamp: str


@acme.tool(read_only=True)
def timestamp() -> dict:
    """The current time (RFC 3339, UTC)."""
    return {"timestamp": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}


@acme.runtime_context
def context(binding: Binding) -> dict:
    greeting: Optional[str] = binding.config.get("greeting")
    return {} if greeting is None else {"env": {"SPRING_CONNECTOR_ACME_GREETING": greeting}}
