"""The stages' IAM policies come from one template (infra/policies.py): the committed files are
what it writes, and a grant added to one stage's file alone is caught."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from infra import policies


def test_every_stages_policy_is_the_templates() -> None:
    assert policies.stages() == ["dev", "prod"]
    assert policies.main(["--check"]) == 0
    for stage in policies.stages():
        assert "{stage}" not in policies.path(stage).read_text()
        assert f"workset-{stage}-agents" in policies.render(stage)


def test_a_grant_in_one_stages_file_alone_fails_the_check(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    drifted = tmp_path / "policy-prod.json"
    document = json.loads(policies.render("prod"))
    document["Statement"][0]["Action"].append("dynamodb:Scan")
    drifted.write_text(json.dumps(document, indent=2))
    monkeypatch.setattr(policies, "path", lambda stage: drifted if stage == "prod" else Path(policies.ROOT, ".chalice",
                                                                                             f"policy-{stage}.json"))
    assert policies.main(["--check"]) == 1


@pytest.mark.parametrize("stage", ["", "Prod", "dev/../x", "a" * 30, "dev\n"])
def test_a_stage_name_that_is_not_one_is_refused(stage: str) -> None:
    with pytest.raises(ValueError, match="a stage is"):
        policies.render(stage)
