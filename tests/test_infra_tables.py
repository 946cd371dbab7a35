"""The tables of `infra/resources.json` against the tables the pynamodb models really create
(created under moto by conftest's `create_all`, then described): names, keys, attribute types,
indexes and projections must match exactly; and each table is on demand, recoverable to a point
in time, protected from deletion and retained with the stack.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import pytest

from chalicelib.store.models import TABLES
from tests.infra import declared_tables, model_tables, stages, template, template_tables


@pytest.mark.parametrize("stage", stages())
def test_template_tables_match_the_models(stage: str) -> None:
    assert declared_tables(template(), stage) == model_tables()


def _table(doc: dict[str, Any], suffix: str) -> dict[str, Any]:
    return next(r for r in template_tables(doc).values()
                if r["Properties"]["TableName"]["Fn::Sub"].endswith(f"-{suffix}"))


def _agents(doc: dict[str, Any]) -> dict[str, Any]:
    return _table(doc, "agents")


def _drop_history(doc: dict[str, Any]) -> None:
    del doc["Resources"]["HistoryTable"]


def _number_key(doc: dict[str, Any]) -> None:
    _agents(doc)["Properties"]["AttributeDefinitions"][1]["AttributeType"] = "N"


def _keys_only(doc: dict[str, Any]) -> None:
    _agents(doc)["Properties"]["GlobalSecondaryIndexes"][0]["Projection"] = {"ProjectionType": "KEYS_ONLY"}


def _rename_index(doc: dict[str, Any]) -> None:
    _agents(doc)["Properties"]["GlobalSecondaryIndexes"][0]["IndexName"] = "by-account"


def _no_range_key(doc: dict[str, Any]) -> None:
    _agents(doc)["Properties"]["KeySchema"].pop()


def _swap_keys(doc: dict[str, Any]) -> None:
    for key in _agents(doc)["Properties"]["KeySchema"]:
        key["KeyType"] = {"HASH": "RANGE", "RANGE": "HASH"}[key["KeyType"]]


def _misname(doc: dict[str, Any]) -> None:
    doc["Resources"]["ToolsTable"]["Properties"]["TableName"] = {"Fn::Sub": "workset-${Stage}-tool"}


def _drop_index(doc: dict[str, Any], suffix: str, index: str, attribute: str) -> None:
    """The index gone, and the attribute only it keyed (as one would write it by hand)."""
    properties = _table(doc, suffix)["Properties"]
    properties["GlobalSecondaryIndexes"] = [i for i in properties["GlobalSecondaryIndexes"] if i["IndexName"] != index]
    properties["AttributeDefinitions"] = [a for a in properties["AttributeDefinitions"]
                                          if a["AttributeName"] != attribute]


def _runs_without_pending_index(doc: dict[str, Any]) -> None:
    _drop_index(doc, "runs", "pending_by_account", "pending_account_id")


def _agents_without_review_index(doc: dict[str, Any]) -> None:
    _drop_index(doc, "agents", "to_review", "review_shard")


def _agents_without_outbox_index(doc: dict[str, Any]) -> None:
    _drop_index(doc, "agents", "outbox", "outbox_shard")


def _outbox_index_keys_only(doc: dict[str, Any]) -> None:
    (index,) = (i for i in _agents(doc)["Properties"]["GlobalSecondaryIndexes"] if i["IndexName"] == "outbox")
    index["Projection"] = {"ProjectionType": "KEYS_ONLY"}


def _runs_index_on_run_id(doc: dict[str, Any]) -> None:
    index = _table(doc, "runs")["Properties"]["GlobalSecondaryIndexes"][0]
    index["KeySchema"][0]["AttributeName"] = "run_id"


def _connections_without_range_key(doc: dict[str, Any]) -> None:
    _table(doc, "connections")["Properties"]["KeySchema"].pop()


def _drop_connections(doc: dict[str, Any]) -> None:
    del doc["Resources"]["ConnectionsTable"]


def _extra_table(doc: dict[str, Any]) -> None:
    doc["Resources"]["SpareTable"] = copy.deepcopy(doc["Resources"]["ToolsTable"])
    doc["Resources"]["SpareTable"]["Properties"]["TableName"] = {"Fn::Sub": "workset-${Stage}-spare"}


@pytest.mark.parametrize(
    "break_it",
    [_drop_history, _number_key, _keys_only, _rename_index, _no_range_key, _swap_keys, _misname, _extra_table,
     _runs_without_pending_index, _agents_without_review_index, _agents_without_outbox_index,
     _outbox_index_keys_only, _runs_index_on_run_id, _connections_without_range_key, _drop_connections],
)
def test_a_broken_table_definition_fails_the_comparison(break_it: Callable[[dict[str, Any]], None]) -> None:
    broken = template()
    break_it(broken)
    assert declared_tables(broken, "dev") != model_tables()


def test_tables_are_on_demand_recoverable_and_retained() -> None:
    tables = template_tables(template())
    assert len(tables) == len(TABLES)
    for logical_id, resource in tables.items():
        properties = resource["Properties"]
        assert resource.get("DeletionPolicy") == "Retain", logical_id
        assert resource.get("UpdateReplacePolicy") == "Retain", logical_id
        assert properties.get("BillingMode") == "PAY_PER_REQUEST", logical_id
        assert "ProvisionedThroughput" not in properties, logical_id
        assert all("ProvisionedThroughput" not in index for index in properties.get("GlobalSecondaryIndexes", []))
        assert properties.get("PointInTimeRecoverySpecification") == {"PointInTimeRecoveryEnabled": True}, logical_id
        assert properties.get("DeletionProtectionEnabled") is True, logical_id
