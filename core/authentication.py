"""API token authentication (``Authorization: Token <key>``)."""

from rest_framework.authentication import TokenAuthentication as DRFTokenAuthentication


class TokenAuthentication(DRFTokenAuthentication):
    keyword = "Token"
