"""Announcing changes: the webhook queue and its signed deliveries.

Every working-set change records itself in the agent's outbox in the change's own transaction
(`change_seq` moves on, the outbox flag is set). `announce` drains one agent right after a
change: one SQS message for however many changes it finds (a sweep that demotes five tools of an
agent sends one), then clears the flag only if nothing newer came in. A Lambda that dies between
commit and drain, or an SQS error there, leaves the flag set, and the next sweep drains it: a
committed change is never left unannounced, and never turned into an error for the caller who
made it. The consumer POSTs each message to the agent's webhook, signed the Standard Webhooks
way; each message of a batch succeeds or fails alone, a failure is retried by SQS with backoff
and finally parked in the dead-letter queue.

The envelope a webhook receives (header `webhook-id` = `event_id`; receivers dedupe on it):

    {"jsonrpc": "2.0", "method": "notifications/tools/list_changed",
     "params": {"agent_id": "ag...", "size": 3, "event_id": "evt_ag..._42", "at": "2026-11-30T07:00:00Z"}}

and for a run that waited on a person and has finished:

    {"jsonrpc": "2.0", "method": "notifications/workset/run_finished",
     "params": {"agent_id": "ag...", "run_id": "run...", "status": "succeeded", "event_id": "...", "at": "..."}}
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import secrets
import time
from collections.abc import Callable
from typing import Any

from chalicelib.base import log
from chalicelib.base.clock import iso, utcnow
from chalicelib.base.config import settings
from chalicelib.base.errors import VendorError, WorksetError
from chalicelib.net import outbound
from chalicelib.store import agents as agent_store
from chalicelib.store import outbox, queues, vault
from chalicelib.store.queues import Message
from chalicelib.store.records import AgentState, Run, RunToSweep

SECRET_PREFIX = "whsec_"
LIST_CHANGED = "notifications/tools/list_changed"
RUN_FINISHED = "notifications/workset/run_finished"
LIST_CHANGED_TYPE = "tools_list_changed"  # the queued message's `type`
RUN_FINISHED_TYPE = "run_finished"
MESSAGE_KEYS = {
    LIST_CHANGED_TYPE: ("agent_id", "size", "event_id", "at"),
    RUN_FINISHED_TYPE: ("agent_id", "run_id", "status", "event_id", "at"),
}
DELIVERED, SKIPPED = "delivered", "skipped"
DELIVERY_MARGIN_SECONDS = 2.0  # the agent's read, KMS and the log line around one delivery


class WebhookFailed(VendorError):
    """The receiver did not take the delivery (non-2xx or no answer); SQS will try again."""

    code = "webhook_failed"


class PoisonMessage(ValueError):
    """A queued message that no delivery could ever succeed with (not JSON, an unknown type, a key
    missing)."""


def new_secret() -> str:
    """A signing secret in the Standard Webhooks form."""
    return SECRET_PREFIX + base64.b64encode(secrets.token_bytes(24)).decode()


def seal_secret(secret: str, *, account_id: str, agent_id: str) -> bytes:
    """The stored form of a signing secret (KMS ciphertext bound to the agent)."""
    return vault.encrypt(secret, account_id=account_id, connection_id=agent_id)


def announce(state: AgentState, *, changes: int, size: int) -> None:
    """After this request made `changes` changes to the agent's set: hand the news to the
    webhook queue and clear the outbox flag (kept if something newer came in meanwhile). Best
    effort, never raising: the change is committed, so a failure here (SQS, DynamoDB) is logged
    and leaves the flag set for the sweep's drain, and the caller still gets its answer."""
    if state.webhook_url:
        _hand_over(state.agent.agent_id, state.change_seq + changes, size)


def drain() -> int:
    """Announce every agent left in the outbox (each sweep runs this); answers how many were
    handed over. One agent's failure is logged and leaves its flag for the next sweep."""
    handed = 0
    for agent_id in outbox.pending():
        try:
            state = agent_store.load_state(agent_id)
        except Exception as error:  # noqa: BLE001 - a failed enqueue is logged and left to the next sweep
            log.failure("webhook.enqueue_failed", error, agent_id=agent_id, left_to="next sweep")
            continue
        if state is not None and _hand_over(agent_id, state.change_seq, len(state.promotions)):
            handed += 1
    return handed


def _hand_over(agent_id: str, seq: int, size: int) -> bool:
    """Queue the agent's news up to `seq`, then clear its outbox flag; False (logged) on failure.
    A send whose clear fails is sent again by the drain: the same `event_id`, which receivers
    dedupe."""
    try:
        queues.send(settings().webhook_queue, [{
            "type": LIST_CHANGED_TYPE, "agent_id": agent_id, "seq": seq, "size": size,
            "event_id": f"evt_{agent_id}_{seq}", "at": iso(utcnow()),
        }])
        outbox.clear(agent_id, seq)
    except Exception as error:  # noqa: BLE001 - a failed enqueue is logged and left to the sweep's drain
        log.failure("webhook.enqueue_failed", error, agent_id=agent_id, seq=seq, left_to="sweep drain")
        return False
    return True


def run_finished(run: Run | RunToSweep) -> bool:
    """Hand the news that a run which waited on a person has ended to the webhook queue. True when
    it is handled (queued, or the agent has no webhook to tell); False, logged, when the queue or
    the store failed: the run stays in the sweep's index and the next sweep tries again, so the
    news is never lost (receivers dedupe on `event_id`)."""
    try:
        state = agent_store.load_state(run.agent_id)
        if state is None or not state.webhook_url:
            return True
        queues.send(settings().webhook_queue, [{
            "type": RUN_FINISHED_TYPE, "agent_id": run.agent_id, "run_id": run.run_id, "status": run.status,
            "event_id": f"evt_{run.run_id}_{run.status}", "at": iso(utcnow()),
        }])
    except Exception as error:  # noqa: BLE001 - a failed enqueue is logged and left to the next sweep
        log.failure("webhook.enqueue_failed", error, agent_id=run.agent_id, run_id=run.run_id, left_to="next sweep")
        return False
    return True


def consume(deliveries: list[Message], remaining_ms: Callable[[], int] | None = None) -> list[str]:
    """Deliver a batch, each message on its own; answer the ids of the messages that failed. A
    failure of one (a poison message, KMS, DynamoDB, the receiver) fails that message only and
    never the batch, so deliveries that succeeded are not sent again. Each failure is put back
    with an exponential backoff: SQS tries it again, and parks it in the dead-letter queue after
    the last try (`queues.MAX_RECEIVES`, the redrive policy's maxReceiveCount). A poison message
    goes the same way: a handful of cheap tries, then the dead-letter queue keeps its body for a
    person (dropping it would lose the evidence, and a message a newer consumer understands,
    during a deploy, would be lost with it).

    Given the Lambda's `remaining_ms`, no delivery starts that its deadline could not finish in
    time: the rest are reported failed untouched, and SQS hands them out again."""
    failed: list[str] = []
    for position, delivery in enumerate(deliveries):
        if remaining_ms is not None and remaining_ms() < _delivery_budget_ms():
            left = deliveries[position:]
            log.event("webhook.batch_cut", metrics=_delivery_metrics(failed=len(left)), left=len(left),
                      remaining_ms=remaining_ms())
            return failed + [message.message_id for message in left]
        if not _consume_one(delivery):
            failed.append(delivery.message_id)
    return failed


def _delivery_budget_ms() -> int:
    """The longest one delivery may take (its whole exchange's deadline), with a margin for its
    reads and log line."""
    return int((settings().webhook_timeout_seconds + DELIVERY_MARGIN_SECONDS) * 1000)


def _consume_one(delivery: Message) -> bool:
    """Deliver one message and write its one log line (never its body, the secret or the
    webhook's URL); True when the message is done."""
    started = time.perf_counter()
    facts: dict[str, Any] = {"message_id": delivery.message_id, "attempt": delivery.receive_count}
    try:
        outcome = deliver(_read(delivery.body), facts)
    except Exception as error:  # noqa: BLE001 - a failed delivery is retried by SQS, never lost
        queues.retry_later(settings().webhook_queue, delivery.receipt_handle, backoff(delivery.receive_count))
        last_try = delivery.receive_count >= queues.MAX_RECEIVES
        metrics = _delivery_metrics(failed=1, dead_lettered=int(last_try))
        fields = {**facts, "outcome": "failed", "dead_lettered": last_try, "duration_ms": log.elapsed_ms(started)}
        if isinstance(error, WebhookFailed):  # the receiver's fault: expected, retried
            log.event("webhook.delivery", metrics=metrics, reason=error.code, **fields)
        else:  # ours or AWS's: a poison message, KMS, DynamoDB, a bug
            log.failure("webhook.delivery", error, metrics=metrics,
                        reason="poison" if isinstance(error, PoisonMessage) else "error", **fields)
        return False
    log.event("webhook.delivery", metrics=_delivery_metrics(delivered=int(outcome == DELIVERED)), outcome=outcome,
              duration_ms=log.elapsed_ms(started), **facts)
    return True


def deliver(message: dict[str, Any], facts: dict[str, Any]) -> str:
    """POST one queued message to the agent's webhook, signed; raise WebhookFailed to retry.
    Answers `delivered`, or `skipped` when the agent or its webhook is gone (nothing to deliver,
    nothing to retry). `facts` gathers what the delivery's log line says."""
    facts.update({key: message[key] for key in ("type", "agent_id", "run_id", "event_id") if key in message})
    state = agent_store.load_state(message["agent_id"])
    if state is None or not state.webhook_url or not state.webhook_secret:
        return SKIPPED
    facts["account_id"] = state.agent.account_id
    payload = _envelope(message)
    secret = vault.decrypt(state.webhook_secret, account_id=state.agent.account_id, connection_id=state.agent.agent_id)
    timestamp = str(int(time.time()))
    headers = {
        "Content-Type": "application/json",
        "webhook-id": message["event_id"],
        "webhook-timestamp": timestamp,
        "webhook-signature": sign(secret, message["event_id"], timestamp, payload),
    }
    config = settings()
    try:
        response = outbound.send(
            outbound.HttpRequest("POST", state.webhook_url, headers, payload),
            timeout=config.webhook_timeout_seconds, max_bytes=1024, allow_private=config.allow_private_network,
        )
    except WorksetError as error:
        facts["cause"] = error.code  # not its message, which may quote the webhook's URL
        raise WebhookFailed(f"webhook for {state.agent.agent_id} failed: {error.code}") from error
    facts["receiver_status"] = response.status
    if not 200 <= response.status < 300:
        raise WebhookFailed(f"webhook for {state.agent.agent_id} answered HTTP {response.status}")
    return DELIVERED


def _read(body: str) -> dict[str, Any]:
    """A queued message, checked before anything is read or sent for it."""
    try:
        message = json.loads(body)
    except (ValueError, RecursionError):
        raise PoisonMessage("the message is not JSON") from None
    if not isinstance(message, dict) or message.get("type") not in MESSAGE_KEYS:
        raise PoisonMessage("the message is not an object of a known type")
    missing = [key for key in MESSAGE_KEYS[message["type"]] if key not in message]
    if missing:
        raise PoisonMessage(f"the message lacks {', '.join(missing)}")
    if not all(isinstance(message[key], str) and message[key] for key in ("agent_id", "event_id")):
        raise PoisonMessage("the message's agent_id and event_id must be text")
    return message


def _delivery_metrics(*, delivered: int = 0, failed: int = 0, dead_lettered: int = 0) -> list[log.Metric]:
    return [log.Metric("WebhookDeliveries", delivered), log.Metric("WebhookFailures", failed),
            log.Metric("WebhookDeadLettered", dead_lettered)]


def backoff(receive_count: int) -> int:
    """Seconds before the next try: base x 2^(tries so far), at most 15 minutes."""
    return int(min(settings().webhook_retry_base_seconds * 2 ** max(receive_count - 1, 0), 900))


def sign(secret: str, message_id: str, timestamp: str, payload: bytes) -> str:
    """The Standard Webhooks signature: `v1,` + base64 HMAC-SHA256 over `id.timestamp.body`."""
    key = base64.b64decode(secret.removeprefix(SECRET_PREFIX))
    signed = f"{message_id}.{timestamp}.".encode() + payload
    return "v1," + base64.b64encode(hmac.new(key, signed, hashlib.sha256).digest()).decode()


def _envelope(message: dict[str, Any]) -> bytes:
    if message["type"] == RUN_FINISHED_TYPE:
        params = {key: message[key] for key in ("agent_id", "run_id", "status", "event_id", "at")}
        method = RUN_FINISHED
    else:
        params = {key: message[key] for key in ("agent_id", "size", "event_id", "at")}
        method = LIST_CHANGED
    return json.dumps({"jsonrpc": "2.0", "method": method, "params": params}).encode()
