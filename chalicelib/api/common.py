"""What every admin route shares: the blueprint, admin authentication, error mapping, and
reading bodies, cursors and page sizes."""

from __future__ import annotations

import json
from collections.abc import Callable
from functools import wraps
from typing import Any

from chalice import Blueprint, Response

from chalicelib import accounts
from chalicelib.config import settings
from chalicelib.errors import InvalidInput, TooLarge, WorksetError
from chalicelib.responses import json_response

bp = Blueprint(__name__)

PAGE_DEFAULT = 50
PAGE_MAX = 100


def admin_route(path: str, method: str, status: int = 200) -> Callable[[Callable[..., Any]], Any]:
    """Register a view that needs an admin token; domain errors become `{"error": ...}` bodies."""

    def register(view: Callable[..., Any]) -> Any:
        @wraps(view)
        def wrapped(**params: str) -> Response:
            try:
                account_id = accounts.authenticate_admin(bearer())
                return json_response(status, view(account_id, **params))
            except WorksetError as error:
                headers = {"WWW-Authenticate": 'Bearer realm="workset"'} if error.status == 401 else {}
                return json_response(error.status, {"error": error.to_dict()}, headers)

        return bp.route(path, methods=[method], content_types=["application/json"])(wrapped)

    return register


def bearer() -> str | None:
    value = bp.current_request.headers.get("authorization", "")
    scheme, _, token = value.partition(" ")
    return token.strip() if scheme.lower() == "bearer" and token.strip() else None


def body() -> Any:
    raw = bp.current_request.raw_body
    if not raw:
        raise InvalidInput("the body must be a JSON object")
    if len(raw) > settings().max_request_bytes:
        raise TooLarge(f"the body is larger than {settings().max_request_bytes} bytes")
    try:
        return json.loads(raw)
    except (ValueError, UnicodeDecodeError):
        raise InvalidInput("the body is not valid JSON") from None


def optional_body() -> dict[str, Any]:
    """The JSON object body, or {} when there is none."""
    if not bp.current_request.raw_body:
        return {}
    payload = body()
    if not isinstance(payload, dict):
        raise InvalidInput("the body must be a JSON object")
    return payload


def query(name: str) -> str | None:
    return (bp.current_request.query_params or {}).get(name)


def limit() -> int:
    text = query("limit")
    if text is None:
        return PAGE_DEFAULT
    if not text.isdigit() or not 1 <= int(text) <= PAGE_MAX:
        raise InvalidInput(f"limit must be an integer from 1 to {PAGE_MAX}", field="limit")
    return int(text)


def tool_ref(body: Any) -> tuple[str, str]:
    if not isinstance(body, dict) or not isinstance(body.get("vendor"), str) or not isinstance(body.get("name"), str):
        raise InvalidInput("vendor and name are required", field="vendor")
    return body["vendor"], body["name"]

