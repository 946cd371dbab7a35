"""Quality and speed figures for find_tool's ranking (chalicelib/search/).

Run from the project root:  python bench/find_tool_quality.py [--sample N]

Reads the corpora in /work/shared/bench (override with --bench-dir):
* MetaTool: 199 tools, 20,614 queries with one correct tool each -> recall@1, recall@5, MRR@10.
  The ranking's parameters were tuned on every 10th query (the "tuning" rows); "all" is
  every query and "held-out" the other 90%.
* Timing per query at 199 tools and with the toolbox padded to 10,000 tools (MetaTool +
  LiveMCPBench tools + seeded variants of both). Tool vectors are computed once up front with
  document_vector(), as the app does at publish, and timed apart from the index build, which
  then starts from the stored vectors.
* Cold start (loading the MiniLM and wordllama weights) and query-embedding time.
* LiveMCPBench: 526 tools, 95 tasks; mean share of each task's gold tools in the top 10.
* "No hit": how many MetaTool queries get [] (should be ~0) and how many of a few nonsense
  queries do (should be all).
* Multi-intent requests (issue 25, goal 5): MetaTool's 497 two-tool requests, recall@5 (share of
  the two tools in the top 5) and complete@5 (both there), and the single-tool figures, each
  side by side for the whole request only (before), split into intents without the residual
  search, and find_tool now (parts and the residual, chalicelib/search/queries.py); the splitter,
  residual and merge were picked on every 10th request of both files only (bench/multi_levers.py). Query time for split requests at 10,000 tools.
"""

from __future__ import annotations

import argparse
import csv
import datetime
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
# One BLAS thread, as recommended for Lambda: on a busy 2-core box OpenBLAS's thread pool
# turns sub-millisecond products into 15 ms spikes. Set the variable to compare.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np

from chalicelib.search import embedder
from chalicelib.search import queries as intents
from chalicelib.search.documents import Document, document_vector
from chalicelib.search.index import SearchIndex
from chalicelib.search.static import wordllama

TUNING_EVERY = 10  # parameters were picked on queries whose index % 10 == 0
PAD_TO = 10_000
SEED = 20240601
NONSENSE = ["zzqx frobnicate", "asdf qwerty uiop", "blorptang snazzle", "quantum chromodynamics lattice",
            "can you please help me"]


def load_tools(path: Path) -> list[Document]:
    return [
        Document(f"{t['vendor']}/{t['name']}", t["vendor"], t["name"], t["description"])
        for t in json.loads(path.read_text(encoding="utf-8"))
    ]


def with_vectors(docs: list[Document]) -> tuple[list[Document], float]:
    """The docs with their stored vectors, as the app keeps them; and the seconds it took."""
    start = time.perf_counter()
    out = [Document(d.key, d.vendor, d.name, d.description, document_vector(d.vendor, d.name, d.description))
           for d in docs]
    return out, time.perf_counter() - start


def timed_build(docs: list[Document]) -> tuple[SearchIndex, float]:
    start = time.perf_counter()
    index = SearchIndex.build(docs)
    return index, time.perf_counter() - start


class Memo:
    """An index whose answers are kept per (query, limit): the side-by-side runs reuse the whole
    request's ranking instead of computing it twice (only the first call of a query is timed)."""

    def __init__(self, index: SearchIndex) -> None:
        self.index = index
        self.answers: dict[tuple[str, int], list[tuple[str, float]]] = {}
        self.residuals: dict[tuple[str, int], list[tuple[str, float]]] = {}

    def search(self, query: str, limit: int = 10, memory: None = None) -> list[tuple[str, float]]:
        return self.search_many([query], limit)[0]

    def holds(self, key: str, words: list[str]) -> list[bool]:
        return self.index.holds(key, words)

    def cosines(self, key: str, keys: list[str]) -> np.ndarray:
        return self.index.cosines(key, keys)

    def search_many(self, queries: list[str], limit: int = 10, memory: None = None,
                    residual: bool = False) -> list[list[tuple[str, float]]]:
        if residual and (queries[0], limit) not in self.residuals:  # the whole request's residual: one pass with all
            *answers, self.residuals[queries[0], limit] = self.index.search_many(queries, limit, residual=True)
            self.answers.update(((q, limit), answer) for q, answer in zip(queries, answers))
        missing = [q for q in dict.fromkeys(queries) if (q, limit) not in self.answers]
        if missing:  # no account memory here: every query ranks from the toolbox alone
            self.answers.update(((q, limit), answer) for q, answer in zip(missing, self.index.search_many(missing, limit)))
        return [self.answers[q, limit] for q in queries] + ([self.residuals[queries[0], limit]] if residual else [])


def split_search(index: SearchIndex | Memo, query: str, limit: int = 10) -> list[tuple[str, float]]:
    """find_tool's ranking now: the request split into its intents (chalicelib/search/queries.py)."""
    return intents.search(index, query, limit)


def split_one_by_one(index: SearchIndex | Memo, query: str, limit: int = 10) -> list[tuple[str, float]]:
    """The split ranking as first shipped: the whole request and each part searched one after the
    other (a MiniLM forward pass each), every hit by its best score in any of them (no part scored
    in the whole's context); to compare with the one batched pass, in time and quality."""
    rankings = [index.search(text, limit) for text in (query, *intents.intents(query))]
    return rankings[0] if len(rankings) == 1 or not rankings[0] else intents.merged(rankings, limit)


def split_parts_only(index: SearchIndex | Memo, query: str, limit: int = 10) -> list[tuple[str, float]]:
    """The split ranking before the residual: the whole request and its parts in one batched pass,
    each part's hits in the whole's context, no search for what the best hit leaves."""
    parts = intents.intents(query)
    if not parts:
        return index.search_many([query], limit)[0]
    rankings = index.search_many([query, *parts], max(limit, intents.WHOLE_DEPTH))
    if not rankings[0]:
        return []
    return intents.merged([rankings[0], *(intents.in_context(p[:limit], rankings[0]) for p in rankings[1:])], limit)


def split_hand_merge(index: SearchIndex | Memo, query: str, limit: int = 10) -> list[tuple[str, float]]:
    """The split ranking before the learned gate (main before i25-multi4): parts and the residual,
    each hit by its best score in the whole's context (queries.hand_merged)."""
    parts = intents.intents(query)
    rankings = index.search_many([query, *parts], max(limit, intents.WHOLE_DEPTH), residual=True)
    return intents.hand_merged(rankings, limit) if rankings[0] else []


def split_gate(weights: tuple[float, ...]) -> Callable[..., list[tuple[str, float]]]:
    """The split ranking with the gate and these weights, whether search() uses the gate or not."""
    def search(index: SearchIndex | Memo, query: str, limit: int = 10) -> list[tuple[str, float]]:
        parts = intents.intents(query)
        rankings = index.search_many([query, *parts], max(limit, intents.WHOLE_DEPTH), residual=True)
        return intents.gated(index, query, parts, rankings, limit, weights) if rankings[0] else []
    return search


def split_metatool_gate(index: SearchIndex | Memo, query: str, limit: int = 10) -> list[tuple[str, float]]:
    """The gate with the weights main shipped before branch i25-gate7 (fitted on MetaTool tuning rows,
    bench/multi_gate.METATOOL_TRAINED): to compare, never shipped again."""
    from bench.multi_gate import METATOOL_TRAINED

    return split_gate(METATOOL_TRAINED)(index, query, limit)


def split_round7_gate(index: SearchIndex | Memo, query: str, limit: int = 10) -> list[tuple[str, float]]:
    """The gate with round 7's weights (branch i25-gate7, bench/multi_gate.ROUND7: trained on
    bench/gate_data.py's generated requests only): to compare."""
    from bench.multi_gate import ROUND7

    return split_gate(ROUND7)(index, query, limit)


def split_openapi_gate(index: SearchIndex | Memo, query: str, limit: int = 10) -> list[tuple[str, float]]:
    """The gate with queries.GATE_WEIGHTS (trained on bench/gate_data.py's corpus with its
    hand-written requests), used by search() only when queries.USE_GATE is on."""
    return split_gate(intents.GATE_WEIGHTS)(index, query, limit)


def whole_search(index: SearchIndex | Memo, query: str, limit: int = 10) -> list[tuple[str, float]]:
    """The ranking before issue 25's goal 5: the whole request only."""
    return index.search(query, limit)


def ranks(index: SearchIndex | Memo, queries: list[tuple[str, str]],
          search: Callable[..., list[tuple[str, float]]] = whole_search) -> tuple[list[int | None], list[float]]:
    """1-based rank of the gold key in the top 10 (None when absent) and seconds per query."""
    found: list[int | None] = []
    seconds: list[float] = []
    for query, gold in queries:
        start = time.perf_counter()
        hits = search(index, query, limit=10)
        seconds.append(time.perf_counter() - start)
        keys = [k for k, _ in hits]
        found.append(keys.index(gold) + 1 if gold in keys else None)
    return found, seconds


def quality(found: list[int | None]) -> dict[str, float]:
    n = max(len(found), 1)
    return {
        "recall@1": sum(r == 1 for r in found) / n,
        "recall@5": sum(r is not None and r <= 5 for r in found) / n,
        "mrr@10": sum(1 / r for r in found if r is not None) / n,
    }


def percentile_ms(seconds: list[float], pct: float) -> float:
    ordered = sorted(seconds)
    return 1000 * ordered[min(len(ordered) - 1, int(pct / 100 * len(ordered)))]


def variants(docs: list[Document], count: int, rng: random.Random) -> list[Document]:
    """Seeded look-alikes: a made-up vendor and ~15% of the description's words dropped."""
    out: list[Document] = []
    syllables = ["ka", "lo", "mi", "ra", "tu", "zen", "vo", "pi", "sa", "nex", "dor", "qui"]
    while len(out) < count:
        doc = rng.choice(docs)
        vendor = "".join(rng.choice(syllables) for _ in range(rng.randint(2, 4)))[:20]
        vendor = f"{vendor}{rng.randint(0, 999)}"
        words = doc.description.split()
        kept = [w for w in words if rng.random() > 0.15] or words
        out.append(Document(f"{vendor}/{doc.name}", vendor, doc.name, " ".join(kept)))
    return out


def multi_quality(index: SearchIndex | Memo, requests: list[tuple[int, str, list[str]]],
                  search: Callable[..., list[tuple[str, float]]]) -> dict[str, dict[str, float]]:
    """recall@5 and complete@5 of two-tool requests over all, tuning and held-out requests."""
    rows = []
    for position, query, gold in requests:
        top = {k for k, _ in search(index, query, limit=5)}
        found = sum(g in top for g in gold)
        rows.append((position % TUNING_EVERY == 0, found / len(gold), found == len(gold)))
    return multi_parts(rows)


def multi_parts(rows: list[tuple[bool, float, bool]]) -> dict[str, dict[str, float]]:
    """recall@5 and complete@5 over all, tuning and held-out rows of (tuning?, share found, all found)."""
    out = {}
    for part, keep in (("all", lambda t: True), ("tuning", lambda t: t), ("held-out", lambda t: not t)):
        chosen = [(r, c) for t, r, c in rows if keep(t)]
        out[part] = {"n": len(chosen), "recall@5": statistics.fmean(r for r, _ in chosen),
                     "complete@5": statistics.fmean(c for _, c in chosen)}
    return out


def livemcp_share(index: SearchIndex | Memo, tasks: list[dict],
                  search: Callable[..., list[tuple[str, float]]] = whole_search) -> tuple[float, int]:
    """Mean share of each task's gold tools found in the top 10, and how many tasks had gold."""
    shares = []
    for task in tasks:
        gold = {f"{g['vendor']}/{g['name']}" for g in task["gold"]}
        if not gold:
            continue
        top = {k for k, _ in search(index, task["query"], limit=10)}
        shares.append(len(gold & top) / len(gold))
    return statistics.fmean(shares), len(shares)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sample", type=int, default=0, help="use N evenly spaced MetaTool queries")
    parser.add_argument("--bench-dir", type=Path, default=Path("/work/shared/bench"))
    parser.add_argument("--multi-only", action="store_true",
                        help="only the multi-intent section; its 10,000-tool timing with random unit tool vectors")
    args = parser.parse_args()
    if args.multi_only:
        multi_only(args.bench_dir, args.sample)
        return
    bench = args.bench_dir

    start = time.perf_counter()
    embedder.model()
    minilm_load = time.perf_counter() - start
    start = time.perf_counter()
    wordllama()
    wordllama_load = time.perf_counter() - start

    meta_docs, meta_vectors = with_vectors(load_tools(bench / "metatool" / "tools.json"))
    with (bench / "metatool" / "queries.csv").open(encoding="utf-8", newline="") as fh:
        rows = [(i, r["query"], f"{r['vendor']}/{r['name']}") for i, r in enumerate(csv.DictReader(fh))]
    if args.sample:  # a seeded random sample keeps some tuning and some held-out queries
        rows = sorted(random.Random(SEED).sample(rows, min(args.sample, len(rows))))
    queries = [(q, g) for _, q, g in rows]
    timing_queries = queries[:: max(1, len(queries) // 2000)]

    embed_seconds = []
    for query, _ in timing_queries:
        start = time.perf_counter()
        embedder.embed([query])
        embed_seconds.append(time.perf_counter() - start)

    meta_index, build_small = timed_build(meta_docs)
    meta_memo = Memo(meta_index)
    found, seconds = ranks(meta_memo, queries)
    tuning = [f for (i, _, _), f in zip(rows, found) if i % TUNING_EVERY == 0]
    held_out = [f for (i, _, _), f in zip(rows, found) if i % TUNING_EVERY != 0]
    empty = sum(not meta_index.search(q, limit=10) for q, _ in timing_queries)
    nonsense_small = sum(not meta_index.search(q) for q in NONSENSE)

    live_docs = load_tools(bench / "livemcpbench" / "tools.json")
    tasks = json.loads((bench / "livemcpbench" / "tasks.json").read_text(encoding="utf-8"))
    live_memo = Memo(SearchIndex.build(live_docs))
    live_share, live_tasks = livemcp_share(live_memo, tasks)

    rng = random.Random(SEED)
    base = meta_docs + live_docs
    padded, padded_vectors = with_vectors(base + variants(base, PAD_TO - len(base), rng))
    big_index, build_big = timed_build(padded)
    _, big_seconds = ranks(big_index, timing_queries)
    nonsense_big = sum(not big_index.search(q) for q in NONSENSE)

    q_all, q_tune, q_held = quality(found), quality(tuning), quality(held_out)
    print(f"## find_tool ranking benchmark ({datetime.date.today().isoformat()})")
    print()
    print(f"Command: `python bench/find_tool_quality.py{' --sample ' + str(args.sample) if args.sample else ''}`")
    print("Parameters were tuned on every 10th MetaTool query (the tuning rows) only. "
          f"OPENBLAS_NUM_THREADS={os.environ['OPENBLAS_NUM_THREADS']}, {os.cpu_count()} CPUs.")
    print()
    print("| corpus | queries | recall@1 | recall@5 | MRR@10 |")
    print("|---|---:|---:|---:|---:|")
    for label, q, n in (("MetaTool, all queries", q_all, len(found)),
                        ("MetaTool, tuning subset (every 10th)", q_tune, len(tuning)),
                        ("MetaTool, held-out (the other 90%)", q_held, len(held_out))):
        cells = " | ".join(f"{q[m]:.3f}" if n else "n/a" for m in ("recall@1", "recall@5", "mrr@10"))
        print(f"| {label} | {n} | {cells} |")
    print()
    print("| measure | value |")
    print("|---|---:|")
    print(f"| MetaTool queries answered with [] (of {len(timing_queries)}) | {empty} |")
    print(f"| nonsense queries answered with [] (of {len(NONSENSE)}), {len(meta_docs)} / {len(padded)} tools | "
          f"{nonsense_small} / {nonsense_big} |")
    print(f"| LiveMCPBench: mean share of gold tools in top 10 ({live_tasks} tasks with gold, "
          f"{len(live_docs)} tools) | {live_share:.3f} |")
    print(f"| model load, once per process: MiniLM / wordllama | {minilm_load * 1000:.0f} / "
          f"{wordllama_load * 1000:.0f} ms |")
    print(f"| query embedding (MiniLM), median / p99 ({len(embed_seconds)} queries) | "
          f"{percentile_ms(embed_seconds, 50):.2f} / {percentile_ms(embed_seconds, 99):.2f} ms |")
    print(f"| tool vectors, {len(meta_docs)} tools (document_vector, once per tool version) | "
          f"{meta_vectors:.1f} s ({meta_vectors / len(meta_docs) * 1000:.1f} ms per tool) |")
    print(f"| index build from stored vectors, {len(meta_docs)} tools | {build_small * 1000:.0f} ms |")
    print(f"| query time, {len(meta_docs)} tools, median / p99 ({len(seconds)} queries) | "
          f"{percentile_ms(seconds, 50):.2f} / {percentile_ms(seconds, 99):.2f} ms |")
    print(f"| tool vectors, {len(padded)} tools (document_vector, once per tool version) | "
          f"{padded_vectors:.1f} s ({padded_vectors / len(padded) * 1000:.1f} ms per tool) |")
    print(f"| index build from stored vectors, {len(padded)} tools | {build_big * 1000:.0f} ms |")
    print(f"| query time, {len(padded)} tools, median / p99 ({len(big_seconds)} queries) | "
          f"{percentile_ms(big_seconds, 50):.2f} / {percentile_ms(big_seconds, 99):.2f} ms |")
    print()
    multi_section(bench, meta_memo, rows, found, live_memo, tasks, big_index, timing_queries)


def multi_only(bench: Path, sample: int) -> None:
    """The multi-intent section alone: tool vectors computed for the 199 MetaTool tools only; the
    10,000-tool index for timing gets random unit vectors (ranking cost does not depend on them)."""
    embedder.model()
    wordllama()
    meta_docs, _ = with_vectors(load_tools(bench / "metatool" / "tools.json"))
    with (bench / "metatool" / "queries.csv").open(encoding="utf-8", newline="") as fh:
        rows = [(i, r["query"], f"{r['vendor']}/{r['name']}") for i, r in enumerate(csv.DictReader(fh))]
    if sample:
        rows = sorted(random.Random(SEED).sample(rows, min(sample, len(rows))))
    meta = Memo(SearchIndex.build(meta_docs))
    found, _ = ranks(meta, [(q, g) for _, q, g in rows])
    live_docs = load_tools(bench / "livemcpbench" / "tools.json")
    tasks = json.loads((bench / "livemcpbench" / "tasks.json").read_text(encoding="utf-8"))
    print(f"Command: `python bench/find_tool_quality.py --multi-only{' --sample ' + str(sample) if sample else ''}` "
          f"({datetime.date.today().isoformat()}, {len(rows)} single-tool queries)")
    print()
    queries = [(q, g) for _, q, g in rows]
    multi_section(bench, meta, rows, found, Memo(SearchIndex.build(live_docs)), tasks, padded_index(bench),
                  queries[:: max(1, len(queries) // 500)])


def padded_index(bench: Path) -> SearchIndex:
    """MetaTool's and LiveMCPBench's tools and seeded look-alikes, PAD_TO in all, with random unit
    vectors: for timing only (ranking cost does not depend on the vectors)."""
    base = load_tools(bench / "metatool" / "tools.json") + load_tools(bench / "livemcpbench" / "tools.json")
    rng = np.random.default_rng(SEED)
    unit = [rng.standard_normal(384).astype(np.float32) for _ in range(PAD_TO)]
    return SearchIndex.build([Document(d.key, d.vendor, d.name, d.description,
                                       (v / np.linalg.norm(v)).astype("<f2").tobytes())
                              for d, v in zip(base + variants(base, PAD_TO - len(base), random.Random(SEED)), unit)])


def union_top5(index: SearchIndex | Memo, query: str) -> set[str]:
    """The tools in the top 5 of the whole request's, any part's or the residual's ranking."""
    parts = intents.intents(query)
    rankings = index.search_many([query, *parts], max(10, intents.WHOLE_DEPTH), residual=True)
    return {key for ranking in rankings for key, _ in ranking[:5]}


def multi_section(bench: Path, meta: Memo, rows: list[tuple[int, str, str]], found: list[int | None],
                  live: Memo, tasks: list[dict], big_index: SearchIndex,
                  timing_queries: list[tuple[str, str]]) -> None:
    """Issue 25, goal 5: whole request only (before) and split into intents (now), side by side."""
    multi = [(i, m["query"], [f"{g['vendor']}/{g['name']}" for g in m["gold"]])
             for i, m in enumerate(json.loads((bench / "metatool" / "multi_queries.json").read_text(encoding="utf-8")))]
    labels = (("before", whole_search), ("parts only", split_parts_only), ("hand merge", split_hand_merge),
              ("old gate", split_metatool_gate), ("round 7 gate", split_round7_gate), ("new gate", split_openapi_gate),
              ("now", split_search))
    founds = {"before": found, **{label: ranks(meta, [(q, g) for _, q, g in rows], search)[0]
                                  for label, search in labels[1:]}}
    singles = {label: {part: quality([f for (i, _, _), f in zip(rows, ranked) if keep(i)])
                       for part, keep in (("all", lambda i: True), ("tuning", lambda i: i % TUNING_EVERY == 0),
                                          ("held-out", lambda i: i % TUNING_EVERY != 0))}
               for label, ranked in founds.items()}
    twos = {label: multi_quality(meta, multi, search) for label, search in labels}
    lives = {label: livemcp_share(live, tasks, search)[0] for label, search in labels}
    print("### Multi-intent requests (issue 25, goal 5): whole request only (before), split into parts "
          "without a residual (main before i25-multi3), parts and the residual by hand rules (main before "
          "i25-multi4), the gate with MetaTool-trained weights (main before i25-gate7), the gate with "
          "round 7's weights (generated requests only), the gate with queries.GATE_WEIGHTS (bench/gate_data.py's "
          f"corpus with its hand-written requests), now (chalicelib/search/queries.py as it ranks; "
          f"USE_GATE = {intents.USE_GATE})")
    print()
    print(f"Requests split into intents: MetaTool single-tool {sum(bool(intents.intents(q)) for _, q, _ in rows)} "
          f"of {len(rows)}, two-tool {sum(bool(intents.intents(q)) for _, q, _ in multi)} of {len(multi)}.")
    print()
    print("| measure | part | before (whole only) | parts only (no residual) | hand merge | MetaTool-trained gate | "
          "round 7 gate | GATE_WEIGHTS gate | now | now / before | now / MetaTool-trained gate | "
          "GATE_WEIGHTS gate / hand merge |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for part in ("all", "tuning", "held-out"):
        for measure, figures in (("MetaTool two-tool complete@5", {k: v[part]["complete@5"] for k, v in twos.items()}),
                                 ("MetaTool two-tool recall@5", {k: v[part]["recall@5"] for k, v in twos.items()}),
                                 ("MetaTool single-tool recall@5", {k: v[part]["recall@5"] for k, v in singles.items()}),
                                 ("MetaTool single-tool recall@1", {k: v[part]["recall@1"] for k, v in singles.items()})):
            print(f"| {measure} | {part} | {figures['before']:.3f} | {figures['parts only']:.3f} | "
                  f"{figures['hand merge']:.3f} | {figures['old gate']:.3f} | {figures['round 7 gate']:.3f} | "
                  f"{figures['new gate']:.3f} | "
                  f"{figures['now']:.3f} | {figures['now'] / figures['before']:.2f}x | "
                  f"{figures['now'] / figures['old gate']:.2f}x | {figures['new gate'] / figures['hand merge']:.2f}x |")
    print(f"| LiveMCPBench mean share of gold in top 10 | all | {lives['before']:.3f} | {lives['parts only']:.3f} | "
          f"{lives['hand merge']:.3f} | {lives['old gate']:.3f} | {lives['round 7 gate']:.3f} | "
          f"{lives['new gate']:.3f} | {lives['now']:.3f} | "
          f"{lives['now'] / lives['before']:.2f}x | {lives['now'] / lives['old gate']:.2f}x | "
          f"{lives['new gate'] / lives['hand merge']:.2f}x |")
    print()
    print("| requests against the hand merge | part | MetaTool-trained gate: gained / lost | "
          "round 7 gate: gained / lost | GATE_WEIGHTS gate: gained / lost | now: gained / lost |")
    print("|---|---|---:|---:|---:|---:|")
    completes = {label: [all(g in {k for k, _ in search(meta, q, 5)} for g in gold) for _, q, gold in multi]
                 for label, search in (("hand merge", split_hand_merge), ("old gate", split_metatool_gate),
                                       ("round 7 gate", split_round7_gate), ("new gate", split_openapi_gate),
                                       ("now", split_search))}

    def changes(pairs: list[tuple[bool, bool]]) -> str:
        return f"{sum(n and not h for h, n in pairs)} / {sum(h and not n for h, n in pairs)}"

    for part, keep in (("tuning", lambda i: i % TUNING_EVERY == 0), ("held-out", lambda i: i % TUNING_EVERY != 0)):
        two = {label: [(h, n) for (i, _, _), h, n in zip(multi, completes["hand merge"], completes[label]) if keep(i)]
               for label in ("old gate", "round 7 gate", "new gate", "now")}
        print(f"| MetaTool two-tool ({len(two['now'])}), complete@5 | {part} | {changes(two['old gate'])} | "
              f"{changes(two['round 7 gate'])} | {changes(two['new gate'])} | {changes(two['now'])} |")
        ones = {label: [(h is not None and h <= 5, n is not None and n <= 5)
                        for (i, _, _), h, n in zip(rows, founds["hand merge"], founds[label]) if keep(i)]
                for label in ("old gate", "round 7 gate", "new gate", "now")}
        print(f"| MetaTool single-tool ({len(ones['now'])}), gold in the top 5 | {part} | {changes(ones['old gate'])} | "
              f"{changes(ones['round 7 gate'])} | {changes(ones['new gate'])} | {changes(ones['now'])} |")
    oracle = [all(g in union for g in gold) for (i, q, gold), union in
              ((m, union_top5(meta, m[1])) for m in multi) if i % TUNING_EVERY != 0]
    print()
    print(f"Oracle merge (held-out two-tool requests with both gold tools in the union of the whole's, every "
          f"part's and the residual's top 5): {statistics.fmean(oracle):.3f} of {len(oracle)}")
    print()
    print(f"| query time at {len(big_index)} tools, warm | requests | median | p99 |")
    print("|---|---:|---:|---:|")
    timed = (("whole only (before issue 25)", whole_search), ("split, hand merge (main before i25-multi4)",
                                                               split_hand_merge), ("split, now", split_search))
    for kind, texts in (("single-tool", [q for q, _ in timing_queries]), ("two-tool", [q for _, q, _ in multi])):
        seconds: dict[str, list[float]] = {label: [] for label, _ in timed}
        for text in texts:  # the rankings interleaved, so a change in the machine's load hits all alike
            for label, search in timed:
                start = time.perf_counter()
                search(big_index, text, limit=10)
                seconds[label].append(time.perf_counter() - start)
        for label, _ in timed:
            print(f"| {kind} requests, {label} | {len(seconds[label])} | {percentile_ms(seconds[label], 50):.1f} ms | "
                  f"{percentile_ms(seconds[label], 99):.1f} ms |")


if __name__ == "__main__":
    main()
