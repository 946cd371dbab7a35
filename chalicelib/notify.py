"""Announcing changes: the webhook queue and its signed deliveries.

Every working-set change records itself in the agent's outbox in the change's own transaction
(`change_seq` moves on, the outbox flag is set). `announce` drains one agent right after a
change: one SQS message for however many changes it finds (a sweep that demotes five tools of an
agent sends one), then clears the flag only if nothing newer came in. A Lambda that dies between
commit and drain leaves the flag set, and the next sweep drains it: a committed change is never
left unannounced. The consumer POSTs each message to the agent's webhook, signed the Standard
Webhooks way; a failure is retried by SQS with backoff and finally parked in the dead-letter
queue.

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
from typing import Any

from chalicelib import outbound
from chalicelib.clock import iso, utcnow
from chalicelib.config import settings
from chalicelib.errors import VendorError, WorksetError
from chalicelib.store import agents as agent_store
from chalicelib.store import outbox, queues, vault
from chalicelib.store.queues import Message
from chalicelib.store.records import AgentState, Run

SECRET_PREFIX = "whsec_"
LIST_CHANGED = "notifications/tools/list_changed"
RUN_FINISHED = "notifications/workset/run_finished"


class WebhookFailed(VendorError):
    """The receiver did not take the delivery (non-2xx or no answer); SQS will try again."""

    code = "webhook_failed"


def new_secret() -> str:
    """A signing secret in the Standard Webhooks form."""
    return SECRET_PREFIX + base64.b64encode(secrets.token_bytes(24)).decode()


def seal_secret(secret: str, *, account_id: str, agent_id: str) -> bytes:
    """The stored form of a signing secret (KMS ciphertext bound to the agent)."""
    return vault.encrypt(secret, account_id=account_id, connection_id=agent_id)


def announce(state: AgentState, *, changes: int, size: int) -> None:
    """After this request made `changes` changes to the agent's set: hand the news to the
    webhook queue and clear the outbox flag (kept if something newer came in meanwhile)."""
    if state.webhook_url:
        _send_change(state.agent.agent_id, state.change_seq + changes, size)


def drain() -> int:
    """Announce every agent left in the outbox (each sweep runs this); answers how many."""
    waiting = outbox.pending()
    for agent_id in waiting:
        state = agent_store.load_state(agent_id)
        if state is not None:
            _send_change(agent_id, state.change_seq, len(state.promotions))
    return len(waiting)


def _send_change(agent_id: str, seq: int, size: int) -> None:
    queues.send(settings().webhook_queue, [{
        "type": "tools_list_changed", "agent_id": agent_id, "seq": seq, "size": size,
        "event_id": f"evt_{agent_id}_{seq}", "at": iso(utcnow()),
    }])
    outbox.clear(agent_id, seq)


def run_finished(run: Run) -> None:
    """Tell the agent's webhook that a run which waited on a person has finished."""
    state = agent_store.load_state(run.agent_id)
    if state is None or not state.webhook_url:
        return
    queues.send(settings().webhook_queue, [{
        "type": "run_finished", "agent_id": run.agent_id, "run_id": run.run_id, "status": run.status,
        "event_id": f"evt_{run.run_id}_{run.status}", "at": iso(utcnow()),
    }])


def deliver(body: str) -> None:
    """POST one queued message to the agent's webhook, signed; raise WebhookFailed to retry."""
    message = json.loads(body)
    state = agent_store.load_state(message["agent_id"])
    if state is None or not state.webhook_url or not state.webhook_secret:
        return  # the agent or its webhook is gone: nothing to deliver, nothing to retry
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
        raise WebhookFailed(f"webhook for {state.agent.agent_id} failed: {error.message}") from error
    if not 200 <= response.status < 300:
        raise WebhookFailed(f"webhook for {state.agent.agent_id} answered HTTP {response.status}")


def consume(deliveries: list[Message]) -> list[str]:
    """Deliver a batch; answer the ids of the messages that failed. Each failure is put back with
    an exponential backoff (SQS retries it then, and parks it in the dead-letter queue after the
    last try); the others are done."""
    failed = []
    for delivery in deliveries:
        try:
            deliver(delivery.body)
        except WebhookFailed:
            failed.append(delivery.message_id)
            queues.retry_later(settings().webhook_queue, delivery.receipt_handle, backoff(delivery.receive_count))
    return failed


def backoff(receive_count: int) -> int:
    """Seconds before the next try: base x 2^(tries so far), at most 15 minutes."""
    return int(min(settings().webhook_retry_base_seconds * 2 ** max(receive_count - 1, 0), 900))


def sign(secret: str, message_id: str, timestamp: str, payload: bytes) -> str:
    """The Standard Webhooks signature: `v1,` + base64 HMAC-SHA256 over `id.timestamp.body`."""
    key = base64.b64decode(secret.removeprefix(SECRET_PREFIX))
    signed = f"{message_id}.{timestamp}.".encode() + payload
    return "v1," + base64.b64encode(hmac.new(key, signed, hashlib.sha256).digest()).decode()


def _envelope(message: dict[str, Any]) -> bytes:
    if message["type"] == "run_finished":
        params = {key: message[key] for key in ("agent_id", "run_id", "status", "event_id", "at")}
        method = RUN_FINISHED
    else:
        params = {key: message[key] for key in ("agent_id", "size", "event_id", "at")}
        method = LIST_CHANGED
    return json.dumps({"jsonrpc": "2.0", "method": method, "params": params}).encode()
