"""ToolLens (COLT) figures for find_tool: vague requests that each need two or three tools.

Run from the project root:  python bench/toollens.py [--colt DIR]

ToolLens comes with the paper "Towards Completeness-Oriented Tool Retrieval for Large Language
Models" (Qu et al., CIKM 2024), in its public repository quchangle1/COLT under datasets/ToolLens:
464 RapidAPI tools (corpus.jsonl), 18,770 requests (queries.jsonl) and the test split's gold
tools (qrels/test.tsv: 1,877 requests, 1 to 3 tools each). The repository states no licence, so
nothing of it is copied into this project: the script reads a local snapshot of the repository
(a bare git directory or a checkout; default /work/.mirror/quchangle1+COLT/repo) at run time.

Each tool becomes a Workset doc: vendor = the RapidAPI tool's name, name = the API's name (both
cut to Workset's name pattern), description = the API's description (its name when empty). The
tools are ranked the way find_tool ranks a toolbox (SearchIndex from stored vectors), and
printed side by side in one run:
* BM25: plain Okapi BM25 (k1 1.2, b 0.75) over vendor, name and description words, every word
  of the request a term (the baseline of issue 25's "1.46x BM25"); and the same with find_tool's
  query stop words left out (a stronger baseline);
* find_tool, whole request only (the ranking before chalicelib/search/queries.py);
* the split into intents without the residual (main before branch i25-multi3), the hand merge
  (main before i25-multi4), the gate with the weights fitted on MetaTool (main before i25-gate7),
  the gate with round 7's weights (bench/multi_gate.ROUND7: bench/gate_data.py's generated requests
  only), the gate with queries.GATE_WEIGHTS (that corpus with its hand-written requests too,
  branch i25-gate8), and find_tool as it
  answers now (the gate only when queries.USE_GATE is on): the request's parts and its residual (what its best hit does not explain), each
  one's hits scored in the whole's context (chalicelib/search/queries.py).
recall@5 is the mean share of a request's gold tools in the top 5 (COLT's Recall@5), complete@5
the share of requests with all of them there (COLT's COMP@5). The tuning part is every 10th
test request (in qrels order); held-out is the rest, and nothing was tuned on it.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import statistics
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

from bench.find_tool_quality import (
    multi_parts,
    split_hand_merge,
    split_metatool_gate,
    split_openapi_gate,
    split_parts_only,
    split_round7_gate,
)
from chalicelib.search import queries as intents
from chalicelib.search.documents import Document, document_vector
from chalicelib.search.index import SearchIndex
from chalicelib.search.text import content_words, words

TUNING_EVERY = 10
TOP = 5
DEFAULT_COLT = Path("/work/.mirror/quchangle1+COLT/repo")
_FIELD = re.compile(r"(?:^|, )(category_name|tool_name|api_name|api_description):")


def read(colt: Path, member: str) -> str:
    """A file of the ToolLens folder, from a checkout or a bare git directory."""
    path = colt / "datasets" / "ToolLens" / member
    if path.exists():
        return path.read_text(encoding="utf-8")
    return subprocess.run(["git", "--git-dir", str(colt), "show", f"HEAD:datasets/ToolLens/{member}"],
                          check=True, capture_output=True, text=True).stdout


def slug(text: str, fallback: str) -> str:
    """Workset's name pattern: lower-case letters, digits and dashes, at most 31 characters."""
    return "-".join(words(text))[:31].strip("-") or fallback


def fields(text: str) -> dict[str, str]:
    """category_name, tool_name, api_name and api_description of a corpus line's text."""
    marks = list(_FIELD.finditer(text))
    out = {}
    for mark, after in zip(marks, [*marks[1:], None]):
        end = after.start() if after else text.find(", required_params:", mark.end())
        out[mark.group(1)] = text[mark.end():end if end >= 0 else len(text)].strip()
    return out


def load_tools(colt: Path) -> dict[str, Document]:
    """Corpus id -> doc."""
    docs: dict[str, Document] = {}
    taken: Counter[str] = Counter()
    for line in read(colt, "corpus.jsonl").splitlines():
        row = json.loads(line)
        f = fields(row["text"])
        vendor = slug(f.get("tool_name", ""), "tool")
        name = slug(f.get("api_name", ""), f"api-{row['_id']}")
        key = f"{vendor}/{name}"
        taken[key] += 1
        if taken[key] > 1:  # two APIs of one tool with the same name: numbered, as an import would
            name = f"{name[:28]}-{taken[key]}"
            key = f"{vendor}/{name}"
        description = f.get("api_description") or f.get("api_name", "")
        docs[row["_id"]] = Document(key, vendor, name, description,
                                    document_vector(vendor, name, description))
    return docs


def load_requests(colt: Path) -> list[tuple[int, str, list[str]]]:
    """(position, request, gold corpus ids) of the test split, in qrels order."""
    texts = {row["_id"]: row["text"] for row in map(json.loads, read(colt, "queries.jsonl").splitlines())}
    gold: dict[str, list[str]] = {}
    for line in read(colt, "qrels/test.tsv").splitlines()[1:]:
        query, corpus, score = line.split("\t")
        if float(score) > 0:
            gold.setdefault(query, []).append(corpus)
    return [(i, texts[q], list(dict.fromkeys(ids))) for i, (q, ids) in enumerate(gold.items())]


class BM25:
    """Plain Okapi BM25 over each doc's vendor, name and description words."""

    def __init__(self, docs: list[Document], terms: Callable[[str], list[str]] = words, k1: float = 1.2,
                 b: float = 0.75) -> None:
        self.terms = terms
        self.keys = [d.key for d in docs]
        self.tfs = [Counter(words(f"{d.vendor} {d.name} {d.description}")) for d in docs]
        self.lengths = [sum(tf.values()) for tf in self.tfs]
        self.mean = statistics.fmean(self.lengths)
        held = Counter(term for tf in self.tfs for term in tf)
        n = len(docs)
        self.idf = {t: math.log(1 + (n - c + 0.5) / (c + 0.5)) for t, c in held.items()}
        self.k1, self.b = k1, b

    def search(self, query: str, limit: int = 10, memory: None = None) -> list[tuple[str, float]]:
        terms = list(dict.fromkeys(self.terms(query)))
        scores = []
        for key, tf, length in zip(self.keys, self.tfs, self.lengths):
            norm = self.k1 * (1 - self.b + self.b * length / self.mean)
            score = sum(self.idf[t] * tf[t] * (self.k1 + 1) / (tf[t] + norm) for t in terms if t in tf)
            if score > 0:
                scores.append((key, score))
        return sorted(scores, key=lambda hit: (-hit[1], hit[0]))[:limit]


def measure(rank, requests: list[tuple[int, str, list[str]]]) -> dict[str, dict[str, float]]:
    """recall@5 and complete@5 over all, tuning and held-out requests; median ms per request."""
    rows, seconds = [], []
    for position, text, gold in requests:
        start = time.perf_counter()
        top = set(rank(text))
        seconds.append(time.perf_counter() - start)
        found = sum(key in top for key in gold)
        rows.append((position % TUNING_EVERY == 0, found / len(gold), found == len(gold)))
    out: dict[str, dict[str, float]] = multi_parts(rows)
    out["ms"] = {"median": 1000 * statistics.median(seconds)}
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--colt", type=Path, default=DEFAULT_COLT, help="COLT repository snapshot")
    args = parser.parse_args()
    docs = load_tools(args.colt)
    requests = [(i, text, [docs[c].key for c in ids]) for i, text, ids in load_requests(args.colt)]
    index = SearchIndex.build(docs.values())
    bm25, bm25_stop = BM25(list(docs.values())), BM25(list(docs.values()), content_words)
    results = {
        "BM25": measure(lambda q: [k for k, _ in bm25.search(q, TOP)], requests),
        "BM25, stop words left out": measure(lambda q: [k for k, _ in bm25_stop.search(q, TOP)], requests),
        "find_tool, whole request only": measure(lambda q: [k for k, _ in index.search(q, TOP)], requests),
        "find_tool, split into parts, no residual (main before i25-multi3)":
            measure(lambda q: [k for k, _ in split_parts_only(index, q, TOP)], requests),
        "find_tool, parts and the residual by hand rules (main before i25-multi4)":
            measure(lambda q: [k for k, _ in split_hand_merge(index, q, TOP)], requests),
        "find_tool, the gate with MetaTool-trained weights (main before i25-gate7)":
            measure(lambda q: [k for k, _ in split_metatool_gate(index, q, TOP)], requests),
        "find_tool, the gate with round 7's weights (generated requests only, main before i25-gate8)":
            measure(lambda q: [k for k, _ in split_round7_gate(index, q, TOP)], requests),
        "find_tool, the gate with queries.GATE_WEIGHTS (gate_data's corpus with its hand-written requests)":
            measure(lambda q: [k for k, _ in split_openapi_gate(index, q, TOP)], requests),
        "find_tool now (chalicelib/search/queries.py)":
            measure(lambda q: [k for k, _ in intents.search(index, q, TOP)], requests),
    }
    split = sum(bool(intents.intents(text)) for _, text, _ in requests)
    print(f"## ToolLens ({len(docs)} tools, {len(requests)} test requests, {split} split into intents)")
    print()
    print("| ranking | recall@5 all | tuning | held-out | complete@5 all | tuning | held-out | median ms |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for label, r in results.items():
        cells = [f"{r[p][m]:.3f}" for m in ("recall@5", "complete@5") for p in ("all", "tuning", "held-out")]
        print(f"| {label} | {' | '.join(cells)} | {r['ms']['median']:.1f} |")
    base = results["BM25"]
    print()
    for label, r in list(results.items())[2:]:
        ratios = " / ".join(f"{r[p]['recall@5'] / base[p]['recall@5']:.2f}x" for p in ("all", "tuning", "held-out"))
        stop = results["BM25, stop words left out"]
        strict = " / ".join(f"{r[p]['recall@5'] / stop[p]['recall@5']:.2f}x" for p in ("all", "tuning", "held-out"))
        print(f"- {label}: recall@5 = {ratios} BM25's (all / tuning / held-out); {strict} that without stop words")
    print(f"\n(tuning: every {TUNING_EVERY}th test request, {results['BM25']['tuning']['n']} of them)")


if __name__ == "__main__":
    main()
