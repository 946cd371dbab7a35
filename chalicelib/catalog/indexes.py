"""The search index each warm instance keeps per account, current with the toolbox.

`current(account_id)` reads the toolbox's revision (one GetItem). When the index it holds is
older, it reads the change records since (`store.tools.changed_since`, one consistent Query) and
the heads they name (one BatchGetItem per 100), and updates the index in place
(`SearchIndex.updated`): a publish costs the next search about what the changed tools cost, not
a rebuild. It rebuilds from every head when it holds none, when the records no longer reach back
(expired, or written before records were kept), or when so much changed that reading it all is
cheaper.

Indexes are kept least recently used first out, within `WORKSET_SEARCH_CACHE_MB` of their own
estimated size (`SearchIndex.nbytes`, read at each use: an index grows after it was built, by the
vectors its searches compute for pending docs): an instance serving many accounts rebuilds some
of them, it never runs out of memory.
"""

from __future__ import annotations

import functools
import gc
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from chalicelib.base.config import settings
from chalicelib.store import tools as tool_store
from chalicelib.store.records import ToolVersion
from chalicelib.store.usage import Memory

if TYPE_CHECKING:
    from chalicelib.search.documents import Document
    from chalicelib.search.index import SearchIndex

INLINE_VECTORS = 8  # search vectors computed within one request (up to ~0.2 s each on a full core, ~0.7 s on 512 MB); more go to the work queue
MAX_CHANGED = 2_000  # past this many changed tools (20 batch reads) a full read is cheaper
MAX_REVISIONS = 500  # change records read at most; an index further behind is rebuilt


@dataclass(frozen=True)
class _Entry:
    revision: int
    index: SearchIndex

    @property
    def nbytes(self) -> int:
        """What the index takes now (not when it was built: its searches grow it)."""
        return self.index.nbytes


_entries: OrderedDict[str, _Entry] = OrderedDict()  # least recently used first
_lock = threading.Lock()  # one refresh at a time: a burst of searches on a stale index waits for one


def current(account_id: str) -> SearchIndex:
    """The account's search index as of the toolbox's current revision."""
    return current_with_memory(account_id)[0]


def current_with_memory(account_id: str) -> tuple[SearchIndex, Memory]:
    """The account's search index as of the toolbox's current revision, and where what its
    searches learned from use is (chalicelib/catalog/usage.py), read in the same GetItem."""
    revision, memory = tool_store.search_revisions(account_id)
    rebuilt = False
    # The entry found or made is the one answered: another account's build may drop it from the
    # cache at any moment between here and `_keep` (looked up again by key, it raised KeyError).
    entry = _held(account_id, revision)
    if entry is None:
        with _lock:
            entry = _held(account_id, revision)
            if entry is None:
                entry, rebuilt = _refresh(account_id, revision)
    with _lock:
        evicted = _keep(account_id, entry)
    if rebuilt or evicted:
        _release_freed_memory()  # the old indexes are unreferenced by now, unless a search still runs on one
    return entry.index, memory


def _held(account_id: str, revision: int) -> _Entry | None:
    """The account's cached entry when it is as of `revision` or newer."""
    entry = _entries.get(account_id)
    return entry if entry is not None and entry.revision >= revision else None


def clear() -> None:
    """Forget every index (tests; a process that wants its memory back)."""
    with _lock:
        _entries.clear()


def cached_bytes() -> int:
    """What the indexes held now take, by their own estimate."""
    return sum(entry.nbytes for entry in list(_entries.values()))


def _refresh(account_id: str, revision: int) -> tuple[_Entry, bool]:
    """Bring the account's index to `revision` (under the lock): the new entry, and whether it
    was built whole."""
    entry = _entries.get(account_id)
    if entry is not None and revision - entry.revision <= MAX_REVISIONS:
        changed = tool_store.changed_since(account_id, entry.revision, revision)
        if changed is not None and len(changed) <= MAX_CHANGED:
            heads = tool_store.get_heads(account_id, sorted(changed), consistent=True)
            index = entry.index.updated(_documents(list(heads.values())))
            _entries[account_id] = updated = _Entry(revision, index)
            return updated, False
    from chalicelib.search.index import SearchIndex  # numpy and the models: only where a search runs

    del entry
    _make_room(account_id)
    index = SearchIndex.build(_documents(tool_store.iter_heads(account_id)))
    _entries[account_id] = built = _Entry(revision, index)
    return built, True


def _make_room(account_id: str) -> None:
    """Before a build: drop the account's stale index, and the least recently used others until
    one more index as large as the largest held fits the budget, then hand their memory back; a
    build's own peak then never comes on top of a full cache."""
    expected = max((entry.nbytes for entry in _entries.values()), default=0)
    _entries.pop(account_id, None)
    budget = settings().search_cache_mb * (1 << 20)
    while _entries and sum(entry.nbytes for entry in _entries.values()) + expected > budget:
        _entries.popitem(last=False)
    _release_freed_memory()


def _keep(account_id: str, entry: _Entry) -> bool:
    """Hold `entry` as the most recently used, dropping the least recently used past the budget
    (never the one just used: an index larger than the whole budget still serves its search);
    whether any was dropped. A newer entry another search stored meanwhile stays."""
    held = _entries.get(account_id)
    if held is None or held.revision < entry.revision:
        _entries[account_id] = entry
    _entries.move_to_end(account_id)
    budget = settings().search_cache_mb * (1 << 20)
    evicted = False
    while len(_entries) > 1 and sum(e.nbytes for e in _entries.values()) > budget:
        _entries.popitem(last=False)
        evicted = True
    return evicted


def _release_freed_memory() -> None:
    """Hand the heap that a build or an evicted index freed back to the system. glibc keeps freed
    small blocks for reuse, and a build of 10,000 tools frees some 55 MiB of them, which a Lambda's
    memory limit counts as used (bench/index_updates.py prints the resident memory). No-op
    without glibc."""
    gc.collect()
    trim = _malloc_trim()
    if trim is not None:
        trim(0)


@functools.cache
def _malloc_trim() -> Callable[[int], int] | None:
    import ctypes  # only once a build or an eviction happens, not at every cold start

    try:
        return ctypes.CDLL(None).malloc_trim  # type: ignore[no-any-return]
    except (AttributeError, OSError):
        return None


def tool_of(key: str) -> tuple[str, str]:
    """(vendor, name) of an index key."""
    vendor, name = key.split("/", 1)
    return vendor, name


def _key(vendor: str, name: str) -> str:
    return f"{vendor}/{name}"


def _documents(heads: Iterable[ToolVersion]) -> list[Document]:
    """Search documents for tool heads, with their stored vectors, keeping only what the index
    needs of each head as it is read. A few missing vectors are computed by the index; many (a
    large import whose vectors the work queue is still computing) would stall this search, so
    they rank without the sentence signal until they arrive."""
    from chalicelib.search import structure
    from chalicelib.search.documents import PENDING, VECTOR_VERSION, Document

    documents = [Document(key=_key(head.vendor, head.name), vendor=head.vendor, name=head.name,
                          description=str(head.definition.get("description", "")),
                          vector=head.vector if head.vector_version == VECTOR_VERSION else None,
                          structure=structure.of(head.definition, head.origin))
                 for head in heads]
    if sum(document.vector is None for document in documents) <= INLINE_VECTORS:
        return documents
    return [replace(document, vector=PENDING) if document.vector is None else document for document in documents]
