"""Replay of multi-intent levers on cached rankings (issue 25, goal 5), tuning parts only.

Run from the project root:  python bench/multi_levers.py [--cache FILE]

Caches, once, for every tuning request (every 10th of MetaTool's queries.csv and
multi_queries.json, every 10th ToolLens test request): the whole request's full ranking, each
intent's (chalicelib/search/queries.py), and residual ("explaining away") rankings after the
whole's top hit; then replays the rules in `rules()` over the cache in seconds. Held-out
requests are never read here: bench/find_tool_quality.py and bench/toollens.py report them.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import pickle
import statistics
import sys
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np

from chalicelib.search import embedder
from chalicelib.search import queries as intents
from chalicelib.search.bm25 import Terms
from chalicelib.search.index import SearchIndex
from chalicelib.search.text import content_words, name_words, stem

TUNING_EVERY = 10
COVER_DEPTH = 30
Ranking = list[tuple[str, float]]


def doc_terms(index: SearchIndex) -> dict[str, frozenset[str]]:
    return {d.key: frozenset(Terms.of(d, name_words(d.name, d.description)).freqs) for d in index._docs}


def ranked(index: SearchIndex, text: str, content: list[str], vector: np.ndarray) -> Ranking:
    """SearchIndex's ranking of a query given its words and its vector (all listed hits)."""
    signals = index._signals
    assert signals is not None
    if not content:
        content = content_words(text)
    keyword, named = signals.lexicon.scores(content)
    cosine = signals.vectors @ vector
    return index._ranked(text, content, keyword, named, vector, cosine, len(index), None)


def cache_one(index: SearchIndex, terms: dict[str, frozenset[str]], text: str) -> dict:
    whole = index.search_many([text], len(index))[0]
    parts = intents.intents(text)
    out: dict = {"whole": whole, "parts": [], "resid": {}}
    if parts:
        out["parts"] = index.search_many(parts, len(index))
    if not whole:
        return out
    (q,) = embedder.embed([text])
    content = content_words(text)
    signals = index._signals
    assert signals is not None
    stems = list(dict.fromkeys(stem(w) for w in content))
    out["idf"] = {s: signals.lexicon.idf(s) for s in stems}
    out["q"] = q
    out["covers"] = {k: frozenset(s for s in stems if s in terms[k]) for k, _ in whole[:COVER_DEPTH]}
    out["vectors"] = {k: signals.vectors[index._rows[k]].astype(np.float32) for k, _ in whole[:COVER_DEPTH]}
    out["pvectors"] = [v for v in embedder.embed(parts)] if parts else []
    for depth in (1, 2):
        top = [index._rows[k] for k, _ in whole[:depth]]
        basis = signals.vectors[top].astype(np.float64)
        # q minus its projection on the span of the top hits' vectors
        coef, *_ = np.linalg.lstsq(basis.T, q.astype(np.float64), rcond=None)
        r = q - basis.T @ coef
        norm = np.linalg.norm(r)
        r = (r / norm if norm > 1e-6 else q).astype(np.float32)
        held = frozenset().union(*(terms[k] for k, _ in whole[:depth]))
        left = [w for w in content if stem(w) not in held]
        out["resid"][f"dense+words{depth}"] = ranked(index, " ".join(left) or text, left or content, r)
        out["resid"][f"dense{depth}"] = ranked(index, text, content, r)
        out["resid"][f"words{depth}"] = ranked(index, " ".join(left), left, q) if left else []
        out["resid"][f"left{depth}"] = left
    return out


def meta_index(bench: Path) -> SearchIndex:
    """MetaTool's 199 tools, indexed from their stored vectors as the app keeps them."""
    from bench.find_tool_quality import load_tools, with_vectors

    meta_docs, _ = with_vectors(load_tools(bench / "metatool" / "tools.json"))
    return SearchIndex.build(meta_docs)


def tuning_sets(bench: Path, colt: Path) -> tuple[dict[str, list[tuple[str, list[str]]]], SearchIndex]:
    """The tuning requests with their gold keys: "single" (every 10th of MetaTool's queries.csv),
    "two" (every 10th of multi_queries.json), "toollens" (every 10th ToolLens test request); and
    ToolLens's index."""
    from bench.toollens import load_requests
    from bench.toollens import load_tools as colt_tools

    with (bench / "metatool" / "queries.csv").open(encoding="utf-8", newline="") as fh:
        singles = [(r["query"], [f"{r['vendor']}/{r['name']}"]) for i, r in enumerate(csv.DictReader(fh))
                   if i % TUNING_EVERY == 0]
    multi = [(m["query"], [f"{g['vendor']}/{g['name']}" for g in m["gold"]])
             for i, m in enumerate(json.loads((bench / "metatool" / "multi_queries.json").read_text("utf-8")))
             if i % TUNING_EVERY == 0]
    docs = colt_tools(colt)
    lens_requests = [(text, [docs[c].key for c in ids]) for i, text, ids in load_requests(colt)
                     if i % TUNING_EVERY == 0]
    return {"single": singles, "two": multi, "toollens": lens_requests}, SearchIndex.build(docs.values())


def build_cache(bench: Path, colt: Path) -> dict:
    meta = meta_index(bench)
    meta_terms = doc_terms(meta)
    sets, lens = tuning_sets(bench, colt)
    lens_terms = doc_terms(lens)
    out = {}
    for name, index, terms in (("single", meta, meta_terms), ("two", meta, meta_terms), ("toollens", lens, lens_terms)):
        out[name] = [(text, gold, cache_one(index, terms, text)) for text, gold in sets[name]]
        print(name, len(out[name]), file=sys.stderr)
    return out


def evaluate(cache: dict, rule: Callable[[dict, int], list[str]]) -> dict[str, float]:
    out = {}
    for name, rows in cache.items():
        shares, complete = [], []
        for text, gold, c in rows:
            top = set(rule(c, 5)[:5])
            found = sum(g in top for g in gold)
            shares.append(found / len(gold))
            complete.append(found == len(gold))
        out[name] = (statistics.fmean(shares), statistics.fmean(complete))
    return out


def show(label: str, figures: dict[str, tuple[float, float]]) -> None:
    s, t, lens = figures["single"], figures["two"], figures["toollens"]
    print(f"| {label} | {s[0]:.3f} | {t[1]:.2f} | {t[0]:.3f} | {lens[0]:.3f} | {lens[1]:.3f} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cache", type=Path, default=Path("/tmp/multi_levers.pkl"))
    parser.add_argument("--bench-dir", type=Path, default=Path("/work/shared/bench"))
    parser.add_argument("--colt", type=Path, default=Path("/work/.mirror/quchangle1+COLT/repo"))
    args = parser.parse_args()
    if args.cache.exists():
        cache = pickle.loads(args.cache.read_bytes())
    else:
        cache = build_cache(args.bench_dir, args.colt)
        args.cache.write_bytes(pickle.dumps(cache))
    from bench import multi_rules

    print("| rule (tuning parts) | single recall@5 | two-tool complete@5 | two-tool recall@5 | ToolLens recall@5 | "
          "ToolLens complete@5 |")
    print("|---|---:|---:|---:|---:|---:|")
    for label, rule in multi_rules.rules():
        show(label, evaluate(cache, rule))


if __name__ == "__main__":
    main()
