"""A uvicorn whose Redis is gone keeps its open event streams on heartbeats and
refuses new ones cleanly (the stream's "unavailable" answer with a long retry
hint, or a 503): never a 500. The hub reconnects on its own."""

import asyncio
from pathlib import Path

import httpx
import pytest
from django.contrib.auth import get_user_model

from live import transport as live
from tests.core.test_asgi_connections import uvicorn_server
from tests.faults.conftest import RedisServer
from tests.fixtures.clients import token_for
from tests.messagecenter.test_live_hub import STREAM, Listener, _until
from tests.served import ServedProcess

pytestmark = [
    pytest.mark.postgres,
    pytest.mark.not_on_cluster(reason="event streams are off on Redis Cluster by design (pages poll)"),
    pytest.mark.django_db(transaction=True),
]


@pytest.mark.redis_server
def test_a_server_whose_redis_is_gone_keeps_streams_open_and_never_answers_500(
    redis_server: RedisServer, tmp_path: Path
) -> None:
    user = get_user_model().objects.create_user(username="live-down", password="pw-down-secret")
    token = token_for(user)
    server = uvicorn_server(
        log=tmp_path / "uvicorn.log",
        application_name="mc-live-down-test",
        extra_env={"MESSAGECENTER_TEST_CACHE_URL": redis_server.url, "MESSAGECENTER_LIVE_HEARTBEAT_SECONDS": "0.3"},
    )
    try:
        server.wait_ready()
        asyncio.run(_down(server, token, redis_server))
    finally:
        server.stop()


async def _down(server: ServedProcess, token: str, redis_server: RedisServer) -> None:
    headers = {"Authorization": f"Token {token}"}
    listener = Listener(0)
    async with httpx.AsyncClient(base_url=server.url, timeout=30.0) as client:
        task = asyncio.create_task(listener.run(client, headers, {}))
        try:
            await _until(listener.hello.is_set, "hello")
            redis_server.stop()
            beats = listener.heartbeats
            await _until(lambda: listener.heartbeats >= beats + 3, "heartbeats with Redis gone")
            assert not task.done()  # the open stream stays open
            for _ in range(3):
                response = await client.get(STREAM, headers=headers)
                # Refused cleanly: the stream's "unavailable" answer with a long retry hint, or a 503.
                assert response.status_code in (200, 503), response.text
                if response.status_code == 200:
                    assert "event: unavailable" in response.text
                    assert f"retry: {live.RETRY_DOWN_MS}" in response.text
        finally:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
