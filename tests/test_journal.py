"""local/journal.py keeps the local stack's tables on disk: every write moto commits is one fsync'd
journal line before the answer, a start loads the snapshot and replays the journals after it, and
compaction folds the journals into the next snapshot. Driven in process against the moto backend
the harness gives every test (conftest's `aws`): writes go through boto3 and the app's own store,
a "crash" is what kill -9 leaves (the journal file closed by the kernel, nothing compacted), and
a "restart" is a second Journal restoring the same folder into emptied tables.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest
from moto.core import DEFAULT_ACCOUNT_ID
from moto.dynamodb.models import dynamodb_backends

from chalicelib.access import connections, credentials
from chalicelib.base.clock import utcnow
from chalicelib.identity import accounts
from local import emulator
from local import journal as journal_module
from local.journal import FORMAT, Journal

REGION = "us-east-1"
THINGS = "journal-things"  # a table of this module's own, beside the app's
BLOB = bytes(range(256))  # every byte value, as a ciphertext may hold


# --- the harness ----------------------------------------------------------------------------------

@pytest.fixture
def backend() -> Any:
    return dynamodb_backends[DEFAULT_ACCOUNT_ID][REGION]


@pytest.fixture
def dynamodb() -> Any:
    """A boto3 client, with this module's table (pk, sk) created."""
    client = boto3.client("dynamodb", region_name=REGION)
    client.create_table(TableName=THINGS, BillingMode="PAY_PER_REQUEST",
                        KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"},
                                   {"AttributeName": "sk", "KeyType": "RANGE"}],
                        AttributeDefinitions=[{"AttributeName": "pk", "AttributeType": "S"},
                                              {"AttributeName": "sk", "AttributeType": "S"}])
    return client


@pytest.fixture
def journals(tmp_path: Path, backend: Any) -> Iterator[Callable[[], Journal]]:
    """Opens Journals on tmp_path; whatever happens, none stays attached to the emulator after the
    test (the next test's writes must not reach this folder)."""
    opened: list[Journal] = []

    def open_journal() -> Journal:
        journal = Journal(tmp_path, backend)
        opened.append(journal)
        return journal

    try:
        yield open_journal
    finally:
        emulator.record_to(None)
        for journal in opened:
            if journal._file is not None:
                journal._file.close()


def _crash(journal: Journal) -> None:
    """What kill -9 leaves: the process gone, its journal closed by the kernel, nothing compacted."""
    emulator.record_to(None)
    journal._file.close()


def _restart(open_journal: Callable[[], Journal], backend: Any, client: Any) -> Journal:
    """Empty every table (a fresh emulator), then restore the folder with a new Journal."""
    for table in backend.tables.values():
        names = [table.hash_key_attr] + ([table.range_key_attr] if table.range_key_attr else [])
        for item in list(table.all_items()):
            attributes = item.to_json()["Attributes"]
            backend.delete_item(table.name, {name: attributes[name] for name in names})
    assert all(not items for items in _contents(client).values())  # really empty
    journal = open_journal()
    journal.restore()
    return journal


def _contents(client: Any) -> dict[str, list[dict[str, Any]]]:
    """Every table's items, as the app reads them (boto3 decodes binary to bytes), in a fixed order."""
    found = {}
    for name in client.list_tables()["TableNames"]:
        items = [item for page in client.get_paginator("scan").paginate(TableName=name, ConsistentRead=True)
                 for item in page["Items"]]
        found[name] = sorted(items, key=lambda item: json.dumps(item, sort_keys=True, default=repr))
    return found


def _journal_files(folder: Path) -> list[Path]:
    """The folder's journals, oldest generation first."""
    return sorted(folder.glob("journal-*.jsonl"), key=journal_module._generation)


def _journal_lines(folder: Path) -> list[bytes]:
    """Every line of every journal in the folder, oldest journal first."""
    return [line for path in _journal_files(folder) for line in path.read_bytes().splitlines(keepends=True)]


def _key(pk: str, sk: str = "-") -> dict[str, Any]:
    return {"pk": {"S": pk}, "sk": {"S": sk}}


def _thing(pk: str, sk: str = "-", **attributes: Any) -> dict[str, Any]:
    """An item with binary in every shape DynamoDB has: B, BS, and B inside a map and a list."""
    return {**_key(pk, sk), "cipher": {"B": BLOB}, "ciphers": {"BS": [b"\x00", b"\xff\xfe"]},
            "nested": {"M": {"inner": {"B": b"\x01\x02"}, "list": {"L": [{"B": b"\x03"}, {"N": "1.50"}]}}},
            **attributes}


def _get(client: Any, pk: str, sk: str = "-") -> dict[str, Any] | None:
    return client.get_item(TableName=THINGS, Key=_key(pk, sk), ConsistentRead=True).get("Item")


# --- (a) every committed write kind is journaled, and replays to the same items -------------------

def _nothing(client: Any) -> None:
    pass


def _put_a(client: Any) -> None:
    client.put_item(TableName=THINGS, Item=_thing("a"))


def _put_a_and_b(client: Any) -> None:
    _put_a(client)
    client.put_item(TableName=THINGS, Item=_thing("b", "2"))


def _update_a(client: Any) -> None:
    client.update_item(TableName=THINGS, Key=_key("a"), UpdateExpression="SET more = :blob, nested.added = :blob, "
                       "n = :n ADD ciphers :set REMOVE nested.#list", ExpressionAttributeNames={"#list": "list"},
                       ExpressionAttributeValues={":blob": {"B": b"\x10\x11"}, ":n": {"N": "7"},
                                                  ":set": {"BS": [b"\x20"]}})


def _delete_a(client: Any) -> None:
    client.delete_item(TableName=THINGS, Key=_key("a"))


def _transaction(client: Any) -> None:
    client.transact_write_items(TransactItems=[
        {"Put": {"TableName": THINGS, "Item": _thing("c"), "ConditionExpression": "attribute_not_exists(pk)"}},
        {"Update": {"TableName": THINGS, "Key": _key("a"), "UpdateExpression": "SET cipher = :blob",
                    "ExpressionAttributeValues": {":blob": {"B": b"\x99"}}}},
        {"Delete": {"TableName": THINGS, "Key": _key("b", "2")}},
    ])


def _batch(client: Any) -> None:
    client.batch_write_item(RequestItems={THINGS: [
        {"PutRequest": {"Item": _thing("d")}},
        {"PutRequest": {"Item": _thing("e", "1")}},
        {"DeleteRequest": {"Key": _key("a")}},
    ]})


def _connection(client: Any) -> None:
    account, _ = accounts.create_account("acme", utcnow())
    connections.create(account.account_id, {"vendor": "keep", "auth": {"type": "bearer", "token": "s3cret"}},
                       utcnow())


KINDS = {  # kind: (what is there before, the write)
    "put": (_nothing, _put_a),
    "update": (_put_a, _update_a),
    "delete": (_put_a_and_b, _delete_a),
    "transaction": (_put_a_and_b, _transaction),
    "batch-write": (_put_a, _batch),
    "connection (the app's ciphertext)": (_nothing, _connection),
}


@pytest.mark.parametrize("kind", KINDS)
def test_every_committed_write_is_journaled_and_replays_to_the_same_items(
        kind: str, dynamodb: Any, backend: Any, journals: Callable[[], Journal]) -> None:
    # GIVEN a journaled emulator, some items, and a write of this kind acknowledged after them
    setup, write = KINDS[kind]
    first = journals()
    first.restore()
    setup(dynamodb)
    before = _contents(dynamodb)
    write(dynamodb)
    acknowledged = _contents(dynamodb)
    assert acknowledged != before  # the write changed something a lost line would lose
    # WHEN the process dies and a new one restores the folder into empty tables
    _crash(first)
    _restart(journals, backend, dynamodb)
    # THEN exactly the acknowledged items are back, binary attributes byte for byte
    assert _contents(dynamodb) == acknowledged


def test_a_restored_connection_still_decrypts(dynamodb: Any, backend: Any, journals: Callable[[], Journal]) -> None:
    # GIVEN a connection stored through the app (its secret is KMS ciphertext, a B attribute)
    first = journals()
    first.restore()
    account, _ = accounts.create_account("acme", utcnow())
    created = connections.create(account.account_id, {"vendor": "keep", "auth": {"type": "bearer",
                                                                                "token": "s3cret"}}, utcnow())
    # WHEN the process dies and the folder is restored
    _crash(first)
    _restart(journals, backend, dynamodb)
    # THEN the same ciphertext comes back, and decrypts to the secret a call carries
    assert connections.get(account.account_id, created.connection_id).ciphertext == created.ciphertext
    credential = credentials.credential(account.account_id, created.connection_id, "https://keep.example/x")
    assert credential.value == "Bearer s3cret"


def _conditioned_on_the_bytes(client: Any) -> None:
    client.update_item(TableName=THINGS, Key=_key("a"), UpdateExpression="SET n = :n", ConditionExpression="cipher = :b",
                       ExpressionAttributeValues={":b": {"B": BLOB}, ":n": {"N": "1"}})
    assert _get(client, "a")["n"] == {"N": "1"}


def _added_to_the_binary_set(client: Any) -> None:
    client.update_item(TableName=THINGS, Key=_key("a"), UpdateExpression="ADD ciphers :set",
                       ExpressionAttributeValues={":set": {"BS": [b"\x00"]}})
    assert sorted(_get(client, "a")["ciphers"]["BS"]) == [b"\x00", b"\xff\xfe"]  # a set: each value once


@pytest.mark.parametrize("write", [_conditioned_on_the_bytes, _added_to_the_binary_set], ids=["condition", "add-to-set"])
def test_a_restored_binary_value_behaves_as_the_same_bytes_written_before(
        write: Callable[[Any], None], dynamodb: Any, backend: Any, journals: Callable[[], Journal]) -> None:
    # GIVEN the same binary item written through the API, and journaled then restored after a crash
    _put_a(dynamodb)
    write(dynamodb)  # (the same write works on the item as written: the test is about the restart)
    first = journals()
    first.restore()
    _put_a(dynamodb)
    _crash(first)
    _restart(journals, backend, dynamodb)
    # WHEN the write is made on the restored item
    # THEN it applies as it did before the restart
    write(dynamodb)


# --- (b) a cancelled transaction ------------------------------------------------------------------

def test_a_cancelled_transaction_writes_no_line_and_restores_to_before_it(
        dynamodb: Any, backend: Any, journals: Callable[[], Journal], tmp_path: Path) -> None:
    # GIVEN journaled items
    first = journals()
    first.restore()
    _put_a_and_b(dynamodb)
    before = _contents(dynamodb)
    lines = _journal_lines(tmp_path)
    # WHEN a transaction puts, updates and deletes, and then its last condition fails
    with pytest.raises(dynamodb.exceptions.TransactionCanceledException):
        dynamodb.transact_write_items(TransactItems=[
            {"Put": {"TableName": THINGS, "Item": _thing("new")}},
            {"Update": {"TableName": THINGS, "Key": _key("a"), "UpdateExpression": "SET cipher = :blob",
                        "ExpressionAttributeValues": {":blob": {"B": b"\x99"}}}},
            {"Delete": {"TableName": THINGS, "Key": _key("b", "2")}},
            {"ConditionCheck": {"TableName": THINGS, "Key": _key("absent"), "ConditionExpression": "attribute_exists(pk)"}},
        ])
    # THEN no journal line was written, and neither the live tables nor a restart show any of it
    assert _journal_lines(tmp_path) == lines
    assert _contents(dynamodb) == before
    _crash(first)
    _restart(journals, backend, dynamodb)
    assert _contents(dynamodb) == before


# --- (c) a torn last line -------------------------------------------------------------------------

def test_a_torn_last_line_is_dropped_and_the_lines_before_it_kept(
        dynamodb: Any, backend: Any, journals: Callable[[], Journal], tmp_path: Path) -> None:
    # GIVEN two acknowledged puts, and the process dying halfway through writing a third line
    first = journals()
    first.restore()
    _put_a_and_b(dynamodb)
    acknowledged = _contents(dynamodb)
    _crash(first)
    newest = _journal_files(tmp_path)[-1]
    torn = json.dumps([[THINGS, _key("torn"), {**_key("torn"), "cipher": {"B": "AAAA"}}]]).encode()
    with newest.open("ab") as file:
        file.write(torn[: len(torn) // 2])
    # WHEN the folder is restored
    second = _restart(journals, backend, dynamodb)
    # THEN the two puts are there and the torn one is not
    assert _contents(dynamodb) == acknowledged
    assert _get(dynamodb, "torn") is None
    # AND the journal goes on: a write after the restart survives the next crash
    dynamodb.put_item(TableName=THINGS, Item=_thing("after"))
    expected = _contents(dynamodb)
    _crash(second)
    _restart(journals, backend, dynamodb)
    assert _contents(dynamodb) == expected


def test_a_transaction_torn_while_written_is_dropped_whole(
        dynamodb: Any, backend: Any, journals: Callable[[], Journal], tmp_path: Path) -> None:
    # GIVEN items, then a transaction (put, update, delete) whose journal line the crash cut in half
    first = journals()
    first.restore()
    _put_a_and_b(dynamodb)
    before = _contents(dynamodb)
    lines = _journal_lines(tmp_path)
    _transaction(dynamodb)
    assert len(_journal_lines(tmp_path)) == len(lines) + 1  # the whole transaction is one line
    _crash(first)
    newest = _journal_files(tmp_path)[-1]
    data = newest.read_bytes()
    last = data.rstrip(b"\n").rfind(b"\n") + 1  # where the transaction's line starts
    newest.write_bytes(data[: last + (len(data) - last) // 2])
    # WHEN the folder is restored
    _restart(journals, backend, dynamodb)
    # THEN none of the transaction is there (not its put, not its update, not its delete)
    assert _contents(dynamodb) == before


# --- (d) a crash between rotation and snapshot ----------------------------------------------------

def test_a_crash_between_rotation_and_snapshot_replays_both_journals_in_order(
        dynamodb: Any, backend: Any, journals: Callable[[], Journal], tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    # GIVEN a journaled put, then a compaction that rotated the journal and died before its snapshot
    first = journals()
    first.restore()
    dynamodb.put_item(TableName=THINGS, Item=_thing("a", n={"N": "1"}))
    dynamodb.put_item(TableName=THINGS, Item=_thing("gone"))
    snapshot = json.loads((tmp_path / "snapshot.json").read_text())

    def die(path: Path, data: bytes) -> None:
        raise OSError("the machine lost power")

    monkeypatch.setattr(journal_module, "_write_atomically", die)
    with pytest.raises(OSError):
        first.compact()
    monkeypatch.undo()
    # AND writes after the rotation, in the new journal, that change the older journal's items
    dynamodb.update_item(TableName=THINGS, Key=_key("a"), UpdateExpression="SET n = :n",
                         ExpressionAttributeValues={":n": {"N": "2"}})
    dynamodb.delete_item(TableName=THINGS, Key=_key("gone"))
    expected = _contents(dynamodb)
    _crash(first)
    generations = sorted(int(path.stem.removeprefix("journal-")) for path in tmp_path.glob("journal-*.jsonl"))
    assert json.loads((tmp_path / "snapshot.json").read_text()) == snapshot  # the old snapshot still
    assert len(generations) == 2 and generations[0] >= snapshot["generation"]
    # WHEN the folder is restored
    _restart(journals, backend, dynamodb)
    # THEN the older journal was replayed first, then the newer one
    assert _get(dynamodb, "a")["n"] == {"N": "2"}
    assert _get(dynamodb, "gone") is None
    assert _contents(dynamodb) == expected


def _line(*records: tuple[dict[str, Any], dict[str, Any] | None]) -> str:
    return json.dumps([[THINGS, key, item] for key, item in records]) + "\n"


def test_journals_replay_by_generation_from_the_snapshots_and_older_ones_are_ignored(
        dynamodb: Any, backend: Any, journals: Callable[[], Journal], tmp_path: Path) -> None:
    # GIVEN a snapshot of generation 9 (it holds "kept"), a journal 8 it already folded in, and
    # journals 9 and 10 (10 sorts before 9 as text: the order must be by number)
    wire = {"B": base64.b64encode(BLOB).decode()}
    (tmp_path / "snapshot.json").write_text(json.dumps({"format": FORMAT, "generation": 9, "tables": {
        THINGS: [{**_key("kept"), "n": {"N": "1"}}]}}))
    (tmp_path / "journal-8.jsonl").write_text(_line((_key("kept"), None), (_key("stale"), {**_key("stale")})))
    (tmp_path / "journal-9.jsonl").write_text(_line((_key("a"), {**_key("a"), "n": {"N": "1"}, "cipher": wire}))
                                              + _line((_key("b"), {**_key("b")})))
    (tmp_path / "journal-10.jsonl").write_text(_line((_key("a"), {**_key("a"), "n": {"N": "2"}, "cipher": wire}),
                                                     (_key("b"), None)))
    # WHEN the folder is restored
    journals().restore()
    # THEN the snapshot and journals 9 then 10 are applied, and journal 8 is not
    assert _contents(dynamodb)[THINGS] == [{**_key("a"), "n": {"N": "2"}, "cipher": {"B": BLOB}},
                                           {**_key("kept"), "n": {"N": "1"}}]


# --- (e) a snapshot of the earlier version --------------------------------------------------------

def test_a_snapshot_written_by_the_earlier_version_loads(
        dynamodb: Any, backend: Any, journals: Callable[[], Journal], tmp_path: Path) -> None:
    # GIVEN items (a connection's ciphertext among them) dumped the way the earlier version did: a
    # scan of every table, botocore's items with bytes as {"__bytes__": base64}
    _put_a_and_b(dynamodb)
    _connection(dynamodb)
    written = _contents(dynamodb)

    def earlier(value: Any) -> Any:
        if isinstance(value, bytes):
            return {"__bytes__": base64.b64encode(value).decode()}
        raise TypeError(type(value).__name__)

    (tmp_path / "snapshot.json").write_text(json.dumps(written, default=earlier))
    # WHEN a stack of this version restores the folder into empty tables
    _restart(journals, backend, dynamodb)
    # THEN the same items are there, binary byte for byte
    assert _contents(dynamodb) == written
    assert any(item["ciphertext"]["B"] for item in written["workset-test-connections"])
    # AND the folder is now in this version's format
    assert json.loads((tmp_path / "snapshot.json").read_text())["format"] == FORMAT


# --- (f) compaction -------------------------------------------------------------------------------

def test_compaction_writes_the_next_snapshot_and_deletes_the_journals_it_folded_in(
        dynamodb: Any, backend: Any, journals: Callable[[], Journal], tmp_path: Path) -> None:
    # GIVEN journaled writes
    first = journals()
    first.restore()
    generation = json.loads((tmp_path / "snapshot.json").read_text())["generation"]
    _put_a_and_b(dynamodb)
    folded = sorted(tmp_path.glob("journal-*.jsonl"))
    assert folded and _journal_lines(tmp_path)
    # WHEN the journal is compacted, and a write made after it
    first.compact()
    snapshot = json.loads((tmp_path / "snapshot.json").read_text())
    after = sorted(tmp_path.glob("journal-*.jsonl"))
    dynamodb.put_item(TableName=THINGS, Item=_thing("after"))
    # THEN the snapshot is the next generation and holds the writes; the folded journals are gone
    assert snapshot["generation"] == generation + 1
    assert sorted(item["pk"]["S"] for item in snapshot["tables"][THINGS]) == ["a", "b"]
    assert not set(folded) & set(after)
    # AND the later write is in the new journal (of the snapshot's generation), alone
    assert [path.name for path in after] == [f"journal-{snapshot['generation']}.jsonl"]
    assert [json.loads(line)[0][1]["pk"]["S"] for line in _journal_lines(tmp_path)] == ["after"]
    # AND a crash now restores the snapshot plus that journal
    expected = _contents(dynamodb)
    _crash(first)
    _restart(journals, backend, dynamodb)
    assert _contents(dynamodb) == expected
