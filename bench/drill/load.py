"""The drill's clients: several users reading their inbox and counts and
marking items read, and an operator publishing now and then, all over HTTP
from threads of the drill process. Every answer is counted; every write
answered 2xx is remembered so the drill can look for it after each fault."""

import http.client
import json
import random
import re
import threading
import time
import urllib.error
import urllib.request
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

TIMEOUT = 10.0


def call(base: str, token: str | None, method: str, path: str, body: Any = None) -> tuple[int, Any]:
    """One request; (status, JSON or None). A socket error, a timeout or an
    answer cut off (a server killed while sending its body) is status 0."""
    headers = {"Content-Type": "application/json"}
    if token:
        headers["Authorization"] = f"Token {token}"
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(f"{base}{path}", data=data, method=method, headers=headers)  # noqa: S310
    try:
        with urllib.request.urlopen(request, timeout=TIMEOUT) as response:  # noqa: S310 - loopback
            raw = response.read()
            return int(response.status), json.loads(raw) if raw else None
    except urllib.error.HTTPError as exc:
        return int(exc.code), None
    except (OSError, ValueError, http.client.HTTPException):
        return 0, None


@dataclass
class Tally:
    """Answers by status (0: no answer) since the last ``take``."""

    statuses: Counter[int] = field(default_factory=Counter)
    failed: Counter[str] = field(default_factory=Counter)  # "<status> <method> <path shape>" of 5xx and no answer
    lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, status: int, what: str) -> None:
        with self.lock:
            self.statuses[status] += 1
            if status >= 500 or status == 0:
                self.failed[f"{status} {what}"] += 1

    def take(self) -> tuple[Counter[int], Counter[str]]:
        with self.lock:
            taken, failed, self.statuses, self.failed = self.statuses, self.failed, Counter(), Counter()
        return taken, failed


@dataclass
class Reader:
    user_id: int
    token: str
    acked_marks: set[str] = field(default_factory=set)


class Load:
    """Steady load until ``stop``: one thread per reader, one for the operator."""

    def __init__(
        self, *, base: str, readers: list[Reader], operator_token: str, publish_every: float, pause: float = 0.1
    ) -> None:
        self.base = base
        self.readers = readers
        self.operator_token = operator_token
        self.publish_every = publish_every
        self.pause = pause
        self.tally = Tally()
        self.acked_messages: list[int] = []  # sent to every reader, answered 202
        self.lock = threading.Lock()
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._published = 0

    def request(self, token: str, method: str, path: str, body: Any = None) -> tuple[int, Any]:
        status, payload = call(self.base, token, method, path, body)
        shape = re.sub(r"/[mbn]?\d+/", "/<id>/", path.split("?")[0])
        self.tally.add(status, f"{method} {shape}")
        return status, payload

    def _read(self, reader: Reader, rng: random.Random) -> None:
        while not self._stop.is_set():
            unread_only = rng.random() < 0.3
            path = "/api/v1/inbox/?limit=20" + ("&unread=true" if unread_only else "")
            status, page = self.request(reader.token, "GET", path)
            self.request(reader.token, "GET", "/api/v1/inbox/counts/")
            if status == 200 and page:
                unread = [item["id"] for item in page["results"] if not item["read"]]
                if unread:
                    ref = rng.choice(unread)
                    marked, _ = self.request(reader.token, "POST", f"/api/v1/inbox/{ref}/read/")
                    if 200 <= marked < 300:
                        with self.lock:
                            reader.acked_marks.add(ref)
            self._stop.wait(self.pause)

    def publish(self, title: str) -> int | None:
        body = {
            "category": "system",
            "title": title,
            "body_html": "<p>drill</p>",
            "to": {"users": [str(reader.user_id) for reader in self.readers]},
        }
        status, answer = self.request(self.operator_token, "POST", "/api/v1/manage/messages/", body)
        if 200 <= status < 300 and answer:
            with self.lock:
                self.acked_messages.append(int(answer["id"]))
            return int(answer["id"])
        return None

    def _operate(self) -> None:
        while not self._stop.wait(self.publish_every):
            self._published += 1
            self.publish(f"drill message {self._published}")

    def start(self) -> None:
        for index, reader in enumerate(self.readers):
            thread = threading.Thread(target=self._read, args=(reader, random.Random(index)), daemon=True)
            self._threads.append(thread)
        self._threads.append(threading.Thread(target=self._operate, daemon=True))
        for thread in self._threads:
            thread.start()

    def stop(self) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(TIMEOUT + 5)

    def snapshot(self) -> tuple[dict[int, set[str]], list[int]]:
        with self.lock:
            return {r.user_id: set(r.acked_marks) for r in self.readers}, list(self.acked_messages)


def wait_until(condition: Any, *, timeout: float, step: float = 0.25) -> float | None:
    """Seconds until ``condition()`` held, or None when ``timeout`` passed first."""
    started = time.monotonic()
    while True:
        if condition():
            return time.monotonic() - started
        if time.monotonic() - started > timeout:
            return None
        time.sleep(step)
