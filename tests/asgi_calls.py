"""Raw ASGI pieces for tests that call an ASGI application as a server would."""

import asyncio
import json
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from typing import Any

import httpx


def get_scope(
    path: str, *, headers: Iterable[tuple[bytes, bytes]] = (), query: str = "", method: str = "GET"
) -> dict[str, Any]:
    """The scope of one request (a ``GET`` unless told) of ``path`` on
    http://testserver (headers: lower-case names)."""
    return {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": method,
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "query_string": query.encode(),
        "root_path": "",
        "headers": [(b"host", b"testserver"), *headers],
        "client": ("127.0.0.1", 50000),
        "server": ("testserver", 80),
    }


def receive_body(body: bytes) -> Callable[[], Awaitable[dict[str, Any]]]:
    """A ``receive`` that gives ``body`` in one message, then waits."""
    asked = {"body": False}

    async def receive() -> dict[str, Any]:
        if not asked["body"]:
            asked["body"] = True
            return {"type": "http.request", "body": body, "more_body": False}
        await asyncio.Event().wait()
        raise AssertionError("unreachable")

    return receive


async def sent_by(app: Any, scope: dict[str, Any], body: bytes = b"") -> list[dict[str, Any]]:
    """The messages ``app`` sends for one request with ``body`` (a client that stays)."""
    sent: list[dict[str, Any]] = []

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    await app(scope, receive_body(body), send)
    return sent


def unsigned(body: bytes) -> Any:
    """A page's JSON with its cursor's signing time and signature left out:
    two answers a second apart sign the same cursor differently. Bodies that
    are not a JSON object come back as they are."""
    try:
        page = json.loads(body)
    except ValueError:
        return body
    if isinstance(page, dict) and page.get("next_cursor"):
        page["next_cursor"] = page["next_cursor"].split(":")[0]
    return page


async def sse_blocks(response: httpx.Response) -> AsyncIterator[tuple[str, Any]]:
    """The event stream's blocks as they arrive: ``(event, data)`` with the data's JSON
    read, and ``("keepalive", None)`` for each heartbeat comment."""
    buffer = ""
    async for text in response.aiter_text():
        buffer += text
        while "\n\n" in buffer:
            block, buffer = buffer.split("\n\n", 1)
            if block.startswith(": keepalive"):
                yield "keepalive", None
            lines = dict(line.split(": ", 1) for line in block.splitlines() if ": " in line)
            if "event" in lines:
                yield lines["event"], json.loads(lines["data"])
