"""The structure signal: what an imported operation's shape says beyond its prose.

An OpenAPI operation knows its method, its path and its operationId. A request such as "list
issues in a repository" says what it wants done (read, create, update, delete) and to what
(issues, of a repository). Per doc, summed:

* intent -- the request's first action verb ("list", "create", "remove", ...) against the
  operation's own: the first word of its operationId or summary when that is a known verb (a
  POST that searches says "get"), else its method. A read asked for scores +1 on a read and -1
  on a write; a write asked for, the reverse, and a delete asked for is -1 on a create or update.
  A verb that is also the noun of what it makes ("comment on an issue", "tag a release",
  "record every episode") asks for a create when it opens the request, and stays a noun.
* cover -- the weighted share of the operation's resource words (fixed path segments, the last
  one's last word weighing most; placeholders and earlier segments little; operationId words;
  its OpenAPI tags, "Issue tracker", "LiveTv") that the request names, times the weighted share
  of the request's nouns the operation holds (two words an operation glues, "pull request" for
  /pullrequests, count as one; nouns after the request's first preposition, "on the media
  server", "of a domain", weigh CONTEXT_ASK: they say where, not what): "create an issue"
  covers create-issue whole and create-issue-type in part. A shorter operation that covers the
  request ranks ahead of a longer one that adds words.
* many -- a read asked for in the plural (of a noun some operation holds as a resource word:
  "details of a server" asks for one), with "list"/"all", or by an attribute ("find an ISO by
  name", not "by its id") scores +1 on a collection (the
  path ends in a fixed segment, or the summary says "list"/"all") and -1 on one item; a create
  asked for scores +1 on a create of a collection (POST /snippets) and -1 on one of an item
  (POST /snippets/{workspace}); a request with no verb ("unleashed sales orders") in the plural
  leans to a read of a collection only where its cover is clear (NO_VERB_COVER), as a blanket
  read lean on every verbless request hurt.
* action -- an operation whose path ends in an action on one item (the segment after an "actions"
  segment, or after a placeholder when it starts with an action's or a write's verb: POST
  /servers/{id}/actions/poweron, /linode/instances/{id}/boot) performs that action; the request's
  first verb phrase says which it asks for, in people's words (ACTIONS: "turn on", "power on",
  "boot" are a start; "restart" a reboot; "grow" or "make it bigger" a resize). An operation
  performing it scores W_ACTION and counts its action's verb as covered; the item it acts on
  weighs as a head (not as context), and starting, resizing... an item is an update, not a create.
* asker -- a request of stop words only that asks about its asker ("who am I") searches for
  ASKER, a resource word of the operations about whoever calls the API (a path word "me", "self";
  a summary naming only the current or authenticated user); politeness alone still finds nothing.
* summary -- the summary is a field of its own, apart from the description: the request's words
  it holds over the words either holds (W_SUMMARY), so "create an issue" is all of the summary
  "Create an issue" and two thirds of "Create an issue type"; the description's prose stays with
  the other signals.

Tried on the tuning part and left out: parameter names as resource words (0.25: recall@1 lower,
and "list issues in a repository" fell to 6th on GitHub: query parameters such as "sort",
"state" dilute the cover), tag descriptions' first sentence (0.1, 0.25: no gain, and each tool
would store them), the summary's words as resource words, or the share of the request's words the summary holds
(lower or no gain: it does not count what the summary adds).

Weights (W_*) were picked on the tuning part (every 3rd request) of bench/apis/*.json only.

Docs without structure (authored tools, MCP servers' tools, benchmark tools) get 0 on every
part, so their ranking is exactly as before; the signal is added in chalicelib/search/index.py.
"""

from __future__ import annotations

import itertools
import re
from collections import defaultdict
from collections.abc import Container, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from chalicelib.search.text import content_words, stem, words

READ, CREATE, UPDATE, DELETE = 1, 2, 3, 4  # 0: no known intent
_VERBS = {
    READ: "list get show view find fetch see display read retrieve search lookup look check browse what which who "
          "where query count describe inspect download export",
    CREATE: "create add new make open post register insert upload generate submit allocate",
    UPDATE: "update edit change modify set rename patch replace put configure adjust mark move close",
    DELETE: "delete remove destroy revoke drop erase purge uninstall unassign detach",
}
VERBS: dict[str, int] = {word: kind for kind, text in _VERBS.items() for word in text.split()}
VERBS.update({stem(word): kind for word, kind in list(VERBS.items())})  # "delet" for "deletes", "deleting"
# verbs that are also the noun of what they make ("comment on an issue", "tag a release"): a create when
# they open the request, and they stay among its resource words
NOUN_VERBS = frozenset({"comment", "record", "schedule", "tag", "note", "reply", "invite", "book", "bookmark",
                        "message", "label", "pin", "subscribe", "follow", "vote", "review"})
# Actions an API performs on one item (POST /servers/{id}/actions/poweron, /linode/instances/{id}/boot)
# and the words people say for them: each word or two-word phrase -> the actions it may mean. An
# operation's action is the last segment of its path after a placeholder or an "actions" segment;
# a request's is its first verb phrase, and a comparative of size anywhere ("make a volume bigger").
_ACTION_WORDS = {
    "start": "start boot poweron startup power_on turn_on switch_on start_up boot_up",
    "stop": "stop shutdown poweroff halt power_off turn_off switch_off shut_down",
    "restart": "restart reboot power_cycle",
    "resize": "resize grow enlarge expand shrink upgrade downgrade bigger larger smaller",
    "rebuild": "rebuild reinstall reimage",
    "attach": "attach mount",
    "detach": "detach unmount",
    "clone": "clone duplicate",
    "restore": "restore recover",
    "enable": "enable activate turn_on switch_on",
    "disable": "disable deactivate turn_off switch_off",
}
ACTIONS: dict[str, frozenset[str]] = {
    phrase: frozenset(action for action, said in _ACTION_WORDS.items() if phrase in said.split())
    for phrase in {phrase for said in _ACTION_WORDS.values() for phrase in said.split()}}
_SIZES = frozenset({"bigger", "larger", "smaller"})  # anywhere in a request: a resize
# other verbs an action segment may start with (matched to a request's first verb as said)
_ACTION_VERBS = frozenset({"approve", "decline", "merge", "resolve", "accept", "reject", "cancel", "retry", "migrate",
                           "mutate", "recycle", "regenerate", "reset", "refresh", "apply", "assign", "unassign",
                           "authenticate", "request", "vote", "watch", "unwatch", "archive", "unarchive", "lock",
                           "unlock", "transfer", "verify", "rotate", "renew", "suspend", "resume", "pause",
                           "unpause", "disconnect", "connect", "sync", "test", "trigger", "run", "execute"})
# whoever calls the API: a request about "I" with nothing else to go on, and operations about the caller
ASKER = "me"
_SELF_WORDS = frozenset({"me", "self", "myself", "whoami"})
_CURRENT = frozenset({"current", "authenticated", "signed", "logged"})
_FIRST_PERSON = frozenset({"i", "me", "my", "myself", "mine"})
_QUESTIONS = frozenset({"who", "what", "which"})
_METHODS = {"GET": READ, "HEAD": READ, "POST": CREATE, "PUT": UPDATE, "PATCH": UPDATE, "DELETE": DELETE}
# intent asked (row) x operation's (column): read vs write opposite; a delete is no create or update
_MATCH = np.array([
    [0, 0, 0, 0, 0],
    [0, 1, -1, -1, -1],
    [0, -1, 1, 0, -1],
    [0, -1, 0, 1, -1],
    [0, -1, -1, -1, 1],
], np.float64)
_PLURAL_ASKS = frozenset({"list", "all", "every", "many"})
_IDENTIFIERS = frozenset({"id", "ids", "uuid", "key", "slug", "identifier", "number"})
_DETERMINERS = frozenset({"a", "an", "the", "its", "their", "his", "her", "my", "your", "our"})
_NOT_RESOURCES = frozenset({"api", "json", "xml", "html", "rest", "by", "for", "of", "the", "a", "an", "and", "or",
                            "in", "to", "from", "with", "id"})
_NOT_PLACEHOLDERS = frozenset({"id", "uuid", "key", "slug", "name", "encoded", "index", "ids"})
# a few abbreviations APIs and people both use, to one stem
_SAME = {"repo": "repository", "config": "configuration", "info": "information", "stat": "statistic",
         "db": "database", "auth": "authentication", "org": "organization", "env": "environment"}
_VERSION = re.compile(r"v\d+(\.\d+)*|\d+")
_CAMEL = re.compile(r"([a-z0-9])([A-Z])")
# Weights of an operation's resource words: the last fixed path segment names what it acts on
# (its last word most), earlier segments and placeholders only say where.
HEAD_WEIGHT, LAST_WEIGHT, CONTEXT_WEIGHT, PLACEHOLDER_WEIGHT, LABEL_WEIGHT, TAG_WEIGHT = 3.0, 1.0, 0.5, 0.5, 1.0, 1.0
W_INTENT, W_COVER, W_MANY, W_CREATE_MANY, W_NO_VERB = 1.0, 3.0, 1.0, 1.0, 1.0
W_ACTION = 1.0  # an operation performing the action the request asks for ("turn on" a server: poweron)
W_SUMMARY = 2.0  # the request's and the summary's words: their overlap over their union
CONTEXT_ASK = 0.5  # weight of a request's noun after its first preposition
NO_VERB_COVER = 0.5  # the cover a verbless plural request needs to lean to a read of a collection
TAGS_READ, TAG_CHARS = 4, 60  # what search reads of an origin's tags (the import keeps no more)
LABEL_CHARS = 128  # what search reads of an origin's label: tools stored before the import cut it may hold more


@dataclass(frozen=True)
class Structure:
    """What an imported operation's shape says: its intent, its resource words with their
    weights, and whether it acts on a collection."""

    intent: int
    resources: dict[str, float]  # stemmed resource word -> weight
    collection: bool  # the path ends in a fixed segment (no placeholder)
    summary: frozenset[str] = frozenset()
    actions: frozenset[str] = frozenset()  # what it does to one item ("start", "reboot"), if an action
    verb: str = ""  # the resource word that is its action's verb ("poweron")


def of(definition: dict[str, Any], origin: dict[str, Any] | None) -> Structure | None:
    """The structure of a tool imported from an OpenAPI document, or of an authored tool that
    calls an HTTP API (its request's method and path, its name as the operationId), else None
    (neutral: an MCP server's tool, a tool with no request). An authored HTTP tool needs one as
    much as an imported one: else, in a toolbox holding both, an imported operation covering the
    request's nouns outranks the authored tool the request names by its vendor."""
    if not isinstance(origin, dict) or origin.get("kind") != "openapi":
        return _authored(definition)
    key = origin.get("key")
    if not isinstance(key, str) or " " not in key:
        return None
    method, path = key.split(" ", 1)
    label = origin.get("label")
    annotations = definition.get("annotations")
    title = annotations.get("title", "") if isinstance(annotations, dict) else ""
    tags = origin.get("tags")
    return shaped(method, path, label[:LABEL_CHARS] if isinstance(label, str) else "", title if isinstance(title, str) else "",
                  [tag[:TAG_CHARS] for tag in tags[:TAGS_READ] if isinstance(tag, str)] if isinstance(tags, list) else [])


def _authored(definition: dict[str, Any]) -> Structure | None:
    request = definition.get("request")
    if not isinstance(request, dict):
        return None
    method, url, name = request.get("method"), request.get("url"), definition.get("name")
    if not (isinstance(method, str) and isinstance(url, str) and isinstance(name, str)):
        return None
    path = _ORIGIN.sub("", url).split("?", 1)[0]
    return shaped(method, path, name)


_ORIGIN = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://[^/]*")  # scheme and host: the path is what names the resource


def shaped(method: str, path: str, label: str = "", title: str = "", tags: Sequence[str] = ()) -> Structure:
    """The structure of an operation from its method, path, operationId, summary and tags."""
    whole = [s for s in path.split("/") if s]
    action, segments = _action(method, whole)
    fixed = [s for s in segments if not s.startswith("{")]
    resources: dict[str, float] = {}

    def add(word: str, weight: float) -> None:
        resources[word] = max(resources.get(word, 0.0), weight)

    for position, segment in enumerate(fixed):
        found = _split(segment)
        last = position == len(fixed) - 1
        for place, word in enumerate(found):
            add(word, (HEAD_WEIGHT if place == len(found) - 1 else LAST_WEIGHT) if last else CONTEXT_WEIGHT)
    # an action's words weigh as a head: its verb is covered when the request asks that action
    # ("turn on" for poweron), and what else it names is what it acts on ("attach_iso": the ISO)
    for word in action:
        if word not in _NOT_RESOURCES:
            add(_SAME.get(stem(word), stem(word)), HEAD_WEIGHT)
    for segment in segments:
        if segment.startswith("{"):
            joined = "".join(w for w in _split(segment) if w not in _NOT_PLACEHOLDERS)
            if joined and joined not in resources:
                add(_SAME.get(joined, joined), PLACEHOLDER_WEIGHT)
    label_words = _split(label)
    for word in label_words:
        if word not in VERBS and word not in resources and not (action and _said_as_action(word) & set(action)):
            add(word, LABEL_WEIGHT)
    for tag in tags:  # what the document groups it under ("Issue tracker"): a resource word where the path has none
        for word in _split(tag):
            if word not in VERBS and word not in resources and not (action and word == "action"):
                add(word, TAG_WEIGHT)
    if _about_the_asker(whole, title):
        add(ASKER, HEAD_WEIGHT)
    title_words = [stem(w) for w in words(title)]
    verb = next((VERBS[w] for w in label_words[:1] if w in VERBS), 0)
    verb = verb or next((VERBS[w] for w in title_words[:1] if w in VERBS), 0)
    lists = bool({"list", "all"} & set(title_words)) or label_words[:1] == ["list"]
    collection = bool(whole) and (not whole[-1].startswith("{") or lists)
    summary = frozenset(_SAME.get(stem(w), stem(w)) for w in content_words(title))
    if action:  # starting, resizing... one item changes it (a POST of one is no create); other verbs say more
        kind = (DELETE if method.upper() == "DELETE" else VERBS.get(action[0])
                or (UPDATE if action[0] in ACTIONS else _METHODS.get(method.upper(), 0)))
        return Structure(kind, resources, collection, summary, _said_as_action(action[0]) | {"_".join(action)},
                         _SAME.get(stem(action[0]), stem(action[0])))
    return Structure(verb or _METHODS.get(method.upper(), 0), resources, collection, summary)


def _about_the_asker(segments: list[str], title: str) -> bool:
    """Whether an operation is about whoever calls it: a path word such as "me" or "self"
    (/Users/Me), or a summary naming only the current user ("Get current user")."""
    if any(segment.lower() in _SELF_WORDS for segment in segments):
        return True
    named = [w for w in content_words(title) if w not in VERBS and stem(w) not in VERBS]
    return len(named) == 2 and named[0] in _CURRENT and stem(named[1]) == "user"


def about_the_asker(query: str) -> list[str]:
    """The words to search for a request of stop words only that asks about its asker ("who am I"):
    [ASKER]; else none (politeness alone, "can you please help me", still finds nothing)."""
    said = set(words(query))
    if content_words(query) or not (said & _FIRST_PERSON and said & _QUESTIONS):
        return []
    return [ASKER]


def _action(method: str, segments: list[str]) -> tuple[list[str], list[str]]:
    """(the action's words, the other segments) of an operation whose path ends in an action on one
    item: a last segment after an "actions" segment, or after a placeholder when its first word is
    an action's or a write's verb ("boot", "reset-secret", "close"); else ([], segments)."""
    if method.upper() in ("GET", "HEAD") or len(segments) < 2 or segments[-1].startswith("{"):
        return [], segments
    before = segments[-2]
    said = [w for w in words(_CAMEL.sub(r"\1 \2", segments[-1])) if not _VERSION.fullmatch(w)]
    if not said:
        return [], segments
    after_actions = before.lower() in ("actions", "action")
    first = said[0]
    verb = first in ACTIONS or first in _ACTION_VERBS or VERBS.get(first) in (UPDATE, DELETE)
    if after_actions or (before.startswith("{") and verb):
        return said, segments[:-2] if after_actions else segments[:-1]
    return [], segments


def _said_as_action(word: str) -> frozenset[str]:
    """The actions a verb may mean: its own and those of the table (ACTIONS)."""
    return ACTIONS.get(word, frozenset()) | {word}


def _split(text: str) -> list[str]:
    """Stemmed words of a path segment or an operationId ("pull_request_id", "getLinodeInstances")."""
    found = [stem(w) for w in words(_CAMEL.sub(r"\1 \2", text))
             if w not in _NOT_RESOURCES and not _VERSION.fullmatch(w)]
    return [_SAME.get(w, w) for w in found]


def intent(query: str) -> int:
    """The intent of a request's first action verb (a create for a NOUN_VERBS word opening it), or 0."""
    said = words(query)
    if said and said[0] in NOUN_VERBS:
        return CREATE
    for word in said:
        kind = VERBS.get(word) or VERBS.get(stem(word))
        if kind:
            return kind
    return 0


def asked_actions(query: str) -> tuple[frozenset[str], int]:
    """The actions a request asks for (its first verb phrase: "power on", "reboot", "approve"; and
    a comparative of size anywhere: "make a volume bigger"), and the intent they ask (UPDATE, or
    the verb's own: "detach" a DELETE; 0 when no action of the table is said)."""
    said = words(query)
    found: frozenset[str] = frozenset()
    kind = 0
    for position, word in enumerate(said):
        pair = f"{word}_{said[position + 1]}" if position + 1 < len(said) else ""
        known = pair if pair in ACTIONS else word if word in ACTIONS else stem(word) if stem(word) in ACTIONS else ""
        if known:
            found, kind = ACTIONS[known], VERBS.get(word) or UPDATE
            break
        if word in _ACTION_VERBS:
            found = frozenset({word})  # matched as said: the intent stays the request's own
            break
        if word in VERBS:
            break
    if _SIZES & set(said):
        found, kind = found | {"resize"}, kind or UPDATE
    return found, kind


def _action_word(word: str) -> bool:
    return word in ACTIONS or stem(word) in ACTIONS or word in _SIZES


@dataclass(frozen=True)
class Shapes:
    """The structure side of an index: per doc, its intent and collection flag (arrays), and per
    resource word the docs holding it with its weight."""

    structures: tuple[Structure | None, ...]
    intents: np.ndarray  # int8 per doc; 0 also for docs without structure
    collections: np.ndarray  # +1 collection, -1 one item, 0 no structure
    shaped: np.ndarray  # bool: the doc has structure
    totals: np.ndarray  # per doc, the sum of its resource weights
    postings: dict[str, tuple[np.ndarray, np.ndarray]]  # stemmed word -> (docs, weights)
    summaries: dict[str, np.ndarray]  # stemmed summary word -> docs whose summary holds it
    summary_sizes: np.ndarray  # per doc, how many distinct words its summary holds
    actions: dict[str, np.ndarray]  # action -> docs performing it
    verbs: np.ndarray  # per doc, the weight of its action's verb among its resource words

    @classmethod
    def build(cls, structures: list[Structure | None]) -> Shapes:
        """The shapes of docs 0..n-1."""
        n = len(structures)
        gathered: defaultdict[str, list[tuple[int, float]]] = defaultdict(list)
        for row, found in enumerate(structures):
            for word, weight in (found.resources.items() if found else ()):
                gathered[word].append((row, weight))
        postings = {word: (np.array([r for r, _ in rows], np.int64), np.array([w for _, w in rows]))
                    for word, rows in gathered.items()}
        in_summaries: defaultdict[str, list[int]] = defaultdict(list)
        performing: defaultdict[str, list[int]] = defaultdict(list)
        for row, found in enumerate(structures):
            for word in (found.summary if found else ()):
                in_summaries[word].append(row)
            for action in (found.actions if found else ()):
                performing[action].append(row)
        return cls(
            structures=tuple(structures),
            intents=np.array([s.intent if s else 0 for s in structures], np.int8).reshape(n),
            collections=np.array([(1 if s.collection else -1) if s else 0 for s in structures], np.float64).reshape(n),
            shaped=np.array([s is not None for s in structures], bool).reshape(n),
            totals=np.array([sum(s.resources.values()) if s else 0.0 for s in structures], np.float64).reshape(n),
            postings=postings,
            summaries={word: np.array(rows, np.int64) for word, rows in in_summaries.items()},
            summary_sizes=np.array([len(s.summary) if s else 0 for s in structures], np.float64).reshape(n),
            actions={action: np.array(rows, np.int64) for action, rows in performing.items()},
            verbs=np.array([s.resources.get(s.verb, 0.0) if s else 0.0 for s in structures], np.float64).reshape(n),
        )

    def updated(self, rows: list[int], new: list[Structure | None]) -> Shapes:
        """A copy with doc `rows[i]` now `new[i]` (rows past the end appended)."""
        structures = list(self.structures)
        for row, found in zip(rows, new):
            if row >= len(structures):
                structures.extend([None] * (row + 1 - len(structures)))
            structures[row] = found
        return Shapes.build(structures)

    @property
    def nbytes(self) -> int:
        return (self.intents.nbytes + self.collections.nbytes + self.shaped.nbytes + self.totals.nbytes
                + sum(d.nbytes + w.nbytes + 100 for d, w in self.postings.values()) + 200 * int(self.shaped.sum())
                + sum(d.nbytes + 100 for d in self.summaries.values()) + self.summary_sizes.nbytes
                + sum(d.nbytes + 100 for d in self.actions.values()) + self.verbs.nbytes)

    def scores(self, query: str, content: list[str]) -> np.ndarray:
        """Per doc: intent + cover + many (see the module's docstring); 0 for docs without structure."""
        n = len(self.shaped)
        if not self.shaped.any():
            return np.zeros(n)
        wanted, action_kind = asked_actions(query)
        asked = action_kind or intent(query)
        units = self._nouns(content, _context_words(query))
        performs = np.zeros(n, bool)
        for action in wanted:
            if action in self.actions:
                performs[self.actions[action]] = True
        covered, held = np.where(performs, self.verbs, 0.0), np.zeros(n)
        for noun, count, weight in units:
            if noun in self.postings:
                docs, weights = self.postings[noun]
                covered[docs] += weights
                held[docs] += count * weight
        cover = np.where(self.totals > 0, covered / np.maximum(self.totals, 1e-9), 0.0)
        if units:
            cover = cover * held / sum(count * weight for _, count, weight in units)
        score = W_INTENT * _MATCH[asked][self.intents] + W_COVER * cover
        score = score + W_SUMMARY * self._summary_overlap(content)
        score = score + W_ACTION * performs
        reads, creates = self.intents == READ, self.intents == CREATE
        if asked == READ and _asks_many(query, content, self.postings):
            score = score + W_MANY * self.collections * reads
        elif asked == CREATE:
            score = score + W_CREATE_MANY * self.collections * creates
        elif asked == 0 and _asks_many(query, content, self.postings):
            score = score + W_NO_VERB * (reads & (self.collections > 0) & (cover >= NO_VERB_COVER))
        return np.where(self.shaped, score, 0.0)

    def _summary_overlap(self, content: list[str]) -> np.ndarray:
        """Per doc, the request's words its summary holds over the words either holds: "create an
        issue" is all of "Create an issue" and two thirds of "Create an issue type"."""
        asked = {_SAME.get(stem(w), stem(w)) for w in content}
        shared = np.zeros(len(self.summary_sizes))
        for word in asked:
            if word in self.summaries:
                shared[self.summaries[word]] += 1
        union = len(asked) + self.summary_sizes - shared
        return np.where(self.summary_sizes > 0, shared / np.maximum(union, 1), 0.0)

    def _nouns(self, content: list[str], context: set[str]) -> list[tuple[str, int, float]]:
        """The request's resource words (stemmed, abbreviations unified) with how many of its
        words each stands for (two words an operation glues, "pull request": pullrequests, are
        one) and its weight (CONTEXT_ASK for a word in `context`, else 1)."""
        kept = [w for w in content if w not in VERBS and stem(w) not in VERBS and not _action_word(w)]
        stems = [_SAME.get(stem(w), stem(w)) for w in kept]
        asides = [CONTEXT_ASK if w in context else 1.0 for w in kept]
        units: list[tuple[str, int, float]] = []
        skip = False
        for first, second, aside in zip(stems, [*stems[1:], ""], asides):
            if skip:
                skip = False
                continue
            joined = stem(first + second) if second else ""
            if joined and joined in self.postings:
                units.append((joined, 2, aside))
                skip = True
            else:
                units.append((first, 1, aside))
        return list({noun: (noun, count, weight) for noun, count, weight in units}.values())


_PREPOSITIONS = frozenset({"on", "of", "in", "for", "from", "to", "with", "at", "by", "within", "into", "under",
                           "inside", "across", "about", "per"})


def _context_words(query: str) -> set[str]:
    """The request's words after its first preposition ("users" is what "list all users on the media
    server" asks for; "media" and "server" only say where)."""
    said = words(query)
    for position, word in enumerate(said):
        if word in _PREPOSITIONS:
            return set(said[position + 1:]) - set(said[:position])
    return set()


def _asks_many(query: str, content: list[str], resources: Container[str]) -> bool:
    """Whether a read asks for many things: "list", "all", or in the plural a noun some operation
    holds as a resource word ("details of a server" asks for one)."""
    said = words(query)
    # "find an ISO by name": a filter on the collection ("by its id" names one)
    kept = [w for w in said if w not in _DETERMINERS]
    by = [after for word, after in itertools.pairwise(kept) if word == "by"]
    return (bool(set(said) & _PLURAL_ASKS) or any(w not in _IDENTIFIERS for w in by)
            or any(w.endswith("s") and stem(w) != w and w not in VERBS and _SAME.get(stem(w), stem(w)) in resources
                   for w in content))
