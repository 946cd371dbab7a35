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
(bench/find_tool_quality.py).
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Protocol

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


def intents(query: str) -> list[str]:
    """The request's intents, each a piece of its text; [] when it is one intent (not split)."""
    text = query[:MAX_SPLIT_CHARS]
    pieces = [piece for sentence in _cut(text, _SENTENCE_END) for piece in _cut(sentence, _CONNECTOR)]
    parts: list[str] = []
    for piece in pieces:
        if parts and (len(content_words(piece)) < MIN_PART_WORDS or len(content_words(parts[-1])) < MIN_PART_WORDS):
            parts[-1] = f"{parts[-1]} {piece}"  # too slight to stand alone: it joins its neighbour
        else:
            parts.append(piece)
    if len(parts) < 2 or len(content_words(parts[-1])) < MIN_PART_WORDS:
        return []
    if len(parts) > MAX_PARTS:  # the rest of the request rides on the last part
        parts[MAX_PARTS - 1:] = [" ".join(parts[MAX_PARTS - 1:])]
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
    return merged([rankings[0], *(in_context(more[:limit], rankings[0]) for more in rankings[1:])], limit)


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
