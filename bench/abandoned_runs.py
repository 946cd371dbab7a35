"""The sweep's cost with runs abandoned across a fleet (issue 11): runs whose Lambda died mid-call
hold a lease on their agent until the sweep expires them. Expiring them must cost O(abandoned),
not O(fleet).

    python bench/abandoned_runs.py [--agents 10000] [--abandoned 1000]

The fleet is bench/sweep_scale.py's (every agent with 20 promotions, nothing due), in in-process
moto. Then runs are seeded as `runs.start` writes them, each with its lease ended 10 minutes
before the sweep's `now` and held on its agent's settings item, spread over random agents. Two
sweeps at the same `now`: the first with the abandoned runs, the second after it (nothing left).
Each sweep's DynamoDB calls are counted with the `DynamoCalls` botocore hook, so the counts do not
depend on the machine; the script checks every run ended `expired` and every lease was freed.
Wall times are moto's (its Query walks the whole table in Python).
"""

from __future__ import annotations

import argparse
import os
import random
import sys
import time
from collections import Counter
from datetime import timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
# The fleet's `now` is a fixed day in the past; keep its runs longer than the default 30 days, or
# reading them would find them past their retention.
os.environ["WORKSET_RUN_RETENTION_DAYS"] = "3650"

from bench import sweep_scale  # fakes the AWS environment before the app loads
from bench.dynamo_calls import DynamoCalls
from chalicelib.agents import sweep
from chalicelib.base.outcomes import RunStatus
from chalicelib.store import agents as agent_store
from chalicelib.store import runs as run_store
from chalicelib.store.records import Run

NOW = sweep_scale.NOW
LEASE_ENDED = NOW - timedelta(minutes=10)  # well past the lease and the clock skew allowance


def abandoned_run(number: int, agent: int) -> Run:
    started = LEASE_ENDED - timedelta(seconds=30)
    return Run(run_id=f"runabandoned{number:06d}", agent_id=sweep_scale.agent_id(agent),
               account_id=sweep_scale.account_id(agent), vendor=sweep_scale.VENDOR, name=sweep_scale.TOOLS[0],
               version=1, input={"customer": "c1"}, status=RunStatus.RUNNING, created_at=started,
               updated_at=started, lease_expires_at=LEASE_ENDED)


def seed_abandoned(agents: int, count: int, rng: random.Random) -> list[Run]:
    """`count` runs started as the app starts them (`runs.start`: the run item, in the `to_sweep`
    index at its lease's end, and the lease on its agent's settings item) whose Lambda then died."""
    seeded = [abandoned_run(number, rng.randrange(agents)) for number in range(count)]
    for run in seeded:
        run_store.start(run, use_due_at=None)
    return seeded


def measured_sweep(counter: DynamoCalls) -> tuple[sweep.Report, Counter, float]:
    with counter.measure() as made:
        start = time.perf_counter()
        report = sweep.run(NOW)
        seconds = time.perf_counter() - start
    return report, Counter(made), seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--agents", type=int, default=10_000)
    parser.add_argument("--abandoned", type=int, default=1_000)
    args = parser.parse_args()
    rng = random.Random(11)
    with sweep_scale.harness():
        began = time.perf_counter()
        items = sweep_scale.seed_fleet(args.agents, rng)
        seeded = seed_abandoned(args.agents, args.abandoned, rng)
        print(f"seeded {args.agents:,} agents ({items:,} items) and {len(seeded):,} abandoned runs in "
              f"{time.perf_counter() - began:.0f} s", file=sys.stderr, flush=True)
        counter = DynamoCalls().install()
        rows = []
        for label in (f"{args.abandoned:,} abandoned runs", "the next sweep (none left)"):
            report, calls, seconds = measured_sweep(counter)
            rows.append((label, report, calls, seconds))
            print(f"{label}: {sum(calls.values())} calls in {seconds:.1f} s", file=sys.stderr, flush=True)
        ended = [run_store.get(run.run_id) for run in seeded]
        assert all(run is not None and run.status == RunStatus.EXPIRED for run in ended), "a run was not expired"
        states = [agent_store.load_state(agent) for agent in {run.agent_id for run in seeded}]
        assert all(state is not None and not state.leases for state in states), "an agent still holds a lease"
    print(f"Sweep with abandoned runs: {args.agents:,} agents with {sweep_scale.PROMOTIONS} promotions each, "
          f"nothing else due (`python bench/abandoned_runs.py --agents {args.agents} --abandoned {args.abandoned}`)")
    print("| sweep | runs expired | DynamoDB calls | by operation | calls per expired run | wall, moto |")
    print("|---|---:|---:|---|---:|---:|")
    for label, report, calls, seconds in rows:
        expired = report.runs.get("expired", 0)
        per_run = f"{(sum(calls.values()) - calls['Query']) / expired:.2f}" if expired else "–"
        by_operation = ", ".join(f"{name} {count}" for name, count in sorted(calls.items()))
        print(f"| {label} | {expired:,} | {sum(calls.values()):,} | {by_operation} | {per_run} | {seconds:.1f} s |")


if __name__ == "__main__":
    main()
