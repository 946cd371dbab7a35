"""DynamoDB calls to take an account's listen slot (store/listens.py), side by side with the way
before it (a conditional write on each slot in turn), in in-process moto: machine-independent counts.

    python bench/listen_slots.py [--limits 10,50] [--trials 7]

For each limit: a take from an empty pool, a take when one slot is free, and a refusal (all held),
each the median of `trials` (where the random first slot lands varies). Calls are counted with the botocore hook of bench/dynamo_calls.py. Request units are on-demand's:
a write 1 per item (under 1 KB; a failed conditional write too), a strongly consistent read 1 per
item (under 4 KB); on-demand prices a read unit at a fifth of a write unit, so `cost` is write
units + read units / 5, in write units.
"""

from __future__ import annotations

import argparse
import random
import secrets
import statistics
import sys
from datetime import datetime, timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _before(account_id: str, *, limit: int, now: datetime, until: datetime) -> str | None:
    """The take this replaced: a conditional write on each slot in turn, from a random one."""
    from chalicelib.store import listens
    from chalicelib.store.base import update_if
    from chalicelib.store.models import ListenSlotItem

    holder = secrets.token_hex(8)
    first = random.randrange(limit)
    for offset in range(limit):
        slot = str((first + offset) % limit)
        if update_if(ListenSlotItem(token_hash=listens._key(account_id, slot)),
                     [ListenSlotItem.holder.set(holder), ListenSlotItem.ttl.set(until)],
                     ListenSlotItem.ttl.does_not_exist() | (ListenSlotItem.ttl < now)):
            return f"{slot}:{holder}"
    return None


def _give_back_before(account_id: str, taken: str) -> None:
    """The give-back this replaced: the slot's ttl removed (the item then stayed forever)."""
    from chalicelib.store import listens
    from chalicelib.store.base import update_if
    from chalicelib.store.models import ListenSlotItem

    slot, holder = taken.split(":", 1)
    update_if(ListenSlotItem(token_hash=listens._key(account_id, slot)), [ListenSlotItem.ttl.remove()],
              ListenSlotItem.holder == holder)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--limits", default="10,50", help="pool sizes, comma-separated")
    parser.add_argument("--trials", type=int, default=7, help="runs of each case (the median is shown)")
    arguments = parser.parse_args()
    limits = [int(value) for value in arguments.limits.split(",")]
    sys.path.insert(0, str(ROOT))
    import tests.conftest  # noqa: F401 - fakes the AWS environment before boto3 is imported

    print(f"{'limit':>5} {'case':20} {'calls before':>12} {'after':>6} {'ratio':>6}   {'cost before':>11} {'after':>6} "
          f"{'ratio':>6}   after: write units, read units")
    for limit in limits:
        for case in ("empty pool", "one slot free", "refused (all held)"):
            medians = []
            for before in (True, False):
                calls, writes, reads = [], [], []
                for _ in range(arguments.trials):
                    made = _measure(limit, case, before=before)
                    calls.append(len(made))
                    writes.append(made.count("UpdateItem"))
                    reads.append(limit - 1 if "BatchGetItem" in made else 0)  # the other slots, a unit each
                medians.append((statistics.median(calls), statistics.median(writes), statistics.median(reads)))
            (calls_before, writes_before, reads_before), (calls_after, writes_after, reads_after) = medians
            cost_before, cost_after = writes_before + reads_before / 5, writes_after + reads_after / 5
            print(f"{limit:5} {case:20} {calls_before:12g} {calls_after:6g} {calls_after / calls_before:6.2f}   "
                  f"{cost_before:11g} {cost_after:6g} {cost_after / cost_before:6.2f}   {writes_after:g}, {reads_after:g}")


def _measure(limit: int, case: str, *, before: bool) -> list[str]:
    """The DynamoDB calls of one take in a fresh moto, the pool prepared as `case` says."""
    from moto import mock_aws

    from bench.dynamo_calls import DynamoCalls

    with mock_aws():
        from chalicelib.base.clock import utcnow
        from chalicelib.store import listens
        from chalicelib.store.tables import create_all

        create_all()
        now = utcnow()
        until = now + timedelta(seconds=30)
        held = [] if case == "empty pool" else [listens.take("acct", limit=limit, now=now, until=until)
                                                for _ in range(limit)]
        if case == "one slot free":
            (_give_back_before if before else listens.give_back)("acct", held[limit // 2] or "")
        counter = DynamoCalls().install()
        with counter.measure() as made:
            (_before if before else listens.take)("acct", limit=limit, now=now, until=until)
    return made

if __name__ == "__main__":
    main()
