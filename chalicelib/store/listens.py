"""Slots for held `subscriptions/listen` requests, at most `limit` per account at once: each held
listen keeps one Lambda execution busy (README.md, "Deploying to AWS": what a listen costs), so an
account's listeners are bounded, and with them what they cost and the API's concurrency they take.

A slot is an item of the admin-tokens table (`ListenSlotItem`), held until its `ttl`: taking one is
one conditional write on a slot that is free or whose holder's time ran out (a Lambda that died
mid-hold frees its slot by the clock); giving it back is one conditional write by its holder.
"""

from __future__ import annotations

import random
import secrets
from datetime import datetime

from chalicelib.store.base import update_if
from chalicelib.store.models import LISTEN_SLOT_PREFIX, ListenSlotItem


def take(account_id: str, *, limit: int, now: datetime, until: datetime, pool: str = "") -> str | None:
    """Hold one of the account's `limit` slots of `pool` until `until`; the holder's token, or None
    when all are held (after at most `limit` conditional writes, starting at a random slot). Each
    pool has slots of its own (`""`: listens; `workingset.APPROVAL_HOLDS`: calls held for a person)."""
    holder = secrets.token_hex(8)
    first = random.randrange(limit) if limit > 0 else 0
    for offset in range(limit):
        slot = f"{pool}{(first + offset) % limit}"
        if update_if(ListenSlotItem(token_hash=_key(account_id, slot)),
                     [ListenSlotItem.holder.set(holder), ListenSlotItem.ttl.set(until)],
                     ListenSlotItem.ttl.does_not_exist() | (ListenSlotItem.ttl < now)):
            return f"{slot}:{holder}"
    return None


def give_back(account_id: str, taken: str) -> None:
    """Free the slot `take` answered, unless its time ran out and another holder has it."""
    slot, holder = taken.split(":", 1)
    update_if(ListenSlotItem(token_hash=_key(account_id, slot)), [ListenSlotItem.ttl.remove()],
              ListenSlotItem.holder == holder)


def _key(account_id: str, slot: str) -> str:
    return f"{LISTEN_SLOT_PREFIX}{account_id}#{slot}"
