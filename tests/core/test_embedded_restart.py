"""``make run``'s embedded default keeps the reader's state across restarts.

Two real processes on one SQLite file with the in-process fakeredis, as
``make run`` has them: the first receives messages, marks one read, one unread
again after reading, deletes one, archives one and snoozes one, then exits
(every mark committed before its answer); the second starts the way ``manage.py serve`` does (rebuild of the
read model from the database) and must see the same inbox and counts.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

from django.conf import settings

FIRST_RUN = """
from django.contrib.auth import get_user_model
from messagecenter import selectors, services
User = get_user_model()
operator = User.objects.create_superuser("op", password="pw-12345678")
reader = User.objects.create_user("reader", password="pw-12345678")
ids = {}
from datetime import timedelta
from django.utils import timezone
for title in ("kept unread", "read", "read then unread", "deleted", "archived", "snoozed"):
    message = services.message_send(sender=operator, category="system", title=title,
                                    body_html="<p>x</p>", user_ids=[reader.pk], group_ids=[], everyone=False)
page = selectors.inbox_list(user=reader, limit=10)
ids = {item.title: item.id for item in page.results}
services.inbox_mark_read(user=reader, item_id=ids["read"])
services.inbox_mark_read(user=reader, item_id=ids["read then unread"])
services.inbox_mark_unread(user=reader, item_id=ids["read then unread"])
services.inbox_hide(user=reader, item_id=ids["deleted"])
services.inbox_archive(user=reader, item_id=ids["archived"])
services.inbox_snooze(user=reader, item_id=ids["snoozed"], until=timezone.now() + timedelta(days=1))
"""

SECOND_RUN = """
import json
from django.contrib.auth import get_user_model
from django.core.management import call_command
from messagecenter import selectors
call_command("rebuild_redis", verbosity=0)
reader = get_user_model().objects.get(username="reader")
page = selectors.inbox_list(user=reader, limit=10)
archived = selectors.inbox_list(user=reader, limit=10, archived=True)
counts = selectors.inbox_counts(user=reader)
print("RESULT" + json.dumps({
    "items": {i.title: i.read for i in page.results},
    "archived": [i.title for i in archived.results],
    "unread": counts["unread"],
}))
"""


def _run(code: str, env: dict[str, str]) -> str:
    done = subprocess.run(  # noqa: S603
        [sys.executable, "manage.py", "shell", "-c", code],
        cwd=settings.BASE_DIR,
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


def test_read_marks_deletes_archives_and_snoozes_survive_a_restart(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k not in {"DATABASE_URL", "REDIS_URL", "DJANGO_SETTINGS_MODULE"}}
    env.update(
        DATABASE_URL=f"sqlite:///{tmp_path / 'db.sqlite3'}",
        DJANGO_SETTINGS_MODULE="config.settings.local",
    )
    subprocess.run(
        [sys.executable, "manage.py", "migrate", "--noinput", "-v", "0"],
        cwd=settings.BASE_DIR,
        env=env,
        check=True,
        capture_output=True,
        timeout=300,
    )
    _run(FIRST_RUN, env)
    out = _run(SECOND_RUN, env)
    result = json.loads(out.split("RESULT", 1)[1])
    assert result["items"] == {"kept unread": False, "read": True, "read then unread": False}
    assert result["archived"] == ["archived"]
    # The snoozed item stays away (and out of the counts) until its time.
    assert result["unread"] == 2
