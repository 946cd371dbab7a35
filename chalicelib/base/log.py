"""Structured log lines: one JSON object per line on standard output (which Lambda sends to
CloudWatch), through the stdlib logger "workset.events". It does not propagate to Chalice's own
"workset" logger, which keeps only errors and prefixes every line with text that would break the
JSON.

Fields are named facts (ids, counts, kinds). Never pass a secret, a token, a request body or a
tool's input: a field whose name says it is a secret (`sensitive.secret_named`), or a body, is written
as "[withheld]".

One line per thing that happened: per request (`request_line`, written by the edge's guard with
whatever the request noted on the way, `note` and `measure`), per run, per sweep, per webhook
delivery. A line may carry metrics in CloudWatch's embedded metric format (EMF): an `_aws`
member names them and their dimensions, and their values are top-level members of the same line,
so CloudWatch Logs extracts them with no PutMetricData call
(https://docs.aws.amazon.com/AmazonCloudWatch/latest/monitoring/CloudWatch_Embedded_Metric_Format_Specification.html):

    {"kind": "mcp.request", "request_id": "...", "rpc_method": "tools/call", "stage": "prod",
     "McpCalls": 1, "McpErrors": 0,
     "_aws": {"Timestamp": 1764486000000, "CloudWatchMetrics": [{"Namespace": "Workset",
              "Dimensions": [["stage", "rpc_method"]],
              "Metrics": [{"Name": "McpCalls", "Unit": "Count"}, {"Name": "McpErrors", "Unit": "Count"}]}]}}

Every metric is dimensioned by the deployment's stage (dev and prod share an AWS account) and by
few-valued fields only (a method, an outcome): never an agent's, account's or run's id, each of
which would be a metric of its own.
"""

from __future__ import annotations

import logging
import sys
import time
import traceback
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any

from chalicelib.base import jsontext, sensitive

LOGGER = "workset.events"
TRACE_FRAMES = 5  # the innermost frames: enough to find the line, short enough to read
MESSAGE_CHARS = 500
NAMESPACE = "Workset"
DIMENSION_CHARS = 64  # a dimension's value is one of a few short words; anything longer is cut


@dataclass(frozen=True)
class Metric:
    """A value CloudWatch extracts from the line that carries it. `by` names fields of that same
    line whose values become its dimensions (besides the stage): few-valued fields only."""

    name: str
    value: float
    unit: str = "Count"
    by: tuple[str, ...] = ()


def event(kind: str, *, metrics: Iterable[Metric] = (), **fields: Any) -> None:
    """Log that something happened (INFO)."""
    _emit(logging.INFO, kind, fields, metrics)


def failure(kind: str, error: BaseException, *, metrics: Iterable[Metric] = (), **fields: Any) -> None:
    """Log an unexpected exception (ERROR): its class, its message (credentials withheld) and the
    innermost frames of its traceback (file, line, function; no locals, no source text), and the
    class and innermost frame of each exception it was raised from or while handling."""
    frames = traceback.extract_tb(error.__traceback__)[-TRACE_FRAMES:]
    causes = [f"{type(cause).__name__} at {_frame(traceback.extract_tb(cause.__traceback__)[-1:])}"
              for cause in _causes(error)]
    _emit(logging.ERROR, kind, {
        **fields,
        "error": type(error).__name__,
        "message": _message(error),
        "trace": [_frame([frame]) for frame in frames],
        **({"causes": causes} if causes else {}),
    }, metrics)


@dataclass
class _Line:
    """What the line of the request being served has gathered so far."""

    fields: dict[str, Any] = field(default_factory=dict)
    metrics: dict[str, Metric] = field(default_factory=dict)


_request_id: ContextVar[str | None] = ContextVar("request_id", default=None)
_line: ContextVar[_Line | None] = ContextVar("request_line", default=None)


@contextmanager
def bound(request_id: str) -> Iterator[None]:
    """While serving one request (or one Lambda invocation): every line logged carries its id (a
    run's line too), and `note` and `measure` gather onto its one line."""
    id_token = _request_id.set(request_id)
    line_token = _line.set(_Line())
    try:
        yield
    finally:
        _line.reset(line_token)
        _request_id.reset(id_token)


def note(**fields: Any) -> None:
    """Attach facts to the current request's line (the caller's account and agent, the MCP method,
    a run id); nothing outside a request."""
    line = _line.get()
    if line is not None:
        line.fields.update(fields)


def measure(name: str, value: float, unit: str = "Count", *, by: tuple[str, ...] = ()) -> None:
    """Attach a metric to the current request's line (replacing one of the same name); nothing
    outside a request."""
    line = _line.get()
    if line is not None:
        line.metrics[name] = Metric(name, value, unit, by)


def stage_from(reader: Callable[[], str]) -> None:
    """Dimension every metric by the stage `reader` answers as its line is written. config
    registers its settings' stage when it is imported (config imports this module, never the
    other way; app.py imports config before any line is written)."""
    global _stage_reader
    _stage_reader = reader


def _no_stage() -> str:
    return "unset"


_stage_reader: Callable[[], str] = _no_stage


def request_line(kind: str, **fields: Any) -> None:
    """Write the current request's one line: `fields`, then what was noted while serving it."""
    line = _line.get() or _Line()
    _emit(logging.INFO, kind, {**fields, **line.fields}, line.metrics.values())


def request_id(context: Mapping[str, Any] | None) -> str:
    """API Gateway's id for the request (`requestContext.requestId`), or a new one where there
    is none (chalice local, the test client)."""
    given = (context or {}).get("requestId")
    if isinstance(given, str) and given and jsontext.text_fault(given) is None:
        return given
    return uuid.uuid4().hex


def invocation_id(context: Any) -> str:
    """Lambda's id for an invocation (a scheduled sweep, a queue batch): the one its own START and
    REPORT lines carry; a new one where there is none."""
    given = getattr(context, "aws_request_id", None)
    if isinstance(given, str) and given and jsontext.text_fault(given) is None:
        return given
    return uuid.uuid4().hex


def elapsed_ms(started: float) -> float:
    """Milliseconds since `started` (a `time.perf_counter()` reading), to a tenth."""
    return round((time.perf_counter() - started) * 1000, 1)


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


def _emit(level: int, kind: str, fields: dict[str, Any], metrics: Iterable[Metric] = ()) -> None:
    logger = logging.getLogger(LOGGER)
    if not logger.isEnabledFor(level):
        return
    if _request_id.get() is not None:
        fields = {"request_id": _request_id.get(), **fields}
    kept = {name: "[withheld]" if sensitive.secret_named(name) or "body" in name.lower() else value
            for name, value in fields.items()}
    metrics = list(metrics)
    if metrics:
        kept = _embed(kept, metrics)
    try:
        line = jsontext.dumps({"kind": kind, **kept})
    except (TypeError, ValueError, RecursionError):  # a field that is not JSON: keep the line, say so
        line = jsontext.dumps({"kind": kind, "unloggable_fields": sorted(kept)})
    logger.log(level, line)


def _embed(line: dict[str, Any], metrics: list[Metric]) -> dict[str, Any]:
    """The line as an EMF document: each metric's value a top-level member, each dimension a
    top-level string member (the spec requires every target member at the root), one directive
    per set of dimensions."""
    line = {**line, "stage": _stage_reader()}
    directives: dict[tuple[str, ...], list[dict[str, str]]] = {}
    for metric in metrics:
        dimensions = ("stage", *metric.by)
        for name in metric.by:
            line[name] = _dimension(line.get(name))
        line[metric.name] = metric.value
        directives.setdefault(dimensions, []).append({"Name": metric.name, "Unit": metric.unit})
    line["_aws"] = {
        "Timestamp": int(time.time() * 1000),
        "CloudWatchMetrics": [{"Namespace": NAMESPACE, "Dimensions": [list(dimensions)], "Metrics": definitions}
                              for dimensions, definitions in directives.items()],
    }
    return line


def _dimension(value: Any) -> str:
    text = value if isinstance(value, str) else "none" if value is None else str(value)
    return text[:DIMENSION_CHARS] or "none"


def _message(error: BaseException) -> str:
    try:
        text = sensitive.withheld(str(error))
    except Exception:  # noqa: BLE001 - an exception whose __str__ fails must not take the log line with it
        text = "(the message could not be read)"
    return text if len(text) <= MESSAGE_CHARS else text[: MESSAGE_CHARS - 1] + "…"


CAUSES = 3  # exceptions down the chain named on a failure's line


def _causes(error: BaseException) -> list[BaseException]:
    """The exceptions `error` was raised from (or while handling), nearest first, at most CAUSES."""
    found: list[BaseException] = []
    cause = error.__cause__ or (None if error.__suppress_context__ else error.__context__)
    while cause is not None and len(found) < CAUSES and cause not in found:
        found.append(cause)
        cause = cause.__cause__ or (None if cause.__suppress_context__ else cause.__context__)
    return found


def _frame(frames: list[traceback.FrameSummary]) -> str:
    """`catalog/toolbox.py:231 search` of the first of `frames` ("?" when there is none)."""
    return f"{_short(frames[0].filename)}:{frames[0].lineno} {frames[0].name}" if frames else "?"


def _short(filename: str) -> str:
    """`catalog/toolbox.py`, not the machine's whole path."""
    return "/".join(filename.replace("\\", "/").split("/")[-2:])
