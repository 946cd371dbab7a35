"""find_tool learns from the account's own use.

When an agent's find_tool listed a tool and the same agent then promotes it, runs it with
run_tool or calls it (within WINDOW), the (request, tool) pair is evidence that the request
means that tool; later similar requests in the same account rank it higher
(chalicelib/search/usage.py). Nothing crosses accounts: the pairs live in the account's own
partition and are read only for its own searches.

* `observe_search` remembers what find_tool answered (the request and its first RECALLED_HITS
  hits; the agent's last SEARCHES_KEPT searches in one small item of its partition, read with
  the rest of it at no extra call: one PutItem per search that found something).
* `credit` turns a follow-up into a pair, once per search and tool, in one transaction with the
  agent's searches marked credited: a tool called a thousand times after one search is one pair.
* At most MEMORY_PAIRS pairs per account, the least recently seen evicted first: an agent that
  floods evidence only churns this bounded list, and the boost is capped besides.
* `memory` is what a search ranks with: cached per warm instance and reread (one Query) only when
  the account's memory revision, read in the GetItem that keeps the search index current, moved.
* `forget` (the admin's reset) makes everything learned unreadable in one write, then deletes it.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import replace
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

from chalicelib.base import log
from chalicelib.base.errors import Busy
from chalicelib.store import usage as usage_store
from chalicelib.store.base import ConditionFailed
from chalicelib.store.records import AgentState, Page, SeenSearch

if TYPE_CHECKING:
    from chalicelib.search.usage import Memory

MEMORY_PAIRS = 256  # per account: ~260 KB to read when it changed (about 1 KB a pair, most of it the vector)
RECALLED_HITS = 10  # a follow-up credits a search only for a tool among its first hits
SEARCHES_KEPT = 3  # an agent's last searches that a follow-up may credit
WINDOW = timedelta(minutes=10)  # how long after a search a follow-up still credits it
MEMORY_RETENTION = timedelta(days=180)  # a pair unused this long is dropped (TTL)
CACHED_ACCOUNTS = 16  # memories a warm instance keeps (each at most ~400 KB of float32 vectors)


def observe_search(state: AgentState, query: str, hits: Sequence[tuple[str, str]], now: datetime) -> None:
    """Remember that find_tool answered `hits` ((vendor, name), best first) for `query`, so that
    a promote, run_tool or call of one of them soon after credits the request."""
    if not hits:
        return
    account_id = state.agent.account_id
    with _lock:
        cached = _cache.get(account_id)
    generation = cached[0].generation if cached else usage_store.memory(account_id).generation
    seen = SeenSearch(query=query, hits=tuple(f"{vendor}/{name}" for vendor, name in hits[:RECALLED_HITS]),
                      at=now, generation=generation)
    earlier = [s for s in state.searches if s.query != query and timedelta(0) <= now - s.at <= WINDOW]
    try:
        usage_store.save_searches(state.agent.agent_id, [seen, *earlier[:SEARCHES_KEPT - 1]])
    except Exception as error:  # noqa: BLE001 - learning is a bonus: the search's answer stands
        log.failure("usage.observe_failed", error, account_id=account_id)


def credit(state: AgentState, vendor: str, name: str, now: datetime) -> bool:
    """The agent promoted, ran or called (vendor, name): if one of its recent searches listed it
    and has not credited it yet, store that (request, tool) pair; whether one was stored. Never
    fails the caller's operation: a reset or a busy store in between drops the pair."""
    key = f"{vendor}/{name}"
    search = next((s for s in state.searches
                   if key in s.hits and key not in s.credited and timedelta(0) <= now - s.at <= WINDOW), None)
    if search is None:
        return False
    from chalicelib.search.usage import query_vector  # the model: only once a pair is stored

    account_id = state.agent.account_id
    sk = usage_store.pair_sk(search.query, vendor, name)
    ages = usage_store.ages(account_id, search.generation)
    evict: list[str] = []
    if sk not in ages:
        oldest = sorted((seen, pair) for pair, seen in ages.items())
        evict = [pair for _, pair in oldest[:max(0, len(ages) + 1 - MEMORY_PAIRS)]][:90]
    searches = [replace(s, credited=(*s.credited, key)) if s is search else s for s in state.searches]
    try:
        usage_store.credit(account_id, search.generation, search.query, vendor, name, query_vector(search.query),
                           now, evict=evict, agent_id=state.agent.agent_id, searches=searches,
                           retention=MEMORY_RETENTION)
    except (ConditionFailed, Busy):
        return False  # a reset came between, or the store is busy: this pair is not learned
    except Exception as error:  # noqa: BLE001 - learning is a bonus: the promote or call stands
        log.failure("usage.credit_failed", error, account_id=account_id)
        return False
    return True


def memory(account_id: str, current: usage_store.Memory) -> Memory:
    """What the account's searches rank with, as of `current` (its memory's generation and
    revision, read with the toolbox revision): the cached one, or the pairs read again."""
    from chalicelib.search.usage import EMPTY, Evidence, Memory

    with _lock:
        cached = _cache.get(account_id)
        if cached is not None and cached[0] == current:
            _cache.move_to_end(account_id)
            return cached[1]
    if current.revision == 0:
        ranked = EMPTY  # nothing was ever learned: no read
    else:
        ranked = Memory([Evidence(p.query, f"{p.vendor}/{p.name}", p.count, p.vector)
                         for p in usage_store.pairs(account_id, current.generation)])
    with _lock:
        _cache[account_id] = (current, ranked)
        _cache.move_to_end(account_id)
        while len(_cache) > CACHED_ACCOUNTS:
            _cache.popitem(last=False)
    return ranked


def learned(account_id: str, *, limit: int, cursor: str | None) -> tuple[Page, int]:
    """One page of what the account's find_tool learned (request, tool, count, first and last
    seen; by key), and how many pairs it holds in all."""
    generation = usage_store.memory(account_id).generation
    return (usage_store.page_pairs(account_id, generation, limit=limit, cursor=cursor),
            usage_store.count(account_id, generation))


def size(account_id: str) -> int:
    """How many pairs the account's find_tool has learned."""
    return usage_store.count(account_id, usage_store.memory(account_id).generation)


def forget(account_id: str) -> int:
    """Reset what the account's find_tool learned: searches rank as if nothing was, from now on
    (every warm instance sees the revision move); how many pairs were deleted."""
    deleted = usage_store.reset(account_id)
    with _lock:
        _cache.pop(account_id, None)
    return deleted


def clear() -> None:
    """Forget every cached memory (tests)."""
    with _lock:
        _cache.clear()


_cache: OrderedDict[str, tuple[usage_store.Memory, Memory]] = OrderedDict()  # least recently used first
_lock = threading.Lock()
