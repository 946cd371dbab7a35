"""The JSON response every edge sends."""

from __future__ import annotations

import json
from typing import Any

from chalice import Response


def json_response(status: int, body: Any, headers: dict[str, str] | None = None) -> Response:
    """A JSON body with its status and extra headers."""
    return Response(
        body=json.dumps(body, ensure_ascii=False),
        status_code=status,
        headers={"Content-Type": "application/json", **(headers or {})},
    )
