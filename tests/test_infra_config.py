"""Each stage of `.chalice/config.json`, and the settings its function will see from it."""

from __future__ import annotations

import pytest

from tests.infra import API_GATEWAY_LIMIT_SECONDS, deployed_settings, stage_config, stages


@pytest.mark.parametrize("stage", stages())
def test_stage_configuration(stage: str) -> None:
    config = stage_config(stage)
    environment = config.environment_variables
    assert config.app_name == "workset"
    assert environment["WORKSET_STAGE"] == stage
    assert environment["WORKSET_TABLE_PREFIX"] == f"workset-{stage}"
    # the stack writes the public URL to /workset/<stage>/public-url (tests/test_deploy.py), which
    # the function reads where WORKSET_PUBLIC_URL is unset; the console secret likewise
    assert "WORKSET_PUBLIC_URL" not in environment and "WORKSET_CONSOLE_SECRET" not in environment
    # Chalice makes no role: infra/resources.json gives each function its own (<function>Role),
    # and its overlays point the functions at them (tests/test_infra_roles.py)
    assert config.manage_iam_role is False
    assert config.iam_role_arn.endswith(":role/set-by-infra-resources-json")

    # The settings the function will see: the stage's environment and the app's own defaults.
    deployed = deployed_settings(stage)
    assert deployed.stage == stage
    assert deployed.table_prefix == f"workset-{stage}"
    # the template's alias (alias/workset-<Stage>) and the policy's condition name this key
    assert deployed.kms_key_id == f"alias/workset-{stage}"
    # the template's queue (workset-<Stage>-sweep) and the policy's grants name this queue
    assert deployed.sweep_queue == f"workset-{stage}-sweep"
    assert deployed.webhook_queue == f"workset-{stage}-webhooks"
    # One vendor call may take a connect and a read timeout; API Gateway gives up at 29 s, so the
    # function must stop first (otherwise it runs on, billed, after the client got a 504).
    assert 2 * deployed.vendor_timeout_seconds <= config.lambda_timeout < API_GATEWAY_LIMIT_SECONDS
    # The search model alone takes the process to ~130 MB (measured); 128 MB (the default) fails.
    assert config.lambda_memory_size >= 512
