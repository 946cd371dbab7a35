"""Tool names people can read, for OpenAPI operations and MCP servers' tools alike.

A name is the words of its source (an operationId, a server's own tool name) joined by "-", as
long as `vendor__name` allows (validation.name_budget: 64 characters in all). A source too long
loses its redundant words first (a word said before, the vendor's own words, version tags,
filler), one at a time from the end, and is then cut at a word boundary. When the name is taken,
a word that tells the two tools apart is added (one the cut dropped, the HTTP method, a path
segment, a tag: whatever the caller offers, and that the holder does not share); a short hash
only when no such word exists. Every step is bounded, so thousands of operations that share one
operationId stay linear.
"""

from __future__ import annotations

import hashlib
import re
import unicodedata
from collections.abc import Iterable, Sequence

from chalicelib.base.validation import name_budget

SOURCE_CHARS = 300  # of a source read for words: more could never fit in a name
QUALIFIERS = 16  # distinguishing words tried for one name, at most
QUALIFIER_CHARS = 24
HASH_CHARS = 6
FILLER = frozenset({"a", "an", "the", "of", "for", "by", "to", "in", "on", "at", "with", "and", "from", "api"})
_VERSION = re.compile(r"v\d+")
_NOT_WORD = re.compile(r"[^a-z0-9]+")
_LOWER_UPPER = re.compile(r"([a-z0-9])([A-Z])")
_UPPER_WORD = re.compile(r"([A-Z]+)([A-Z][a-z])")


def words(text: str) -> list[str]:
    """getPetById -> get pet by id; HTTPServer -> http server; café -> cafe; anything but letters
    and digits separates words."""
    text = unicodedata.normalize("NFKD", text[:SOURCE_CHARS]).encode("ascii", "ignore").decode("ascii")
    text = _UPPER_WORD.sub(r"\1-\2", _LOWER_UPPER.sub(r"\1-\2", text))
    return [word for word in _NOT_WORD.split(text.lower()) if word]


def fit(parts: Sequence[str], budget: int, *, vendor: str = "") -> list[str]:
    """The words of a name of at most `budget` characters: all of them when they fit; else without
    redundant words, then with a run of middle words left out (`_cut`)."""
    kept = list(parts)
    length = _length(kept)
    if length <= budget:
        return kept
    gone: set[int] = set()
    for index in _redundant(kept, set(vendor.split("-"))):
        if length <= budget or len(gone) == len(kept) - 1:
            break
        gone.add(index)
        length -= len(kept[index]) + 1
    kept = [word for index, word in enumerate(kept) if index not in gone]
    if length > budget:
        kept = _cut(kept, budget)
    while len(kept) > 1 and kept[-1] in FILLER and kept[-1] != parts[-1]:  # "...-by-id-and" once "status" left
        kept.pop()
    return kept


class Names:
    """The names given under one vendor so far, each with the words that describe its holder, so
    that a name taken gets a word the holder does not share."""

    def __init__(self, vendor: str) -> None:
        self.vendor = vendor
        self.budget = name_budget(vendor)
        self._holders: dict[str, frozenset[str]] = {}
        self._hashed: dict[str, int] = {}  # salt -> hashes of it tried (so sources shared by many stay linear)
        self._plain = FILLER | set(vendor.split("-"))  # words that tell nothing apart

    def __contains__(self, name: object) -> bool:
        return name in self._holders

    def hold(self, name: str, describing: Iterable[str] = ()) -> None:
        """Mark `name` as given (a name kept from an earlier import, say)."""
        self._holders[name] = frozenset([*describing, *name.split("-")])

    def give(self, parts: Sequence[str], qualifiers: Sequence[str] = (), *, salt: str) -> str:
        """A free name from `parts` (non-empty words): fitted to the budget; when taken, with a word
        that tells this source from the holder's (one the fitting dropped, then `qualifiers` in
        order); the first HASH_CHARS hex of sha256(`salt`) only when none does."""
        parts = list(parts) or ["tool"]
        base = fit(parts, self.budget, vendor=self.vendor)
        describing = [*parts, *qualifiers]
        name = "-".join(base)
        if name not in self._holders:
            return self._take(name, describing)
        holder = self._holders[name]
        dropped = [word for word in reversed(parts) if word not in base]
        for word in list(dict.fromkeys([*dropped, *qualifiers]))[:QUALIFIERS]:
            if word in holder or word in self._plain or len(word) > QUALIFIER_CHARS:
                continue
            head = fit(parts, self.budget - len(word) - 1, vendor=self.vendor)
            name = "-".join([*head, word])
            if word not in head and name not in self._holders:
                return self._take(name, describing)
        return self._take(self._hashed_name(parts, salt), describing)

    def _hashed_name(self, parts: Sequence[str], salt: str) -> str:
        head = "-".join(fit(parts, self.budget - HASH_CHARS - 1, vendor=self.vendor))
        # Names only join the holders, so the attempts an earlier source of the same salt spent are
        # taken still: start after them.
        start = self._hashed.get(salt, 0)
        for attempt in range(start, start + len(self._holders) + 1):
            salted = salt if attempt == 0 else f"{salt}#{attempt}"
            name = f"{head}-{hashlib.sha256(salted.encode('utf-8', 'surrogatepass')).hexdigest()[:HASH_CHARS]}"
            if name not in self._holders:
                self._hashed[salt] = attempt + 1
                return name
        raise AssertionError("unreachable: more attempts than names given")

    def _take(self, name: str, describing: Sequence[str]) -> str:
        self.hold(name, describing)
        return name


def _length(parts: Sequence[str]) -> int:
    return sum(len(word) for word in parts) + max(len(parts) - 1, 0)


def _cut(parts: list[str], budget: int) -> list[str]:
    """The first and the last words and as many around them as fit, taken from both ends in turn
    (the verb is often first, the resource or the method last): a run of middle words is dropped."""
    if len(parts[0]) >= budget or len(parts) == 1:
        return [parts[0][:budget]]
    if len(parts[0]) + 1 + len(parts[-1]) > budget:
        return [parts[0]]
    front, back = 1, len(parts) - 1  # parts[:front] and parts[back:] are kept
    length = len(parts[0]) + 1 + len(parts[-1])
    sides = [True, False]  # the front's turn, then the back's, while each has room
    while front < back and sides:
        for at_front in list(sides):
            word = parts[front] if at_front else parts[back - 1]
            if front >= back or length + 1 + len(word) > budget:
                sides.remove(at_front)
                continue
            length += 1 + len(word)
            front, back = (front + 1, back) if at_front else (front, back - 1)
    while front > 1 and parts[front - 1] in FILLER:  # no "...-count-by" at the cut
        front -= 1
    while back < len(parts) - 1 and parts[back] in FILLER:
        back += 1
    return [*parts[:front], *parts[back:]]


def _redundant(parts: Sequence[str], vendor_words: set[str]) -> list[int]:
    """Indexes of the words a name can lose, the most redundant first, the last first within a kind:
    a word said before, the vendor's own, a version tag, filler."""
    seen: set[str] = set()
    ranked = []
    for index, word in enumerate(parts):
        if word in seen:
            rank = 0
        elif word in vendor_words:
            rank = 1
        elif _VERSION.fullmatch(word):
            rank = 2
        elif word in FILLER:
            rank = 3
        else:
            rank = 4
        seen.add(word)
        if rank < 4:
            ranked.append((rank, -index))
    return [-negative for _, negative in sorted(ranked)]
