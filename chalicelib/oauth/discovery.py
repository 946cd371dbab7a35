"""Where a client learns how to get a token for `/mcp`: protected resource metadata (RFC 9728)
naming this server, its own metadata (RFC 8414), and the 401's challenge."""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

from chalicelib.base.config import settings

SCOPE = "mcp"  # the one scope: act as the agent at /mcp
AUTH_METHODS = ("none", "client_secret_post", "client_secret_basic")


def issuer() -> str:
    """This authorization server's issuer identifier."""
    public = settings().public_url
    return public if urlsplit(public).path else f"{public}/"


def resource_metadata_url() -> str:
    """Where the protected resource metadata of `/mcp` is (RFC 9728 3.1, path form)."""
    return f"{settings().public_url}/.well-known/oauth-protected-resource/mcp"


def protected_resource_metadata() -> dict[str, Any]:
    """RFC 9728 metadata of `/mcp`."""
    return {"resource": settings().mcp_url, "authorization_servers": [issuer()], "scopes_supported": [SCOPE],
            "bearer_methods_supported": ["header"], "resource_name": "Workset"}


def server_metadata() -> dict[str, Any]:
    """RFC 8414 metadata of this authorization server."""
    public = settings().public_url
    return {
        "issuer": issuer(),
        "authorization_endpoint": f"{public}/console/oauth/authorize",
        "token_endpoint": f"{public}/oauth/token",
        "registration_endpoint": f"{public}/oauth/register",
        "revocation_endpoint": f"{public}/oauth/revoke",
        "scopes_supported": [SCOPE],
        "response_types_supported": ["code"],
        "grant_types_supported": ["authorization_code", "refresh_token"],
        "token_endpoint_auth_methods_supported": list(AUTH_METHODS),
        "revocation_endpoint_auth_methods_supported": list(AUTH_METHODS),
        "code_challenge_methods_supported": ["S256"],
        "authorization_response_iss_parameter_supported": True,
        # MCP 2026-07-28 client-registration, "Advertising CIMD Support" (oauth/documents.py)
        "client_id_metadata_document_supported": True,
    }


def challenge() -> str:
    """The `WWW-Authenticate` value of a 401 from `/mcp` (RFC 9728 5.1)."""
    return f'Bearer resource_metadata="{resource_metadata_url()}", scope="{SCOPE}"'
