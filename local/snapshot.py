"""Local state that survives a restart: the embedded moto server keeps nothing on disk, so the
stack dumps every table to a JSON file when something changed and loads it at start."""

from __future__ import annotations

import base64
import copy
import hashlib
import json
import os
import threading
from pathlib import Path
from typing import Any

import boto3

BATCH = 25


class Snapshots:
    """Dump and restore the given tables to one file, atomically."""

    def __init__(self, path: Path, tables: list[str]) -> None:
        self.path = path
        self.tables = tables
        self._client = boto3.client("dynamodb")
        self._digest = ""
        self._lock = threading.Lock()

    def restore(self) -> int:
        """Load the file into the (empty) tables; answers how many items were loaded."""
        if not self.path.exists():
            return 0
        data: dict[str, list[dict[str, Any]]] = json.loads(self.path.read_text(), object_hook=_from_json)
        loaded = 0
        for table, items in data.items():
            if table not in self.tables:
                continue
            for start in range(0, len(items), BATCH):
                requests = [{"PutRequest": {"Item": item}} for item in items[start:start + BATCH]]
                pending: dict[str, Any] = {table: requests}
                while pending:
                    pending = self._client.batch_write_item(RequestItems=pending).get("UnprocessedItems") or {}
            loaded += len(items)
        self._digest = _digest(self._dump())
        return loaded

    def save_if_changed(self) -> bool:
        """Write the file when the tables differ from the last save."""
        with self._lock:
            data = self._dump()
            digest = _digest(data)
            if digest == self._digest:
                return False
            self.path.parent.mkdir(parents=True, exist_ok=True)
            temporary = self.path.with_suffix(".tmp")
            temporary.write_text(json.dumps(data, default=_to_json))
            os.replace(temporary, self.path)
            self._digest = digest
            return True

    def _dump(self) -> dict[str, list[dict[str, Any]]]:
        paginator = self._client.get_paginator("scan")
        return {
            table: [item for page in paginator.paginate(TableName=table) for item in page.get("Items", [])]
            for table in self.tables
        }


def _digest(data: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(data, sort_keys=True, default=_to_json).encode()).hexdigest()


def _to_json(value: Any) -> Any:
    """Binary attributes (ciphertexts, search vectors) as base64 in the JSON file."""
    if isinstance(value, bytes):
        return {"__bytes__": base64.b64encode(value).decode()}
    raise TypeError(f"cannot snapshot a {type(value).__name__}")


def _from_json(value: dict[str, Any]) -> Any:
    return base64.b64decode(value["__bytes__"]) if set(value) == {"__bytes__"} else value


class KmsKeys:
    """The embedded emulator's KMS keys survive a restart too: their material is saved beside the
    table snapshot and put back at start, so secrets encrypted before (connections, webhook
    secrets) still decrypt. Only for the embedded moto server, which runs in this process."""

    def __init__(self, path: Path, region: str) -> None:
        from moto.core import DEFAULT_ACCOUNT_ID
        from moto.kms.models import kms_backends

        self.path = path
        self.backend = kms_backends[DEFAULT_ACCOUNT_ID][region]

    def restore(self) -> None:
        """Give every saved key id its saved material (after the current key was created)."""
        if not self.path.exists() or not self.backend.keys:
            return
        template = next(iter(self.backend.keys.values()))
        for key_id, material in json.loads(self.path.read_text()).items():
            if key_id not in self.backend.keys:
                key = copy.copy(template)
                key.id, key.key_material = key_id, base64.b64decode(material)
                self.backend.keys[key_id] = key

    def save(self) -> None:
        """Write every key's material (the local stack's own, never a real AWS secret)."""
        keys = {key_id: base64.b64encode(key.key_material).decode() for key_id, key in self.backend.keys.items()}
        temporary = self.path.with_suffix(".tmp")
        temporary.write_text(json.dumps(keys))
        temporary.chmod(0o600)
        os.replace(temporary, self.path)
