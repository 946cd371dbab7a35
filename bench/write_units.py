"""DynamoDB write units per operation, computed from item sizes (moto fakes consumed capacity).

    .venv/bin/python bench/write_units.py            # this checkout
    .venv/bin/python bench/write_units.py --json     # the same, as one JSON object

For every write the app makes (PutItem, UpdateItem, DeleteItem, and each item of a
TransactWriteItems) this applies AWS's formulas to the item as it is after the write (before, for
a delete): one write unit per started KB, doubled inside a transaction, plus one write per global
secondary index the item is in whose projection the write touched (the projected part of the
item, per started KB; a write that moves the item's index key costs a delete and a put there).
Table schemas (keys, indexes, projections) are read from the tables themselves, so the same
script measures any version of the code: run it in a worktree of an older commit to compare.
"""

from __future__ import annotations

import json
import logging
import math
import os
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
KB = 1024


def item_size(item: dict[str, Any]) -> int:
    """DynamoDB's item size: attribute names plus values (numbers approximated by their digits)."""
    return sum(len(name.encode()) + _value_size(value) for name, value in item.items())


def _value_size(value: dict[str, Any]) -> int:
    (kind, inner), = value.items()
    if kind == "S":
        return len(inner.encode())
    if kind == "N":
        return math.ceil(len(inner.lstrip("-").replace(".", "")) / 2) + 1
    if kind == "B":
        return len(inner) if isinstance(inner, bytes | bytearray) else len(inner.encode())
    if kind in ("BOOL", "NULL"):
        return 1
    if kind == "M":
        return 3 + sum(len(k.encode()) + _value_size(v) + 1 for k, v in inner.items())
    if kind == "L":
        return 3 + sum(_value_size(v) + 1 for v in inner)
    if kind in ("SS", "NS", "BS"):
        return sum(len(str(v)) for v in inner)
    raise ValueError(kind)


class Meter:
    """Records write units per operation through botocore hooks on the store's clients."""

    def __init__(self, raw_client: Any) -> None:
        self.raw = raw_client  # an unhooked client, to read items around the writes
        self.units = 0.0
        self.details: list[str] = []
        self._schemas: dict[str, dict[str, Any]] = {}
        self._before: list[tuple[str, dict[str, Any], bool, str, dict[str, Any] | None]] = []

    def install(self) -> Meter:
        from pynamodb.models import Model

        from chalicelib.store import models
        from chalicelib.store.base import connection

        every_model = [value for value in vars(models).values()
                       if isinstance(value, type) and issubclass(value, Model) and value is not Model]
        clients = [connection().client] + [model._get_connection().connection.client for model in every_model]
        for client in {id(c): c for c in clients}.values():
            client.meta.events.register("before-parameter-build.dynamodb", self._before_call, unique_id="write-units-before")
            client.meta.events.register("after-call.dynamodb", self._after_call, unique_id="write-units-after")
        return self

    @contextmanager
    def measure(self) -> Iterator[dict[str, Any]]:
        """Write units and their breakdown inside the block."""
        start, first = self.units, len(self.details)
        figures: dict[str, Any] = {}
        yield figures
        figures.update(units=round(self.units - start, 1), writes=self.details[first:])

    # -- hooks --------------------------------------------------------------------------------

    def _before_call(self, params: dict[str, Any], model: Any, **_: Any) -> None:
        writes = []
        if model.name in ("PutItem", "UpdateItem", "DeleteItem"):
            writes.append((model.name, params, False))
        elif model.name == "TransactWriteItems":
            for entry in params["TransactItems"]:
                (kind, body), = entry.items()
                if kind != "ConditionCheck":
                    writes.append(({"Put": "PutItem", "Update": "UpdateItem", "Delete": "DeleteItem"}[kind], body, True))
        self._before = [(kind, body, doubled, body["TableName"], self._read(body)) for kind, body, doubled in writes]

    def _after_call(self, model: Any, parsed: dict[str, Any], **_: Any) -> None:
        if "Error" in parsed or not self._before:
            self._before = []
            return
        for kind, body, doubled, table, before in self._before:
            after = None if kind == "DeleteItem" else self._read(body)
            self._charge(kind, body, doubled, table, before, after)
        self._before = []

    # -- the formulas ---------------------------------------------------------------------------

    def _charge(self, kind: str, body: dict[str, Any], doubled: bool, table: str,
                before: dict[str, Any] | None, after: dict[str, Any] | None) -> None:
        item = after if after is not None else (before or {})
        base = math.ceil(max(item_size(item), 1) / KB) * (2 if doubled else 1)
        index_units = 0
        for index in self._schema(table)["indexes"]:
            old, new = _projected(index, before), _projected(index, after)
            if old is None and new is None:
                continue
            keys_moved = (old is None) != (new is None) or _index_key(index, before) != _index_key(index, after)
            if keys_moved:
                index_units += sum(math.ceil(item_size(p) / KB) for p in (old, new) if p is not None)
            elif old != new:  # DynamoDB writes an index only when the item's projected part changed
                index_units += math.ceil(item_size(new or {}) / KB)
        self.units += base + index_units
        short = table.rsplit("-", 1)[-1]
        self.details.append(f"{kind}{' (txn)' if doubled else ''} {short}: {base}" +
                            (f" + {index_units} index" if index_units else ""))

    def _schema(self, table: str) -> dict[str, Any]:
        if table not in self._schemas:
            described = self.raw.describe_table(TableName=table)["Table"]
            keys = [k["AttributeName"] for k in described["KeySchema"]]
            indexes = []
            for index in described.get("GlobalSecondaryIndexes", []):
                index_keys = [k["AttributeName"] for k in index["KeySchema"]]
                projection = index["Projection"]
                kind = projection["ProjectionType"]
                attributes = set(keys + index_keys)
                if kind == "ALL":
                    attributes.add("*")
                elif kind == "INCLUDE":
                    attributes |= set(projection.get("NonKeyAttributes", []))
                indexes.append({"keys": index_keys, "attributes": attributes})
            self._schemas[table] = {"keys": keys, "indexes": indexes}
        return self._schemas[table]

    def _read(self, body: dict[str, Any]) -> dict[str, Any] | None:
        key = body.get("Key")
        if key is None:
            schema = self._schema(body["TableName"])
            key = {name: body["Item"][name] for name in schema["keys"]}
        return self.raw.get_item(TableName=body["TableName"], Key=key, ConsistentRead=True).get("Item")


def _projected(index: dict[str, Any], item: dict[str, Any] | None) -> dict[str, Any] | None:
    if item is None or any(key not in item for key in index["keys"]):
        return None
    if "*" in index["attributes"]:
        return item
    return {name: value for name, value in item.items() if name in index["attributes"]}


def _index_key(index: dict[str, Any], item: dict[str, Any] | None) -> Any:
    return None if item is None else [item.get(key) for key in index["keys"]]


def operations(admin: Any, mcp: Any, vendor: Any, client: Any) -> dict[str, Callable[[], Any]]:
    """The operations measured, each after the same warm-up."""
    small = {"vendor": "unleashed", "name": "tool-0", "input": {"customer": "acme"}}

    def large_call() -> Any:
        vendor.body = {"orders": [{"id": index, "note": "x" * 500} for index in range(200)]}  # ~110 KB
        try:
            return mcp.call("unleashed__tool-1", {"customer": "acme"})
        finally:
            vendor.body = {"orders": [{"id": 1}]}

    def approve() -> Any:
        run_id = mcp.call("unleashed__write", {"customer": "acme"})["structuredContent"]["run_id"]
        return admin.call("POST", f"/v1/approvals/{run_id}/approve")

    return {
        "promote": lambda: mcp.call("promote", {"vendor": "unleashed", "name": "tool-5"}),
        "demote": lambda: mcp.call("demote", {"vendor": "unleashed", "name": "tool-5"}),
        "call of a promoted tool, small result": lambda: mcp.call("run_tool", small),
        "call of a promoted tool, 110 KB result": large_call,
        "write call waiting for a person": lambda: mcp.call("unleashed__write", {"customer": "acme"}),
        "approve (the run executes)": approve,
        "publish a version": lambda: admin.publish(name="tool-5", description="A new version."),
    }


def main() -> None:
    sys.path.insert(0, str(ROOT))
    os.environ.setdefault("WORKSET_STAGE", "test")
    from moto import mock_aws

    from tests.conftest import Admin, Mcp  # the test harness (it also fakes the AWS environment)

    with mock_aws():
        import boto3
        from chalice.test import Client

        from app import app
        from chalicelib.identity import accounts

        logging.getLogger("workset.events").disabled = True  # the app's own log lines
        from chalicelib.base.clock import utcnow
        from chalicelib.store import queues, vault
        from chalicelib.store.tables import create_all

        create_all()
        vault.ensure_key()
        for queue in ("sweep", "webhooks"):
            queues.ensure(f"{os.environ.get('WORKSET_TABLE_PREFIX', 'workset-test')}-{queue}")
        _, token = accounts.create_account("bench", utcnow())
        vendor = _vendor()
        with Client(app) as client:
            admin = Admin(client, token)
            for index in range(6):
                admin.publish(name=f"tool-{index}", request={"method": "GET", "url": f"{vendor.url}/x"})
            admin.publish(name="write", annotations={"destructiveHint": False},
                          request={"method": "POST", "url": f"{vendor.url}/x"})
            agent = admin.create_agent()
            mcp = Mcp(client, agent["api_key"])
            for index in range(5):
                mcp.call("promote", {"vendor": "unleashed", "name": f"tool-{index}"})
            mcp.call("promote", {"vendor": "unleashed", "name": "write"})
            meter = Meter(boto3.client("dynamodb")).install()
            figures = {}
            for label, operation in operations(admin, mcp, vendor, client).items():
                with meter.measure() as measured:
                    operation()
                figures[label] = measured
    if "--json" in sys.argv:
        print(json.dumps({label: f["units"] for label, f in figures.items()}))
        return
    print(f"{'operation':42} {'WCU':>6}  writes")
    for label, measured in figures.items():
        print(f"{label:42} {measured['units']:6.1f}  {'; '.join(measured['writes'])}")


def _vendor() -> Any:
    """The tests' local vendor server (127.0.0.1 only)."""
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    from tests.conftest import Vendor

    state = Vendor(url="")

    class Handler(BaseHTTPRequestHandler):
        def _serve(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            self.rfile.read(length)
            payload = json.dumps(state.body).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

        do_GET = do_POST = _serve

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    state.url = f"http://127.0.0.1:{server.server_address[1]}"
    return state


if __name__ == "__main__":
    main()
