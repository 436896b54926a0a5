"""A push service for the bench: ``python -m bench.push_sink PORT``.

It answers every POST with 201 after reading its body, on keep-alive
connections, and counts them (``GET /count``). It runs in a process of its
own so that its work does not share the sender's interpreter lock: the bench
times the sender, not this. It decrypts nothing (the tests' push service,
tests/messagecenter/push_service.py, checks the encryption and the VAPID
signature); a push service's own work is not ours to time.
"""

import sys

from aiohttp import web

received = 0


async def push(request: web.Request) -> web.Response:
    global received
    await request.read()
    received += 1
    return web.Response(status=201)


async def count(request: web.Request) -> web.Response:
    return web.json_response({"received": received})


def main() -> None:
    app = web.Application()
    app.router.add_post("/push/{name}", push)
    app.router.add_get("/count", count)
    web.run_app(app, host="127.0.0.1", port=int(sys.argv[1]), print=None, access_log=None)


if __name__ == "__main__":
    main()
