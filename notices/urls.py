from django.urls import URLPattern

api_urlpatterns: list[URLPattern] = []
page_urlpatterns: list[URLPattern] = []
