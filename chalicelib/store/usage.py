"""What find_tool learns from an account's use (chalicelib/catalog/usage.py), and what an agent's last
searches answered.

Per account, the pairs live in one partition of the tools table per generation
(`memory_partition`): one Query reads them all, the domain keeps them to MEMORY_PAIRS. A credit is
one transaction: the pair (its count moved on), the pairs it evicts, the account's
`memory_revision` moved on (so warm instances reread the pairs) on the condition that the
generation is still the one the search saw, and the agent's searches marked credited. A reset
moves the generation on in one UpdateItem, so nothing of the old generation is read again from
that moment, then deletes the old partition a page at a time (each page one transaction).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from datetime import datetime, timedelta
from typing import Any, NamedTuple

from chalicelib.store.base import page, transaction
from chalicelib.store.models import (
    MEMORY_PREFIX,
    SEARCHES_SK,
    AccountItem,
    MemoryItem,
    SearchesItem,
    memory_partition,
)
from chalicelib.store.records import LearnedPair, Page, SeenSearch

DELETE_PAGE = 100  # items per reset transaction (DynamoDB's limit)


class Memory(NamedTuple):
    """Where an account's memory is: its generation (the partition) and its revision."""

    generation: int
    revision: int


def pair_sk(query: str, vendor: str, name: str) -> str:
    """Range key of a pair: a hash of the request and the tool (requests may be long)."""
    digest = hashlib.sha256(f"{query}\0{vendor}/{name}".encode()).hexdigest()[:32]
    return f"{MEMORY_PREFIX}{digest}"


def memory_of(item: AccountItem) -> Memory:
    """The memory fields of an account item read for them."""
    return Memory(int(item.memory_generation or 0), int(item.memory_revision or 0))


def memory(account_id: str) -> Memory:
    """The account's memory generation and revision (one GetItem)."""
    item = AccountItem.get(account_id, attributes_to_get=["account_id", "memory_generation", "memory_revision"])
    return memory_of(item)


def save_searches(agent_id: str, searches: Iterable[SeenSearch]) -> None:
    """Replace the agent's remembered searches (one PutItem)."""
    SearchesItem(agent_id, SEARCHES_SK, searches=[_search_json(s) for s in searches]).save()


def searches_of(item: SearchesItem) -> tuple[SeenSearch, ...]:
    """The searches an agent's item holds, newest first (malformed entries skipped)."""
    found = []
    for entry in item.searches or []:
        try:
            found.append(SeenSearch(query=str(entry["q"]), hits=tuple(map(str, entry["hits"])),
                                    at=datetime.fromisoformat(entry["at"]), generation=int(entry["gen"]),
                                    credited=tuple(map(str, entry.get("credited", [])))))
        except (KeyError, TypeError, ValueError):
            continue
    return tuple(found)


def _search_json(search: SeenSearch) -> dict[str, Any]:
    return {"q": search.query, "hits": list(search.hits), "at": search.at.isoformat(), "gen": search.generation,
            "credited": list(search.credited)}


def pairs(account_id: str, generation: int) -> list[LearnedPair]:
    """Every pair of the generation, with its vector (one Query; a second page only past 1 MB)."""
    return [_pair(item, with_vector=True) for item in MemoryItem.query(memory_partition(account_id, generation))]


def ages(account_id: str, generation: int) -> dict[str, datetime]:
    """Range key -> last seen of every pair of the generation (one small Query: keys and dates)."""
    items = MemoryItem.query(memory_partition(account_id, generation), attributes_to_get=["sk", "last_seen"])
    return {item.sk: item.last_seen for item in items}


def count(account_id: str, generation: int) -> int:
    """How many pairs the generation holds (a Query that counts)."""
    return MemoryItem.count(memory_partition(account_id, generation))


def page_pairs(account_id: str, generation: int, *, limit: int, cursor: str | None) -> Page:
    """One page of the generation's pairs, by key, without vectors."""
    return page(MemoryItem, memory_partition(account_id, generation), limit=limit, cursor=cursor,
                record=lambda item: _pair(item, with_vector=False),
                attributes_to_get=["account_id", "sk", "request", "vendor", "name", "times", "first_seen", "last_seen"])


def credit(account_id: str, generation: int, query: str, vendor: str, name: str, vector: bytes, now: datetime, *,
           evict: Iterable[str], agent_id: str, searches: Iterable[SeenSearch], retention: timedelta) -> None:
    """One transaction: the pair counted once more (created if new), `evict` deleted, the memory's
    revision moved on if the generation is still `generation` (ConditionFailed otherwise: a reset
    came between, nothing is written), and the agent's searches replaced by `searches`."""
    partition = memory_partition(account_id, generation)
    pair = MemoryItem(partition, pair_sk(query, vendor, name))
    account = AccountItem(account_id)
    same_generation = (AccountItem.memory_generation == generation)
    if generation == 0:
        same_generation = same_generation | AccountItem.memory_generation.does_not_exist()
    with transaction() as write:
        write.update(pair, actions=[
            MemoryItem.request.set(query), MemoryItem.vendor.set(vendor), MemoryItem.name.set(name),
            MemoryItem.kind.set("memory"), MemoryItem.vector.set(vector), MemoryItem.last_seen.set(now),
            MemoryItem.first_seen.set(MemoryItem.first_seen | now), MemoryItem.times.add(1),
            MemoryItem.ttl.set(now + retention),
        ])
        for sk in evict:
            write.delete(MemoryItem(partition, sk))
        write.update(account, actions=[AccountItem.memory_revision.add(1)],
                     condition=AccountItem.account_id.exists() & same_generation)
        write.save(SearchesItem(agent_id, SEARCHES_SK, searches=[_search_json(s) for s in searches]))


def reset(account_id: str) -> int:
    """Start the account's next generation (one UpdateItem: from then on nothing learned before
    is read), then delete the previous generation's pairs a page at a time; how many were deleted.
    A failure between pages leaves only unread pairs behind, which the next reset does not
    reach but their TTL does."""
    item = AccountItem(account_id)
    item.update(actions=[AccountItem.memory_generation.add(1), AccountItem.memory_revision.add(1)],
                condition=AccountItem.account_id.exists())
    previous = memory_partition(account_id, int(item.memory_generation) - 1)
    deleted = 0
    while True:
        keys = [entry.sk for entry in MemoryItem.query(previous, attributes_to_get=["account_id", "sk"],
                                                       limit=DELETE_PAGE, consistent_read=True)]
        if not keys:
            return deleted
        with transaction() as write:
            for sk in keys:
                write.delete(MemoryItem(previous, sk))
        deleted += len(keys)


def _pair(item: MemoryItem, *, with_vector: bool) -> LearnedPair:
    return LearnedPair(query=item.request, vendor=item.vendor, name=item.name, count=int(item.times),
                       first_seen=item.first_seen, last_seen=item.last_seen,
                       vector=bytes(item.vector) if with_vector and item.vector else b"")
