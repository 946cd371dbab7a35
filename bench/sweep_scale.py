"""The five-minute sweep at fleet scale: DynamoDB calls, demotions and wall time for fleets of
1,000 and 10,000 agents with 20 promotions each, in in-process moto; first with nothing due,
then with 1% of the agents due one idle demotion each; and the call count projected to 100,000.

    python bench/sweep_scale.py [--fleets 1000,10000] [--runs 3] [--budget 540]

Calls are counted with the `DynamoCalls` botocore hook (bench/dynamo_calls.py), so they do not
depend on the machine. Wall times are moto's: its Query walks the whole table in Python, so they
grow with the fleet even where the call count does not (the script measures that and says so).

The fleet is seeded with BatchWriteItem from the store's own model classes (settings item and
promotion items as the app writes them; the script checks their attribute shapes against an
agent created, and a tool promoted and called, through the app's own API). Every sweep runs at
the same `now`: all seeded deadlines fall 14 to 21 days after it, and the due case re-writes,
before each of its runs, one promotion of 1% of the agents with a last use 21 days and an hour
or more before `now` (and the agent's settings item with its size back to 20), since the sweep
before demoted them.

moto's Query walks and sorts the whole table, so a sweep costs it time in the fleet's size even
where the calls do not grow (its transactions copied whole tables too, until local/emulator.py
made them copy only the items they touch). Within `--budget`, later runs of a case are cut
first, and a due case moto cannot finish in time falls back to one due agent. The output says
which, wherever it happens.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import platform
import random
import statistics
import subprocess
import sys
import time
from collections import Counter
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from importlib import metadata
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import tests.conftest
from bench.dynamo_calls import DynamoCalls
from chalicelib.agents import sweep
from chalicelib.identity.accounts import DEFAULT_CAP, DEFAULT_IDLE_WINDOW_DAYS
from chalicelib.store import agents as agent_store
from chalicelib.store.models import (
    AGENT_SK,
    SHARDS,
    AgentPartitionItem,
    AgentSettingsItem,
    PromotionItem,
    promotion_sk,
    tool_key,
)

NOW = datetime(2026, 6, 1, 12, 0, tzinfo=UTC)  # the moment every sweep runs at
WINDOW = timedelta(days=DEFAULT_IDLE_WINDOW_DAYS)
PROMOTIONS = 20
VENDOR = "bench"
TOOLS = [f"tool-{index:02d}" for index in range(PROMOTIONS)]
AGENTS_PER_ACCOUNT = 100
DUE_PERCENT = 1
PROJECTED_FLEET = 100_000
PAGE_BYTES = 1024 * 1024  # DynamoDB's Query page (moto uses 1,000,000)
MARGIN = 1.3  # on moto's per-item costs when budgeting a bigger table (its Query sorts: n log n)
# Flags a settings item carries only while something waits (a review by the sweep, a change to
# announce): the reference agent has them, a fleet at rest does not.
PENDING_FLAGS = {"review_shard", "review_token", "outbox_shard"}


def agent_id(index: int) -> str:
    return "ag" + hashlib.sha256(f"bench-agent-{index}".encode()).hexdigest()[:16]  # like accounts.create_agent


def account_id(index: int) -> str:
    return "ac" + hashlib.sha256(f"bench-account-{index // AGENTS_PER_ACCOUNT}".encode()).hexdigest()[:16]


def promoted_at(tool: int) -> datetime:
    return NOW - timedelta(days=40) + timedelta(minutes=tool)


def settings_item(index: int) -> AgentSettingsItem:
    """The agent's settings item, as `create_agent` writes it and 20 promotions left it."""
    return AgentSettingsItem(
        agent_id=agent_id(index), sk=AGENT_SK, account_id=account_id(index),
        created_at=NOW - timedelta(days=60), name=f"agent-{index}", cap=DEFAULT_CAP,
        idle_window_days=DEFAULT_IDLE_WINDOW_DAYS,
        key_hashes=[hashlib.sha256(f"wsk_bench_{index}".encode()).hexdigest()],
        size=PROMOTIONS, leases={}, lease_rev=0,
    )


def promotion_item(index: int, tool: int, last_used_at: datetime) -> PromotionItem:
    """A promotion as `add_promotion` writes it and a use (`runs.start`) updates it."""
    name = TOOLS[tool]
    return PromotionItem(
        agent_id=agent_id(index), sk=promotion_sk(VENDOR, name), vendor=VENDOR, name=name,
        promoted_at=promoted_at(tool), promoted_by="agent", last_used_at=last_used_at,
        tool_key=tool_key(account_id(index), VENDOR, name),
        **agent_store.due_fields(agent_id(index), last_used_at + WINDOW),
    )


def batch_write(items: Any) -> int:
    count = 0
    with AgentPartitionItem.batch_write() as batch:
        for item in items:
            batch.save(item)
            count += 1
    return count


def seed_fleet(agents: int, rng: random.Random) -> int:
    """Every agent with 20 promotions, each last used 0 to 7 days before NOW: nothing is due."""

    def items() -> Any:
        for index in range(agents):
            yield settings_item(index)
            for tool in range(PROMOTIONS):
                yield promotion_item(index, tool, NOW - timedelta(seconds=rng.uniform(0, 7 * 86400)))

    return batch_write(items())


def make_due(chosen: list[tuple[int, int]]) -> set[tuple[str, str]]:
    """One promotion of each chosen agent idle past its deadline; the agent's size back to 20."""

    def items() -> Any:
        for index, tool in chosen:
            yield settings_item(index)
            yield promotion_item(index, tool, NOW - WINDOW - timedelta(hours=1, minutes=index % 600))

    batch_write(items())
    return {(agent_id(index), TOOLS[tool]) for index, tool in chosen}


def verify_demoted(report: sweep.Report, expected: set[tuple[str, str]]) -> None:
    """The sweep demoted exactly the due tools, for idleness, and the store agrees."""
    made = {(entry["agent_id"], entry["name"]) for entry in report.demoted}
    assert len(report.demoted) == len(expected), (len(report.demoted), len(expected))
    assert made == expected, sorted(made ^ expected)[:5]
    assert all(entry["cause"] == "idle" for entry in report.demoted), report.demoted[:3]
    assert not report.held and not report.dispatched, (report.held[:3], report.dispatched)
    settings = {item.agent_id: item for item in AgentSettingsItem.batch_get(
        [(agent, AGENT_SK) for agent, _ in expected])}
    assert len(settings) == len(expected) and all(int(s.size) == PROMOTIONS - 1 for s in settings.values())
    left = list(PromotionItem.batch_get([(agent, promotion_sk(VENDOR, name)) for agent, name in expected]))
    assert not left, f"{len(left)} demoted promotions still stored"


def verify_nothing(report: sweep.Report) -> None:
    assert not report.demoted and not report.held and not report.dispatched, report.to_dict()


@dataclass
class Case:
    label: str
    due: int
    calls: list[Counter] = field(default_factory=list)  # by operation, one per run
    seconds: list[float] = field(default_factory=list)
    demoted: list[int] = field(default_factory=list)
    note: str = ""

    @property
    def total(self) -> int:
        return sum(self.calls[0].values())

    @property
    def median(self) -> float:
        return statistics.median(self.seconds)


@dataclass
class Fleet:
    agents: int
    items: int = 0
    seed_seconds: float = 0.0
    reseed_seconds: list[float] = field(default_factory=list)
    cases: list[Case] = field(default_factory=list)
    demotion_seconds: float | None = None  # moto's time for one due agent's review at this size
    notes: list[str] = field(default_factory=list)


@dataclass
class Moto:
    """moto's costs per item of the table, as measured on the fleet before (to budget the next):
    seeding is linear in items; so is every Query and every TransactWriteItems, in moto."""

    seed: float | None = None  # seconds per item seeded
    sweep: float | None = None  # seconds per table item of a nothing-due sweep
    demotion: float | None = None  # seconds per table item of one due agent's review

    def estimate(self, rate: float | None, items: int, count: float = 1) -> float:
        return 0.0 if rate is None else rate * items * count * MARGIN


def timed_sweep(counter: DynamoCalls, case: Case) -> sweep.Report:
    with counter.measure() as made:
        start = time.perf_counter()
        report = sweep.run(NOW)
        case.seconds.append(time.perf_counter() - start)
    case.calls.append(Counter(made))
    case.demoted.append(len(report.demoted))
    return report


def run_fleet(agents: int, runs: int, counter: DynamoCalls, moto: Moto, deadline: float, reserve_items: int,
              log: Any) -> Fleet | str:
    """Seed one fleet; sweep it once with nothing due and once with D due (or, where moto could
    not finish that in time, one due agent); then more runs of each, up to `runs`, while they
    leave room for the fleets still to come (`reserve_items`: seeding them, one sweep and one due
    agent each). Answers the figures, or why the fleet was skipped."""
    fleet = Fleet(agents)
    items = agents * (PROMOTIONS + 1)

    def left() -> float:
        return deadline - time.perf_counter()

    def reserve() -> float:
        return (moto.estimate(moto.seed, reserve_items) + moto.estimate(moto.sweep, reserve_items)
                + moto.estimate(moto.demotion, reserve_items))

    needed = moto.estimate(moto.seed, items) + moto.estimate(moto.sweep, items)
    if needed > left():
        return f"{agents:,} agents skipped: seeding and one sweep estimated at {needed:.0f} s, {left():.0f} s left"
    log(f"fleet of {agents:,} agents x {PROMOTIONS} promotions ({items:,} items)"
        + (f", estimated {needed:.0f} s to seed and sweep once" if needed else ""))
    rng = random.Random(agents)
    with harness():
        start = time.perf_counter()
        fleet.items = seed_fleet(agents, rng)
        fleet.seed_seconds = time.perf_counter() - start
        moto.seed = fleet.seed_seconds / fleet.items
        log(f"  seeded {fleet.items:,} items in {fleet.seed_seconds:.1f} s")

        nothing = Case("nothing due", 0)
        fleet.cases.append(nothing)

        def sweep_nothing() -> None:
            verify_nothing(timed_sweep(counter, nothing))
            moto.sweep = nothing.median / items
            log(f"  nothing due: {nothing.total} calls, {nothing.seconds[-1]:.2f} s")

        sweep_nothing()
        due = max(1, agents * DUE_PERCENT // 100)
        some: Case | None = Case(f"{DUE_PERCENT}% due", due)
        first = nothing.median + moto.estimate(moto.demotion, items, due)
        if first > left():
            single = nothing.median + moto.estimate(moto.demotion, items)
            if single > left():
                fleet.notes.append(f"due case not run: moto would take ~{first / 60:.0f} min for D = {due} "
                                   f"and ~{single / 60:.1f} min for one due agent; {left():.0f} s left")
                log("  " + fleet.notes[-1])
                some = None
            else:
                some = Case("1 due", 1, note=f"{DUE_PERCENT}% (D = {due}) not run: moto would take "
                                             f"~{first / 60:.0f} min per sweep at this size; one agent due instead")
                log(f"  {some.note}")
                first = single
        # the nothing-due runs first: a due sweep changes the fleet (D fewer promotions)
        while len(nothing.seconds) < runs and nothing.median * MARGIN <= left() - reserve() - (first if some else 0):
            sweep_nothing()
        if some is not None:
            fleet.cases.append(some)
            chosen = [(index, rng.randrange(PROMOTIONS)) for index in sorted(rng.sample(range(agents), some.due))]
            while not some.seconds or (len(some.seconds) < runs and some.median * MARGIN <= left() - reserve()):
                start = time.perf_counter()
                expected = make_due(chosen)
                fleet.reseed_seconds.append(time.perf_counter() - start)
                verify_demoted(timed_sweep(counter, some), expected)
                moto.demotion = max(some.median - nothing.median, 0.0) / some.due / items
                fleet.demotion_seconds = moto.demotion * items
                log(f"  {some.label} (D = {some.due}): {some.total} calls, {some.demoted[-1]} demoted, "
                    f"{some.seconds[-1]:.2f} s")
        for case in fleet.cases:
            if len(case.seconds) < runs:
                case.note = "; ".join(filter(None, [case.note, (f"{len(case.seconds)} run"
                                                     f"{'s' if len(case.seconds) > 1 else ''} of {runs} (time budget)")]))
    return fleet


def item_bytes(serialized: dict[str, Any]) -> int:
    """DynamoDB's size of an item: attribute names plus values (strings in UTF-8, numbers about
    one byte per two digits plus one, maps and lists 3 bytes plus their contents)."""

    def value(typed: dict[str, Any]) -> int:
        (kind, content), = typed.items()
        if kind == "S":
            return len(content.encode())
        if kind == "N":
            return (len(content.lstrip("-").replace(".", "")) + 1) // 2 + 1
        if kind == "M":
            return 3 + sum(len(name.encode()) + 1 + value(inner) for name, inner in content.items())
        if kind == "L":
            return 3 + sum(1 + value(inner) for inner in content)
        if kind == "SS":
            return sum(len(text.encode()) for text in content)
        return 1

    return sum(len(name.encode()) + value(typed) for name, typed in serialized.items())


def harness() -> Any:
    """The test harness's own AWS, entered as a context: `tests.conftest.aws` (mock_aws, every
    table, the KMS key, the queues, cold caches), so the bench follows the tests' setup."""
    fixture = tests.conftest.aws
    return contextmanager(getattr(fixture, "__wrapped__", fixture))()


def check_shapes() -> None:
    """The seeded items carry the same attributes, of the same types, as the app's own: an agent
    created over the admin API, a tool promoted and then called over MCP. Flags of pending work
    aside (the reference agent has just changed, a fleet at rest has not)."""
    from chalice.test import Client

    from app import app
    from chalicelib.base.clock import utcnow
    from chalicelib.identity import accounts
    from local.demo import start_vendor
    from tests.conftest import Admin, Mcp

    vendor = start_vendor(0)
    try:
        with harness(), Client(app, project_dir=str(ROOT / "tests")) as client:
            _, token = accounts.create_account("bench", utcnow())
            admin = Admin(client, token)
            admin.publish(vendor=VENDOR, name=TOOLS[0], request={
                "method": "GET", "url": f"http://127.0.0.1:{vendor.server_address[1]}/orders"})
            created = admin.create_agent("reference")
            mcp = Mcp(client, created["api_key"])
            mcp.call("promote", {"vendor": VENDOR, "name": TOOLS[0]})
            mcp.call(f"{VENDOR}__{TOOLS[0]}", {"customer": "acme"})
            table = AgentPartitionItem.Meta.table_name
            dynamodb = AgentPartitionItem._get_connection().connection.client

            def app_shape(sk: str) -> dict[str, str]:
                item = dynamodb.get_item(TableName=table, Key={"agent_id": {"S": created["id"]}, "sk": {"S": sk}})
                return {name: next(iter(typed)) for name, typed in item["Item"].items() if name not in PENDING_FLAGS}

            app_items = {"settings": app_shape(AGENT_SK), "promotion": app_shape(promotion_sk(VENDOR, TOOLS[0]))}
    finally:
        vendor.shutdown()
        vendor.server_close()

    def shape(item: Any) -> dict[str, str]:
        return {"agent_id": "S", "sk": "S"} | {name: next(iter(typed)) for name, typed in item.serialize().items()}

    ours = {"settings": shape(settings_item(0)), "promotion": shape(promotion_item(0, 0, NOW))}
    for kind, seeded in ours.items():
        app_item = app_items[kind]
        if seeded != app_item:
            raise SystemExit(f"seeded {kind} item differs from the app's: only ours "
                             f"{sorted(seeded.items() - app_item.items())}, only the app's "
                             f"{sorted(app_item.items() - seeded.items())}")


def ops(counter: Counter) -> str:
    return ", ".join(f"{name} {count:,}" for name, count in sorted(counter.items()))


def fit(points: list[tuple[int, int]]) -> tuple[float, float]:
    """Least squares `calls = a + b * D` over the measured points."""
    mean_d = statistics.fmean(d for d, _ in points)
    mean_c = statistics.fmean(c for _, c in points)
    spread = sum((d - mean_d) ** 2 for d, _ in points)
    if not spread:  # only one D measured (no due sweep ran): no slope
        return mean_c, float("nan")
    slope = sum((d - mean_d) * (c - mean_c) for d, c in points) / spread
    return mean_c - slope * mean_d, slope


def code_version() -> str:
    """The commit measured, and whether chalicelib/ differed from it (read-only git calls)."""
    env = {**os.environ, "GIT_OPTIONAL_LOCKS": "0"}  # never refresh the index
    try:
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, env=env, capture_output=True,
                                text=True, check=True).stdout.strip()
        changed = subprocess.run(["git", "status", "--porcelain", "--", "chalicelib"], cwd=ROOT, env=env,
                                 capture_output=True, text=True, check=True).stdout.splitlines()
    except (OSError, subprocess.CalledProcessError):
        return "unknown (no git)"
    return f"commit {commit}" + (f", chalicelib/ with {len(changed)} uncommitted change(s) at the start" if changed
                                 else ", chalicelib/ clean")


def machine() -> str:
    model = ""
    try:
        model = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                      if line.startswith("model name")), "")
    except OSError:
        pass
    load = ", ".join(f"{value:.2f}" for value in os.getloadavg())
    versions = ", ".join(f"{name} {metadata.version(name)}" for name in ("moto", "pynamodb", "boto3"))
    return (f"cores (os.cpu_count()): {os.cpu_count()}; {model or platform.processor()}; load average at start: "
            f"{load}\n{platform.platform()}; Python {platform.python_version()}; {versions}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--fleets", default="1000,10000", help="fleet sizes, comma-separated (run smallest first)")
    parser.add_argument("--runs", type=int, default=3, help="sweeps per case (median wall time)")
    parser.add_argument("--budget", type=float, default=540,
                        help="seconds the whole run may take: runs moto would not finish in time are cut, "
                             "and a due case too slow for moto falls back to one due agent")
    args = parser.parse_args()
    command = "python bench/sweep_scale.py " + " ".join(sys.argv[1:])
    began = time.perf_counter()
    deadline = began + args.budget
    setting = machine()  # the load average before the run loads the machine

    def log(text: str) -> None:
        print(f"[{time.perf_counter() - began:6.1f} s] {text}", file=sys.stderr, flush=True)

    check_shapes()
    log("seeded item shapes match the app's own writes")
    counter = DynamoCalls().install()
    moto = Moto()
    fleets: list[Fleet] = []
    skipped: list[str] = []
    sizes = sorted(int(value) for value in args.fleets.split(","))
    for number, agents in enumerate(sizes):
        later = sum(size * (PROMOTIONS + 1) for size in sizes[number + 1:])
        outcome = run_fleet(agents, args.runs, counter, moto, deadline, later, log)
        if isinstance(outcome, str):
            skipped.append(outcome)
            log(outcome)
        else:
            fleets.append(outcome)
    report(fleets, skipped, command, setting, args.budget, time.perf_counter() - began)


def report(fleets: list[Fleet], skipped: list[str], command: str, setting: str, budget: float,
           elapsed: float) -> None:
    print(f"# The sweep at fleet scale, {datetime.now(UTC):%Y-%m-%d %H:%M} UTC")
    print(f"command: {command.strip()}")
    print(f"code: {code_version()}")
    print(setting)
    print(f"in-process moto; SHARDS = {SHARDS}; {PROMOTIONS} promotions per agent; cap {DEFAULT_CAP}; idle window "
          f"{DEFAULT_IDLE_WINDOW_DAYS} days; each sweep is chalicelib.agents.sweep.run(now) inline (no dispatch)")
    print(f"whole run: {elapsed:.0f} s (budget {budget:.0f} s)\n")

    print("## Measured")
    points: list[tuple[int, int]] = []
    for fleet in fleets:
        print(f"{fleet.agents:,} agents: seeded {fleet.items:,} items with BatchWriteItem in "
              f"{fleet.seed_seconds:.1f} s "
              f"({fleet.items / fleet.seed_seconds:,.0f} items/s)"
              + (f"; re-seeding the due items before each due sweep: {statistics.median(fleet.reseed_seconds):.2f} s"
                 if fleet.reseed_seconds else ""))
        for case in fleet.cases:
            runs = len(case.seconds)
            identical = all(calls == case.calls[0] for calls in case.calls)
            base = fleet.cases[0].total
            per = (f"{case.total / case.demoted[0]:.2f} calls/demotion, {(case.total - base) / case.demoted[0]:.2f} "
                   f"over the nothing-due sweep" if case.demoted[0] else "no demotions")
            points.append((case.due, case.total))
            print(f"  {case.label:11} D = {case.due:3}: {case.total:,} calls ({ops(case.calls[0])})"
                  f"{'' if identical else ' DIFFERS between runs: ' + ' | '.join(map(ops, case.calls))}; "
                  f"demoted {case.demoted[0]} (verified in each run); {per}; wall {case.median:.2f} s, "
                  f"median of {runs} ({', '.join(f'{s:.2f}' for s in case.seconds)})"
                  + (f"; {case.note}" if case.note else ""))
        for note in fleet.notes:
            print(f"  {note}")
        nothing = fleet.cases[0]
        print(f"  moto at this table size: ~{nothing.median / nothing.total:.2f} s per index Query (the nothing-due "
              f"sweep / its calls)" + (f"; ~{fleet.demotion_seconds:.1f} s per due agent (one Query of its "
                                        f"partition + one TransactWriteItems)"
                                        if fleet.demotion_seconds is not None else ""))
    for line in skipped:
        print(line)
    print("  (moto walks and sorts the whole table for every index Query: wall times here are moto's and "
          "grow with the fleet; DynamoDB's follow the calls)")

    print("\n## Projection to 100,000 agents")
    nothing = [fleet.cases[0].total for fleet in fleets]
    constant = max(nothing)
    shards = f" = {constant // SHARDS} sparse indexes x SHARDS ({SHARDS})" if constant % SHARDS == 0 else ""
    verdict = "constant" if len(set(nothing)) == 1 else "NOT CONSTANT"
    print("nothing due, measured: "
          + ", ".join(f"{fleet.agents:,} agents -> {calls}" for fleet, calls in zip(fleets, nothing))
          + f" ({verdict}{shards}); at {PROJECTED_FLEET:,} agents: {constant}")
    a, b = fit(points)
    projected_due = PROJECTED_FLEET * DUE_PERCENT // 100
    projected = a + b * projected_due
    residual = max(abs(a + b * d - c) for d, c in points)
    print(f"{DUE_PERCENT}% due: calls = a + b x D, least squares over every measured (D, calls) "
          f"{sorted(set(points))}: a = {a:.2f}, b = {b:.3f}, max residual {residual:.2f}; a is the nothing-due "
          f"sweep, and chalicelib/agents/sweep.py's account of b is one Query per agent found plus one transaction per "
          f"demotion, 2 here{'' if round(b, 3) == 2 else ' <- NOT what was measured'}")
    print(f"  at {PROJECTED_FLEET:,} agents, D = {DUE_PERCENT}% = {projected_due:,}: calls = {a:.0f} + {b:.0f} x "
          f"{projected_due:,} = {projected:,.0f} ({projected / projected_due:.3f} calls/demotion)")
    item = item_bytes(promotion_item(0, 0, NOW - WINDOW - timedelta(hours=1)).serialize())
    per_page = PAGE_BYTES // item
    print(f"  valid while each due-index shard fits one Query page: a due promotion is ~{item} bytes, ~{per_page:,} "
          f"to a 1 MB page, so up to ~{per_page * SHARDS:,} due promotions per sweep over {SHARDS} even shards; "
          f"past that, +1 Query per extra page and shard")
    print(f"  D = {projected_due:,} > INLINE_AGENTS = {sweep.INLINE_AGENTS}: the scheduled sweep makes the "
          f"{a:.0f} index queries and hands {-(-projected_due // sweep.BATCH)} batches of {sweep.BATCH} agents "
          f"to workers, which make the other {projected - a:,.0f} calls")

    print("\n## For BENCHMARKS.md\n")
    print("| agents | promotions | sweep | D | DynamoDB calls | by operation | calls/demotion | wall, moto | "
          "seeding, moto |")
    print("|---:|---:|---|---:|---:|---|---:|---:|---:|")
    for fleet in fleets:
        for number, case in enumerate(fleet.cases):
            per = f"{case.total / case.demoted[0]:.2f}" if case.demoted[0] else "–"
            seeding = f"{fleet.seed_seconds:.0f} s ({fleet.items:,} items)" if number == 0 else ""
            label = case.label + (" *" if case.note else "")
            print(f"| {fleet.agents:,} | {fleet.agents * PROMOTIONS:,} | {label} | {case.due:,} | {case.total:,} | "
                  f"{ops(case.calls[0])} | {per} | {case.median:.2f} s (median of {len(case.seconds)}) | {seeding} |")
    print(f"| {PROJECTED_FLEET:,} (projected) | {PROJECTED_FLEET * PROMOTIONS:,} | nothing due | 0 | {constant} | "
          f"{ops(fleets[-1].cases[0].calls[0])} | – | – | – |")
    print(f"| {PROJECTED_FLEET:,} (projected) | {PROJECTED_FLEET * PROMOTIONS:,} | {DUE_PERCENT}% due | "
          f"{projected_due:,} | {projected:,.0f} | {a:.0f} + {b:.0f} x D | {projected / projected_due:.2f} "
          f"| – | – |")
    print()
    for fleet in fleets:
        for case in fleet.cases:
            if case.note:
                print(f"\\* {fleet.agents:,} agents, {case.label}: {case.note}.  ")
    print(f"{command.strip()}, {os.cpu_count()} cores, in-process moto. Calls counted with a botocore hook; wall "
          f"times are moto's, which walks the whole table for every index Query, so they grow with the fleet "
          f"where DynamoDB's would not.")


if __name__ == "__main__":
    main()
