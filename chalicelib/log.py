"""Structured log lines: one JSON object per line on standard output (which Lambda sends to
CloudWatch), through the stdlib logger "workset.events". It does not propagate to Chalice's own
"workset" logger, which keeps only errors and prefixes every line with text that would break the
JSON.

Fields are named facts (ids, counts, kinds). Never pass a secret, a token or a request body: a
field whose name says it is one is written as "[withheld]".
"""

from __future__ import annotations

import logging
import sys
import traceback
import uuid
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

from chalicelib import jsontext

LOGGER = "workset.events"
TRACE_FRAMES = 5  # the innermost frames: enough to find the line, short enough to read
MESSAGE_CHARS = 500
_WITHHELD = ("authorization", "body", "cookie", "key", "password", "secret", "token")


def event(kind: str, **fields: Any) -> None:
    """Log that something happened (INFO)."""
    _emit(logging.INFO, kind, fields)


def failure(kind: str, error: BaseException, **fields: Any) -> None:
    """Log an unexpected exception (ERROR): its class, its message and the innermost frames of
    its traceback (file, line, function; no locals, no source text)."""
    frames = traceback.extract_tb(error.__traceback__)[-TRACE_FRAMES:]
    _emit(logging.ERROR, kind, {
        **fields,
        "error": type(error).__name__,
        "message": _message(error),
        "trace": [f"{_short(frame.filename)}:{frame.lineno} {frame.name}" for frame in frames],
    })


_request_id: ContextVar[str | None] = ContextVar("request_id", default=None)


@contextmanager
def bound(request_id: str) -> Iterator[None]:
    """While serving one request: every line logged carries its id (a run's line too)."""
    token = _request_id.set(request_id)
    try:
        yield
    finally:
        _request_id.reset(token)


def request_id(context: Mapping[str, Any] | None) -> str:
    """API Gateway's id for the request (`requestContext.requestId`), or a new one where there
    is none (chalice local, the test client)."""
    given = (context or {}).get("requestId")
    if isinstance(given, str) and given and jsontext.text_fault(given) is None:
        return given
    return uuid.uuid4().hex


def _setup() -> logging.Logger:
    """The events logger with its own plain handler (set up once, at import)."""
    logger = logging.getLogger(LOGGER)
    if not any(getattr(handler, "workset", False) for handler in logger.handlers):
        handler = logging.StreamHandler(sys.stdout)
        handler.setFormatter(logging.Formatter("%(message)s"))
        handler.workset = True  # type: ignore[attr-defined]
        logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    logger.propagate = False
    return logger


_setup()


def _emit(level: int, kind: str, fields: dict[str, Any]) -> None:
    logger = logging.getLogger(LOGGER)
    if not logger.isEnabledFor(level):
        return
    if _request_id.get() is not None:
        fields = {"request_id": _request_id.get(), **fields}
    kept = {name: "[withheld]" if any(word in name.lower() for word in _WITHHELD) else value
            for name, value in fields.items()}
    try:
        line = jsontext.dumps({"kind": kind, **kept})
    except (TypeError, ValueError, RecursionError):  # a field that is not JSON: keep the line, say so
        line = jsontext.dumps({"kind": kind, "unloggable_fields": sorted(kept)})
    logger.log(level, line)


def _message(error: BaseException) -> str:
    try:
        text = str(error)
    except Exception:  # an exception whose __str__ fails must not take the log line with it
        text = "(the message could not be read)"
    return text if len(text) <= MESSAGE_CHARS else text[: MESSAGE_CHARS - 1] + "…"


def _short(filename: str) -> str:
    """`chalicelib/toolbox.py`, not the machine's whole path."""
    return "/".join(filename.replace("\\", "/").split("/")[-2:])
