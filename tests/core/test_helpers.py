"""Cursors, parameters, HTML sanitising, key names and the Lua loader."""

from datetime import timedelta

import pytest
from redis.cluster import key_slot

from accounts import keys as account_keys
from core import keys
from core.api.errors import ValidationFailed
from core.api.pagination import decode_cursor, encode_cursor
from core.api.params import parse_limit, parse_time
from core.html import sanitize_html, summarize

XSS_PAYLOADS = [
    "<script>alert(1)</script>",
    '<img src=x onerror="alert(1)">',
    '<a href="javascript:alert(1)">x</a>',
    '<svg onload="alert(1)"></svg>',
    '<iframe src="https://evil.example"></iframe>',
    '<p style="background:url(javascript:alert(1))">x</p>',
    '<a href="JaVaScRiPt:alert(1)">x</a>',
    '<body onload="alert(1)">',
    '<img src="data:text/html;base64,PHNjcmlwdD5hbGVydCgxKTwvc2NyaXB0Pg==">',
    "<math><mtext><table><mglyph><style><img src=x onerror=alert(1)>",
]


@pytest.mark.parametrize("payload", XSS_PAYLOADS)
def test_sanitize_neutralises_xss(payload: str) -> None:
    cleaned = sanitize_html(payload).lower()
    for bad in ("<script", "onerror", "onload", "javascript:", "<iframe", "<svg", "style=", "data:text"):
        assert bad not in cleaned


def test_sanitize_keeps_formatting_and_safe_links() -> None:
    cleaned = sanitize_html('<p>Hi <strong>there</strong> <a href="https://example.com">site</a></p>')
    assert "<strong>there</strong>" in cleaned
    assert 'href="https://example.com"' in cleaned
    assert 'rel="noopener noreferrer nofollow"' in cleaned


def test_summarize_cuts_on_words() -> None:
    assert summarize("<p>Hello <b>world</b></p>") == "Hello world"
    assert summarize("<p>First.</p><p>Second<br>line</p>") == "First. Second line"
    assert summarize("<p>a</p><script>alert(1)</script>") == "a"
    long = summarize("<p>" + "word " * 100 + "</p>", length=30)
    assert len(long) <= 30
    assert long.endswith("…")


def test_cursor_round_trip_and_forgery() -> None:
    cursor = encode_cursor({"score": 123, "offset": 2}, scope="inbox")
    assert decode_cursor(cursor, scope="inbox") == {"score": 123, "offset": 2}
    with pytest.raises(ValidationFailed):
        decode_cursor(cursor, scope="announcements")
    with pytest.raises(ValidationFailed):
        decode_cursor(cursor[:-2] + "xx", scope="inbox")
    with pytest.raises(ValidationFailed):
        decode_cursor("garbage", scope="inbox")


@pytest.mark.parametrize(("raw", "expected"), [(None, 20), ("", 20), ("5", 5), ("100", 100), ("1000", 100)])
def test_parse_limit(raw: str | None, expected: int) -> None:
    assert parse_limit(raw) == expected


@pytest.mark.parametrize("raw", ["0", "-1", "abc", "1.5"])
def test_parse_limit_rejects(raw: str) -> None:
    with pytest.raises(ValidationFailed):
        parse_limit(raw)


def test_parse_time() -> None:
    aware = parse_time("2026-11-22T10:00:00+00:00", name="since")
    assert aware is not None
    assert aware.isoformat() == "2026-11-22T10:00:00+00:00"
    naive = parse_time("2026-11-22T10:00:00", name="since")
    assert naive is not None
    assert naive.utcoffset() == timedelta(0)
    assert parse_time(None, name="since") is None
    with pytest.raises(ValidationFailed):
        parse_time("yesterday", name="since")


def test_per_user_keys_share_one_slot() -> None:
    assert key_slot(account_keys.user_platforms(42).encode()) == key_slot(keys.user_tag(42).encode())
