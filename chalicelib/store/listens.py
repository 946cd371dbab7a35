"""Slots for held `subscriptions/listen` requests, at most `limit` per account at once: each held
listen keeps one Lambda execution busy (README.md, "Deploying to AWS": what a listen costs), so an
account's listeners are bounded, and with them what they cost and the API's concurrency they take.

A slot is an item of the admin-tokens table (`ListenSlotItem`): held while it has a `holder` and
its `ttl` is ahead (a Lambda that died mid-hold frees its slot by the clock). Taking one is one
conditional write on a random slot, which is free unless the pool is busy; when it is not, one
strongly consistent BatchGetItem reads the pool's other slots, and only those seen free are tried,
each by a conditional write (the writes, not the read, keep two takers off one slot). A refusal
costs one write and one read, whatever `limit` is. Giving a slot back removes its holder and keeps
its `ttl`, so DynamoDB drops a slot no one takes again (a slot not there is free too).
"""

from __future__ import annotations

import random
import secrets
from datetime import datetime

from chalicelib.store.base import update_if
from chalicelib.store.models import LISTEN_SLOT_PREFIX, ListenSlotItem


def take(account_id: str, *, limit: int, now: datetime, until: datetime, pool: str = "") -> str | None:
    """Hold one of the account's `limit` slots of `pool` until `until`; the holder's token, or None
    when all are held. Each pool has slots of its own (`""`: listens; `workingset.APPROVAL_HOLDS`:
    calls held for a person)."""
    holder = secrets.token_hex(8)
    slots = [f"{pool}{number}" for number in range(limit)]
    random.shuffle(slots)  # takers start apart, so few meet on one slot
    if not slots:
        return None
    guess, others = slots[0], slots[1:]
    if _hold(account_id, guess, holder, now, until):
        return f"{guess}:{holder}"
    if not others:
        return None
    held = _held(account_id, others, now)
    for slot in others:
        if slot not in held and _hold(account_id, slot, holder, now, until):
            return f"{slot}:{holder}"
    return None


def give_back(account_id: str, taken: str) -> None:
    """Free the slot `take` answered, unless its time ran out and another holder has it."""
    slot, holder = taken.split(":", 1)
    update_if(ListenSlotItem(token_hash=_key(account_id, slot)), [ListenSlotItem.holder.remove()],
              ListenSlotItem.holder == holder)


def _hold(account_id: str, slot: str, holder: str, now: datetime, until: datetime) -> bool:
    # free: never held, given back (no holder), or its holder's time ran out; a slot given back
    # before slots kept their ttl has a holder and no ttl
    return update_if(ListenSlotItem(token_hash=_key(account_id, slot)),
                     [ListenSlotItem.holder.set(holder), ListenSlotItem.ttl.set(until)],
                     ListenSlotItem.holder.does_not_exist() | ListenSlotItem.ttl.does_not_exist()
                     | (ListenSlotItem.ttl < now))


def _held(account_id: str, slots: list[str], now: datetime) -> set[str]:
    """Which of these slots are held at `now`, as one strongly consistent read shows them (a
    BatchGetItem per 100)."""
    keys = {_key(account_id, slot): slot for slot in slots}
    return {keys[item.token_hash] for item in ListenSlotItem.batch_get(list(keys), consistent_read=True)
            if item.holder is not None and item.ttl is not None and item.ttl >= now}


def _key(account_id: str, slot: str) -> str:
    return f"{LISTEN_SLOT_PREFIX}{account_id}#{slot}"
