"""Seeding, the faults and the checks (Django is set up before this module is imported)."""

import signal
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from django.contrib.auth import get_user_model
from django.db import close_old_connections, connection, connections
from redis.exceptions import RedisError

from accounts.tokens import token_issue
from bench.drill import stack
from bench.drill.load import Load, Reader, call, wait_until
from durability.keys import readmodel_generation
from messagecenter import fallback
from messagecenter import keys as mc_keys
from messagecenter.models import FanoutChunk, Message, MessageRecipient, MessageStatus, PendingDelivery
from messagecenter.services import groups

RESTORE_TARGET = 30.0  # seconds, without an operator
# After a loss Redis grows back with the users who return: with this share of
# them back, it holds at most MEMORY_TARGET of what it held before, MEMORY_WAIT after.
RETURNING = 0.15
# Every how many users of the crowd one reads before the worker-kill fan-out.
CROWD_BACK_EVERY = 10
MEMORY_TARGET = 0.5
MEMORY_WAIT = 30.0
SETTLE_TIMEOUT = 90.0  # how long the drill keeps looking before it counts what is missing
CROWD = 5000  # the large message's audience: pushed (the threshold is 5,000), in chunks of 50
READERS = 8


@dataclass
class Row:
    fault: str
    requests: int = 0
    errors_5xx: int = 0
    errors_503: int = 0
    no_answer: int = 0
    restore: float | None = None
    marks_lost: int = 0
    deliveries_lost: int = 0
    duplicates: int = 0
    allow_503: bool = False
    # The fault takes the whole app down: requests meanwhile get no answer (never a wrong one).
    app_down: bool = False
    blocked: bool = False  # the fault's own recovery (a fan-out) never finished
    memory_ratio: float | None = None  # Redis memory after the fault over before (the memory row)
    not_run: str = ""
    notes: list[str] = field(default_factory=list)

    def checks(self) -> list[tuple[str, bool]]:
        bad = self.errors_5xx - (self.errors_503 if self.allow_503 else 0)
        if self.app_down:
            memory = (
                [(f"Redis memory ≤{MEMORY_TARGET}x", self.memory_ratio <= MEMORY_TARGET)]
                if self.memory_ratio is not None
                else []
            )
            return [
                ("0 acknowledged writes lost", self.marks_lost == 0 and self.deliveries_lost == 0),
                (f"restore ≤{RESTORE_TARGET:.0f} s", self.restore is not None and self.restore <= RESTORE_TARGET),
                ("0 duplicates", self.duplicates == 0),
                *memory,
            ]
        return [
            ("0 5xx" + (" but 503" if self.allow_503 else ""), bad == 0 and self.no_answer == 0),
            (f"restore ≤{RESTORE_TARGET:.0f} s", self.restore is not None and self.restore <= RESTORE_TARGET),
            ("0 lost", self.marks_lost == 0 and self.deliveries_lost == 0),
            ("0 duplicates", self.duplicates == 0),
        ]

    def verdict(self) -> str:
        if self.not_run:
            return f"not run: {self.not_run}"
        missed = [text for text, ok in self.checks() if not ok]
        return "met" if not missed else "MISSED (" + ", ".join(missed) + ")"


def table(rows: list[Row]) -> str:
    head = "| fault | requests | 5xx (503) | no answer | restore | acked writes (marks) lost | deliveries lost | duplicates |"
    lines = [head + " target | verdict |", "|" + " --- |" * 10]
    for r in rows:
        target = f"0 5xx, restore ≤{RESTORE_TARGET:.0f} s, 0 lost, 0 duplicates"
        if r.app_down:
            target = f"0 acknowledged writes lost, restore ≤{RESTORE_TARGET:.0f} s, 0 duplicates"
            if r.memory_ratio is not None:
                target += f", Redis memory ≤{MEMORY_TARGET}x"
        if r.not_run:
            lines.append(f"| {r.fault} | - | - | - | - | - | - | - | {target} | {r.verdict()} |")
            continue
        restore = "never" if r.restore is None else f"{r.restore:.1f} s"
        lines.append(
            f"| {r.fault} | {r.requests:,} | {r.errors_5xx} ({r.errors_503}) | {r.no_answer} | {restore} "
            f"| {r.marks_lost} | {r.deliveries_lost} | {r.duplicates} | {target} | {r.verdict()} |"
        )
    notes = [f"- {r.fault}: {note}" for r in rows for note in r.notes]
    return "\n".join(lines + (["", *notes] if notes else []))


@dataclass
class View:
    """One reader's inbox: refs in order (duplicates kept), read flags, unread count."""

    refs: list[str]
    read: dict[str, bool]
    unread: int


def api_view(base: str, token: str) -> View | None:
    refs: list[str] = []
    read: dict[str, bool] = {}
    unread = 0
    cursor = ""
    for _ in range(50):
        status, page = call(base, token, "GET", f"/api/v1/inbox/?limit=100{cursor}")
        if status != 200 or not page:
            return None
        for item in page["results"]:
            refs.append(item["id"])
            read[item["id"]] = bool(item["read"])
        unread = int(page["unread_count"])
        if not page["next_cursor"]:
            return View(refs, read, unread)
        cursor = f"&cursor={page['next_cursor']}"
    return None


def truth_view(user_id: int) -> View:
    """What PostgreSQL alone says (every acknowledged write is committed there): the fallback's inbox."""
    close_old_connections()
    page = fallback.inbox_page(
        user_id=user_id,
        now=datetime.now(UTC),
        category=None,
        max_score=None,
        skip=0,
        limit=100_000,
        unread_only=False,
        since_ms=None,
    )
    return View([row.ref for row in page.rows], {row.ref: row.read for row in page.rows}, page.counts.unread)


class Drill:
    def __init__(
        self,
        *,
        base: str,
        redis: stack.RedisServer,
        worker: stack.Process,
        workdir: Path,
        postgres: stack.PrivatePostgres | None,
        rabbit: stack.RabbitBroker | None = None,
    ) -> None:
        self.postgres = postgres
        self.rabbit = rabbit
        self.base = base
        self.redis = redis
        self.worker = worker
        self.workdir = workdir
        self.load: Load | None = None
        self.readers: list[Reader] = []
        self.operator_token = ""
        self.crowd_group = 0
        self.known_lost: set[tuple[str, int, str]] = set()
        # gunicorn (or uvicorn), the Celery worker and beat: every app process.
        self.app: list[stack.Process] = []
        self.workers_started = 1
        self.crowd_tokens: dict[int, str] = {}

    # --- seeding -------------------------------------------------------------

    def seed(self) -> None:
        user_model = get_user_model()
        operator = user_model.objects.create_superuser("drill-operator", "op@example.com", "drill-operator-pass")
        self.operator_token = token_issue(user=operator).token
        for index in range(READERS):
            user = user_model.objects.create_user(f"drill-reader-{index}", password="drill-reader-pass")  # noqa: S106 - a throwaway database
            self.readers.append(Reader(user_id=int(user.pk), token=token_issue(user=user).token))
        with connection.cursor() as cursor:
            cursor.execute(
                """
                INSERT INTO auth_user (password, is_superuser, username, first_name, last_name, email,
                                       is_staff, is_active, date_joined)
                SELECT '!', false, 'drill' || g, '', '', '', false, true, now() FROM generate_series(1, %s) AS g
                """,
                [CROWD],
            )
            cursor.execute("SELECT id FROM auth_user WHERE username ~ '^drill[0-9]+$'")
            crowd = [int(row[0]) for row in cursor.fetchall()]
        group = groups.user_group_create(name="drill crowd")
        groups.user_group_add_members(group=group, user_ids=crowd)
        self.crowd_group = int(group.pk)

    # --- health and correctness ----------------------------------------------

    def serving_from_redis(self) -> bool:
        status, body = call(self.base, None, "GET", "/healthz")
        return status == 200 and bool(body) and body.get("redis") == "ok"

    def correct(self) -> bool:
        """The read model answers from Redis and every reader's whole inbox over
        the API holds every acknowledged message once, shows every acknowledged
        mark, and counts what it lists as unread."""
        if not self.serving_from_redis():
            return False
        assert self.load is not None
        marks, messages = self.load.snapshot()
        for reader in self.readers:
            api = api_view(self.base, reader.token)
            if api is None or len(api.refs) != len(set(api.refs)):
                return False
            if api.unread != sum(1 for ref in api.refs if not api.read[ref]):
                return False
            if not all(f"m{message_id}" in api.read for message_id in messages):
                return False
            if not all(api.read.get(ref) for ref in marks[reader.user_id]):
                return False
        return True

    def all_delivered(self, ids: list[int]) -> bool:
        close_old_connections()
        return not Message.objects.filter(pk__in=ids).exclude(status=MessageStatus.DELIVERED).exists()

    def losses(self, row: Row) -> None:
        """Acknowledged marks and messages missing from the API or from PostgreSQL,
        and items listed twice; only those not already counted by an earlier fault."""
        assert self.load is not None
        marks, messages = self.load.snapshot()
        if wait_until(lambda: self.all_delivered(messages), timeout=SETTLE_TIMEOUT) is None:
            row.notes.append("some acknowledged messages were still not delivered after the settle time")
        differ: dict[str, list[int]] = {}
        for reader in self.readers:
            api = api_view(self.base, reader.token)
            truth = truth_view(reader.user_id)
            if api is not None and set(api.refs) != set(truth.refs):
                # A message in delivery right now is listed by one side first: look again.
                time.sleep(1.5)
                api, truth = api_view(self.base, reader.token), truth_view(reader.user_id)
            if api is None:
                row.notes.append(f"reader {reader.user_id}: the API did not answer the check")
                continue
            row.duplicates += (len(api.refs) - len(set(api.refs))) + (len(truth.refs) - len(set(truth.refs)))
            for message_id in messages:
                ref = f"m{message_id}"
                for where, view in (("api", api), ("pg", truth)):
                    key = (f"delivery-{where}", reader.user_id, ref)
                    if ref not in view.read and key not in self.known_lost:
                        self.known_lost.add(key)
                        row.deliveries_lost += 1
                        row.notes.append(f"message {ref} acknowledged but missing for user {reader.user_id} ({where})")
            for ref in sorted(set(api.refs) ^ set(truth.refs)):
                key = ("differ", reader.user_id, ref)
                if key not in self.known_lost:
                    self.known_lost.add(key)
                    side = (
                        "listed by the API, not by PostgreSQL's fallback"
                        if ref in api.read
                        else "listed by PostgreSQL's fallback, not by the API"
                    )
                    differ.setdefault(f"{ref}: {side}", []).append(reader.user_id)
            for ref in marks[reader.user_id]:
                for where, view in (("api", api), ("pg", truth)):
                    key = (f"mark-{where}", reader.user_id, ref)
                    # A mark of an item the view does not list at all is reported above.
                    if ref in view.read and not view.read[ref] and key not in self.known_lost:
                        self.known_lost.add(key)
                        row.marks_lost += 1
                        row.notes.append(f"mark of {ref} by user {reader.user_id} answered 2xx, unread in {where}")
        # One note per (side, readers): a run of messages that all readers see the same way is one line.
        grouped: dict[str, list[str]] = {}
        for what, users in differ.items():
            ref, _, side = what.partition(": ")
            grouped.setdefault(f"{side} (for {len(users)} of {len(self.readers)} readers)", []).append(ref)
        for what, refs in grouped.items():
            row.notes.append(f"{len(refs)} item(s) {what}: {', '.join(refs)}")

    # --- one fault -----------------------------------------------------------

    def run_fault(
        self, name: str, inject: Callable[[Row], float], *, allow_503: bool = False, app_down: bool = False
    ) -> Row:
        """``inject`` breaks something, mends what an operator-less supervisor would
        (a restart), and returns the monotonic time from which restore is measured."""
        assert self.load is not None
        print(f"== {name}", flush=True)
        row = Row(name, allow_503=allow_503, app_down=app_down)
        self.load.tally.take()
        since = inject(row)
        took = wait_until(self.correct, timeout=SETTLE_TIMEOUT, step=0.2)
        row.restore = None if took is None or row.blocked else time.monotonic() - since
        self.losses(row)
        statuses, failed = self.load.tally.take()
        for what, count in sorted(failed.items()):
            row.notes.append(f"{count} x {what}" if not what.startswith("0 ") else f"{count} x no answer: {what[2:]}")
        row.requests = sum(statuses.values())
        row.errors_5xx = sum(n for code, n in statuses.items() if code >= 500)
        row.errors_503 = statuses.get(503, 0)
        row.no_answer = statuses.get(0, 0)
        if took is None:
            row.notes.append(f"the read model did not answer correctly within {SETTLE_TIMEOUT:.0f} s")
        print(table([row]), flush=True)
        return row

    def baseline(self, seconds: float) -> Callable[[Row], float]:
        def inject(row: Row) -> float:
            time.sleep(seconds)
            return time.monotonic()

        return inject

    def flushall(self, row: Row) -> float:
        time.sleep(3)
        self.redis.client().flushall()
        return time.monotonic()

    def app_killed_and_flushed(self, row: Row) -> float:
        """SIGKILL every app process (web server, worker, beat) and FLUSHALL Redis at
        the same moment, then start the app again: every write answered 2xx before
        must be there from each reader's first read (PostgreSQL had it before the answer)."""
        return self._app_killed(row, flush=True)

    def app_killed(self, row: Row) -> float:
        """SIGKILL every app process while the load acts, Redis keeping its data,
        then start the app again. A write whose process died between its commit
        and its Redis half is in PostgreSQL and missing from the user's part in
        Redis: the note it left in the user's state hash outlives it, and the
        user's reads after the note's grace fill the part again, the write with it."""
        return self._app_killed(row, flush=False)

    def _app_killed(self, row: Row, *, flush: bool) -> float:
        time.sleep(3)
        for process in self.app:
            process.signal_group(signal.SIGKILL)
        if flush:
            self.redis.client().flushall()
        for process in self.app:
            process.kill()  # reaped
        for process in self.app:
            process.start()
        redis = "Redis flushed at once" if flush else "Redis kept"
        row.notes.append(f"every app process SIGKILLed, {redis}; restore counted from the restart")
        return time.monotonic()

    def few_return(self, row: Row) -> float:
        """Every user has read their inbox once (a push to the crowd, then each of
        them reads), then every app process is SIGKILLed and Redis flushed, the
        app restarts, only a share of the users read again (RETURNING: the
        readers and part of the crowd) and another push goes to the whole crowd:
        MEMORY_WAIT later Redis holds what those who came back need, not
        everyone's part (the push writes nothing for the others)."""
        assert self.load is not None
        message_id = self._crowd_push(row, "to the crowd, before the memory fault")
        wait_until(lambda: self.all_delivered([message_id]), timeout=SETTLE_TIMEOUT)
        tokens = self._crowd_tokens()
        everyone = self._crowd_read(tokens)
        time.sleep(3)
        before = int(self.redis.client().info("memory")["used_memory"])
        restarted = self.app_killed_and_flushed(row)
        back = tokens[: max(0, int((len(tokens) + len(self.readers)) * RETURNING) - len(self.readers))]
        # The readers' inboxes are right again first (the row's restore), then the crowd's share reads.
        took = wait_until(self.correct, timeout=SETTLE_TIMEOUT, step=0.2)
        restore = SETTLE_TIMEOUT if took is None else time.monotonic() - restarted
        returned = self._crowd_read(back)
        after_id = self._crowd_push(row, "to the crowd, after the restart")
        if wait_until(lambda: self.all_delivered([after_id]), timeout=SETTLE_TIMEOUT) is None:
            row.notes.append("the push after the restart was not delivered within the settle time")
        time.sleep(max(0.0, MEMORY_WAIT - (time.monotonic() - restarted)))
        after = int(self.redis.client().info("memory")["used_memory"])
        row.memory_ratio = after / before
        kinds: dict[str, int] = {}
        for name in self.redis.client().scan_iter(count=1000):
            kind = ":".join(part for part in name.decode().split(":")[1:3] if not part.startswith("{"))
            kinds[kind] = kinds.get(kind, 0) + 1
        largest = sorted(kinds.items(), key=lambda kv: -kv[1])[:6]
        row.notes.append("keys after, by kind: " + ", ".join(f"{kind} {count:,}" for kind, count in largest))
        row.notes.append(
            f"all {len(self.readers) + len(tokens):,} users read before the fault ({everyone:,} crowd reads "
            f"answered 200), {len(self.readers) + len(back):,} came back ({returned:,}), then a push to the crowd; Redis used_memory "
            f"{before / 2**20:.1f} MiB before, {after / 2**20:.1f} MiB {MEMORY_WAIT:.0f} s after the restart: "
            f"{row.memory_ratio:.2f}x"
        )
        # Restore is the readers' (measured above), not the wait for the memory.
        return time.monotonic() - restore

    def _crowd_tokens(self, every: int = 1) -> list[str]:
        """A token for every ``every``-th user of the crowd (each issued once per drill)."""
        close_old_connections()
        crowd = list(get_user_model().objects.filter(username__regex=r"^drill[0-9]+$").order_by("pk"))[::every]
        for user in crowd:
            if user.pk not in self.crowd_tokens:
                self.crowd_tokens[user.pk] = token_issue(user=user).token
        return [self.crowd_tokens[user.pk] for user in crowd]

    def _crowd_read(self, tokens: list[str]) -> int:
        """Each token's user reads the first page of their inbox (8 at a time);
        returns how many reads answered 200."""
        with ThreadPoolExecutor(max_workers=8) as pool:
            statuses = pool.map(lambda token: call(self.base, token, "GET", "/api/v1/inbox/?limit=20")[0], tokens)
            return sum(1 for status in statuses if status == 200)

    def _crowd_push(self, row: Row, title: str) -> int:
        """Send a message to the crowd's group; its id (0 when refused, noted)."""
        assert self.load is not None
        status, answer = self.load.request(
            self.operator_token,
            "POST",
            "/api/v1/manage/messages/",
            {
                "category": "system",
                "title": title,
                "body_html": "<p>many</p>",
                "to": {"groups": [str(self.crowd_group)]},
            },
        )
        if status != 202 or not answer:
            row.notes.append(f"the message to the crowd was refused ({status})")
            return 0
        return int(answer["id"])

    def redis_stopped(self, outage: float) -> Callable[[Row], float]:
        def inject(row: Row) -> float:
            time.sleep(3)
            self.redis.kill()
            time.sleep(outage)
            self.redis.start()  # empty: no persistence
            row.notes.append(f"Redis down {outage:.0f} s, restarted empty; restore counted from the restart")
            return time.monotonic()

        return inject

    def redis_frozen(self, seconds: float) -> Callable[[Row], float]:
        def inject(row: Row) -> float:
            time.sleep(3)
            self.redis.freeze()
            time.sleep(seconds)
            self.redis.thaw()
            row.notes.append(f"SIGSTOP for {seconds:.0f} s; restore counted from SIGCONT")
            return time.monotonic()

        return inject

    def postgres_down(self, outage: float) -> Callable[[Row], float]:
        def inject(row: Row) -> float:
            assert self.postgres is not None
            time.sleep(3)
            self.postgres.stop(mode="immediate")  # no shutdown checkpoint: as a crash
            time.sleep(outage)
            self.postgres.start()
            connections.close_all()  # this process's connections died with the server
            row.notes.append(f"the stack's PostgreSQL down {outage:.0f} s; restore counted from its restart")
            return time.monotonic()

        return inject

    def worker_killed(self, row: Row) -> float:
        """SIGKILL the worker while it runs the chunks of a message to 5,000 users,
        start a new one two seconds later, and count the crowd's copies in Redis.
        A tenth of the crowd reads first, as users who come back do: a fan-out
        writes only the parts Redis holds, and the others' fills read the
        recipient rows (counted in PostgreSQL)."""
        read = self._crowd_read(self._crowd_tokens(CROWD_BACK_EVERY))
        row.notes.append(f"a tenth of the crowd read their inboxes first ({read:,} reads answered 200)")
        message_id = self._crowd_push(row, "to the crowd")
        if not message_id:
            return time.monotonic()
        chunks = -(-CROWD // 50)

        def done_chunks() -> int:
            close_old_connections()
            return FanoutChunk.objects.filter(message_id=message_id).count()

        wait_until(lambda: done_chunks() >= 3, timeout=60, step=0.01)
        at_kill = done_chunks()
        self.worker.kill()
        killed = time.monotonic()
        row.notes.append(f"worker SIGKILLed with {at_kill} of {chunks} chunks done; a new one started 2 s later")
        time.sleep(2)
        self.workers_started += 1
        self.worker.command[self.worker.command.index("-n") + 1] = f"drill{self.workers_started}@%h"
        self.worker.start()
        took = wait_until(lambda: self.all_delivered([message_id]) and done_chunks() >= chunks, timeout=SETTLE_TIMEOUT)
        if self.rabbit is not None:
            held = self.rabbit.held()
        else:
            held = str(self.redis.client(1).hlen("unacked"))  # kombu's Redis transport: delivered, not acknowledged
        row.notes.append(f"{held} task(s) held unacknowledged on the broker after the restart")
        if took is None:
            row.blocked = True
            row.notes.append(f"the large message's fan-out had not finished {SETTLE_TIMEOUT:.0f} s after the restart")
            row.notes.extend(self._stuck_fanout(message_id, chunks))
        else:
            row.notes.append(f"fan-out finished {time.monotonic() - killed:.1f} s after the kill")
        self._count_crowd(row, message_id)
        return killed

    def _stuck_fanout(self, message_id: int, chunks: int) -> list[str]:
        """What a fan-out that did not finish left behind: the chunks not
        recorded, their pending rows (tries, due, last error) and the worker
        log's errors, so that a miss on a machine since gone can be explained."""
        close_old_connections()
        done = set(FanoutChunk.objects.filter(message_id=message_id).values_list("index", flat=True))
        missing = sorted(set(range(chunks)) - done)
        notes = [
            f"message {message_id}: status {Message.objects.get(pk=message_id).status}, chunks not recorded {missing}"
        ]
        now = datetime.now(UTC)
        for pending in PendingDelivery.objects.order_by("id"):
            notes.append(
                f"pending {pending.task}({pending.object_id}, {pending.index}): {pending.attempts} failed tries, "
                f"due in {(pending.due_at - now).total_seconds():.0f} s, last error {pending.last_error or '-'!r}"
            )
        for log in sorted(self.workdir.glob("worker*.log")):
            lines = log.read_text(errors="replace").splitlines()
            flagged = [line for line in lines if "ERROR" in line or "WARNING" in line or "Error" in line]
            notes += [f"{log.name}: {line[:300]}" for line in flagged[-15:]]
        return notes

    def _count_crowd(self, row: Row, message_id: int) -> None:
        """The crowd's copies of the item: once in Redis for each user whose part
        Redis holds, nowhere else in Redis, and a recipient row in PostgreSQL
        for every one (what the others' fills read)."""
        close_old_connections()
        with connection.cursor() as cursor:
            cursor.execute("SELECT id FROM auth_user WHERE username ~ '^drill[0-9]+$'")
            crowd = [int(r[0]) for r in cursor.fetchall()]
        rows = set(MessageRecipient.objects.filter(message_id=message_id).values_list("user_id", flat=True))
        client = self.redis.client()
        prefix = f"m{message_id}|".encode()
        copies: dict[int, int] = {}
        held: set[int] = set()
        for start in range(0, len(crowd), 500):
            batch = crowd[start : start + 500]
            pipe = client.pipeline(transaction=False)
            for user_id in batch:
                pipe.zrange(mc_keys.inbox(user_id), 0, -1)
                pipe.hexists(mc_keys.inbox_state(user_id), "fill")
            replies = pipe.execute()
            for i, user_id in enumerate(batch):
                copies[user_id] = sum(1 for m in replies[2 * i] if m.startswith(prefix))
                if replies[2 * i + 1]:
                    held.add(user_id)
        no_row = [u for u in crowd if u not in rows]
        once = sum(1 for u in held if copies[u] == 1)
        missing = sum(1 for u in held if copies[u] == 0)
        row.deliveries_lost += missing + len(no_row)
        row.duplicates += sum(n - 1 for n in copies.values() if n > 1)
        stray = sum(1 for u in crowd if u not in held and copies[u])
        row.notes.append(
            f"crowd of {len(crowd):,}: {len(crowd) - len(no_row):,} recipient rows in PostgreSQL; of the "
            f"{len(held):,} whose part Redis holds, {once:,} hold the item once, {missing:,} not at all, "
            f"{sum(1 for n in copies.values() if n > 1):,} more than once; {stray:,} of the others hold it"
        )

    # --- the whole drill -----------------------------------------------------

    def run(self, *, quick: bool, outage: float, only: list[str]) -> list[Row]:
        self.load = Load(base=self.base, readers=self.readers, operator_token=self.operator_token, publish_every=2.0)
        for index in range(10):
            self.load.publish(f"seed message {index}")
        _, seeded = self.load.snapshot()
        if wait_until(lambda: self.all_delivered(seeded), timeout=60) is None:
            raise RuntimeError("the seed messages were not delivered: is the worker running?")
        self.load.start()
        freeze = 5.0 if quick else 10.0
        pg_outage = 10.0 if quick else 30.0
        plan: list[tuple[str, Any, bool]] = [
            ("none (steady load, 10 s)", self.baseline(10), False),
            ("FLUSHALL", self.flushall, False),
            ("app SIGKILL (web, worker, beat) + FLUSHALL at once, restarted", self.app_killed_and_flushed, False),
            ("app SIGKILL (web, worker, beat), Redis kept, restarted", self.app_killed, False),
            (f"Redis stopped {outage:.0f} s, restarted empty", self.redis_stopped(outage), False),
            (f"redis-server SIGSTOP {freeze:.0f} s, SIGCONT", self.redis_frozen(freeze), False),
            ("Celery worker SIGKILL mid fan-out (5,000 recipients)", self.worker_killed, False),
            (f"PostgreSQL down {pg_outage:.0f} s (private cluster), restarted", self.postgres_down(pg_outage), True),
            # The marks of every fault above must have reached PostgreSQL: a
            # second loss of Redis shows the ones that live in Redis only.
            ("FLUSHALL again, after all the above", self.flushall, False),
            (
                f"app SIGKILL + FLUSHALL, {RETURNING:.0%} of the users back: Redis memory {MEMORY_WAIT:.0f} s later",
                self.few_return,
                False,
            ),
        ]
        rows: list[Row] = []
        try:
            for name, inject, allow_503 in plan:
                if only and not any(part.lower() in name.lower() for part in only):
                    rows.append(Row(name, not_run="not selected (--only)"))
                    continue
                if name.startswith("PostgreSQL") and self.postgres is None:
                    rows.append(Row(name, not_run="no private PostgreSQL cluster was started"))
                    continue
                row = self.run_fault(name, inject, allow_503=allow_503, app_down=name.startswith("app SIGKILL"))
                rows.append(row)
        finally:
            self.load.stop()
        return rows

    def cluster_failover(self, cluster: stack.PrivateCluster) -> Row:
        """The stack now on a private Redis Cluster (rebuilt there by the
        self-healing): SIGKILL the master holding the read model's generation
        marker, let its replica take over, start the killed node again (it
        rejoins as a replica), and look for what was lost."""
        previous = self.load
        self.load = Load(base=self.base, readers=self.readers, operator_token=self.operator_token, publish_every=2.0)
        if previous is not None:
            self.load.acked_messages = list(previous.acked_messages)  # still owed to every reader
        if wait_until(self.correct, timeout=SETTLE_TIMEOUT) is None:
            raise RuntimeError("the read model was not rebuilt on the Redis Cluster in time")
        self.load.start()

        def inject(row: Row) -> float:
            time.sleep(5)
            node = cluster.master_of(readmodel_generation())
            node.kill()
            killed = time.monotonic()

            def promoted() -> bool:
                try:
                    return cluster.master_of(readmodel_generation()).port != node.port
                except (RedisError, OSError, RuntimeError):
                    return False

            took = wait_until(promoted, timeout=60, step=0.1)
            row.notes.append(
                f"master :{node.port} (holding the generation marker) SIGKILLed; its replica took over "
                + ("never (60 s)" if took is None else f"{took:.1f} s later")
                + "; the node then restarted empty (it rejoins as a replica); restore counted from the kill"
            )
            node.start()
            return killed

        try:
            return self.run_fault("Redis Cluster master failover (SIGKILL of a master)", inject)
        finally:
            self.load.stop()
