"""What the stack keeps, and for how long: a history event expires HistoryRetentionDays after it
happened (400 by default: a yearly audit), through DynamoDB's TTL on the history table, which the
functions are told through WORKSET_HISTORY_RETENTION_DAYS; AWS Backup copies every table daily
when Backups is Daily (optionally to another vault), with point-in-time recovery always on.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from chalicelib.base import config as app_config
from chalicelib.base.clock import utcnow
from chalicelib.store import history
from chalicelib.store.records import HistoryEvent
from tests.infra import CHALICE_FUNCTIONS, evaluate, settings_under, template


def test_history_expires_after_the_retention_parameter() -> None:
    doc = template()
    parameter = doc["Parameters"]["HistoryRetentionDays"]
    assert parameter["Default"] == 400 and parameter["MinValue"] >= 1
    properties = doc["Resources"]["HistoryTable"]["Properties"]
    assert properties["TimeToLiveSpecification"] == {"AttributeName": "ttl", "Enabled": True}
    for function in CHALICE_FUNCTIONS:
        variables = doc["Resources"][function]["Properties"]["Environment"]["Variables"]
        assert variables["WORKSET_HISTORY_RETENTION_DAYS"] == {"Ref": "HistoryRetentionDays"}, function
    assert settings_under({"WORKSET_HISTORY_RETENTION_DAYS": "30"}).history_retention_days == 30
    assert settings_under({}).history_retention_days == 400


@pytest.mark.parametrize("days", [400, 30])
def test_a_history_event_carries_its_expiry(days: int, settings_env: Any) -> None:
    settings_env(WORKSET_HISTORY_RETENTION_DAYS=str(days))
    at = utcnow()
    event = HistoryEvent(vendor="shop", name="a", action="promote", cause="agent", actor="agent", at=at)
    item = history.new_item("agent-1", event)
    # the attribute the table's TTL names, as DynamoDB reads it: epoch seconds
    assert item.ttl == (at + timedelta(days=days)).replace(microsecond=0)  # TTLAttribute keeps whole seconds
    assert item.serialize()["ttl"] == {"N": str(int((at + timedelta(days=days)).timestamp()))}
    assert app_config.settings().history_retention_days == days


@pytest.mark.parametrize("days", [400, 30])
def test_every_kind_of_history_event_is_stored_with_its_expiry(days: int, settings_env: Any) -> None:
    # issue 27 (a retention parameter, 400 days by default) over SPEC's "never deleted": a decision on
    # a run and a person's policy change expire as promotions do, counted from when they happened
    from chalicelib.store import policies
    from chalicelib.store.models import HistoryItem, policy_partition
    from chalicelib.store.records import Run

    settings_env(WORKSET_HISTORY_RETENTION_DAYS=str(days))
    at = utcnow()
    run = Run(run_id="r1", agent_id="agent-1", account_id="acct", vendor="shop", name="a", version=1, input={},
              status="awaiting_approval", created_at=at, updated_at=at, lease_expires_at=at)
    decision = history.decision_item(run, history.APPROVED, "admin", at)
    assert decision.serialize()["ttl"] == {"N": str(int((at + timedelta(days=days)).timestamp()))}
    policies.put("acct", "shop", "a", "every_call", "admin", at)
    [stored] = HistoryItem.query(policy_partition("acct"))
    assert stored.ttl == (at + timedelta(days=days)).replace(microsecond=0)


def test_daily_backups_of_every_table_are_an_option() -> None:
    doc = template()
    resources = doc["Resources"]
    assert doc["Parameters"]["Backups"]["Default"] == "None"
    for logical_id in ("BackupVault", "BackupPlan", "BackupSelection", "BackupRole"):
        assert resources[logical_id]["Condition"] == "BacksUp", logical_id
    tables = sorted(i for i, r in resources.items() if r.get("Type") == "AWS::DynamoDB::Table")
    selected = resources["BackupSelection"]["Properties"]["BackupSelection"]["Resources"]
    assert sorted(r["Fn::GetAtt"][0] for r in selected) == tables
    rule = resources["BackupPlan"]["Properties"]["BackupPlan"]["BackupPlanRule"][0]
    assert rule["Lifecycle"] == {"DeleteAfterDays": {"Ref": "BackupRetentionDays"}}
    copied = evaluate(rule, {"BackupCopyVaultArn": "arn:aws:backup:eu-west-1:123456789012:backup-vault:dr",
                             "BackupRetentionDays": 35}, {"CopiesBackups": True})
    assert copied["CopyActions"][0]["DestinationBackupVaultArn"].endswith(":backup-vault:dr")
    assert "CopyActions" not in evaluate(rule, {"BackupRetentionDays": 35})
    # point-in-time recovery stays on whatever the option
    for table in tables:
        assert resources[table]["Properties"]["PointInTimeRecoverySpecification"] == {
            "PointInTimeRecoveryEnabled": True}, table
