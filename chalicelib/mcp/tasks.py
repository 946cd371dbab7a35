"""The 2026-07-28 tasks extension (`io.modelcontextprotocol/tasks`, SEP-2663) for calls that wait
on a person. Only a client that declares the extension in its request's capabilities gets a
task; everyone else gets the plain `awaiting_approval` result. A task is a run: its id is the
run id, and `tasks/get` reads the run."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from chalicelib.base.clock import iso
from chalicelib.base.config import settings
from chalicelib.base.outcomes import RunStatus, tool_result
from chalicelib.calls import runs
from chalicelib.net.protocol import INVALID_PARAMS, ProtocolError, Request
from chalicelib.store.records import AgentState, Run

EXTENSION = "io.modelcontextprotocol/tasks"
POLL_INTERVAL_MS = 5000
# run status -> task status; a failed vendor call is a completed task whose result is an error
TASK_STATUS: dict[str, str] = {
    RunStatus.AWAITING: "working",
    RunStatus.RUNNING: "working",
    RunStatus.SUCCEEDED: "completed",
    RunStatus.FAILED: "completed",
    RunStatus.DENIED: "cancelled",
    RunStatus.EXPIRED: "cancelled",
}


def declared(request: Request) -> bool:
    """True when the client's capabilities on this request name the tasks extension."""
    extensions = request.client_capabilities.get("extensions")
    return request.modern and isinstance(extensions, dict) and EXTENSION in extensions


def created(run_id: str, state: AgentState, now: datetime) -> dict[str, Any]:
    """The CreateTaskResult answering a call that now waits for a person."""
    run = runs.get_for_agent(state, run_id, now)
    return {**_task(run), "resultType": "task"}


def get(state: AgentState, request: Request, now: datetime) -> dict[str, Any]:
    """`tasks/get`: the task's state and, once it is finished, the call's result."""
    task_id = request.params.get("taskId")
    if not isinstance(task_id, str):
        raise ProtocolError(INVALID_PARAMS, "Invalid params: tasks/get needs a taskId")
    try:
        run = runs.get_for_agent(state, task_id, now)
    except runs.RunNotFound:  # a store fault is ours, not an unknown task
        raise ProtocolError(INVALID_PARAMS, f"Unknown task: {task_id}") from None
    answer = _task(run)
    if run.status in (RunStatus.SUCCEEDED, RunStatus.FAILED):
        answer["result"] = tool_result(runs.recorded_answer(run))
    return answer


def _task(run: Run) -> dict[str, Any]:
    task: dict[str, Any] = {
        "taskId": run.run_id,
        "status": TASK_STATUS[run.status],
        "createdAt": iso(run.created_at),
        "lastUpdatedAt": iso(run.updated_at),
        "ttlMs": settings().approval_ttl_seconds * 1000,
        "pollIntervalMs": POLL_INTERVAL_MS,
    }
    if run.status == RunStatus.AWAITING:
        task["statusMessage"] = f"Waiting for a person to approve it at {runs.approval_url(run.run_id)}"
    elif run.status in (RunStatus.DENIED, RunStatus.EXPIRED):
        task["statusMessage"] = f"The call was {run.status}; it never reached the vendor."
    return task
