"""The toolbox: immutable versions, the head copy of each tool's newest version, the revision.

Every write that changes heads moves the account's toolbox revision by exactly one, with a
conditional SET (not an ADD) so that the writer knows the number, and records in the same
transaction which heads it wrote (`ToolChangeItem`). Two writers that read the same revision
cannot both commit: the loser reads the revision again and sends its transaction once more.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from functools import partial
from typing import Any

from pynamodb.exceptions import DoesNotExist, TransactWriteError

from chalicelib.base.clock import utcnow
from chalicelib.base.errors import Busy
from chalicelib.store.base import (
    ConditionFailed,
    WriteRefused,
    batch_get_raw,
    cancellation_codes,
    error_code,
    key_ok,
    page,
    transaction,
)
from chalicelib.store.models import (
    ANY_TOOL,
    HEAD_PREFIX,
    VERSION_PREFIX,
    AccountItem,
    PolicyItem,
    ToolboxItem,
    ToolChangeItem,
    ToolHeadItem,
    ToolVersionItem,
    change_partition,
    change_sk,
    head_sk,
    policy_partition,
    policy_sk,
    version_sk,
)
from chalicelib.store.policies import setting_of
from chalicelib.store.records import Page, PolicySetting, ToolVersion
from chalicelib.store.usage import Memory, memory_of


def get_head(account_id: str, vendor: str, name: str) -> ToolVersion | None:
    """The newest version of a tool, or None."""
    if not key_ok(account_id, head_sk(vendor, name)):
        return None
    try:
        return _record(ToolHeadItem.get(account_id, head_sk(vendor, name)))
    except DoesNotExist:
        return None


def get_version(account_id: str, vendor: str, name: str, version: int) -> ToolVersion | None:
    """One version of a tool, or None."""
    if not key_ok(account_id, version_sk(vendor, name, version)):
        return None
    try:
        return _record(ToolVersionItem.get(account_id, version_sk(vendor, name, version)))
    except DoesNotExist:
        return None


def get_heads(account_id: str, tools: Iterable[tuple[str, str]], *,
              consistent: bool = False) -> dict[tuple[str, str], ToolVersion]:
    """The newest versions of several tools in batch reads (100 keys each), keyed by (vendor, name)."""
    keys = [(account_id, head_sk(vendor, name)) for vendor, name in tools]
    if not keys:
        return {}
    return {(item.vendor, item.name): _record(item)
            for item in ToolHeadItem.batch_get(keys, consistent_read=consistent)}


def get_versions(account_id: str, versions: Iterable[tuple[str, str, int]]) -> list[ToolVersion]:
    """Several versions, (vendor, name, version) each, in batch reads (unknown ones left out)."""
    keys = [(account_id, version_sk(vendor, name, version)) for vendor, name, version in versions]
    return [_record(item) for item in ToolVersionItem.batch_get(keys)] if keys else []


PolicyKey = tuple[str, str | None]  # (vendor, name); a name of None is the vendor's default


@dataclass(frozen=True)
class ToolsAndPolicies:
    """What `get_with_policies` found: heads by (vendor, name), versions by (vendor, name,
    version), and the approval policies a person set, by (vendor, name or None)."""

    heads: dict[tuple[str, str], ToolVersion] = field(default_factory=dict)
    versions: dict[tuple[str, str, int], ToolVersion] = field(default_factory=dict)
    policies: dict[PolicyKey, PolicySetting] = field(default_factory=dict)


def get_with_policies(account_id: str, *, heads: Iterable[tuple[str, str]] = (),
                      versions: Iterable[tuple[str, str, int]] = ()) -> ToolsAndPolicies:
    """These tools (newest versions, or given versions) and the approval policies that can apply to
    them (each tool's own, its vendor's default), in the same batch reads: the policies live in the
    same table, so asking for them costs keys, not calls (100 keys per BatchGetItem). Keys no item
    can have (from outside: too long, empty) are not sent; unknown ones are left out."""
    heads, versions = list(heads), list(versions)
    tools = list(dict.fromkeys([*heads, *((vendor, name) for vendor, name, _ in versions)]))
    policies = list(dict.fromkeys(key for vendor, name in tools for key in ((vendor, name), (vendor, ANY_TOOL))))
    keys = [(account_id, head_sk(vendor, name)) for vendor, name in heads]
    keys += [(account_id, version_sk(vendor, name, number)) for vendor, name, number in versions]
    keys += [(policy_partition(account_id), policy_sk(vendor, name)) for vendor, name in policies]
    keys = [key for key in keys if key_ok(*key)]
    found = ToolsAndPolicies()
    if not keys:
        return found
    for raw in batch_get_raw(ToolboxItem, keys):
        if raw["account_id"]["S"] == account_id:
            record = _record(ToolboxItem.from_raw_data(raw))
            if raw["sk"]["S"].startswith(HEAD_PREFIX):
                found.heads[(record.vendor, record.name)] = record
            elif raw["sk"]["S"].startswith(VERSION_PREFIX):
                found.versions[(record.vendor, record.name, record.version)] = record
        else:
            setting = setting_of(PolicyItem.from_raw_data(raw))
            found.policies[(setting.vendor, setting.name)] = setting
    return found


def list_heads(account_id: str) -> list[ToolVersion]:
    """Every tool of the account at its newest version (the whole toolbox, all pages)."""
    return list(iter_heads(account_id))


def iter_heads(account_id: str) -> Iterator[ToolVersion]:
    """`list_heads` a page at a time, each read as the caller gets to it: a caller that keeps only
    a little of each tool never holds the whole toolbox."""
    return map(_record, ToolHeadItem.query(account_id, ToolboxItem.sk.startswith(HEAD_PREFIX)))


def page_heads(account_id: str, *, limit: int, cursor: str | None = None) -> Page:
    """One page of the toolbox, ordered by vendor then name."""
    return page(ToolHeadItem, account_id, limit=limit, cursor=cursor, record=_record,
                range_key_condition=ToolboxItem.sk.startswith(HEAD_PREFIX))


def list_vendor_heads(account_id: str, vendor: str) -> list[ToolVersion]:
    """Every tool of one vendor at its newest version."""
    if not key_ok(account_id, head_sk(vendor, "")):
        return []
    return [_record(item) for item in ToolHeadItem.query(account_id, ToolboxItem.sk.startswith(head_sk(vendor, "")))]


def list_versions(account_id: str, vendor: str, name: str, *, consistent: bool = False) -> list[ToolVersion]:
    """Every version of one tool, oldest first."""
    if not key_ok(account_id, version_sk(vendor, name, 0)):
        return []
    condition = ToolboxItem.sk.startswith(f"{VERSION_PREFIX}{vendor}#{name}#")
    return [_record(item) for item in ToolVersionItem.query(account_id, condition, consistent_read=consistent)]


def toolbox_revision(account_id: str, *, consistent: bool = False) -> int:
    """A counter that every change to the toolbox's heads moves on by one."""
    item = AccountItem.get(account_id, attributes_to_get=["account_id", "toolbox_revision"], consistent_read=consistent)
    return int(item.toolbox_revision or 0)


def search_revisions(account_id: str) -> tuple[int, Memory]:
    """The toolbox revision, and the generation and revision of what its searches learned from
    use (chalicelib/catalog/usage.py), in one GetItem."""
    item = AccountItem.get(account_id, attributes_to_get=["account_id", "toolbox_revision", "memory_generation",
                                                          "memory_revision"])
    return int(item.toolbox_revision or 0), memory_of(item)


def changed_since(account_id: str, revision: int, current: int) -> set[tuple[str, str]] | None:
    """(vendor, name) of every head written after `revision` up to `current`, from the change
    records (one consistent Query); None when a record in the range is missing (expired, or the
    revision moved before records were kept), so the changes are unknown."""
    if current <= revision:
        return set()
    records = list(ToolChangeItem.query(change_partition(account_id), ToolChangeItem.sk.between(change_sk(revision + 1),
                                                                           change_sk(current)),
                                        consistent_read=True))
    if len(records) != current - revision:
        return None
    return {_tool_of(str(key)) for record in records for key in record.tools}


def _tool_of(key: str) -> tuple[str, str]:
    """(vendor, name) of a change record's "vendor/name"."""
    vendor, name = key.split("/", 1)
    return vendor, name


@dataclass(frozen=True)
class NewVersion:
    """A tool's next version: `previous` is the version it follows (0 for a new tool)."""

    vendor: str
    name: str
    definition: dict[str, Any]
    previous: int
    vector: bytes | None = field(default=None, repr=False)
    vector_version: str | None = None
    origin: dict[str, Any] | None = None
    guard: dict[str, Any] | None = None  # the hints Workset will enforce (chalicelib/tools/guards.py)
    accepted_by: str | None = None  # the person whose publish accepts a loosening of them


# A transaction holds at most 100 actions and 4 MB: a batch of tools (two items each), the
# account's revision and its change record stay within both.
BATCH_TOOLS = 49
BATCH_BYTES = 3_500_000


def put_version(account_id: str, new: NewVersion, published_by: str, now: datetime) -> ToolVersion:
    """Publish version `new.previous + 1` and make it the head, atomically.

    Raises `ConditionFailed` when another publish of the same tool got there first.
    """
    (published,) = put_versions(account_id, [new], published_by, now)
    return published


def put_versions(account_id: str, versions: Sequence[NewVersion], published_by: str,
                 now: datetime) -> list[ToolVersion]:
    """Publish several tools' next versions: one transaction per batch of up to BATCH_TOOLS tools,
    each also moving the toolbox's revision. Raises `ConditionFailed` when another publish of a
    tool in a batch got there first, `WriteRefused` when DynamoDB refuses what a batch holds (an
    item over its 400 KB): that batch wrote nothing (earlier batches stand)."""
    published: list[ToolVersion] = []
    revision = None
    for batch in version_batches(versions):
        records = [ToolVersion(new.vendor, new.name, new.previous + 1, new.definition, published_at=now,
                               published_by=published_by, vector=new.vector, vector_version=new.vector_version,
                               origin=new.origin, guard=new.guard, accepted_by=new.accepted_by,
                               accepted_at=now if new.accepted_by else None) for new in batch]
        try:
            revision = _revise(account_id, records, partial(_save_versions, account_id, batch, records), revision,
                               now)
        except TransactWriteError as error:  # neither a condition nor transient (transaction() raised those)
            # no code: no answer came (a timeout past the SDK's retries, a lost connection), so the
            # transaction may have been applied
            code = error_code(error)
            message = (error.cause_response_message or "")[:200] if code else "no answer came"
            raise WriteRefused(f"the store refused the write ({code or 'no code'}: {message})",
                               cancellation_codes(error), maybe_written=code is None) from error
        published.extend(records)
    return published


def version_batches(versions: Sequence[NewVersion]) -> Iterator[list[NewVersion]]:
    """The batches `put_versions` writes `versions` in, one transaction each: a caller that writes
    batch by batch knows, when one fails, that the others before it stand whole."""
    return _batches(versions, lambda new: 2 * len(json.dumps(new.definition)) + 2 * len(new.vector or b""))


def set_unavailable(account_id: str, heads: Sequence[ToolVersion], reason: str | None) -> None:
    """Mark tools unavailable for `reason`, or available again (None), each only while its head
    is still the version given; one transaction per batch, each moving the revision. Raises
    `ConditionFailed` when a head moved on: that batch wrote nothing."""
    action = ToolHeadItem.unavailable.set(reason) if reason is not None else ToolHeadItem.unavailable.remove()
    revision = None
    for batch in _batches(heads, lambda head: 0, tools=CHANGES_PER_REVISION):
        revision = _revise(account_id, batch, partial(_update_heads, account_id, [(head, [action]) for head in batch]),
                           revision, utcnow())


def accept_guard(account_id: str, head: ToolVersion, guard: dict[str, Any], accepted_by: str,
                 now: datetime) -> None:
    """A person accepts `guard` for the newest version: on the version and its head, in one
    transaction that moves the revision, only while the head is still that version. Raises
    `ConditionFailed` when a newer version was published meanwhile (nothing is written)."""
    actions = [ToolboxItem.guard.set(guard), ToolboxItem.accepted_by.set(accepted_by),
               ToolboxItem.accepted_at.set(now)]

    def write(tx: Any) -> None:
        tx.update(ToolVersionItem(account_id=account_id, sk=version_sk(head.vendor, head.name, head.version)),
                  actions=actions, condition=ToolboxItem.sk.exists())
        _update_heads(account_id, [(head, actions)], tx)

    _revise(account_id, [head], write, None, now)


def set_vectors(account_id: str, vectors: Sequence[tuple[ToolVersion, bytes]], vector_version: str) -> None:
    """Store search vectors computed after their versions were published: on each version, and on
    its head while the head is still that version (a newer head carries its own). The heads'
    transactions move the revision, so that warm search indexes take the vectors up."""
    for batch in _batches(vectors, lambda pair: 0, tools=CHANGES_PER_REVISION):
        with transaction() as write:
            for version, vector in batch:
                write.update(ToolVersionItem(account_id=account_id,
                                             sk=version_sk(version.vendor, version.name, version.version)),
                             actions=_vector_actions(vector, vector_version), condition=ToolboxItem.sk.exists())
        try:
            _set_head_vectors(account_id, batch, vector_version)
        except ConditionFailed:  # some heads moved on: the others one by one
            for pair in batch:
                try:
                    _set_head_vectors(account_id, [pair], vector_version)
                except ConditionFailed:
                    pass


def _set_head_vectors(account_id: str, pairs: Sequence[tuple[ToolVersion, bytes]], vector_version: str) -> None:
    updates = [(version, _vector_actions(vector, vector_version)) for version, vector in pairs]
    _revise(account_id, [version for version, _ in pairs], partial(_update_heads, account_id, updates), None, utcnow())


def _save_versions(account_id: str, batch: Sequence[NewVersion], records: Sequence[ToolVersion], write: Any) -> None:
    """Each new version, and its head while the head is still the version it follows."""
    for new, record in zip(batch, records):
        fields = _fields(account_id, record)
        write.save(ToolVersionItem(sk=version_sk(new.vendor, new.name, record.version), **fields),
                   condition=ToolboxItem.sk.does_not_exist())
        write.save(ToolHeadItem(sk=head_sk(new.vendor, new.name), **fields),
                   condition=ToolboxItem.sk.does_not_exist() if new.previous == 0
                   else ToolboxItem.version == new.previous)


def _update_heads(account_id: str, updates: Sequence[tuple[ToolVersion, list[Any]]], write: Any) -> None:
    """Each head's actions, while the head is still the version given."""
    for head, actions in updates:
        write.update(ToolHeadItem(account_id=account_id, sk=head_sk(head.vendor, head.name)),
                     actions=actions, condition=ToolboxItem.version == head.version)


def _vector_actions(vector: bytes, vector_version: str) -> list[Any]:
    return [ToolboxItem.vector.set(vector), ToolboxItem.vector_version.set(vector_version)]


# A transaction holds at most 100 actions: the heads a revision changes, the revision and its record.
CHANGES_PER_REVISION = 98
REVISION_ATTEMPTS = 8  # writers racing for one account's next revision; past this the store is Busy
CHANGE_RETENTION = timedelta(days=7)  # a warm index older than this rebuilds from the whole toolbox


def _revise(account_id: str, heads: Sequence[ToolVersion], write: Callable[[Any], None], revision: int | None,
            now: datetime) -> int:
    """Commit `write`'s items in one transaction that also moves the toolbox from `revision` (read
    here when None) to the next and records the heads it changed; returns the new revision.
    When another writer took that revision first, the revision is read again and the
    transaction sent again; a condition of `write`'s own that fails raises `ConditionFailed`."""
    if revision is None:
        revision = toolbox_revision(account_id, consistent=True)
    keys = sorted({f"{head.vendor}/{head.name}" for head in heads})
    for _ in range(REVISION_ATTEMPTS):
        try:
            with transaction() as tx:
                write(tx)
                tx.save(ToolChangeItem(account_id=change_partition(account_id), sk=change_sk(revision + 1),
                                       tools=keys, ttl=now + CHANGE_RETENTION),
                        condition=ToolChangeItem.sk.does_not_exist())
                at_revision = AccountItem.toolbox_revision == revision
                if revision == 0:  # an account item written before the revision had a default
                    at_revision = at_revision | AccountItem.toolbox_revision.does_not_exist()
                tx.update(AccountItem(account_id=account_id), actions=[AccountItem.toolbox_revision.set(revision + 1)],
                          condition=AccountItem.account_id.exists() & at_revision)
            return revision + 1
        except ConditionFailed:
            current = toolbox_revision(account_id, consistent=True)
            if current == revision:
                raise  # the revision held: one of `write`'s own conditions failed
            revision = current
    raise Busy("the toolbox is changing too fast to publish into; nothing was changed, try again shortly")


def _batches(items: Sequence[Any], size: Any, *, tools: int = BATCH_TOOLS) -> Iterator[list[Any]]:
    """Consecutive runs of at most `tools` items and BATCH_BYTES of `size(item)`."""
    batch: list[Any] = []
    total = 0
    for item in items:
        if batch and (len(batch) == tools or total + size(item) > BATCH_BYTES):
            yield batch
            batch, total = [], 0
        batch.append(item)
        total += size(item)
    if batch:
        yield batch


def _fields(account_id: str, record: ToolVersion) -> dict[str, Any]:
    return {"account_id": account_id, "vendor": record.vendor, "name": record.name, "version": record.version,
            "definition": record.definition, "published_at": record.published_at,
            "published_by": record.published_by, "vector": record.vector, "vector_version": record.vector_version,
            "origin": record.origin, "guard": record.guard, "accepted_by": record.accepted_by,
            "accepted_at": record.accepted_at}


def _record(item: ToolboxItem) -> ToolVersion:
    return ToolVersion(
        vendor=item.vendor,
        name=item.name,
        version=int(item.version),
        definition=item.definition,
        published_at=item.published_at,
        published_by=item.published_by,
        vector=bytes(item.vector) if item.vector else None,
        vector_version=item.vector_version,
        origin=item.origin,
        unavailable=getattr(item, "unavailable", None),
        guard=item.guard,
        accepted_by=item.accepted_by,
        accepted_at=item.accepted_at,
    )
