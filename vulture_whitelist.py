"""Names vulture (make lint, 80% confidence) takes for dead but a framework
passes by keyword, so the parameter keeps its name; each with its reason.
Not imported by anything: vulture reads the names below as used."""

# compat/notifications/checks.py: Django calls system checks with app_configs= by keyword.
app_configs
# core/api/openapi.py: drf-spectacular calls its extensions' hooks with auto_schema= by keyword.
auto_schema
# messagecenter/live_api.py: a DRF renderer's render() keeps BaseRenderer's
# signature (callers may name accepted_media_type and renderer_context).
accepted_media_type
renderer_context
# durability/projection.py: BaseDatabaseWrapper is used in a quoted annotation, which vulture does not read.
BaseDatabaseWrapper
# messagecenter/webpush.py: modified_ns is part of the lru_cache key (the key
# file is read again when it changes), not read in the body.
modified_ns
# durability/progress.py: a context manager's __exit__ keeps the protocol's
# parameter names (exc_type, exc, traceback), whether or not it reads them.
traceback
# insight/apis.py, messagecenter/apis/unread.py: DRF calls perform_content_negotiation
# with force= by keyword; these views choose their renderer themselves.
force
