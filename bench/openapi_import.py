"""Importing a large real OpenAPI document: operations per second, and DynamoDB writes per
imported operation (machine-independent).

    .venv/bin/python bench/openapi_import.py --document spec3.json
    .venv/bin/python bench/openapi_import.py --merge-dir twilio-oai/spec/json   # many documents as one

Runs POST /v1/imports/openapi `{url}` (the document served on 127.0.0.1) through the Chalice test
client against in-process moto, as the admin API serves it: a dry run (read, convert, validate: the CPU part), the import itself (the
dry run's work plus the batched writes), a re-import of the same document (nothing changes),
then the work queue's vector messages (the embedding a large import defers). Prints each phase's
median wall time over --runs runs and its process CPU time, the DynamoDB calls by API operation
and the items written per imported operation.

`--merge-dir` makes one document of every OpenAPI document in a directory (each path keeps its
document's server; component names get the document's name as a prefix), the way a provider
that publishes one description per product (Twilio) would look as one large document.
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent


def merged(directory: Path) -> dict[str, Any]:
    """One OpenAPI document holding every document's paths and components in `directory`."""
    document: dict[str, Any] = {"openapi": "3.0.3", "info": {"title": f"merged from {directory.name}", "version": "1"},
                                "paths": {}, "components": {}}
    for path in sorted(directory.glob("*.json")):
        part = json.loads(path.read_text())
        prefix = re.sub(r"[^A-Za-z0-9]", "_", path.stem) + "_"
        part = _prefixed(part, prefix)
        server = (part.get("servers") or [{"url": "/"}])[0]
        for route, item in part.get("paths", {}).items():
            key = route if route not in document["paths"] else f"{route.rstrip('/')}/{prefix.rstrip('_')}"
            document["paths"][key] = {"servers": [server], **item}
        for section, entries in part.get("components", {}).items():
            keep = section == "securitySchemes"  # named by security requirements, not by $ref
            document["components"].setdefault(section, {}).update(
                {(name if keep else prefix + name): value for name, value in entries.items()})
        document.setdefault("security", part.get("security"))
    return document


def _prefixed(node: Any, prefix: str) -> Any:
    if isinstance(node, dict):
        return {key: (_renamed(value, prefix) if key == "$ref" else _prefixed(value, prefix))
                for key, value in node.items()}
    if isinstance(node, list):
        return [_prefixed(item, prefix) for item in node]
    return node


def _renamed(ref: Any, prefix: str) -> Any:
    parts = ref.split("/") if isinstance(ref, str) and ref.startswith("#/components/") else None
    if parts is None or parts[2] == "securitySchemes":
        return ref
    parts[3] = prefix + parts[3]
    return "/".join(parts)


class Recorder:
    """DynamoDB calls by API operation, and the items each write call carries."""

    def __init__(self) -> None:
        self.calls: Counter[str] = Counter()
        self.items = 0

    def install(self) -> Recorder:
        from chalicelib.store.base import connection
        from chalicelib.store.models import TABLES, UpstreamItem

        clients = [connection().client] + [model._get_connection().connection.client
                                           for model in (*TABLES, UpstreamItem)]
        for client in {id(c): c for c in clients}.values():
            client.meta.events.register("provide-client-params.dynamodb", self._record, unique_id="bench-import")
        return self

    def _record(self, params: dict[str, Any], model: Any, **_: Any) -> None:
        self.calls[model.name] += 1
        if model.name == "TransactWriteItems":
            self.items += len(params.get("TransactItems", []))
        elif model.name in ("PutItem", "UpdateItem", "DeleteItem"):
            self.items += 1

    def take(self) -> tuple[dict[str, int], int]:
        """What was recorded since the last take."""
        calls, items = dict(self.calls), self.items
        self.calls, self.items = Counter(), 0
        return calls, items


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--document", type=Path, help="an OpenAPI 3 document (JSON or YAML)")
    source.add_argument("--merge-dir", type=Path, help="a directory of OpenAPI 3 JSON documents, merged into one")
    parser.add_argument("--runs", type=int, default=3, help="runs of each timed phase (medians are printed)")
    args = parser.parse_args()
    sys.path.insert(0, str(ROOT))
    from tests.conftest import Admin  # the test harness: it also fakes the AWS environment

    text = args.document.read_text() if args.document else json.dumps(merged(args.merge_dir), indent=2)
    from moto import mock_aws

    with mock_aws():
        from chalice.test import Client

        from app import app
        from chalicelib import openapi
        from chalicelib.base.clock import utcnow
        from chalicelib.base.config import settings
        from chalicelib.identity import accounts
        from chalicelib.openapi.operations import METHODS
        from chalicelib.store import queues
        from chalicelib.store.tables import create_all
        from tests.books import take_bodies, work

        create_all()
        queues.ensure(settings().sweep_queue)
        document = openapi.read_document(text)
        operations = sum(1 for item in document.get("paths", {}).values() if isinstance(item, dict)
                         for method in item if method in METHODS)
        print(f"document: {len(text.encode()) / 2**20:.1f} MB, {operations} operations "
              f"({args.document or args.merge_dir})")
        recorder = Recorder().install()
        with Client(app) as client, _served(text.encode()) as url:
            phases: dict[str, list[tuple[float, float]]] = {"dry run": [], "import": [], "re-import (unchanged)": []}
            answers: dict[str, Any] = {}
            for run in range(args.runs):
                _, token = accounts.create_account(f"bench-{run}", utcnow())
                admin = Admin(client, token)
                for phase, dry in (("dry run", True), ("import", False), ("re-import (unchanged)", False)):
                    recorder.take()
                    wall, cpu = time.perf_counter(), time.process_time()
                    answer = admin.call("POST", "/v1/imports/openapi", {"vendor": "bench", "url": url, "dry_run": dry})
                    phases[phase].append((time.perf_counter() - wall, time.process_time() - cpu))
                    assert answer.status_code == 200, answer.body[:500]
                    answers[phase] = (answer.json_body, *recorder.take())
                messages = take_bodies(settings().sweep_queue)
            recorder.take()
            wall, cpu = time.perf_counter(), time.process_time()
            work(client, messages)
            vectors = (time.perf_counter() - wall, time.process_time() - cpu)
            vector_calls = recorder.take()
        _report(phases, answers, vectors, vector_calls, messages)


@contextmanager
def _served(document: bytes) -> Iterator[str]:
    """The document at a URL on 127.0.0.1 (imports of more than 6 MB go by URL)."""
    from tests.conftest import serving

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(document)))
            self.end_headers()
            self.wfile.write(document)

        def log_message(self, *args: Any) -> None:
            pass

    with serving(Handler) as base:
        yield f"{base}/openapi.json"


def _report(phases: dict[str, list[tuple[float, float]]], answers: dict[str, Any], vectors: tuple[float, float],
            vector_calls: tuple[dict[str, int], int], messages: list[dict[str, Any]]) -> None:
    imported, import_calls, import_items = answers["import"]
    counts = imported["counts"]
    published = counts["published"] + counts["new_version"]
    print(f"outcomes: {counts}")
    reasons = Counter(line["reason"].split(" (")[0][:70] for line in imported["tools"] if line["outcome"] == "skipped")
    for reason, count in reasons.most_common(5):
        print(f"  skipped {count:5}  {reason}")
    print(f"{'phase':28} {'median s':>9} {'cpu s':>7} {'ops/s':>8}")
    for phase, samples in phases.items():
        wall = statistics.median(sample[0] for sample in samples)
        cpu = statistics.median(sample[1] for sample in samples)
        print(f"{phase:28} {wall:9.2f} {cpu:7.2f} {len(imported['tools']) / wall:8.0f}")
    tools = sum(len(message["tools"]) for message in messages)
    print(f"{'vectors (work queue)':28} {vectors[0]:9.2f} {vectors[1]:7.2f} {tools / vectors[0]:8.0f}   "
          f"{len(messages)} messages, {tools} tools")
    print(f"DynamoDB, import: {import_calls}; {import_items} items written, "
          f"{import_items / max(published, 1):.2f} per published tool")
    print(f"DynamoDB, re-import: {answers['re-import (unchanged)'][1]}")
    print(f"DynamoDB, vectors: {vector_calls[0]}; {vector_calls[1] / max(tools, 1):.2f} items per tool")


if __name__ == "__main__":
    main()
