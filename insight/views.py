"""The staff-only activity dashboard (admin): DAU / WAU / MAU over time as a
server-side SVG chart and a table, N-day retention, readers of one item over
time, and the same figures as CSV. Thin adapters over insight/activity.py."""

import csv
import re
from datetime import date
from typing import Any

from django.contrib import admin
from django.http import HttpRequest, HttpResponse
from django.template.response import TemplateResponse
from redis.exceptions import RedisError

from core.api.fields import ID_PATTERN
from insight import activity

_ID = re.compile(rf"\A{ID_PATTERN}\Z")

DEFAULT_DAYS, MAX_DAYS = 30, 180
UNAVAILABLE = "Activity figures are unavailable (Redis does not answer); try again shortly."


def _days(request: HttpRequest) -> tuple[int, str]:
    raw = request.GET.get("days", "")
    if not raw:
        return DEFAULT_DAYS, ""
    if not raw.isdigit() or not 1 <= int(raw) <= MAX_DAYS:
        return DEFAULT_DAYS, f"days must be a whole number from 1 to {MAX_DAYS}; showing {DEFAULT_DAYS}."
    return int(raw), ""


def _item(request: HttpRequest, end: date, days: int) -> dict[str, Any]:
    kind, raw_id = request.GET.get("kind", ""), request.GET.get("item", "").strip()
    context: dict[str, Any] = {"kinds": activity.reader_sources(), "kind": kind, "item": raw_id}
    if not raw_id:
        return context
    source = activity.reader_source(kind)
    if source is None:
        context["item_error"] = "Choose a kind of item."
        return context
    if not _ID.match(raw_id):
        context["item_error"] = "The item id must be a positive whole number."
        return context
    if not source.exists(int(raw_id)):
        context["item_error"] = f"There is no {source.label.lower()} {raw_id}."
        return context
    context["item_days"] = activity.item_readers_by_day(source=source, item_id=int(raw_id), end=end, days=days)
    context["item_label"] = f"{source.label} {raw_id}"
    return context


def activity_dashboard(request: HttpRequest) -> HttpResponse:
    days, days_error = _days(request)
    end = activity.today()
    context: dict[str, Any] = {
        **admin.site.each_context(request),
        "title": "User activity",
        "days": days,
        "days_error": days_error,
        "offsets": activity.RETENTION_OFFSETS,
    }
    try:
        series = activity.activity_series(end=end, days=days)
        context.update(
            series=series,
            chart=activity.series_chart(series),
            retention=activity.retention(end=end, days=min(days, activity.MONTH)),
            **_item(request, end, days),
        )
    except RedisError:
        context["unavailable"] = UNAVAILABLE
    return TemplateResponse(request, "admin/activity.html", context)


def activity_csv(request: HttpRequest) -> HttpResponse:
    days, _error = _days(request)
    end = activity.today()
    try:
        series = activity.activity_series(end=end, days=days)
        kept = activity.retention(end=end, days=days)
    except RedisError:
        return HttpResponse(UNAVAILABLE, status=503, content_type="text/plain; charset=utf-8")
    response = HttpResponse(content_type="text/csv; charset=utf-8")
    response["Content-Disposition"] = f'attachment; filename="activity-{end:%Y%m%d}-{days}d.csv"'
    writer = csv.writer(response)
    offsets = activity.RETENTION_OFFSETS
    writer.writerow(["day", "dau", "wau", "mau", *(f"retained_{n}d" for n in offsets)])
    for point, row in zip(series, kept, strict=True):
        retained = ["" if row.kept[n] is None else row.kept[n] for n in offsets]
        writer.writerow([point.day.isoformat(), point.dau, point.wau, point.mau, *retained])
    return response
