"""The project's URLs plus one page that uses every template tag of
notifications_tags (tests/compat/test_template_tags.py)."""

from django.http import HttpRequest, HttpResponse
from django.template import engines
from django.urls import path

from config.urls import handler400, handler403, handler404, handler500
from config.urls import urlpatterns as project_urlpatterns

PAGE = """{% load static notifications_tags %}<!doctype html>
<html><head><title>Live</title>
<script src="{% static 'notifications/notify.js' %}"></script>
{% register_notify_callbacks callbacks='fill_notification_list,fill_notification_badge' fetch=20 refresh_period=5 %}
</head><body>
<nav>{% live_notify_badge %}{% live_notify_list %}</nav>
{% notifications_unread as unread %}<p id="unread">{{ unread }}</p>
<p id="has">{{ user|has_notification }}</p>
</body></html>"""


def live_page(request: HttpRequest) -> HttpResponse:
    return HttpResponse(engines["django"].from_string(PAGE).render({}, request))


urlpatterns = [path("compat-live/", live_page), *project_urlpatterns]

__all__ = ["handler400", "handler403", "handler404", "handler500", "urlpatterns"]
