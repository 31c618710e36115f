"""A Python connector that exercises every surface of the SDK for tests/all/languages.rs,
including what a hostile connector would try: fetching any URL, reading any secret,
minting a token for any installation, looping and hogging memory. tests/guests/probe-js
is the same connector in TypeScript."""

import base64
from dataclasses import dataclass
from typing import Annotated, Any, Optional, TypedDict

from spring_connector import GITHUB_INSTALLATION, Binding, Connector, Message, Result, ToolError, Webhook, content, github_installation_token, http, secret

PNG = base64.b64decode("iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAIAAACQd1PeAAAADElEQVQI12P4z8AAAAMBAQAY3Y2wAAAAAElFTkSuQmCC")


class ProbeConfig(TypedDict, total=False):
    routes: list[str]
    installationId: Annotated[int, GITHUB_INSTALLATION]
    secret: str
    mute: list[str]


probe = Connector(
    "probe-py",
    namespace="probe",
    display_name="Probe (Python)",
    description="Exercises the Python SDK.",
    config=ProbeConfig,
    allowed_hosts=["127.0.0.1"],
    webhook="standard-webhooks",
)


@probe.tool(read_only=True, open_world=True)
def fetch(url: str) -> dict:
    """GET a URL; answers its status and body."""
    response = http.get(url)
    return {"status": response.status, "body": response.text()}


@probe.tool(open_world=True)
def post(url: str, body: str) -> dict:
    """POSTs a JSON body to a URL; answers its status and body."""
    response = http.post(url, body, {"content-type": "application/json"})
    return {"status": response.status, "body": response.text()}


@probe.tool()
def secret_value(name: str) -> dict:
    """Reads a secret by name."""
    return {"value": secret(name)}


@probe.tool()
def token(installation_id: int) -> dict:
    """Mints a GitHub installation token for any installation."""
    return {"token": github_installation_token(installation_id)}


@dataclass
class Weather:
    city: str
    celsius: float


@probe.tool()
def weather(city: str) -> Result[Weather]:
    """Structured output checked against its schema, and content blocks."""
    return Result(structured=Weather(city=city, celsius=21.5), content=[content.text(f"{city}: 21.5 C"), content.image(PNG, "image/png")])


class Celsius(TypedDict):
    celsius: float


@probe.tool()
def broken_output() -> Celsius:
    """Returns a result its output schema refuses."""
    return {"celsius": "warm"}  # type: ignore[typeddict-item]


@probe.tool()
def refuse() -> None:
    """Fails with invalid arguments."""
    raise ToolError.invalid_arguments("nothing is ever right")


# Counts this instance's calls of `counter`: every call has a fresh instance, so 1.
_calls = 0


@probe.tool()
def counter() -> dict:
    """Counts its calls in a module-level variable and answers the count."""
    global _calls
    _calls += 1
    return {"count": _calls}


@probe.tool()
def spin() -> None:
    """Never returns."""
    while True:
        pass


@probe.tool()
def hog() -> None:
    """Allocates memory until stopped."""
    kept = []
    while True:
        kept.append(bytearray(1 << 20))


@probe.bind
def bind(config: dict) -> list[str]:
    return config.get("routes", [])


@probe.translate_webhook
def translate(hook: Webhook) -> list[Message]:
    event: dict[str, Any] = hook.json()
    return [Message(route=event["route"], kind=event["kind"], thread_key=event.get("thread"), payload=event.get("data"))]


@probe.accept
def accept(binding: Binding, message: Message) -> bool:
    return message.kind not in binding.config.get("mute", [])


@probe.runtime_context
def context(binding: Binding) -> dict:
    return {"env": {"SPRING_CONNECTOR_PROBE_PY_UNIT": binding.unit}}
