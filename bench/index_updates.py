"""A toolbox that grows while it is searched: what a publish costs a warm instance's next find_tool,
and the memory the search indexes of many accounts hold.

    python bench/index_updates.py [--tools 10000] [--accounts 10] [--publishes 15]

Runs the app's own search path (`toolbox.search`: the revision, the change records, the changed
heads, the index update, the hits) against the local stack's AWS emulator in its own process
(local/aws.py, data in a temporary folder), as the local stack does; so the resident memory
printed is this process's alone, as a Lambda's would be.

1. One account of `--tools` tools (MetaTool and LiveMCPBench descriptions and seeded variants, as
   bench/find_tool_quality.py pads them; random unit search vectors, since only time and memory
   are measured here) is seeded with BatchWriteItem. Then, side by side: a warm search with
   nothing changed, the first search after each of `--publishes` publishes (each through
   `store.tools.put_version`, with the tool's real vector), and the first search of a cold
   instance (a whole rebuild, what every publish cost before).
2. `--accounts` accounts of `--tools` tools each are searched in turn with the cache budget a
   Lambda of the stage's memory gets (a quarter of `lambda_memory_size` in .chalice/config.json),
   then with no budget (every index kept, as before); resident memory after each account.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from local import environment

environment.prepare()
LAMBDA_MB = json.loads((ROOT / ".chalice" / "config.json").read_text())["lambda_memory_size"]
QUERIES = ["send an invoice to a customer", "weather forecast for a city", "list open pull requests",
           "translate text to french", "find flights to paris", "stock price of a company", "create a calendar event",
           "search recent news articles"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tools", type=int, default=10_000)
    parser.add_argument("--accounts", type=int, default=10)
    parser.add_argument("--publishes", type=int, default=15)
    parser.add_argument("--searched", nargs="+", help=argparse.SUPPRESS)  # the child of the memory part
    args = parser.parse_args()
    if args.searched:
        return searched(args.searched)
    with tempfile.TemporaryDirectory() as data:
        from local.__main__ import _start_emulator, _stop

        emulator = _start_emulator(Path(data))
        try:
            run(args)
        finally:
            _stop(emulator)


def run(args: argparse.Namespace) -> None:
    from bench.find_tool_quality import PAD_TO, SEED, load_tools, variants
    from chalicelib.catalog import indexes, toolbox
    from chalicelib.search import embedder, static
    from chalicelib.store import tables

    tables.create_all()
    embedder.model()
    static.wordllama()
    bench = Path("/work/shared/bench")
    base = load_tools(bench / "metatool" / "tools.json") + load_tools(bench / "livemcpbench" / "tools.json")
    print(f"## Search index updates and memory ({datetime.date.today().isoformat()}, {args.tools:,} tools)")
    print()

    account_id = seed(base + variants(base, max(PAD_TO, args.tools) - len(base), random.Random(SEED)), args.tools, 0)
    rounds = [timed(partial(toolbox.search, account_id, query, 10)) for query in QUERIES * 2]  # the first builds
    warm = statistics.median(rounds[1:])
    after = []
    for number in range(args.publishes):
        publish(account_id, number)
        after.append(timed(partial(toolbox.search, account_id, QUERIES[number % len(QUERIES)], 10)))
    cold = []
    for query in QUERIES[:3]:
        indexes.clear()
        cold.append(timed(partial(toolbox.search, account_id, query, 10)))
    found = [tool.spec.name for tool in toolbox.search(account_id, "publish number refunds a charge", 50)[0]]
    print("| find_tool (toolbox.search), median | ms | extra over warm |")
    print("|---|---:|---:|")
    print(f"| warm, nothing changed ({len(rounds) - 1} searches) | {warm:.1f} | |")
    print(f"| first search after a publish ({len(after)} publishes) | {statistics.median(after):.1f} | "
          f"{statistics.median(after) - warm:.1f} |")
    print(f"| cold instance: the whole toolbox read and indexed (before: after every publish; {len(cold)} runs) | "
          f"{statistics.median(cold):.1f} | {statistics.median(cold) - warm:.1f} |")
    print()
    print(f"Every published tool is found: {all(f'published-{n}' in found for n in range(args.publishes))}")
    print()
    if args.accounts:
        memory(args, base)


def memory(args: argparse.Namespace, base: list) -> None:
    """Each cache setting in a fresh process (as a new Lambda instance would be), the same accounts."""
    from bench.find_tool_quality import SEED, variants

    accounts = [seed(base + variants(base, args.tools - len(base), random.Random(SEED + n)), args.tools, n + 1)
                for n in range(args.accounts)]
    budget = LAMBDA_MB / 4
    columns = [measured(accounts, budget), measured(accounts, None)]
    print(f"Resident memory (VmRSS, MiB) of a fresh process that searches {args.accounts} accounts of "
          f"{args.tools:,} tools in turn; the Lambda has {LAMBDA_MB} MiB:")
    print()
    print(f"| after account | cache of {budget:.0f} MiB (the default at {LAMBDA_MB} MiB): RSS / indexes held / their "
          f"estimate, MiB | no bound (as before): RSS / indexes held |")
    print("|---:|---|---|")
    for number, (bounded, unbounded) in enumerate(zip(*(column["rows"] for column in columns)), 1):
        print(f"| {number} | {bounded[0]:.0f} / {bounded[1]} / {bounded[2]:.0f} | {unbounded[0]:.0f} / {unbounded[1]} |")
    print(f"| peak (VmHWM) | {columns[0]['peak']:.0f} | {columns[1]['peak']:.0f} |")
    print(f"| before the first search (models loaded) | {columns[0]['base']:.0f} | {columns[1]['base']:.0f} |")


def measured(accounts: list[str], budget: float | None) -> dict:
    """Run `searched` in a child process against the same emulator; its figures."""
    env = {**os.environ, "WORKSET_SEARCH_CACHE_MB": str(budget if budget is not None else 1e9)}
    out = subprocess.run([sys.executable, __file__, "--searched", *accounts], env=env, check=True,
                         capture_output=True, text=True).stdout
    return json.loads(out.splitlines()[-1])


def searched(accounts: list[str]) -> None:
    """(In the child) search each account once, in turn; print RSS, indexes held and their estimate."""
    from chalicelib.catalog import indexes, toolbox
    from chalicelib.search import embedder, static

    embedder.model()
    static.wordllama()
    base = rss()
    rows = []
    for number, account_id in enumerate(accounts):
        toolbox.search(account_id, QUERIES[number % len(QUERIES)], 10)
        rows.append((rss(), len(indexes._entries), indexes.cached_bytes() / 2**20))
    print(json.dumps({"base": base, "rows": rows, "peak": status("VmHWM")}))


def seed(docs: list, count: int, number: int) -> str:
    """An account whose toolbox holds `count` of the docs as heads with random unit vectors (one
    BatchWriteItem per 25), its revision at 1 with no change records (a first search builds)."""
    import numpy as np

    from chalicelib.base.clock import utcnow
    from chalicelib.identity import accounts
    from chalicelib.search.documents import VECTOR_VERSION
    from chalicelib.store.models import AccountItem, ToolHeadItem, head_sk

    now = utcnow()
    account_id = accounts.create_account(f"bench-{number}", now)[0].account_id
    rng = np.random.default_rng(number)
    with ToolHeadItem.batch_write() as batch:
        for doc in docs[:count]:
            vector = rng.standard_normal(384).astype(np.float32)
            batch.save(ToolHeadItem(account_id=account_id, sk=head_sk(doc.vendor, doc.name), vendor=doc.vendor,
                                    name=doc.name, version=1, published_at=now, published_by="bench",
                                    definition=definition(doc.vendor, doc.name, doc.description or doc.name),
                                    vector=(vector / np.linalg.norm(vector)).astype("<f2").tobytes(),
                                    vector_version=VECTOR_VERSION))
    AccountItem(account_id=account_id).update(actions=[AccountItem.toolbox_revision.set(1)])
    return account_id


def publish(account_id: str, number: int) -> None:
    from chalicelib.base.clock import utcnow
    from chalicelib.search.documents import VECTOR_VERSION, document_vector
    from chalicelib.store import tools as tool_store

    name, description = f"published-{number}", f"Publish number {number}: refunds a charge to the buyer."
    tool_store.put_version(account_id, tool_store.NewVersion(
        "bench", name, definition("bench", name, description), 0,
        vector=document_vector("bench", name, description), vector_version=VECTOR_VERSION), "bench", utcnow())


def definition(vendor: str, name: str, description: str) -> dict:
    return {"vendor": vendor, "name": name, "description": description, "input_schema": {"type": "object"},
            "annotations": {"readOnlyHint": True}, "request": {"method": "GET", "url": "https://api.example.test/x"}}


def timed(work: Callable[[], object]) -> float:
    start = time.perf_counter()
    work()
    return (time.perf_counter() - start) * 1000


def rss() -> float:
    return status("VmRSS")


def status(field: str) -> float:
    lines = Path("/proc/self/status").read_text().splitlines()
    return int(next(line for line in lines if line.startswith(field + ":")).split()[1]) / 1024


if __name__ == "__main__":
    main()
