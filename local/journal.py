"""The local stack's tables on disk: a snapshot and a write-ahead journal, so that every write the
embedded emulator acknowledged survives `kill -9`, and a restart always yields a state that was
real (never half a transaction).

    .workset/snapshot.json      {"format": 2, "generation": G, "tables": {name: [item, ...]}}
    .workset/journal-<N>.jsonl  one line per committed write: [[table, key, item or null], ...]

- **Before an answer.** `local/emulator.py` hands every committed write (a put, an update, a
  delete, or a whole transaction as one line) to `append`, inside the emulator's lock and before
  moto answers. The line is written and fsync'd there, so a write the app was told about is on
  disk. A transaction is one line: a torn last line (the process died while writing it) was
  never acknowledged, and is dropped on replay.
- **At start.** The snapshot is loaded, then every journal from its generation on is replayed in
  order, then the whole is compacted.
- **Compaction** (once the journal passes COMPACT_BYTES, checked every COMPACT_SECONDS, and at
  start; never at stop, which only closes the journal). Inside the lock, the tables are copied and the journal moves on to generation N+1.
  Outside it, the snapshot of generation N+1 is written and renamed into place, then the
  journals before N+1 are deleted. A crash at any point leaves a snapshot and the journals that
  complete it.

Items are kept as DynamoDB's wire JSON (binary as base64), as moto's own `to_json` gives them
(the binary values it keeps as bytes are encoded the same way).
Snapshots of earlier versions (botocore's decoded items, bytes as `{"__bytes__": base64}`) are
read too.
"""

from __future__ import annotations

import base64
import json
import os
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from local import emulator

FORMAT = 2
COMPACT_SECONDS = 30.0  # how often the journal's size is looked at
COMPACT_BYTES = 16 * 1024 * 1024

Record = tuple[str, dict[str, Any], dict[str, Any] | None]  # table, key, item after the write (None: deleted)


class Journal:
    """The embedded emulator's DynamoDB tables, kept durable in `folder`."""

    def __init__(self, folder: Path, backend: Any) -> None:
        self.folder = folder
        self.snapshot = folder / "snapshot.json"
        self.backend = backend  # moto's DynamoDBBackend for the stack's account and region
        self.generation = 0
        self._file: Any = None
        self._written = 0
        self._compacting = threading.Lock()

    def restore(self) -> int:
        """Load the snapshot and replay the journals after it into the (empty) tables, then
        compact, and journal every write from now on; answers how many items were loaded."""
        loaded = 0
        generation, tables = self._read_snapshot()
        for name, items in tables.items():
            for item in items:
                loaded += self._apply(name, None, item)
        for path in self._journals(since=generation):
            for records in _lines(path):
                for name, key, item in records:
                    self._apply(name, key, item)
            generation = max(generation, _generation(path))
        self.generation = generation
        self._open(generation + 1)
        emulator.record_to(self.append)
        self.compact()  # start on a fresh snapshot and an empty journal
        return loaded

    def append(self, records: list[Record]) -> None:
        """Write one committed write's records and fsync them (the emulator calls this inside its
        lock, before it answers)."""
        line = json.dumps(records, separators=(",", ":"), default=_base64).encode() + b"\n"
        self._file.write(line)
        self._file.flush()
        os.fsync(self._file.fileno())
        self._written += len(line)

    def due(self) -> bool:
        """Whether a compaction is worth its cost now: it copies every table while no request is
        served, so only once the journal has grown past COMPACT_BYTES (replaying a journal that
        size at start takes a few seconds)."""
        return self._written > COMPACT_BYTES

    def compact(self) -> None:
        """Fold the journal into a new snapshot (see the module's docstring)."""
        with self._compacting:
            with emulator.locked():
                tables = {name: [item.to_json()["Attributes"] for item in table.all_items()]
                          for name, table in self.backend.tables.items()}
                finished = self.generation
                self._open(finished + 1)
            _write_atomically(self.snapshot, json.dumps({"format": FORMAT, "generation": finished + 1,
                                                         "tables": tables}, default=_base64).encode())
            self.generation = finished + 1
            for path in self._journals(since=0):
                if _generation(path) <= finished:
                    path.unlink(missing_ok=True)

    def close(self) -> None:
        """Stop journaling and close the journal (at stop). Every write is on disk already, so
        nothing is compacted: copying every table took 7-9 s with 1,000 tools and 100 agents, and
        the next start replays the journal (at most COMPACT_BYTES and a few seconds' writes)."""
        emulator.record_to(None)
        with emulator.locked():
            self._file.close()

    def _open(self, generation: int) -> None:
        if self._file is not None:
            self._file.close()
        self._file = open(self.folder / f"journal-{generation}.jsonl", "ab")  # noqa: SIM115 - kept open
        self._written = 0
        _sync_folder(self.folder)

    def _journals(self, *, since: int) -> list[Path]:
        found = [path for path in self.folder.glob("journal-*.jsonl") if _generation(path) >= since]
        return sorted(found, key=_generation)

    def _read_snapshot(self) -> tuple[int, dict[str, list[dict[str, Any]]]]:
        if not self.snapshot.exists():
            return 0, {}
        data = json.loads(self.snapshot.read_text(), object_hook=_earlier_bytes)
        if data.get("format") == FORMAT:
            return int(data["generation"]), data["tables"]
        return 0, {name: [_wire(item) for item in items] for name, items in data.items()}  # an earlier version's

    def _apply(self, table: str, key: dict[str, Any] | None, item: dict[str, Any] | None) -> int:
        """Put `item` (or delete `key`) in `table`, if the table still exists; 1 when put."""
        if table not in self.backend.tables:
            return 0
        if item is None:
            self.backend.delete_item(table, _typed(key))
            return 0
        self.backend.put_item(table, _typed(item))
        return 1


def _typed(attributes: dict[str, Any] | None) -> dict[str, Any] | None:
    """Wire JSON as moto's own request parsing hands it to the backend: binary values (B, BS, and
    inside M and L) as bytes, not base64 text, so a restored value compares equal to a written one."""
    if attributes is None:
        return None
    return {name: _typed_value(value) for name, value in attributes.items()}


def _typed_value(value: dict[str, Any]) -> dict[str, Any]:
    (kind, inner), = value.items()
    if kind == "B":
        return {kind: base64.b64decode(inner) if isinstance(inner, str) else inner}
    if kind == "BS":
        return {kind: [base64.b64decode(part) if isinstance(part, str) else part for part in inner]}
    if kind == "M":
        return {kind: {name: _typed_value(part) for name, part in inner.items()}}
    if kind == "L":
        return {kind: [_typed_value(part) for part in inner]}
    return value


def _lines(path: Path) -> Iterator[list[Record]]:
    """A journal's complete lines; a torn last line (never acknowledged) ends it."""
    with path.open("rb") as journal:
        for line in journal:
            if not line.endswith(b"\n"):
                return
            try:
                yield [(name, key, item) for name, key, item in json.loads(line)]
            except ValueError:
                return


def _generation(path: Path) -> int:
    return int(path.stem.removeprefix("journal-"))


def _write_atomically(path: Path, data: bytes) -> None:
    temporary = path.with_suffix(".tmp")
    with temporary.open("wb") as file:
        file.write(data)
        file.flush()
        os.fsync(file.fileno())
    os.replace(temporary, path)
    _sync_folder(path.parent)


def _sync_folder(folder: Path) -> None:
    """fsync the folder, so a file created or renamed in it survives a crash."""
    descriptor = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)


def _base64(value: Any) -> str:
    """moto keeps some binary values as bytes; on the wire (and here) they are base64 text."""
    if isinstance(value, bytes):
        return base64.b64encode(value).decode()
    raise TypeError(f"cannot journal a {type(value).__name__}")


def _earlier_bytes(value: dict[str, Any]) -> Any:
    """Earlier snapshots wrote botocore's bytes as {"__bytes__": base64}."""
    return base64.b64decode(value["__bytes__"]) if set(value) == {"__bytes__"} else value


def _wire(value: Any) -> Any:
    """An earlier snapshot's item in DynamoDB's wire JSON: bytes as base64 text."""
    if isinstance(value, bytes):
        return base64.b64encode(value).decode()
    if isinstance(value, dict):
        return {key: _wire(inner) for key, inner in value.items()}
    if isinstance(value, list):
        return [_wire(inner) for inner in value]
    return value
