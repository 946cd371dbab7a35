"""Candidate pieces for the gate (issue 25, goal 5): which pieces of a request, searched besides the
whole, hold the second intent's tool? Oracles and untrained rules on the tuning parts only.

Run from the project root:  python bench/multi_windows.py [--cache FILE] [--synthetic N] [--timing N]

The learned gate (chalicelib/search/queries.py) picks places 2-5 from the top 5s of the whole
request, its parts (at most MAX_PARTS) and its residual. Each variant here is another set of
queries searched besides the whole request (always with the whole's residual):
* parts N: queries.intents(text, max_parts=N), N = 3 (main), 4, 5, 6;
* windows: every run of 1 (or up to 2, 3) adjacent pieces (queries.pieces: sentence, connector and
  comma pieces), but never all the pieces at once, capped at C windows (single pieces first, in
  order, then pairs, then triples); alone, or with main's 3 parts;
* tails: the request after its first piece, after its third (after the second is main's 3rd part);
* parts without the first intent: each part's content words the whole's best hit does not hold,
  searched as a new text (a second MiniLM pass: an oracle only), or as that part's residual
  against the best hit (its words the best hit lacks and its vector minus its projection on the
  best hit's, SearchIndex._residual: no second pass).
For each: the oracle (both gold tools in the union of every ranking's top 5, and of every
ranking's top 3 with the whole's best hit skipped: the best hit is always first), the pool a
gate would choose among (distinct tools in the union of the top 5s), the hand merge
(queries.hand_merged: no learned weight) over the same rankings, and the queries searched per
request. Rows: MetaTool single-tool tuning requests (every 10th of queries.csv), two-tool
tuning requests (every 10th of multi_queries.json), synthetic two-intent requests joined from
two single-tool tuning requests (bench/multi_gate.join; a larger but glued-at-one-join set) and
ToolLens's tuning part (every 10th test request). Held-out rows are never read here.

Every distinct text is ranked once (its top RANKING_DEPTH, the whole request's WHOLE_DEPTH) and
cached; `--timing N` then times main's candidate set and the variants named in TIMED, request by
request interleaved, at 10,000 tools (warm): the whole request and the variant's queries in one
search_many (one MiniLM pass, with the residual) and the gate over them, as queries.search does.
"""

from __future__ import annotations

import argparse
import itertools
import os
import pickle
import random
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")


from chalicelib.search import embedder
from chalicelib.search import queries as intents
from chalicelib.search.index import HIT_COSINE, SearchIndex
from chalicelib.search.text import content_words

Ranking = list[tuple[str, float]]
RANKING_DEPTH = 10
SEED = 25


# -- the variants: the queries searched besides the whole request ----------------------------------

def parts(n: int) -> Callable[[str], list[str]]:
    return lambda text: intents.intents(text, max_parts=n)


def windows(width: int, cap: int, with_parts: bool = False) -> Callable[[str], list[str]]:
    """Runs of 1..width adjacent pieces (never all of them), the shorter runs first, at most `cap`."""
    def texts(text: str) -> list[str]:
        cut = intents.pieces(text)
        runs = [" ".join(cut[i:i + w]) for w in range(1, width + 1) for i in range(len(cut) - w + 1)
                if w < len(cut)]
        chosen = list(dict.fromkeys(runs))[:cap]
        return list(dict.fromkeys([*intents.intents(text), *chosen])) if with_parts else chosen
    return texts


def tails(count: int, with_parts: bool = True) -> Callable[[str], list[str]]:
    """The request from its 2nd, 3rd, ... piece to the end (at most `count`), with main's parts."""
    def texts(text: str) -> list[str]:
        cut = intents.pieces(text)
        rest = [" ".join(cut[i:]) for i in range(1, len(cut))][:count]
        return list(dict.fromkeys([*(intents.intents(text) if with_parts else []), *rest]))
    return texts


PLAIN: dict[str, Callable[[str], list[str]]] = {
    "parts 3 (main)": parts(3),
    "parts 4": parts(4),
    "parts 5": parts(5),
    "parts 6": parts(6),
    "pieces, all (no cap)": parts(99),
    "windows 1, cap 4": windows(1, 4),
    "windows 1-2, cap 4": windows(2, 4),
    "windows 1-2, cap 6": windows(2, 6),
    "windows 1-2, cap 8": windows(2, 8),
    "windows 1-2, no cap": windows(2, 99),
    "windows 1-3, cap 8": windows(3, 8),
    "parts 3 + windows 1-2, cap 4": windows(2, 4, with_parts=True),
    "parts 3 + windows 1-2, cap 6": windows(2, 6, with_parts=True),
    "parts 3 + windows 1-2, cap 8": windows(2, 8, with_parts=True),
    "parts 3 + tail after piece 1": tails(1),
    "parts 3 + tails after pieces 1-3": tails(3),
}
# variants built on main's parts after the whole's best hit is known: (plain variant, how)
DERIVED = {
    "parts 3 + each part without the best hit's words (re-embedded: 2nd pass)": ("parts 3 (main)", "stripped"),
    "parts 3 + each part's residual against the best hit (no 2nd pass)": ("parts 3 (main)", "presid"),
    "parts 3, each part replaced by its residual against the best hit": ("parts 3 (main)", "presid only"),
    "parts 6 + each part's residual against the best hit": ("parts 6", "presid"),
    "windows 1-2, cap 6 + each window's residual against the best hit": ("windows 1-2, cap 6", "presid"),
}
PAIRED = ("parts 4", "parts 5", "parts 6", "windows 1-2, cap 8", "parts 3 + windows 1-2, cap 4",
          "parts 3 + each part's residual against the best hit (no 2nd pass)")
CURVES = ("parts 3 (main)", "parts 6", "windows 1-2, no cap", "parts 3 + tails after pieces 1-3",
          "parts 3 + each part's residual against the best hit (no 2nd pass)")
TIMED = (("parts 3 (main)", 5), ("parts 3 (main)", 7), ("parts 4", 5), ("parts 6", 5), ("windows 1-2, cap 6", 5),
         ("windows 1-2, no cap", 5), ("parts 3 + windows 1-2, cap 6", 5), ("parts 3 + tails after pieces 1-3", 5))


# -- the cache: every distinct text ranked once per toolbox ----------------------------------------

def stripped(index: SearchIndex, part: str, top: str) -> str:
    """The part's content words the whole's best hit `top` does not hold ('' if it holds them all)."""
    words = content_words(part)
    return " ".join(w for w, held in zip(words, index.holds(top, words)) if not held)


def part_residuals(index: SearchIndex, texts: list[str], top: str) -> list[Ranking]:
    """Each text's residual against `top` (SearchIndex._residual with the text's own vector):
    what the text asks beyond the whole request's best hit, from the vector already computed."""
    signals = index._signals
    assert signals is not None
    out: list[Ranking] = []
    vectors = embedder.embed(texts)
    for text, vector in zip(texts, vectors):
        content = content_words(text)
        if not content:
            out.append([])
            continue
        keyword, _ = signals.lexicon.scores(content)
        listed = (keyword > 0) | (signals.vectors @ vector >= HIT_COSINE)
        out.append(index._residual(text, content, vector, top, listed, RANKING_DEPTH, None))
    return out


def cache_set(index: SearchIndex, requests: list[tuple[str, list[str]]]) -> dict:
    """Rankings for one set of requests: the whole (and its residual) per request, and every text any
    variant searches, each ranked once."""
    wholes: dict[str, tuple[Ranking, Ranking]] = {}
    for text, _ in requests:
        if text not in wholes:
            whole, resid = index.search_many([text], intents.WHOLE_DEPTH, residual=True)
            wholes[text] = (whole, resid)
    texts = list(dict.fromkeys(t for text, _ in requests for make in PLAIN.values() for t in make(text)))
    ranked: dict[str, Ranking] = {}
    for start in range(0, len(texts), 16):
        batch = [t for t in texts[start:start + 16] if t not in wholes]
        ranked.update(zip(batch, index.search_many(batch, RANKING_DEPTH)))
    ranked.update((t, w[:RANKING_DEPTH]) for t, (w, _) in wholes.items())
    presid: dict[tuple[str, str], Ranking] = {}
    for text, _ in requests:
        whole = wholes[text][0]
        if not whole:
            continue
        top = whole[0][0]
        bases = list(dict.fromkeys(t for plain, _ in DERIVED.values() for t in PLAIN[plain](text)))
        missing = [t for t in bases if (t, top) not in presid]
        if missing:
            presid.update(((t, top), r) for t, r in zip(missing, part_residuals(index, missing, top)))
        new = [s for s in (stripped(index, t, top) for t in bases) if s and s not in ranked]
        if new:
            ranked.update(zip(new, index.search_many(new, RANKING_DEPTH)))
    return {"requests": requests, "wholes": wholes, "ranked": ranked, "presid": presid}


def ranking(index: SearchIndex, cache: dict, text: str) -> Ranking:
    """A text's cached ranking, ranked now if no variant asked for it when the cache was built."""
    if text not in cache["ranked"]:
        cache["ranked"][text] = index.search_many([text], RANKING_DEPTH)[0]
    return cache["ranked"][text]


def extra_rankings(index: SearchIndex, cache: dict, text: str,
                   variant: str) -> tuple[list[str], list[Ranking], list[Ranking], int]:
    """What a variant searches besides the whole and its residual: the texts the gate reads as
    parts and their rankings, the rankings it reads as residuals (after the whole's), and how many
    texts are embedded."""
    top = cache["wholes"][text][0][0][0]
    plain, how = DERIVED.get(variant, (variant, ""))
    texts = PLAIN[plain](text)
    own = [ranking(index, cache, t) for t in texts]
    if not how:
        return texts, own, [], len(texts)
    if how == "stripped":
        more = [s for s in (stripped(index, t, top) for t in texts) if s]
        return texts + more, own + [ranking(index, cache, s) for s in more], [], len(texts) + len(more)
    missing = [t for t in texts if (t, top) not in cache["presid"]]
    if missing:
        cache["presid"].update(((t, top), r) for t, r in zip(missing, part_residuals(index, missing, top)))
    residuals = [cache["presid"][t, top] for t in texts]
    return (texts, residuals, [], len(texts)) if how == "presid only" else (texts, own, residuals, len(texts))


# -- figures ---------------------------------------------------------------------------------------

def gate_hits(index: SearchIndex, cache: dict, variant: str) -> list[float]:
    """Per request, the share of its gold tools in the shipped gate's top 5 over a variant's rankings."""
    out = []
    for text, gold in cache["requests"]:
        whole, resid = cache["wholes"][text]
        if not whole:
            out.append(0.0)
            continue
        texts, own, after, _ = extra_rankings(index, cache, text, variant)
        top = {k for k, _ in intents.gated(index, text, texts, [whole, *own, resid, *after], 5)}
        out.append(sum(g in top for g in gold) / len(gold))
    return out


def paired(meta: SearchIndex, lens: SearchIndex, caches: dict[str, dict]) -> None:
    """Requests gained and lost against main by the shipped gate (not re-trained) over PAIRED."""
    print()
    print("| the shipped gate over ..., against main (tuning rows): gained / lost | " + " | ".join(
        f"{name} ({len(caches[name]['requests'])})" for name in ("two", "synthetic", "single", "toollens")) + " |")
    print("|---|" + "---:|" * 4)
    base = {name: gate_hits(lens if name == "toollens" else meta, cache, "parts 3 (main)")
            for name, cache in caches.items()}
    for variant in PAIRED:
        cells = []
        for name in ("two", "synthetic", "single", "toollens"):
            now = gate_hits(lens if name == "toollens" else meta, caches[name], variant)
            full = name != "toollens"  # complete (two-tool) or gold found (single); ToolLens: any share moved
            gained = sum((n == 1.0 and b < 1.0) if full else n > b for n, b in zip(now, base[name]))
            lost = sum((b == 1.0 and n < 1.0) if full else n < b for n, b in zip(now, base[name]))
            cells.append(f"{gained} / {lost}")
        print(f"| {variant} | " + " | ".join(cells) + " |", flush=True)


def figures(index: SearchIndex, cache: dict, variant: str, depth: int = 5) -> dict[str, float]:
    """Over one cached set: the oracle (every gold tool in the union of the rankings' first `depth`;
    and of their first 3 after the whole's best hit), the pool (distinct tools in the union, the
    best hit left out), the gate as shipped (GATE_WEIGHTS, not re-trained) and the hand merge over
    the same rankings, and the texts embedded per request."""
    rows: dict[str, list[float]] = {name: [] for name in (
        "oracle", "oracle3", "share", "pool", "gate recall", "gate complete", "hand recall", "hand complete",
        "texts")}
    for text, gold in cache["requests"]:
        whole, resid = cache["wholes"][text]
        if not whole:
            for name, values in rows.items():
                values.append(1.0 if name == "texts" else 0.0)
            continue
        texts, own, after, count = extra_rankings(index, cache, text, variant)
        rankings = [whole, *own, resid, *after]
        top = whole[0][0]
        union = {k for r in rankings for k, _ in r[:depth]}
        union3 = {top} | {k for r in rankings for k in [k for k, _ in r if k != top][:3]}
        found = sum(g in union for g in gold)
        pool_part, intents.POOL_PART = intents.POOL_PART, depth  # the gate reads each ranking as deep
        try:
            gate = {k for k, _ in intents.gated(index, text, texts, rankings, 5)}
        finally:
            intents.POOL_PART = pool_part
        hand = {k for k, _ in intents.hand_merged(rankings, 5)}
        rows["oracle"].append(float(found == len(gold)))
        rows["share"].append(found / len(gold))
        rows["oracle3"].append(float(all(g in union3 for g in gold)))
        rows["pool"].append(len(union - {top}))
        for name, chosen in (("gate", gate), ("hand", hand)):
            hit = sum(g in chosen for g in gold)
            rows[f"{name} recall"].append(hit / len(gold))
            rows[f"{name} complete"].append(float(hit == len(gold)))
        rows["texts"].append(1 + count)
    return {name: statistics.fmean(values) for name, values in rows.items()}


def table(meta: SearchIndex, lens: SearchIndex, caches: dict[str, dict]) -> None:
    n = {name: len(c["requests"]) for name, c in caches.items()}
    print(f"| candidate set (tuning rows) | two-tool oracle@5 / @3 ({n['two']}) | synthetic oracle@5 / @3 "
          f"({n['synthetic']}) | synthetic pool | single oracle@5 ({n['single']}) | single pool | "
          f"ToolLens oracle recall@5 ({n['toollens']}) | gate: two-tool complete@5 | synthetic complete@5 | "
          "single recall@5 | ToolLens recall@5 | hand merge: synthetic complete@5 | single recall@5 | "
          "texts per request (single / synthetic) |")
    print("|---|" + "---:|" * 13)
    rows = [(variant, 5) for variant in [*PLAIN, *DERIVED]]
    rows[1:1] = [("parts 3 (main)", depth) for depth in (6, 7)]
    for variant, depth in rows:
        two, syn, one, tl = (figures(lens if name == "toollens" else meta, caches[name], variant, depth)
                             for name in ("two", "synthetic", "single", "toollens"))
        label = variant if depth == 5 else f"{variant}, each ranking read to place {depth} (the gate's POOL_PART)"
        print(f"| {label} | {two['oracle']:.2f} / {two['oracle3']:.2f} | {syn['oracle']:.3f} / {syn['oracle3']:.3f} | "
              f"{syn['pool']:.1f} | {one['oracle']:.3f} | {one['pool']:.1f} | {tl['share']:.3f} | "
              f"{two['gate complete']:.2f} | {syn['gate complete']:.3f} | {one['gate recall']:.3f} | "
              f"{tl['gate recall']:.3f} | {syn['hand complete']:.3f} | {one['hand recall']:.3f} | "
              f"{one['texts']:.2f} / {syn['texts']:.2f} |", flush=True)


def coverage(index: SearchIndex, cache: dict, variant: str, depth: int,
             keep: Callable[[str], bool] = lambda text: True) -> tuple[float, float, int]:
    """(oracle, pool, requests) with every ranking read to `depth`, over the requests `keep` keeps."""
    found, pools = [], []
    for text, gold in cache["requests"]:
        if not keep(text):
            continue
        whole, resid = cache["wholes"][text]
        if not whole:
            found.append(0.0)
            pools.append(0)
            continue
        _, own, after, _ = extra_rankings(index, cache, text, variant)
        union = {k for r in [whole, *own, resid, *after] for k, _ in r[:depth]}
        found.append(float(all(g in union for g in gold)))
        pools.append(len(union - {whole[0][0]}))
    return statistics.fmean(found), statistics.fmean(pools), len(found)


def at_pool(curve: list[tuple[float, float, int]], pool: float) -> float:
    """The oracle at a pool of `pool` tools, linear between the depths around it (nan out of range)."""
    for (o1, p1, _), (o2, p2, _) in itertools.pairwise(curve):
        if p1 <= pool <= p2:
            return o1 + (o2 - o1) * (pool - p1) / (p2 - p1) if p2 > p1 else o1
    return float("nan")


def matched(meta: SearchIndex, lens: SearchIndex, caches: dict[str, dict]) -> None:
    """Does a variant cover more than main at the same pool size? Each ranking read to 1..9 places;
    the oracle interpolated at main's pool size with 5 places (and at 3 places), per set; and on
    the synthetic requests by their number of pieces (real two-tool requests have 2-3 mostly)."""
    few = lambda text: len(intents.pieces(text)) <= 3
    many = lambda text: len(intents.pieces(text)) > 3
    sets = (("synthetic", caches["synthetic"], meta, lambda text: True),
            ("synthetic, <= 3 pieces", caches["synthetic"], meta, few),
            ("synthetic, > 3 pieces", caches["synthetic"], meta, many),
            ("ToolLens", caches["toollens"], lens, lambda text: True))
    curves = {(name, variant): [coverage(index, cache, variant, depth, keep) for depth in range(1, 10)]
              for name, cache, index, keep in sets for variant in [*PLAIN, *DERIVED]}
    base = {name: (curves[name, "parts 3 (main)"][2][1], curves[name, "parts 3 (main)"][4][1])
            for name, *_ in sets}
    print()
    print("| synthetic requests (tuning rows): oracle / pool with each ranking read to place | "
          + " | ".join(str(depth) for depth in range(1, 10)) + " |")
    print("|---|" + "---:|" * 9)
    for variant in CURVES:
        print(f"| {variant} | " + " | ".join(f"{o:.3f} / {p:.1f}" for o, p, _ in curves["synthetic", variant]) + " |")
    print()
    print("| candidate set (tuning rows): oracle at main's pool size with 3 / 5 places per ranking | "
          + " | ".join(f"{name} ({curves[name, 'parts 3 (main)'][0][2]}; pool {base[name][0]:.1f} / {base[name][1]:.1f})"
                       for name, *_ in sets) + " |")
    print("|---|" + "---:|" * len(sets))
    for variant in [*PLAIN, *DERIVED]:
        print(f"| {variant} | " + " | ".join(
            f"{at_pool(curves[name, variant], base[name][0]):.3f} / {at_pool(curves[name, variant], base[name][1]):.3f}"
            for name, *_ in sets) + " |", flush=True)


# -- data ------------------------------------------------------------------------------------------

def build(bench: Path, colt: Path, synthetic: int) -> tuple[SearchIndex, SearchIndex, dict[str, dict]]:
    from bench.multi_gate import JOINS, join
    from bench.multi_levers import meta_index, tuning_sets

    meta = meta_index(bench)
    sets, lens = tuning_sets(bench, colt)
    rng = random.Random(SEED)
    glued: list[tuple[str, list[str]]] = []
    while len(glued) < synthetic:
        (a, (ta,)), (b, (tb,)) = rng.sample(sets["single"], 2)
        if ta != tb:
            glued.append((join(a, b, rng.choice(JOINS)), [ta, tb]))
    sets["synthetic"] = glued
    caches = {}
    for name in ("single", "two", "synthetic", "toollens"):
        start = time.perf_counter()
        caches[name] = cache_set(lens if name == "toollens" else meta, sets[name])
        print(f"{name}: {len(sets[name])} requests, {len(caches[name]['ranked'])} texts ranked in "
              f"{time.perf_counter() - start:.0f} s", file=sys.stderr, flush=True)
    return meta, lens, caches


def timing(bench: Path, caches: dict[str, dict], count: int) -> None:
    """Median and p99 ms per request at 10,000 tools, warm: main's set and TIMED, interleaved."""
    from bench.find_tool_quality import padded_index, percentile_ms

    big = padded_index(bench)
    singles = [text for text, _ in caches["single"]["requests"]]
    kinds = (("single-tool", singles[::max(1, len(singles) // count)][:count]),
             ("two-tool", [text for text, _ in caches["two"]["requests"]]),
             ("synthetic two-intent", [text for text, _ in caches["synthetic"]["requests"]][:count]))

    def searched(text: str, variant: str, pool_part: int) -> None:
        texts = PLAIN[variant](text)
        rankings = big.search_many([text, *texts], intents.WHOLE_DEPTH, residual=True)
        if rankings[0]:
            intents.POOL_PART = pool_part
            try:
                intents.gated(big, text, texts, rankings, 10)
            finally:
                intents.POOL_PART = 5

    for text in singles[:20]:  # warm
        searched(text, *TIMED[0])
    labels = [variant if pool == 5 else f"{variant}, POOL_PART {pool}" for variant, pool in TIMED]
    print()
    print(f"| query time at {len(big)} tools, warm (median / p99 ms) | " + " | ".join(labels) + " |")
    print("|---|" + "---:|" * len(labels))
    for kind, texts in kinds:
        seconds: dict[str, list[float]] = {label: [] for label in labels}
        for text in texts:  # interleaved: a change in the machine's load hits every variant alike
            for label, (variant, pool) in zip(labels, TIMED):
                start = time.perf_counter()
                searched(text, variant, pool)
                seconds[label].append(time.perf_counter() - start)
        print(f"| {kind} ({len(texts)}) | " + " | ".join(
            f"{percentile_ms(seconds[label], 50):.1f} / {percentile_ms(seconds[label], 99):.1f}" for label in labels)
            + " |", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cache", type=Path, default=Path("/tmp/multi_windows.pkl"))
    parser.add_argument("--bench-dir", type=Path, default=Path("/work/shared/bench"))
    parser.add_argument("--colt", type=Path, default=Path("/work/.mirror/quchangle1+COLT/repo"))
    parser.add_argument("--synthetic", type=int, default=1000, help="synthetic two-intent tuning requests")
    parser.add_argument("--timing", type=int, default=0, help="time N single-tool requests (and as many synthetic)")
    parser.add_argument("--tables", default="gate,matched,paired", help="which tables: gate, matched, paired")
    args = parser.parse_args()
    if args.cache.exists():
        meta, lens, caches = pickle.loads(args.cache.read_bytes())
    else:
        meta, lens, caches = build(args.bench_dir, args.colt, args.synthetic)
        args.cache.write_bytes(pickle.dumps((meta, lens, caches)))
    if "gate" in args.tables:
        table(meta, lens, caches)
    if "matched" in args.tables:
        matched(meta, lens, caches)
    if "paired" in args.tables:
        paired(meta, lens, caches)
    if args.timing:
        timing(args.bench_dir, caches, args.timing)


if __name__ == "__main__":
    main()
