"""The OAuth edge (see `chalicelib/oauth/`): discovery documents, client registration, the token
and revocation endpoints. Public routes: each authenticates what it must itself. Errors are
OAuth's own JSON (`error`, `error_description`); nothing here is cached, and no token or secret
reaches a log line (the request line names the route and the status only)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any
from urllib.parse import parse_qs

from chalice import Response

from chalicelib.base import jsontext
from chalicelib.base.clock import utcnow
from chalicelib.base.config import settings
from chalicelib.base.responses import GuardedBlueprint, json_response
from chalicelib.oauth import OAuthError, clients, discovery, tokens


def _crashed(request_id: str) -> Response:
    return json_response(500, {"error": "server_error",
                               "error_description": f"Workset failed; quote request id {request_id}"}, NO_STORE)


bp = GuardedBlueprint(__name__, edge="oauth", on_crash=_crashed)

FORM = ["application/x-www-form-urlencoded"]
NO_STORE = {"Cache-Control": "no-store", "Pragma": "no-cache"}
DISCOVERY = {"Cache-Control": "public, max-age=3600", "Access-Control-Allow-Origin": "*"}


@bp.route("/.well-known/oauth-protected-resource", methods=["GET"])
def resource_metadata() -> Response:
    return json_response(200, discovery.protected_resource_metadata(), DISCOVERY)


@bp.route("/.well-known/oauth-protected-resource/mcp", methods=["GET"])
def mcp_resource_metadata() -> Response:
    return json_response(200, discovery.protected_resource_metadata(), DISCOVERY)


@bp.route("/.well-known/oauth-authorization-server", methods=["GET"])
def server_metadata() -> Response:
    return json_response(200, discovery.server_metadata(), DISCOVERY)


@bp.route("/oauth/register", methods=["POST"], content_types=["application/json"])
def register() -> Response:
    return _answer(lambda: (201, clients.register(_json_body(), utcnow(), source=_source_address())))


@bp.route("/oauth/token", methods=["POST"], content_types=FORM)
def token() -> Response:
    return _answer(lambda: (200, tokens.token(_form(), _authorization(), utcnow())))


@bp.route("/oauth/revoke", methods=["POST"], content_types=FORM)
def revoke() -> Response:
    def revoked() -> tuple[int, Any]:
        tokens.revoke(_form(), _authorization(), utcnow())
        return 200, {}

    return _answer(revoked)


def _answer(work: Callable[[], tuple[int, Any]]) -> Response:
    try:
        status, body = work()
    except OAuthError as error:
        basic = _authorization() or ""
        challenge = {"WWW-Authenticate": 'Basic realm="workset"'} if error.status == 401 and basic[:6].lower() == "basic " else {}
        wait = {"Retry-After": str(error.retry_after)} if error.retry_after is not None else {}
        return json_response(error.status, error.to_dict(), {**NO_STORE, **challenge, **wait})
    return json_response(status, body, NO_STORE)


def _source_address() -> str | None:
    """The address the request came from as API Gateway saw the connection (the local stack: the
    socket's peer). Never X-Forwarded-For or any other header: the client writes those."""
    identity = (bp.current_request.context or {}).get("identity") or {}
    address = identity.get("sourceIp") if isinstance(identity, dict) else None
    return address if isinstance(address, str) else None


def _authorization() -> str | None:
    return bp.current_request.headers.get("authorization")


def _raw() -> bytes:
    raw = bp.current_request.raw_body or b""
    raw = raw.encode("utf-8", "surrogatepass") if isinstance(raw, str) else raw
    if len(raw) > settings().max_request_bytes:
        raise OAuthError("invalid_request", f"the body is larger than {settings().max_request_bytes} bytes", status=413)
    return raw


def _json_body() -> Any:
    try:
        return jsontext.loads(_raw())
    except jsontext.JsonRefused as refused:
        raise OAuthError("invalid_client_metadata", f"the body is not usable JSON: {refused.reason}") from None


def _form() -> dict[str, str]:
    """The form's parameters; one sent twice, or one that is not text, is refused (RFC 6749 3.1)."""
    try:
        fields = parse_qs(_raw().decode("utf-8"), keep_blank_values=True, strict_parsing=False)
    except UnicodeDecodeError:
        raise OAuthError("invalid_request", "the form is not UTF-8") from None
    for name, values in fields.items():
        if len(values) > 1:
            raise OAuthError("invalid_request", f"{name[:40]} is sent more than once")
        if jsontext.text_fault(name) or jsontext.text_fault(values[0]):
            raise OAuthError("invalid_request", "a parameter is not text")
    return {name: values[0] for name, values in fields.items()}
