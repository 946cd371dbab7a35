"""The alarms an on-call person keeps, and the dashboard (infra/resources.json).

Each alarm says something is wrong with the service itself, past a threshold the operator sets
(template parameters), notifies the alarm topic, and notifies again when it clears:
- a dead-letter queue holding anything, a queue's oldest message older than AlarmQueueAgeSeconds;
- each function's errors past AlarmFunctionErrors in five minutes; throttled invocations of any;
- the API's 5xx *rate* past AlarmApiErrorRatePercent for fifteen minutes (a vendor's failures are
  a tool result on /mcp, not a 5xx; one failing vendor on /v1 cannot page alone), its p99 latency,
  APIHandler's concurrency (held listens count);
- all tables' throttle events together past AlarmTableThrottleEvents;
- vendor failures as a *rate* (VendorFailures / VendorCalls, the app's EMF metrics by stage), past
  AlarmVendorFailureRatePercent for AlarmVendorFailurePeriods periods of at least AlarmVendorMinCalls
  calls: apart from the service's own 5xx (tests/test_infra_vendor_metrics.py: the metrics' lines);
- the app's own failures left for later (SweepFailures, RunEndsUnrecorded) and leaked OAuth tokens.
The alarms read at most 40 metrics (CloudWatch bills each: bench/costs.py).
"""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Callable
from typing import Any

import pytest

from chalicelib.base import log
from tests.infra import CHALICE_FUNCTIONS, QUEUES, template

TOPIC = {"Fn::If": ["MakesAlarmTopic", {"Ref": "AlarmTopic"}, {"Ref": "AlarmTopicArn"}]}
API = [{"Name": "ApiName", "Value": {"Fn::Sub": "workset-${Stage}"}}, {"Name": "Stage", "Value": "api"}]
APP_METRICS = ("SweepFailures", "RunEndsUnrecorded", "OAuthReplays")
MAX_ALARM_METRICS = 40


def single(namespace: str, metric: str, dimensions: list[dict[str, Any]], statistic: str, threshold: Any,
           periods: int = 1) -> dict[str, Any]:
    """What a single-metric alarm's properties must hold."""
    shape = {"Namespace": namespace, "MetricName": metric, "Dimensions": dimensions, "Period": 300,
             "ComparisonOperator": "GreaterThanThreshold", "Threshold": threshold, "EvaluationPeriods": periods}
    return shape | ({"ExtendedStatistic": statistic} if statistic.startswith("p") else {"Statistic": statistic})


def expected_alarms(doc: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Each alarm's logical id -> the properties it must have (single-metric alarms), or
    {"sums": [(namespace, metric, dimensions)...], "threshold": ...} for a sum of metrics."""
    wanted: dict[str, dict[str, Any]] = {}
    for queue in QUEUES:
        wanted[f"{queue.dead_letter_id}Alarm"] = single("AWS/SQS", "ApproximateNumberOfMessagesVisible", [
            {"Name": "QueueName", "Value": {"Fn::GetAtt": [queue.dead_letter_id, "QueueName"]}}], "Maximum", 0)
        wanted[f"{queue.logical_id}AgeAlarm"] = single("AWS/SQS", "ApproximateAgeOfOldestMessage", [
            {"Name": "QueueName", "Value": {"Fn::GetAtt": [queue.logical_id, "QueueName"]}}], "Maximum",
            {"Ref": "AlarmQueueAgeSeconds"})
    for function in CHALICE_FUNCTIONS:
        wanted[f"{function}ErrorsAlarm"] = single("AWS/Lambda", "Errors", [
            {"Name": "FunctionName", "Value": {"Ref": function}}], "Sum", {"Ref": "AlarmFunctionErrors"})
    wanted["FunctionThrottlesAlarm"] = {"sums": sorted(
        ("AWS/Lambda", "Throttles", json.dumps([{"Name": "FunctionName", "Value": {"Ref": f}}])) for f in CHALICE_FUNCTIONS),
        "threshold": 0, "periods": 1}
    wanted["ApiLatencyAlarm"] = single("AWS/ApiGateway", "Latency", API, "p99", {"Ref": "AlarmLatencyP99Ms"}, 3)
    wanted["ApiConcurrencyAlarm"] = single("AWS/Lambda", "ConcurrentExecutions", [
        {"Name": "FunctionName", "Value": {"Ref": "APIHandler"}}], "Maximum", {"Ref": "AlarmConcurrentExecutions"}, 2)
    tables = [i for i, r in doc["Resources"].items() if r.get("Type") == "AWS::DynamoDB::Table"]
    wanted["TablesThrottledAlarm"] = {"sums": sorted(
        ("AWS/DynamoDB", metric, json.dumps([{"Name": "TableName", "Value": {"Ref": table}}]))
        for table in tables for metric in ("ReadThrottleEvents", "WriteThrottleEvents")),
        "threshold": {"Ref": "AlarmTableThrottleEvents"}, "periods": 2}
    for metric in APP_METRICS:
        wanted[f"{metric}Alarm"] = single(log.NAMESPACE, metric, [{"Name": "stage", "Value": {"Ref": "Stage"}}], "Sum", 0)
    return wanted


def api_error_rate_problems(properties: dict[str, Any]) -> list[str]:
    """The 5xx alarm is a rate: 100 x 5XXError / Count of the stage's API, past the parameter."""
    metrics = {m["Id"]: m for m in properties.get("Metrics", [])}
    stat = {i: (m["MetricStat"]["Metric"]["MetricName"], m["MetricStat"]["Metric"]["Dimensions"], m["MetricStat"]["Stat"])
            for i, m in metrics.items() if "MetricStat" in m}
    problems = []
    if sorted(stat.values(), key=str) != sorted([("5XXError", API, "Sum"), ("Count", API, "Sum")], key=str):
        problems.append(f"the 5xx alarm reads {stat}")
    returned = [m for m in metrics.values() if m.get("ReturnData", True)]
    names = {v[0]: k for k, v in stat.items()}
    if len(returned) != 1 or re.sub(r"\s", "", returned[0].get("Expression", "")) != (
            f"IF({names.get('Count')}>=20,100*{names.get('5XXError')}/{names.get('Count')},0)"):
        problems.append(f"the 5xx alarm is not the rate of 5xx among at least 20 requests: {returned}")
    if (properties.get("Threshold"), properties.get("EvaluationPeriods"), properties.get("DatapointsToAlarm")) != (
            {"Ref": "AlarmApiErrorRatePercent"}, 3, 3):
        problems.append("the 5xx alarm is not past AlarmApiErrorRatePercent for three periods running")
    return problems


def vendor_rate_problems(properties: dict[str, Any]) -> list[str]:
    """The vendor alarm is a rate: 100 x VendorFailures / VendorCalls of the stage, among at least
    AlarmVendorMinCalls calls, past AlarmVendorFailureRatePercent for AlarmVendorFailurePeriods."""
    stage = [{"Name": "stage", "Value": {"Ref": "Stage"}}]
    metrics = {m["Id"]: m for m in properties.get("Metrics", [])}
    stat = {i: (m["MetricStat"]["Metric"]["Namespace"], m["MetricStat"]["Metric"]["MetricName"],
                m["MetricStat"]["Metric"]["Dimensions"], m["MetricStat"]["Stat"], m["MetricStat"]["Period"])
            for i, m in metrics.items() if "MetricStat" in m}
    problems = []
    if sorted(stat.values(), key=str) != sorted([(log.NAMESPACE, "VendorFailures", stage, "Sum", 300),
                                                 (log.NAMESPACE, "VendorCalls", stage, "Sum", 300)], key=str):
        problems.append(f"the vendor alarm reads {stat}")
    names = {v[1]: k for k, v in stat.items()}
    returned = [m for m in metrics.values() if m.get("ReturnData", True)]
    expression = returned[0].get("Expression") if len(returned) == 1 else None
    text = expression.get("Fn::Sub") if isinstance(expression, dict) else None
    if not isinstance(text, str) or re.sub(r"\s", "", text) != (
            f"IF({names.get('VendorCalls')}>=${{AlarmVendorMinCalls}},"
            f"100*{names.get('VendorFailures')}/{names.get('VendorCalls')},0)"):
        problems.append(f"the vendor alarm is not the failure rate among AlarmVendorMinCalls calls: {returned}")
    periods = {"Ref": "AlarmVendorFailurePeriods"}
    if (properties.get("Threshold"), properties.get("EvaluationPeriods"), properties.get("DatapointsToAlarm")) != (
            {"Ref": "AlarmVendorFailureRatePercent"}, periods, periods):
        problems.append("the vendor alarm is not past AlarmVendorFailureRatePercent for AlarmVendorFailurePeriods")
    return problems


def alarm_problems(doc: dict[str, Any]) -> list[str]:
    """What is wrong with the template's alarms (nothing: [])."""
    alarms = {i: r["Properties"] for i, r in doc["Resources"].items() if r.get("Type") == "AWS::CloudWatch::Alarm"}
    wanted = expected_alarms(doc) | {"ApiServerErrorsAlarm": {}, "VendorFailureRateAlarm": {}}
    problems = [f"unexpected alarm {i}" for i in sorted(set(alarms) - set(wanted))]
    problems += [f"missing alarm {i}" for i in sorted(set(wanted) - set(alarms))]
    parameters = doc["Parameters"]
    for logical_id, properties in alarms.items():
        if (properties.get("AlarmActions"), properties.get("OKActions"), properties.get("TreatMissingData")) != (
                [TOPIC], [TOPIC], "notBreaching"):
            problems.append(f"{logical_id} does not notify the topic (and again when it clears)")
        threshold = properties.get("Threshold")
        if isinstance(threshold, dict) and threshold.get("Ref") not in parameters:
            problems.append(f"{logical_id}: its threshold is no parameter")
        want = wanted.get(logical_id)
        if want is None:
            continue
        if logical_id == "ApiServerErrorsAlarm":
            problems += api_error_rate_problems(properties)
        elif logical_id == "VendorFailureRateAlarm":
            problems += vendor_rate_problems(properties)
        elif "sums" in want:
            stats = [m for m in properties.get("Metrics", []) if "MetricStat" in m]
            read = sorted((m["MetricStat"]["Metric"]["Namespace"], m["MetricStat"]["Metric"]["MetricName"],
                           json.dumps(m["MetricStat"]["Metric"]["Dimensions"])) for m in stats)
            returned = [m for m in properties.get("Metrics", []) if m.get("ReturnData", True)]
            summed = re.fullmatch(r"SUM\(\[(.*)\]\)", returned[0].get("Expression", "")) if len(returned) == 1 else None
            if read != want["sums"] or summed is None or set(summed.group(1).split(",")) != {m["Id"] for m in stats}:
                problems.append(f"{logical_id} does not sum {want['sums']}")
            if (threshold, properties.get("EvaluationPeriods")) != (want["threshold"], want["periods"]):
                problems.append(f"{logical_id}: threshold {threshold} over {properties.get('EvaluationPeriods')}")
        else:
            shape = {key: properties.get(key) for key in want}
            if shape != want:
                problems.append(f"{logical_id}: {shape} is not {want}")
    return problems


def alarm_metrics(doc: dict[str, Any]) -> int:
    """How many metrics the alarms read (what CloudWatch bills per alarm)."""
    return sum(len([m for m in r["Properties"].get("Metrics", []) if "MetricStat" in m]) or 1
               for r in doc["Resources"].values() if r.get("Type") == "AWS::CloudWatch::Alarm")


def test_the_alarms_are_the_ones_an_on_call_person_keeps() -> None:
    assert alarm_problems(template()) == []
    assert alarm_metrics(template()) <= MAX_ALARM_METRICS


def test_every_threshold_parameter_has_a_default_and_a_range() -> None:
    for name, parameter in template()["Parameters"].items():
        if name.startswith("Alarm") and parameter["Type"] == "Number":
            assert parameter["MinValue"] <= parameter["Default"] <= parameter["MaxValue"], name


def _props(logical_id: str) -> Callable[[dict[str, Any]], dict[str, Any]]:
    return lambda doc: doc["Resources"][logical_id]["Properties"]


@pytest.mark.parametrize("break_it", [
    lambda doc: doc["Resources"].pop("SweepDeadLetterQueueAlarm"),
    lambda doc: doc["Resources"].pop("WebhookQueueAgeAlarm"),
    lambda doc: _props("ApiServerErrorsAlarm")(doc).update(Threshold=0),
    lambda doc: _props("ApiServerErrorsAlarm")(doc)["Metrics"][2].update(Expression="errors"),
    lambda doc: _props("ApiLatencyAlarm")(doc).update(ExtendedStatistic="p50"),
    lambda doc: doc["Resources"].pop("VendorFailureRateAlarm"),
    lambda doc: _props("VendorFailureRateAlarm")(doc)["Metrics"][2].update(Expression="failures"),
    lambda doc: _props("VendorFailureRateAlarm")(doc)["Metrics"][0]["MetricStat"]["Metric"].update(
        MetricName="McpErrors"),
    lambda doc: _props("VendorFailureRateAlarm")(doc).update(EvaluationPeriods=1),
    lambda doc: _props("SweepErrorsAlarm")(doc).update(Threshold=0),
    lambda doc: _props("SweepErrorsAlarm")(doc)["Dimensions"][0].update(Value={"Ref": "SweepWorker"}),
    lambda doc: _props("TablesThrottledAlarm")(doc)["Metrics"].pop(0),
    lambda doc: _props("FunctionThrottlesAlarm")(doc)["Metrics"][-1].update(Expression="SUM([t0,t1])"),
    lambda doc: _props("OAuthReplaysAlarm")(doc).update(OKActions=[]),
    lambda doc: _props("ApiConcurrencyAlarm")(doc).update(Threshold={"Ref": "Nowhere"}),
    lambda doc: doc["Resources"].update(Extra={"Type": "AWS::CloudWatch::Alarm", "Properties": {}}),
])
def test_a_broken_alarm_fails_the_check(break_it: Callable[[dict[str, Any]], Any]) -> None:
    broken = copy.deepcopy(template())
    break_it(broken)
    assert alarm_problems(broken) != []


def test_the_dashboard_shows_the_products_own_figures() -> None:
    dashboard = template()["Resources"]["Dashboard"]
    assert dashboard["Type"] == "AWS::CloudWatch::Dashboard"
    body = json.loads(dashboard["Properties"]["DashboardBody"]["Fn::Sub"])
    shown = set()
    for widget in body["widgets"]:
        previous: list[Any] = []
        for row in widget["properties"].get("metrics", []):  # a log widget queries lines instead
            names = [item for item in row if isinstance(item, str)]
            if not names:  # an expression (SEARCH over a metric's dimensions)
                shown |= {(log.NAMESPACE, name) for name in re.findall(r'MetricName="(\w+)"', row[0]["expression"])}
                continue
            if names and names[0] == "...":  # the previous row's metric, other dimension values
                names = previous[:2]
            names = [previous[i] if name == "." else name for i, name in enumerate(names)]
            shown.add((names[0], names[1]))
            previous = names
    for metric in ("McpCalls", "RunsAwaitingApproval", "SweepDemotions", "SweepFailures", "VendorLatency",
                   "VendorCalls", "VendorFailures"):
        assert (log.NAMESPACE, metric) in shown, metric
    assert ("AWS/ApiGateway", "Latency") in shown and ("AWS/SQS", "ApproximateAgeOfOldestMessage") in shown
    # every ${...} is a parameter, a pseudo parameter or a resource of the template
    names = set(template()["Parameters"]) | set(template()["Resources"]) | {"AWS::Region"}
    assert set(re.findall(r"\$\{([^}]+)\}", dashboard["Properties"]["DashboardBody"]["Fn::Sub"])) <= names
    assert (log.NAMESPACE, "McpErrors") in shown


def test_the_dashboard_shows_vendor_failures_per_vendor_from_the_run_lines() -> None:
    # GIVEN the dashboard: the metrics count vendor calls by stage alone (runs.vendor_metrics: no
    # series per vendor name an account writes)
    body = json.loads(template()["Resources"]["Dashboard"]["Properties"]["DashboardBody"]["Fn::Sub"])
    expressions = [row[0]["expression"] for widget in body["widgets"]
                   for row in widget["properties"].get("metrics", []) if isinstance(row[0], dict)]
    assert not any("vendor" in expression for expression in expressions)
    # THEN a table sums the run lines' VendorCalls and VendorFailures by vendor, in APIHandler's
    # log group (where runs are logged)
    [table] = [widget for widget in body["widgets"] if widget["type"] == "log"]
    query = table["properties"]["query"]
    assert query.startswith("SOURCE '/aws/lambda/${APIHandler}' |")
    assert 'kind = "run"' in query and "sum(VendorCalls)" in query and "sum(VendorFailures)" in query
    assert re.search(r"by [\w, ]*\bvendor\b", query)
