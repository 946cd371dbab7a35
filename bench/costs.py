"""What a stage costs a month, estimated from the template's resources and stated prices.

    .venv/bin/python bench/costs.py            # the README's table (markdown)
    .venv/bin/python bench/costs.py --json     # the same figures as one JSON object

It reads infra/resources.json (alarms and the metrics each reads, the dashboard, KMS keys, log
groups, tables) and .chalice/config.json (each function's memory, the sweep's rate from app.py's
schedule), and prices three loads:

- an idle stage: what the stack costs with no traffic (the sweep every five minutes, alarms,
  the dashboard, the key, the console secret's parameter is free);
- 100 agents x 1,000 tool calls a day (3 million calls in a 30-day month);
- the listen path: one agent that always listens (20-s holds back to back), and the bound an
  account's MaxListensPerAccount puts on it.

An estimate, not a bill: prices are AWS's published us-east-1 list prices as this script states
them (PRICES, noted 2026-12-03 from the public price pages; check them for your region), free
tiers are left out, and a call's work is the measured figures of BENCHMARKS.md (DynamoDB units of
a call) or the stated assumptions below (a call's Lambda duration, which the vendor's latency
sets). Machine-independent: nothing is timed.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
MONTH_HOURS = 730
MONTH_DAYS = 30

# us-east-1 list prices, USD (noted 2026-12-03; free tiers left out).
PRICES = {
    "lambda_gb_second_x86_64": 0.0000166667,
    "lambda_gb_second_arm64": 0.0000133334,
    "lambda_request": 0.20 / 1e6,
    "api_gateway_rest_request": 3.50 / 1e6,  # first 333 million a month
    "dynamodb_write_request_unit": 0.625 / 1e6,  # on-demand
    "dynamodb_read_request_unit": 0.125 / 1e6,
    "cloudwatch_alarm_metric_month": 0.10,  # standard resolution, per metric an alarm reads
    "cloudwatch_dashboard_month": 3.00,  # past the account's first three
    "cloudwatch_logs_ingested_gb": 0.50,
    "kms_key_month": 1.00,
    "sqs_request": 0.40 / 1e6,
}

# A tool call (tools/call of a promoted tool, small result): DynamoDB units measured
# (BENCHMARKS.md, "DynamoDB write units per operation", rerun 2026-12-01: 16 write units; reads:
# the Query that authenticates, the state's reads and the lease's check, 6 read units); the
# Lambda time is an assumption: 300 ms (the vendor's answer dominates it), at the function's memory.
CALL = {"write_units": 16, "read_units": 6, "seconds": 0.3, "log_bytes": 1200}
# The sweep when nothing is due: a few index queries (3 x SHARDS, chalicelib/store/models.py) in
# about a second.
SWEEP = {"read_units": 12, "seconds": 1.0, "log_bytes": 600}
# An idle listen (tests/test_deploy.py): 6 strongly consistent reads, the Query that
# authenticates, 2 slot writes; held WORKSET_LISTEN_HOLD_SECONDS (20 s).
LISTEN = {"read_units": 7, "write_units": 2, "seconds": 20.0, "log_bytes": 600}


def template() -> dict[str, Any]:
    return json.loads((ROOT / "infra" / "resources.json").read_text())


def memory_gb(function: str = "api_handler") -> float:
    """A function's memory, as .chalice/config.json sets it (its own setting over the top level)."""
    config = json.loads((ROOT / ".chalice" / "config.json").read_text())
    own = config.get("lambda_functions", {}).get(function, {})
    return float(own.get("lambda_memory_size", config["lambda_memory_size"])) / 1024


def sweeps_a_month() -> float:
    """The scheduled sweep's runs a month, from app.py's `Rate(N, unit=Rate.MINUTES)`."""
    found = re.search(r"Rate\((\d+), unit=Rate\.MINUTES\)", (ROOT / "app.py").read_text())
    assert found, "app.py's sweep schedule"
    return MONTH_HOURS * 60 / int(found.group(1))


def alarm_metrics(doc: dict[str, Any]) -> int:
    """Metrics the alarms read: CloudWatch bills each (a metric-math alarm, each metric it reads)."""
    return sum(len([m for m in r["Properties"].get("Metrics", []) if "MetricStat" in m]) or 1
               for r in doc["Resources"].values() if r.get("Type") == "AWS::CloudWatch::Alarm")


def count(doc: dict[str, Any], kind: str) -> int:
    return sum(1 for r in doc["Resources"].values() if r.get("Type") == kind)


def invocation_cost(seconds: float, gb: float, architecture: str) -> float:
    return seconds * gb * PRICES[f"lambda_gb_second_{architecture}"] + PRICES["lambda_request"]


def monthly(architecture: str = "x86_64") -> dict[str, Any]:
    """The three loads' monthly figures, itemised."""
    doc = template()
    gb = memory_gb()
    idle = {
        "alarms": alarm_metrics(doc) * PRICES["cloudwatch_alarm_metric_month"],
        "dashboard": count(doc, "AWS::CloudWatch::Dashboard") * PRICES["cloudwatch_dashboard_month"],
        "kms keys": count(doc, "AWS::KMS::Key") * PRICES["kms_key_month"],
        "sweep": sweeps_a_month() * (invocation_cost(SWEEP["seconds"], gb, architecture)
                                     + SWEEP["read_units"] * PRICES["dynamodb_read_request_unit"]
                                     + SWEEP["log_bytes"] / 1e9 * PRICES["cloudwatch_logs_ingested_gb"]),
    }
    calls = 100 * 1000 * MONTH_DAYS
    per_call = {
        "api gateway": PRICES["api_gateway_rest_request"],
        "lambda": invocation_cost(CALL["seconds"], gb, architecture),
        "dynamodb": CALL["write_units"] * PRICES["dynamodb_write_request_unit"]
        + CALL["read_units"] * PRICES["dynamodb_read_request_unit"],
        "logs": CALL["log_bytes"] / 1e9 * PRICES["cloudwatch_logs_ingested_gb"],
    }
    listens = MONTH_HOURS * 3600 / LISTEN["seconds"]  # back to back
    per_listen = {
        "api gateway": PRICES["api_gateway_rest_request"],
        "lambda": invocation_cost(LISTEN["seconds"], gb, architecture),
        "dynamodb": LISTEN["write_units"] * PRICES["dynamodb_write_request_unit"]
        + LISTEN["read_units"] * PRICES["dynamodb_read_request_unit"],
        "logs": LISTEN["log_bytes"] / 1e9 * PRICES["cloudwatch_logs_ingested_gb"],
    }
    max_listens = int(doc["Parameters"]["MaxListensPerAccount"]["Default"])
    listener = {k: v * listens for k, v in per_listen.items()}
    return {
        "architecture": architecture,
        "memory_gb": gb,
        "alarm_metrics": alarm_metrics(doc),
        "idle": idle, "idle_total": sum(idle.values()),
        "calls": calls, "calls_items": {k: v * calls for k, v in per_call.items()},
        "calls_total": sum(per_call.values()) * calls,
        "listener_items": listener, "listener_total": sum(listener.values()),
        "listens_a_month": listens,
        "max_listens_per_account": max_listens,
        "account_listen_bound": sum(listener.values()) * max_listens,
    }


def table(x86: dict[str, Any], arm: dict[str, Any]) -> str:
    def money(value: float) -> str:
        return f"${value:,.2f}"

    rows = [
        ("idle stage (alarms: {} metrics; dashboard; KMS key; the sweep every 5 min)".format(x86["alarm_metrics"]),
         x86["idle_total"], arm["idle_total"]),
        ("100 agents x 1,000 calls a day ({:,} calls: API Gateway {}, Lambda {}, DynamoDB {}, logs {})".format(
            x86["calls"], *(money(x86["calls_items"][k]) for k in ("api gateway", "lambda", "dynamodb", "logs"))),
         x86["calls_total"], arm["calls_total"]),
        ("one agent always listening ({:,.0f} held 20-s listens: Lambda {})".format(
            x86["listens_a_month"], money(x86["listener_items"]["lambda"])), x86["listener_total"], arm["listener_total"]),
        ("an account at MaxListensPerAccount ({}) listeners, the most it can hold".format(x86["max_listens_per_account"]),
         x86["account_listen_bound"], arm["account_listen_bound"]),
    ]
    lines = ["| load (a 30-day month) | x86_64 | arm64 |", "|---|---:|---:|"]
    lines += [f"| {what} | {money(a)} | {money(b)} |" for what, a, b in rows]
    return "\n".join(lines)


def main(arguments: list[str]) -> int:
    x86, arm = monthly("x86_64"), monthly("arm64")
    if arguments == ["--json"]:
        print(json.dumps({"prices": PRICES, "x86_64": x86, "arm64": arm}, indent=2))
    else:
        print(table(x86, arm))
        print(f"\nprices: {PRICES}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
