"""Rules replayed by bench/multi_levers.py."""
from __future__ import annotations

import numpy as np

from chalicelib.search import queries as intents


def whole(c, limit):
    return [k for k, _ in c["whole"][:limit]]


def shipped(c, limit):
    if not c["parts"] or not c["whole"]:
        return whole(c, limit)
    w = c["whole"][:max(limit, intents.WHOLE_DEPTH)]
    return [k for k, _ in intents.merged([w, *(intents.in_context(p[:limit], w) for p in c["parts"])], limit)]


def gap(c):
    w = c["whole"]
    return w[0][1] - w[1][1] if len(w) > 1 else 99.0


def with_resid(base, variant, weight=0.6, gate=99.0, depth=None):
    """The residual ranking merged as one more part (in the whole's context)."""
    def rule(c, limit):
        if not c["whole"] or gap(c) >= gate or not c["resid"].get(variant):
            return base(c, limit)
        w = c["whole"][:max(limit, intents.WHOLE_DEPTH)]
        parts = [intents.in_context(p[:limit], w) for p in c["parts"]] if base is shipped else []
        r = [(k, s) for k, s in c["resid"][variant] if k != w[0][0]][:depth or limit]
        old = intents.PART_WEIGHT
        intents.PART_WEIGHT = weight
        try:
            parts.append(intents.in_context(r, w))
        finally:
            intents.PART_WEIGHT = old
        return [k for k, _ in intents.merged([w, *parts], limit)]
    return rule


def resid_slot(base, variant, threshold=-99.0, gate=99.0, place=1, count=1):
    """The residual's best new hit(s) placed right after the whole's best when strong."""
    def rule(c, limit):
        out = base(c, limit + count)
        if not c["whole"] or gap(c) >= gate:
            return out[:limit]
        top = c["whole"][0][0]
        r = [(k, s) for k, s in c["resid"].get(variant) or [] if k != top]
        new = [k for k, s in r[:count] if s >= threshold]
        if not new:
            return out[:limit]
        rest = [k for k in out if k not in new]
        return (rest[:place] + new + rest[place:])[:limit]
    return rule


def cover(base_depth=20, lam=1.0, gate=99.0, dense=0.0):
    """Greedy coverage over the whole's top base_depth: score + lam * share of uncovered request
    words (idf-weighted) a tool adds; dense: + dense * cosine with the residual of q."""
    def rule(c, limit):
        w = c["whole"][:base_depth]
        if not w or gap(c) >= gate or not c.get("idf"):
            return whole(c, limit)
        idf = c["idf"]
        total = sum(idf.values()) or 1.0
        picked = [w[0][0]]
        covered = set(c["covers"].get(w[0][0], ()))
        basis = [c["vectors"][w[0][0]]] if dense else []
        left = dict(w[1:])
        while left and len(picked) < limit:
            if dense:
                B = np.stack(basis).astype(np.float64)
                coef, *_ = np.linalg.lstsq(B.T, c["q"].astype(np.float64), rcond=None)
                r = c["q"] - B.T @ coef
            else:
                r = None
            def value(k, covered=covered, r=r if dense else None):
                gain = sum(idf[s] for s in c["covers"].get(k, ()) if s not in covered) / total
                v = left[k] + lam * gain
                if dense:
                    v += dense * float(r @ c["vectors"][k])
                return (v, k)
            best = max(left, key=lambda k: (value(k)[0], k))
            picked.append(best)
            covered |= c["covers"].get(best, set())
            if dense:
                basis.append(c["vectors"][best])
            del left[best]
        return picked[:limit]
    return rule


def multi_resid(variants, weight=0.6):
    def rule(c, limit):
        if not c["whole"]:
            return whole(c, limit)
        w = c["whole"][:max(limit, intents.WHOLE_DEPTH)]
        parts = [intents.in_context(p[:limit], w) for p in c["parts"]]
        for v in variants:
            r = [(k, s) for k, s in c["resid"].get(v) or [] if k != w[0][0]][:limit]
            parts.append(intents.in_context(r, w))
        return [k for k, _ in intents.merged([w, *parts], limit)]
    return rule


def rules():
    yield "whole request only", whole
    yield "parts in the whole's context (main before)", shipped
    for v, label in (("dense+words1", "words and vector"), ("words1", "words only"), ("dense1", "vector only")):
        for wgt in (0.4, 0.5, 0.6, 0.7, 0.8, 1.0):
            yield f"+ residual after the best hit ({label}) as a part, weight {wgt}", with_resid(shipped, v, wgt)
    for wgt in (0.6, 1.0):
        yield f"+ residual after the best 2 hits (words and vector), weight {wgt}", with_resid(shipped, "dense+words2", wgt)
    yield "+ residual (words and vector) to the whole only, no parts, weight 0.6", with_resid(whole, "dense+words1", 0.6)
    for g in (1, 2, 3, 4, 6):
        yield f"+ residual weight 0.6, only when the whole's 1st-2nd score gap < {g}", \
            with_resid(shipped, "dense+words1", 0.6, gate=g)
    for v, label in (("dense+words1", "words and vector"), ("words1", "words only"), ("dense1", "vector only")):
        yield f"+ residual's best new hit ({label}) placed 2nd", resid_slot(shipped, v)
    yield "+ residuals after 1 and after 2 hits, both as parts", multi_resid(["dense+words1", "dense+words2"])
    yield "+ all five residual rankings as parts", \
        multi_resid(["dense+words1", "dense+words2", "words1", "dense1", "dense2"])
    for lam in (1, 2, 5, 10, 20):
        yield f"coverage rerank of the whole's top 20, words, lambda {lam}", cover(lam=lam)
    for d in (2, 5, 10, 20):
        yield f"coverage rerank of the whole's top 20, residual vector, mu {d}", cover(lam=0, dense=d)
