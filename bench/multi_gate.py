"""A learned gate for multi-intent requests (issue 25, goal 5): data, training, cross-validation.

Run from the project root:  python bench/multi_gate.py [--cache FILE] [--pairs N] [--two-stage]

The 24-feature gate of main (the last queries.PAIRWISE features held at 0) is trained and
cross-validated beside the gate with them; the share printed as best is the one with the most CV
synthetic complete@5 whose CV single-tool recall@5 is not below the 24-feature gate's.

Which candidate from a part's or the residual's ranking takes a place in the top 5 is decided by
a linear score of a few features (chalicelib/search/queries.py, gate_features). Its weights are
learned here, from tuning rows only:
* synthetic two-intent requests: two single-tool TUNING requests of MetaTool (every 10th row of
  queries.csv) for different tools, joined as people join them ("X and y", "X. Also, Y",
  "X, then y", "X as well as y", "X. Y"; y the second request lower-cased at its start, its
  trailing punctuation kept), the two tools gold;
* the single-tool tuning requests themselves (their parts must not displace the whole's hits);
* checks never trained on: MetaTool's real two-tool tuning requests (every 10th of
  multi_queries.json, 50) and ToolLens's tuning part (every 10th test request, 188).
Cross-validation is by tool: the 199 tools fall in FOLDS folds; a fold's model is trained on the
requests with none of its tools and measured on the requests whose tools are all in it (unseen
tools). Held-out rows are never read here: bench/find_tool_quality.py and bench/toollens.py
report them.

Training: a listwise softmax over each request's candidates (the gold ones pulled up), L2,
full-batch Adam in numpy; features standardised, the weights folded back to raw features.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import pickle
import random
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np

from chalicelib.search import queries as intents
from chalicelib.search.index import SearchIndex

TUNING_EVERY = 10
FOLDS = 5
SEED = 25
JOINS = ("{a} and {b}", "{a}. Also, {b}", "{a}, then {b}", "{a} as well as {b}", "{a}. {B}", "{a}, and {b}")


def join(a: str, b: str, how: str) -> str:
    """Two requests joined as one: the first without its final punctuation, the second after it."""
    a = a.strip().rstrip(".!?;, ")
    b = b.strip()
    return how.format(a=a, b=b[:1].lower() + b[1:], B=b[:1].upper() + b[1:])


def row_of(index: SearchIndex, text: str, gold: list[str]) -> dict:
    """What the gate sees of one request, and what the rankings before it answer."""
    parts = intents.intents(text)
    rankings = index.search_many([text, *parts], intents.WHOLE_DEPTH, residual=True)
    out: dict = {"text": text, "gold": gold, "top": None, "keys": [], "x": None}
    if not rankings[0]:
        return out
    whole = rankings[0]
    out["top"] = whole[0][0]
    out["whole"] = [k for k, _ in whole[:5]]
    out["shipped"] = [k for k, _ in intents.merged([whole, *(intents.in_context(r[:5], whole)
                                                             for r in rankings[1:])], 5)]
    keys, x = intents.gate_features(index, text, parts, rankings)
    out["keys"], out["x"] = keys, x.astype(np.float32)
    out["rest"] = [k for k, _ in whole[1:] if k not in set(keys)]
    out["union"] = {k for r in rankings[1:] for k, _ in r[:5]} | set(out["whole"])
    return out


def build(bench: Path, colt: Path, pairs: int) -> dict:
    from bench.find_tool_quality import load_tools, with_vectors
    from bench.toollens import load_requests
    from bench.toollens import load_tools as colt_tools

    meta_docs, _ = with_vectors(load_tools(bench / "metatool" / "tools.json"))
    meta = SearchIndex.build(meta_docs)
    with (bench / "metatool" / "queries.csv").open(encoding="utf-8", newline="") as fh:
        singles = [(r["query"], f"{r['vendor']}/{r['name']}") for i, r in enumerate(csv.DictReader(fh))
                   if i % TUNING_EVERY == 0]
    real = [(m["query"], [f"{g['vendor']}/{g['name']}" for g in m["gold"]])
            for i, m in enumerate(json.loads((bench / "metatool" / "multi_queries.json").read_text("utf-8")))
            if i % TUNING_EVERY == 0]
    rng = random.Random(SEED)
    synthetic = []
    while len(synthetic) < pairs:
        (a, ta), (b, tb) = rng.sample(singles, 2)
        if ta != tb:
            synthetic.append((join(a, b, rng.choice(JOINS)), [ta, tb]))
    out: dict = {}
    for name, requests in (("single", [(t, [g]) for t, g in singles]), ("synthetic", synthetic), ("real", real)):
        out[name] = [row_of(meta, text, gold) for text, gold in requests]
        print(name, len(out[name]), file=sys.stderr)
    docs = colt_tools(colt)
    lens = SearchIndex.build(docs.values())
    out["toollens"] = [row_of(lens, text, [docs[c].key for c in ids]) for i, text, ids in load_requests(colt)
                       if i % TUNING_EVERY == 0]
    return out


def ranked(row: dict, w: np.ndarray | None, limit: int = 5) -> list[str]:
    """The top `limit` with gate weights `w` (None: the shipped merge)."""
    if row["top"] is None:
        return []
    if w is None:
        return row["shipped"][:limit]
    scores = row["x"].astype(np.float64) @ w
    order = [row["keys"][i] for i in sorted(range(len(row["keys"])), key=lambda i: (-scores[i], row["keys"][i]))]
    return [row["top"], *order, *row["rest"]][:limit]


def figures(rows: list[dict], w: np.ndarray | None, which: str = "gate") -> tuple[float, float]:
    """(recall@5, complete@5) over rows."""
    shares, complete = [], []
    for row in rows:
        if which == "whole":
            top = set(row.get("whole", []))
        elif which == "oracle":
            top = row.get("union", set())
        else:
            top = set(ranked(row, w))
        found = sum(g in top for g in row["gold"])
        shares.append(found / len(row["gold"]))
        complete.append(found == len(row["gold"]))
    return statistics.fmean(shares), statistics.fmean(complete)


def train(rows: list[dict], weights: list[float], l2: float = 1e-3, steps: int = 600, lr: float = 0.05,
          pairwise: bool = True) -> np.ndarray:
    """Gate weights over raw features: listwise softmax over each row's candidates, gold pulled up.
    Without `pairwise`, the last queries.PAIRWISE features are held at 0 (their weights 0): the
    24-feature gate of the round before."""
    used = [(r, wt) for r, wt in zip(rows, weights) if r["top"] is not None and any(k in r["gold"] for k in r["keys"])]
    width = max(len(r["keys"]) for r, _ in used)
    nf = len(intents.GATE_FEATURES)
    X = np.zeros((len(used), width, nf))
    mask = np.zeros((len(used), width), bool)
    gold = np.zeros((len(used), width))
    for i, (r, _) in enumerate(used):
        n = len(r["keys"])
        X[i, :n] = r["x"]
        if not pairwise:
            X[i, :n, nf - intents.PAIRWISE:] = 0.0
        mask[i, :n] = True
        gold[i, :n] = [k in r["gold"] for k in r["keys"]]
    gold /= gold.sum(axis=1, keepdims=True)
    wt = np.array([w for _, w in used])
    wt /= wt.sum()
    flat = X[mask]
    mean, std = flat.mean(axis=0), flat.std(axis=0)
    mean[0], std[0] = 0.0, 1.0  # the bias stays
    std[std < 1e-9] = 1.0
    Z = np.where(mask[..., None], (X - mean) / std, 0.0)
    theta = np.zeros(nf)
    m, v = np.zeros(nf), np.zeros(nf)
    for step in range(1, steps + 1):
        s = Z @ theta
        s = np.where(mask, s, -1e9)
        s -= s.max(axis=1, keepdims=True)
        p = np.exp(s) * mask
        p /= p.sum(axis=1, keepdims=True)
        grad = np.einsum("i,ijk,ij->k", wt, Z, p - gold) + l2 * theta
        m = 0.9 * m + 0.1 * grad
        v = 0.999 * v + 0.001 * grad ** 2
        theta -= lr * (m / (1 - 0.9 ** step)) / (np.sqrt(v / (1 - 0.999 ** step)) + 1e-8)
    w = theta / std
    w[0] = theta[0] - float((theta / std * mean)[1:].sum())
    return w


def weights_for(rows: list[dict], single_share: float) -> list[float]:
    """Per-row weights: the single-tool rows together `single_share` of the total."""
    n_single = sum(len(r["gold"]) == 1 for r in rows) or 1
    n_pair = sum(len(r["gold"]) > 1 for r in rows) or 1
    return [single_share / n_single if len(r["gold"]) == 1 else (1 - single_share) / n_pair for r in rows]


def folds(cache: dict) -> list[tuple[list[dict], list[dict], list[dict], list[dict]]]:
    """Per fold: (train singles, train synthetic, validation singles, validation synthetic), by tool."""
    tools = sorted({g for r in cache["single"] for g in r["gold"]})
    random.Random(SEED).shuffle(tools)
    fold_of = {t: i % FOLDS for i, t in enumerate(tools)}
    out = []
    for f in range(FOLDS):
        def unseen(r: dict, f: int = f) -> bool:
            return all(fold_of[g] == f for g in r["gold"])

        def seen(r: dict, f: int = f) -> bool:
            return all(fold_of[g] != f for g in r["gold"])

        out.append(([r for r in cache["single"] if seen(r)], [r for r in cache["synthetic"] if seen(r)],
                    [r for r in cache["single"] if unseen(r)], [r for r in cache["synthetic"] if unseen(r)]))
    return out


def request_features(row: dict) -> np.ndarray:
    """Request-level evidence of a second intent, from the gate's rows (length left out: the
    synthetic requests are two requests long, which says nothing about real ones): the whole's
    gap, the parts, the parts' and the residual's best hits' scores, cosines with the whole's
    best hit and words it holds, and whether they are new to the whole's top 5."""
    f = {n: i for i, n in enumerate(intents.GATE_FEATURES)}
    x = row["x"].astype(np.float64)
    lead = x[(x[:, f["in a part"]] > 0) & (x[:, f["log part rank"]] == 0)]
    res = x[(x[:, f["in residual"]] > 0) & (x[:, f["log residual rank"]] == 0)]
    return np.array([1.0, x[0, f["whole gap"]], x[0, f["parts"]],
                     lead[:, f["part score"]].max() if len(lead) else 0.0,
                     lead[:, f["cosine with best hit"]].min() if len(lead) else 1.0,
                     lead[:, f["part words the best hit holds"]].min() if len(lead) else 1.0,
                     float((lead[:, f["in whole top 5"]] == 0).sum()) if len(lead) else 0.0,
                     res[:, f["residual score"]].max() if len(res) else 0.0,
                     res[:, f["cosine with best hit"]].min() if len(res) else 1.0,
                     res[:, f["in whole top 5"]].min() if len(res) else 1.0])


def classifier(rows: list[dict], l2: float = 1e-2, steps: int = 500):
    """Logistic regression: is this request two-intent (synthetic) or one (single)? Balanced."""
    used = [r for r in rows if r["top"] is not None and r["keys"]]
    X = np.stack([request_features(r) for r in used])
    y = np.array([len(r["gold"]) > 1 for r in used], float)
    wt = np.where(y > 0, 1 / max(y.sum(), 1), 1 / max((1 - y).sum(), 1))
    mean, std = X.mean(0), X.std(0)
    mean[0], std[0] = 0.0, 1.0
    std[std < 1e-9] = 1.0
    Z = (X - mean) / std
    theta = np.zeros(X.shape[1])
    for _ in range(steps):
        p = 1 / (1 + np.exp(-Z @ theta))
        theta -= 0.5 * (Z.T @ (wt * (p - y)) / wt.sum() + l2 * theta)
    return lambda row: float(1 / (1 + np.exp(-((request_features(row) - mean) / std) @ theta)))


def two_stage(clf, w: np.ndarray, tau: float):
    """The gate's ranking for requests the classifier calls two-intent (p > tau), else the hand merge."""
    def rank(row: dict) -> list[str]:
        if row["top"] is None or not row["keys"] or clf(row) <= tau:
            return ranked(row, None)
        return ranked(row, w)
    return rank


def measured(rows: list[dict], rank) -> tuple[float, float]:
    """(recall@5, complete@5) of a ranking function over rows."""
    shares, complete = [], []
    for row in rows:
        top = set(rank(row)[:5])
        found = sum(g in top for g in row["gold"])
        shares.append(found / len(row["gold"]))
        complete.append(found == len(row["gold"]))
    return statistics.fmean(shares), statistics.fmean(complete)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cache", type=Path, default=Path("/tmp/multi_gate6.pkl"))
    parser.add_argument("--bench-dir", type=Path, default=Path("/work/shared/bench"))
    parser.add_argument("--colt", type=Path, default=Path("/work/.mirror/quchangle1+COLT/repo"))
    parser.add_argument("--pairs", type=int, default=4000)
    parser.add_argument("--two-stage", action="store_true", help="also the request classifier's two stages")
    args = parser.parse_args()
    if args.cache.exists():
        cache = pickle.loads(args.cache.read_bytes())
    else:
        cache = build(args.bench_dir, args.colt, args.pairs)
        args.cache.write_bytes(pickle.dumps(cache))
    print(f"rows: {', '.join(f'{k} {len(v)}' for k, v in cache.items())}")
    print()
    print("| ranking | CV single r@5 (unseen tools) | CV synthetic complete@5 (unseen tools) | "
          "single r@5 (tuning) | synthetic complete@5 | real two-tool complete@5 (tuning, 50) | "
          "real two-tool r@5 | ToolLens r@5 (tuning) | ToolLens complete@5 |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    splits = folds(cache)

    def line(label: str, cv: tuple[float, float], w: np.ndarray | None, which: str = "gate") -> None:
        cells = [figures(cache["single"], w, which)[0], figures(cache["synthetic"], w, which)[1],
                 *reversed(figures(cache["real"], w, which)), *figures(cache["toollens"], w, which)]
        print(f"| {label} | {cv[0]:.3f} | {cv[1]:.3f} | " + " | ".join(f"{c:.3f}" for c in cells) + " |")

    def cv_of(fit) -> tuple[float, float]:
        s, t = [], []
        for tr_s, tr_p, va_s, va_p in splits:
            w = fit(tr_s + tr_p)
            s += [figures([r], w)[0] for r in va_s]
            t += [figures([r], w)[1] for r in va_p]
        return statistics.fmean(s), statistics.fmean(t)

    for which in ("whole", "oracle"):
        cv = (statistics.fmean(figures([r], None, which)[0] for *_, va_s, _ in splits for r in va_s),
              statistics.fmean(figures([r], None, which)[1] for *_, va_p in splits for r in va_p))
        line({"whole": "whole request only", "oracle": "oracle: union of the rankings' top 5s"}[which], cv, None, which)
    cv = (statistics.fmean(figures([r], None)[0] for *_, va_s, _ in splits for r in va_s),
          statistics.fmean(figures([r], None)[1] for *_, va_p in splits for r in va_p))
    line("main: parts and residual in the whole's context (hand rules)", cv, None)
    def fit_of(share: float, l2: float, pairwise: bool):
        def fit(rows: list[dict]) -> np.ndarray:
            return train(rows, weights_for(rows, share), l2, pairwise=pairwise)
        return fit

    baseline = cv_of(fit_of(0.5, 1e-2, False))  # the 24-feature gate on main (share 0.5)
    line("gate on main: 24 features, single-tool share 0.5", baseline, fit_of(0.5, 1e-2, False)(
        cache["single"] + cache["synthetic"]))
    best = None
    for share in (0.3, 0.5, 0.7, 0.85):
        for l2 in (1e-2,):  # 1e-3 gave the same figures to +-0.005
            cv = cv_of(fit_of(share, l2, True))
            w = fit_of(share, l2, True)(cache["single"] + cache["synthetic"])
            line(f"gate + {intents.PAIRWISE} pairwise features, single-tool share {share}, L2 {l2}", cv, w)
            print("  weights: (" + ", ".join(f"{x:.4f}" for x in w) + ")")
            # the rule: most CV synthetic complete@5 whose CV single r@5 is not below main's
            if cv[0] >= round(baseline[0], 3) and (best is None or cv[1] > best[0]):
                best = (cv[1], share, l2, w)
    if best is None:
        print("no share keeps the CV single-tool recall@5 of the gate on main")
        return
    if args.two_stage:
        share, l2 = 0.5, 1e-2
        models = [(classifier(tr_s + tr_p), train(tr_s + tr_p, weights_for(tr_s + tr_p, share), l2))
                  for tr_s, tr_p, _, _ in splits]
        every = cache["single"] + cache["synthetic"]
        clf_all, w_all = classifier(every), train(every, weights_for(every, share), l2)
        for tau in (0.3, 0.5, 0.7, 0.9):
            cv = (statistics.fmean(measured([r], two_stage(c, w, tau))[0] for (c, w), (_, _, va, _) in zip(models, splits)
                                   for r in va),
                  statistics.fmean(measured([r], two_stage(c, w, tau))[1] for (c, w), (*_, vp) in zip(models, splits)
                                   for r in vp))
            rank = two_stage(clf_all, w_all, tau)
            cells = [measured(cache["single"], rank)[0], measured(cache["synthetic"], rank)[1],
                     *reversed(measured(cache["real"], rank)), *measured(cache["toollens"], rank)]
            flagged = statistics.fmean(clf_all(r) > tau for r in cache["real"] if r["top"] is not None and r["keys"])
            print(f"| two stages: a request classifier (p > {tau}; flags {flagged:.2f} of the real two-tool "
                  f"requests) picks the gate (share {share}, L2 {l2}), else the hand merge | {cv[0]:.3f} | {cv[1]:.3f} | "
                  + " | ".join(f"{c:.3f}" for c in cells) + " |")
    print()
    print(f"best by CV (most synthetic complete@5, single r@5 >= main's {baseline[0]:.3f}): "
          f"share {best[1]}, L2 {best[2]}")
    print("GATE_WEIGHTS = (" + ", ".join(f"{x:.4f}" for x in best[3]) + ")")
    for name, x in zip(intents.GATE_FEATURES, best[3]):
        print(f"  {name}: {x:+.4f}")


if __name__ == "__main__":
    main()
