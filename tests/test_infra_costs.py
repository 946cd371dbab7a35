"""bench/costs.py prices the template as it is (its alarms' metrics, the dashboard, the key, the
functions' memory, the sweep's schedule), and the README's cost table is what it prints."""

from __future__ import annotations

import copy
from typing import Any

from bench import costs
from tests.infra import ROOT


def test_the_readme_cost_table_is_what_the_bench_prints() -> None:
    table = costs.table(costs.monthly("x86_64"), costs.monthly("arm64"))
    assert table in (ROOT / "README.md").read_text()


def test_the_estimate_follows_the_template(monkeypatch: Any) -> None:
    base = costs.monthly()
    assert base["alarm_metrics"] == 35 and base["memory_gb"] == 0.5
    # a listener: 20-s holds back to back at 0.5 GB, about $22 a month on x86_64
    assert 21 < base["listener_total"] < 24
    assert base["account_listen_bound"] == base["listener_total"] * base["max_listens_per_account"]
    # arm64's GB-second is cheaper: the listen path costs less, nothing costs more
    arm = costs.monthly("arm64")
    assert arm["listener_total"] < base["listener_total"] and arm["idle_total"] <= base["idle_total"]
    # another alarm metric shows in the idle figure
    doc = costs.template()
    more = copy.deepcopy(doc)
    more["Resources"]["Extra"] = {"Type": "AWS::CloudWatch::Alarm", "Properties": {}}
    monkeypatch.setattr(costs, "template", lambda: more)
    assert round(costs.monthly()["idle_total"] - base["idle_total"], 6) == costs.PRICES["cloudwatch_alarm_metric_month"]
