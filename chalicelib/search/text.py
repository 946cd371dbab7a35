"""Words for ranking: normalising, stop words, a light stemmer, and splitting glued tool names
("auspetrolprices") into dictionary words (the MiniLM vocabulary, chalicelib/search/embedder.py)."""

from __future__ import annotations

import functools
import re
from pathlib import Path

from chalicelib.search import embedder

_STOP_WORDS = Path(__file__).with_name("stopwords.txt")
_WORD = re.compile(r"[a-z0-9]+")


@functools.cache
def _stop_words() -> frozenset[str]:
    lines = _STOP_WORDS.read_text(encoding="utf-8").splitlines()
    return frozenset(w for line in lines if not line.startswith("#") for w in line.split())


def words(text: str) -> list[str]:
    """The text's lower-cased runs of letters and digits, in order."""
    return _WORD.findall(text.lower())


def content_words(query: str) -> list[str]:
    """The query's distinct words that are not stop words, in order."""
    return [w for w in dict.fromkeys(words(query)) if w not in _stop_words()]


@functools.lru_cache(maxsize=65536)
def stem(word: str) -> str:
    """Light English stemmer: "orders", "ordering", "ordered" -> "order"; "prices" -> "pric".

    Strips one inflection, then a final "e", so "create"/"creates"/"creating" all meet.
    """
    if len(word) <= 3 or not word.isalpha():
        return word
    if word.endswith("ies") and len(word) > 4:
        word = word[:-3] + "y"
    elif word.endswith(("sses", "xes", "zes", "ches", "shes")):
        word = word[:-2]
    elif word.endswith("s") and not word.endswith(("ss", "us", "is")):
        word = word[:-1]
    elif word.endswith("ing") and len(word) > 5:
        word = word[:-3]
    elif word.endswith("ed") and len(word) > 4:
        word = word[:-2]
    if len(word) >= 4 and word[-1] == word[-2] and word[-1] not in "lsz":
        word = word[:-1]  # "shipping" -> "shipp" -> "ship"
    return word[:-1] if len(word) > 4 and word.endswith("e") else word


def is_known_word(word: str) -> bool:
    """Whether a word, or its stem, is a whole word of the MiniLM vocabulary.

    On a diverse toolbox made-up words ("zzqx frobnicate") reach MiniLM cosines of 0.2-0.3
    with some tool, as high as weak real queries do; they are not words, though.
    """
    return word in embedder.vocabulary() or stem(word) in embedder.vocabulary()


def _segment(part: str, dictionary: frozenset[str]) -> list[str]:
    """Split a glued name ("auspetrolprices") into dictionary words, fewest pieces first.

    Known words of 3+ letters cost 1, any other character costs 3, so unknown stretches
    only survive when nothing in the dictionary covers them.
    """
    unreached: list[tuple[float, list[str]]] = [(float("inf"), [])]
    best: list[tuple[float, list[str]]] = [(0.0, [])] + unreached * len(part)
    for end in range(1, len(part) + 1):
        for start in range(max(0, end - 20), end):
            piece = part[start:end]
            cost = 1.0 if len(piece) >= 3 and piece in dictionary else 3.0 * len(piece)
            if best[start][0] + cost < best[end][0]:
                best[end] = (best[start][0] + cost, best[start][1] + [piece])
    return best[-1][1]


@functools.lru_cache(maxsize=65536)
def _split_glued(part: str) -> tuple[str, ...]:
    """Dictionary words of a glued name part (pieces under 3 letters dropped), else the part."""
    pieces = [p for p in _segment(part, embedder.vocabulary()) if len(p) >= 3]
    return tuple(pieces) or (part,)


def name_words(name: str, description: str) -> list[str]:
    """Words of a tool name: split on "-", and long parts that are no word segmented.

    A part the tool's own description uses ("agones" for "Agones provides soccer results")
    is a name in its own right and stays whole.
    """
    own = set(words(description))
    found: list[str] = []
    for part in filter(None, name.split("-")):
        whole = len(part) < 6 or part in own or part in embedder.vocabulary()
        found.extend([part] if whole else _split_glued(part))
    return found


def keywords(vendor: str, name: str, name_words: list[str]) -> list[str]:
    """Name-field keywords: vendor parts, name words and glued originals ("financetool")."""
    return name_words + [p for p in f"{vendor}-{name}".split("-") if p and p not in name_words]
