"""Bench data: users in bulk and the one-row-per-recipient baseline table."""

from django.db import connection

BASELINE_TABLE = "bench_recipient_row"


def ensure_users(n: int) -> tuple[int, int]:
    """At least ``n`` plain users named bench<i>; returns (min id, max id) of them.

    One INSERT ... SELECT: creating 100,000 users through the ORM would take
    longer than every case together. They have no platform rows, so the
    default rule puts them on the "user" platform.
    """
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM auth_user WHERE username LIKE 'bench%%'")
        have = cursor.fetchone()[0]
        if have < n:
            cursor.execute(
                """
                INSERT INTO auth_user (password, is_superuser, username, first_name, last_name, email,
                                       is_staff, is_active, date_joined)
                SELECT '!', false, 'bench' || g, '', '', '', false, true, now()
                FROM generate_series(%s, %s) AS g
                ON CONFLICT (username) DO NOTHING
                """,
                [have + 1, n],
            )
        cursor.execute(
            "SELECT min(id), max(id) FROM (SELECT id FROM auth_user WHERE username LIKE 'bench%%' ORDER BY id LIMIT %s) s",
            [n],
        )
        low, high = cursor.fetchone()
    return int(low), int(high)


def reset_baseline_table() -> None:
    """A plain row-per-recipient table: what most notification apps write."""
    with connection.cursor() as cursor:
        cursor.execute(f"DROP TABLE IF EXISTS {BASELINE_TABLE}")
        cursor.execute(
            f"""
            CREATE TABLE {BASELINE_TABLE} (
                id bigserial PRIMARY KEY,
                user_id integer NOT NULL,
                item_id integer NOT NULL,
                category varchar(16) NOT NULL DEFAULT 'system',
                unread boolean NOT NULL DEFAULT true,
                created timestamptz NOT NULL DEFAULT now()
            )
            """
        )
        # The inbox query of the baseline: a user's unread items newest first.
        cursor.execute(f"CREATE INDEX {BASELINE_TABLE}_inbox ON {BASELINE_TABLE} (user_id, unread, created DESC)")


def baseline_fanout_insert_select(item_id: int, low: int, high: int) -> None:
    with connection.cursor() as cursor:
        cursor.execute(
            f"INSERT INTO {BASELINE_TABLE} (user_id, item_id) SELECT id, %s FROM auth_user WHERE id BETWEEN %s AND %s",
            [item_id, low, high],
        )


def baseline_bytes_per_row() -> float:
    with connection.cursor() as cursor:
        cursor.execute(f"ANALYZE {BASELINE_TABLE}")
        cursor.execute(f"SELECT pg_total_relation_size('{BASELINE_TABLE}'), (SELECT count(*) FROM {BASELINE_TABLE})")
        size, rows = cursor.fetchone()
    return size / rows if rows else 0.0
