"""Learning from use (issue 25, goal 3): a replay of one account's searches on MetaTool.

    python bench/usage_replay.py [--part held-out|tuning] [--tune]

MetaTool's queries are grouped by their gold tool (each group is paraphrases of one need). A
seeded half of the tools have history: half of each such tool's queries are replayed first as
find_tool followed by a promote of the gold tool (credited only when find_tool listed it in its
top 10, as the app does), kept in a memory bounded as the store bounds it (MEMORY_PAIRS, oldest
out). The other half of their queries are the tests. The tools without history keep all their
queries as tests: the memory must not make those worse.

Recall@1/@5 are printed side by side without and with the memory, in one run, for:
* tests of tools with history, with the memory bounded as shipped, and unbounded;
* tests of tools without history (the memory holds other tools' evidence).

`--part tuning` uses only every 10th query (the only rows W_USAGE and FLOOR were picked on, with
`--tune`, which prints a grid); the default reports the other 90% (held-out). Query vectors are
computed once per query and reused by both rankings.
"""

from __future__ import annotations

import argparse
import csv
import datetime
import itertools
import json
import os
import random
import sys
from collections import OrderedDict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np

from chalicelib.catalog.usage import MEMORY_PAIRS, RECALLED_HITS
from chalicelib.search import embedder
from chalicelib.search import usage as search_usage
from chalicelib.search.documents import Document, document_vector
from chalicelib.search.index import SearchIndex
from chalicelib.search.usage import Evidence, Memory

TUNING_EVERY = 10
SEED = 20261203


def load(bench: Path, part: str) -> tuple[list[Document], dict[str, list[str]]]:
    """The tools (with vectors, as stored at publish) and the part's queries by gold tool."""
    tools = json.loads((bench / "metatool" / "tools.json").read_text(encoding="utf-8"))
    docs = [Document(f"{t['vendor']}/{t['name']}", t["vendor"], t["name"], t["description"],
                     document_vector(t["vendor"], t["name"], t["description"])) for t in tools]
    groups: dict[str, list[str]] = {}
    with (bench / "metatool" / "queries.csv").open(encoding="utf-8", newline="") as fh:
        for i, row in enumerate(csv.DictReader(fh)):
            if (i % TUNING_EVERY == 0) == (part == "tuning"):
                groups.setdefault(f"{row['vendor']}/{row['name']}", []).append(row["query"])
    return docs, groups


def cache_vectors(queries: list[str]) -> dict[str, np.ndarray]:
    """Every query's MiniLM vector, computed once; embedder.embed answers from it afterwards."""
    unique = sorted(set(queries))
    vectors: dict[str, np.ndarray] = {}
    for start in range(0, len(unique), 64):
        batch = unique[start:start + 64]
        vectors.update(zip(batch, embedder.embed(batch)))
    plain = embedder.embed

    def embed(texts: list[str]) -> np.ndarray:
        if all(text in vectors for text in texts):
            return np.stack([vectors[text] for text in texts])
        return plain(texts)

    embedder.embed = embed  # type: ignore[assignment]
    return vectors


def split(groups: dict[str, list[str]]) -> tuple[list[tuple[str, str]], list[tuple[str, str]], list[tuple[str, str]]]:
    """(history, tests of tools with history, tests of tools without), each (query, gold key)."""
    rng = random.Random(SEED)
    tools = sorted(groups)
    rng.shuffle(tools)
    with_history = set(tools[: len(tools) // 2])
    history, tests, unseen = [], [], []
    for tool in sorted(groups):
        queries = sorted(groups[tool])
        rng.shuffle(queries)
        if tool in with_history:
            half = len(queries) // 2
            history += [(q, tool) for q in queries[:half]]
            tests += [(q, tool) for q in queries[half:]]
        else:
            unseen += [(q, tool) for q in queries]
    rng.shuffle(history)  # the order they happened in
    return history, tests, unseen


def credited(index: SearchIndex, history: list[tuple[str, str]]) -> list[tuple[str, str]]:
    """The history as find_tool then a promote of the gold tool: only where find_tool listed it."""
    return [(query, gold) for query, gold in history
            if gold in [key for key, _ in index.search(query, RECALLED_HITS)]]


def remember(history: list[tuple[str, str]], vectors: dict[str, np.ndarray], bound: int | None) -> Memory:
    """The credited history as a memory of at most `bound` pairs, the least recently seen out first."""
    pairs: OrderedDict[tuple[str, str], int] = OrderedDict()
    for query, gold in history:
        pairs[(query, gold)] = pairs.get((query, gold), 0) + 1
        pairs.move_to_end((query, gold))
        while bound is not None and len(pairs) > bound:
            pairs.popitem(last=False)
    return Memory([Evidence(q, key, count, vectors[q].astype("<f2").tobytes()) for (q, key), count in pairs.items()])


def recall(index: SearchIndex, tests: list[tuple[str, str]], memory: Memory | None) -> tuple[float, float]:
    """recall@1 and recall@5 of the tests."""
    at1 = at5 = 0
    for query, gold in tests:
        keys = [key for key, _ in index.search(query, 5, memory=memory)]
        at1 += bool(keys) and keys[0] == gold
        at5 += gold in keys
    n = max(len(tests), 1)
    return at1 / n, at5 / n


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--part", choices=["held-out", "tuning"], default="held-out")
    parser.add_argument("--tune", action="store_true", help="print a grid of W_USAGE x FLOOR (tuning part only)")
    parser.add_argument("--bench-dir", type=Path, default=Path("/work/shared/bench"))
    args = parser.parse_args()
    if args.tune and args.part != "tuning":
        parser.error("--tune reads the tuning part only: pass --part tuning")

    docs, groups = load(args.bench_dir, args.part)
    history, tests, unseen = split(groups)
    vectors = cache_vectors([q for q, _ in history + tests + unseen])
    index = SearchIndex.build(docs)
    promoted = credited(index, history)
    bounded = remember(promoted, vectors, MEMORY_PAIRS)
    unbounded = remember(promoted, vectors, None)

    if args.tune:
        print("| W_USAGE | FLOOR | with history r@1 / r@5 | without history r@1 / r@5 |")
        print("|---:|---:|---|---|")
        for weight, floor in itertools.product((0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0), (0.3, 0.4, 0.5, 0.6, 0.7, 0.8)):
            search_usage.W_USAGE, search_usage.FLOOR = weight, floor
            seen, new = recall(index, tests, bounded), recall(index, unseen, bounded)
            print(f"| {weight} | {floor} | {seen[0]:.3f} / {seen[1]:.3f} | {new[0]:.3f} / {new[1]:.3f} |")
        return

    rows = [("tools with history, memory bounded as shipped", tests, bounded),
            ("tools with history, memory unbounded", tests, unbounded),
            ("tools without history, memory bounded as shipped", unseen, bounded)]
    print(f"## Learning from use: MetaTool replay, {args.part} part ({datetime.date.today().isoformat()})")
    print()
    print(f"Command: `python bench/usage_replay.py --part {args.part}`. {len(docs)} tools, "
          f"{len(groups)} with queries in this part; history: {len(history)} queries of "
          f"{len({g for _, g in history})} tools, {len(promoted)} credited (gold in find_tool's top "
          f"{RECALLED_HITS}); memory as shipped: {len(bounded)} pairs (bound {MEMORY_PAIRS}), "
          f"unbounded: {len(unbounded)}. W_USAGE={search_usage.W_USAGE}, FLOOR={search_usage.FLOOR}.")
    print()
    print("| tests | queries | recall@1 without / with memory | recall@5 without / with memory |")
    print("|---|---:|---|---|")
    baselines: dict[int, tuple[float, float]] = {}
    for label, queries, memory in rows:
        if id(queries) not in baselines:
            baselines[id(queries)] = recall(index, queries, None)
        before = baselines[id(queries)]
        after = recall(index, queries, memory)
        print(f"| {label} | {len(queries)} | {before[0]:.3f} / {after[0]:.3f} ({after[0] / max(before[0], 1e-9):.2f}x) "
              f"| {before[1]:.3f} / {after[1]:.3f} ({after[1] / max(before[1], 1e-9):.2f}x) |")


if __name__ == "__main__":
    main()
