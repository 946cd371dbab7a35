"""What every admin route shares: the blueprint, admin authentication, error mapping, and
reading bodies, parameters, cursors and page sizes.

Every text the caller chooses is judged before a view sees it: the body by `jsontext.loads`,
path and query parameters by `jsontext.text_fault`. A crash answers 500 `internal_error` with
the request id its log line carries."""

from __future__ import annotations

import re
from collections.abc import Callable
from functools import wraps
from typing import Any

from chalice import Response

from chalicelib.base import jsontext
from chalicelib.base.config import body_limit
from chalicelib.base.errors import InvalidInput, TooLarge, WorksetError
from chalicelib.base.responses import GuardedBlueprint, internal_error, json_response
from chalicelib.identity import accounts

bp = GuardedBlueprint(__name__, edge="api", on_crash=lambda request_id: json_response(500, internal_error(request_id)))

PAGE_DEFAULT = 50
PAGE_MAX = 100
_LIMIT = re.compile(r"[0-9]{1,3}")  # ASCII digits only: "²".isdigit() is True and int("²") fails


def admin_route(path: str, method: str, status: int = 200) -> Callable[[Callable[..., Any]], Any]:
    """Register a view that needs an admin token; domain errors become `{"error": ...}` bodies."""

    def register(view: Callable[..., Any]) -> Any:
        @wraps(view)
        def wrapped(**params: str) -> Response:
            try:
                account_id = accounts.authenticate_admin(bearer())
                _check_parameters(params)
                return json_response(status, view(account_id, **params))
            except WorksetError as error:
                headers = {"WWW-Authenticate": 'Bearer realm="workset"'} if error.status == 401 else {}
                return json_response(error.status, {"error": error.to_dict()}, headers)

        return bp.route(path, methods=[method], content_types=["application/json"])(wrapped)

    return register


def bearer() -> str | None:
    """The admin token the request carries (one that is not text counts as none)."""
    return accounts.bearer(bp.current_request.headers.get("authorization"))


def body() -> Any:
    """The JSON body, read strictly (`jsontext.loads`): bad JSON, non-finite numbers, deep
    nesting and lone surrogates are `invalid_input`, the last naming where it sat."""
    raw = bp.current_request.raw_body
    if not raw:
        raise InvalidInput("the body must be a JSON object")
    limit = body_limit(bp.current_request.path)
    if len(raw) > limit:
        raise TooLarge(f"the body is larger than {limit} bytes")
    try:
        return jsontext.loads(raw)
    except jsontext.JsonRefused as refused:
        field = refused.where or None
        raise InvalidInput(f"the body is not usable JSON: {refused.reason}", field=field) from None


def optional_body() -> dict[str, Any]:
    """The JSON object body, or {} when there is none."""
    if not bp.current_request.raw_body:
        return {}
    payload = body()
    if not isinstance(payload, dict):
        raise InvalidInput("the body must be a JSON object")
    return payload


def query(name: str) -> str | None:
    """A query parameter (already judged clean by `admin_route`)."""
    params = bp.current_request.query_params
    return params.get(name) if params else None


def limit() -> int:
    """The page size the caller asked for, or the default."""
    text = query("limit")
    if text is None:
        return PAGE_DEFAULT
    if not _LIMIT.fullmatch(text) or not 1 <= int(text) <= PAGE_MAX:
        raise InvalidInput(f"limit must be an integer from 1 to {PAGE_MAX}", field="limit")
    return int(text)


def _check_parameters(path_params: dict[str, str]) -> None:
    """Refuse path and query parameters that are not text (a lone surrogate, a control
    character, percent-escapes of either)."""
    for name, value in path_params.items():
        if (fault := jsontext.text_fault(value, escaped=True)) is not None:
            raise InvalidInput(f"{name} {fault}", field=name)
    query_params = bp.current_request.query_params
    if not query_params:
        return
    for name in query_params:
        if (fault := jsontext.text_fault(name)) is not None:
            raise InvalidInput(f"a query parameter's name {fault}")
        for value in query_params.getlist(name):
            if (fault := jsontext.text_fault(value)) is not None:
                raise InvalidInput(f"{name} {fault}", field=name)


def tool_ref(body: Any) -> tuple[str, str]:
    if not isinstance(body, dict) or not isinstance(body.get("vendor"), str) or not isinstance(body.get("name"), str):
        raise InvalidInput("vendor and name are required", field="vendor")
    return body["vendor"], body["name"]

