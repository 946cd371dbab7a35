"""What every edge answers with: JSON bodies that always encode, and the guard that turns an
unexpected exception into the edge's own 500 (logged with the request id) instead of Chalice's
generic one, and writes each request's one log line."""

from __future__ import annotations

import time
from collections.abc import Callable
from functools import wraps
from typing import Any

from chalice import Blueprint, Response

from chalicelib.base import jsontext, log
from chalicelib.base.errors import InternalError

CrashAnswer = Callable[[str], Response]  # request id -> the edge's 500
LOGGED_PARAMETERS = ("agent_id", "run_id")  # path parameters the request line names
PARAMETER_CHARS = 128  # a path parameter is the caller's text: enough for any id, no more


def json_response(status: int, body: Any, headers: dict[str, str] | None = None) -> Response:
    """A JSON body with its status and extra headers (valid UTF-8 whatever `body` holds)."""
    return Response(
        body=jsontext.dumps(body),
        status_code=status,
        headers={"Content-Type": "application/json", **(headers or {})},
    )


class GuardedBlueprint(Blueprint):
    """A blueprint every route of which stands behind one guard: whatever escapes a view (a
    crash in our own code) is logged with the request id and answered by `on_crash`, and every
    request, answered or crashed, writes one line (`<edge>.request`: route, status, outcome,
    duration and what the request noted on the way: account, agent, run, MCP method). The guard
    sits in `route` itself, so no view registered on the blueprint can go without it."""

    def __init__(self, import_name: str, *, edge: str, on_crash: CrashAnswer) -> None:
        super().__init__(import_name)
        self._edge = edge
        self._on_crash = on_crash

    def route(self, path: str, **kwargs: Any) -> Callable[..., Any]:
        """Chalice's `route`, with the view wrapped in the guard."""
        register = super().route(path, **kwargs)

        def guard(view: Callable[..., Any]) -> Any:
            @wraps(view)
            def guarded(**params: str) -> Any:
                started = time.perf_counter()
                request_id = log.request_id(self.current_request.context)
                with log.bound(request_id):  # every line logged while serving carries it
                    log.note(**{name: str(params[name])[:PARAMETER_CHARS]
                                for name in LOGGED_PARAMETERS if name in params})
                    try:
                        response = view(**params)
                        outcome = None
                    except Exception as error:  # noqa: BLE001 - the guard: whatever a view raises is answered
                        response, outcome = self._crashed(error, path, request_id), "crashed"
                    self._log_request(path, response, outcome, started)
                    return response

            return register(guarded)

        return guard

    def _log_request(self, route: str, response: Any, outcome: str | None, started: float) -> None:
        status = getattr(response, "status_code", 200)
        if outcome is None:  # the view's own notes (an MCP outcome) say more, and win
            outcome = "ok" if status < 400 else "refused" if status < 500 else "error"
        else:
            log.note(outcome=outcome)  # a crash wins over whatever the view noted before it
        log.request_line(f"{self._edge}.request", http_method=self.current_request.method, route=route,
                         status=status, outcome=outcome, duration_ms=log.elapsed_ms(started))

    def _crashed(self, error: Exception, route: str, request_id: str) -> Response:
        request = self.current_request
        log.failure(f"{self._edge}.internal_error", error, request_id=request_id, method=request.method, route=route)
        try:
            return self._on_crash(request_id)
        except Exception as again:  # noqa: BLE001 - the edge's own error page failed: still answer, still log
            log.failure(f"{self._edge}.internal_error", again, request_id=request_id, during="crash answer")
            return json_response(500, internal_error(request_id))


def internal_error(request_id: str) -> dict[str, Any]:
    """The `/v1` body of a 500 (also the last resort of every edge)."""
    error = InternalError(f"an unexpected error occurred on the server; quote request id {request_id} "
                          "when reporting it")
    return {"error": {**error.to_dict(), "request_id": request_id}}
