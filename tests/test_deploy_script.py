"""infra/deploy.sh run for real against a fake `aws` on PATH (no AWS, no network): the paths that
need no build (--rollback, --rollback-alias) and the refusals of bad input. The fake keeps the
bucket as a folder and writes every call it gets to a log, so a test can check what was deployed,
and that a refusal made no call at all."""

from __future__ import annotations

import os
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
BUCKET = "workset-releases"
HANG_GUARD = 60.0  # seconds; a hang guard, not a speed claim

# The fake CLI: the calls deploy.sh makes on these paths, answered from $FAKE (bucket/, stacks).
FAKE_AWS = r"""#!/usr/bin/env bash
set -euo pipefail
echo "$*" >> "$FAKE/calls"
case "$1 $2" in
  "configure get") echo us-east-1 ;;
  "sts get-caller-identity") echo 123456789012 ;;
  "s3api head-bucket") ;;
  "s3 ls")
    prefix=${3#s3://}
    [ -d "$FAKE/bucket/$prefix" ] || exit 1
    for file in "$FAKE/bucket/$prefix"*; do echo "2026-12-01 10:00:00       42 $(basename "$file")"; done ;;
  "s3 cp")
    source=$4 target=$5
    [[ $source == s3://* ]] && source=$FAKE/bucket/${source#s3://}
    [[ $target == s3://* ]] && target=$FAKE/bucket/${target#s3://}
    mkdir -p "$(dirname "$target")"
    cp "$source" "$target" ;;
  "cloudformation deploy")
    while [ $# -gt 0 ]; do
      if [ "$1" = --template-file ]; then echo "deployed $(cat "$2")" >> "$FAKE/deployed"; fi
      shift
    done ;;
  "cloudformation describe-stack-resources")
    if [ ! -f "$FAKE/functions" ]; then echo "An error occurred (ValidationError): Stack does not exist" >&2; exit 254; fi
    tr '\n' '\t' < "$FAKE/functions"; echo ;;
  *) echo "fake aws: not faked: $*" >&2; exit 99 ;;
esac
"""


@dataclass
class Fake:
    home: Path

    def release(self, stage: str, name: str, content: str) -> None:
        """A release deploy.sh kept earlier: s3://BUCKET/workset-STAGE/releases/NAME."""
        path = self.home / "bucket" / BUCKET / f"workset-{stage}" / "releases" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(content)

    def run(self, *arguments: str) -> subprocess.CompletedProcess[str]:
        environment = {**os.environ, "PATH": f"{self.home / 'bin'}:{os.environ['PATH']}", "FAKE": str(self.home),
                       "AWS_DEFAULT_REGION": "us-east-1"}
        return subprocess.run(["bash", str(ROOT / "infra" / "deploy.sh"), *arguments], capture_output=True,
                              text=True, env=environment, timeout=HANG_GUARD, check=False)

    def calls(self) -> list[str]:
        log = self.home / "calls"
        return log.read_text().splitlines() if log.exists() else []

    def deployed(self) -> list[str]:
        log = self.home / "deployed"
        return [line.removeprefix("deployed ") for line in log.read_text().splitlines()] if log.exists() else []


@pytest.fixture
def fake(tmp_path: Path) -> Fake:
    (tmp_path / "bin").mkdir()
    aws = tmp_path / "bin" / "aws"
    aws.write_text(FAKE_AWS)
    aws.chmod(0o755)
    return Fake(tmp_path)


@pytest.fixture(autouse=True)
def aws() -> None:
    """Replaces conftest's fake AWS: these tests run a shell script, not the app."""


def test_a_rollback_deploys_the_release_before_the_current_one(fake: Fake) -> None:
    # GIVEN three releases deployed in turn
    for name in ("20261201T100000Z.yaml", "20261202T100000Z.yaml", "20261203T100000Z.yaml"):
        fake.release("prod", name, name.removesuffix(".yaml"))
    # WHEN the stage is rolled back
    result = fake.run("--rollback", "prod", BUCKET)
    # THEN the one before the newest is deployed
    assert result.returncode == 0, result.stderr
    assert fake.deployed() == ["20261202T100000Z"]


def test_a_second_rollback_goes_one_further_back_not_forward_again(fake: Fake) -> None:
    # GIVEN three releases, the newest bad
    for name in ("20261201T100000Z.yaml", "20261202T100000Z.yaml", "20261203T100000Z.yaml"):
        fake.release("prod", name, name.removesuffix(".yaml"))
    # WHEN the operator rolls back, and then (the one before is bad too) rolls back again
    first = fake.run("--rollback", "prod", BUCKET)
    second = fake.run("--rollback", "prod", BUCKET)
    # THEN the second goes to the release before that one, never back to the bad newest one
    assert first.returncode == 0 and second.returncode == 0, (first.stderr, second.stderr)
    assert fake.deployed() == ["20261202T100000Z", "20261201T100000Z"]
    # and a third has nothing earlier to go to
    third = fake.run("--rollback", "prod", BUCKET)
    assert third.returncode == 1 and "no earlier release" in third.stderr
    assert fake.deployed() == ["20261202T100000Z", "20261201T100000Z"]


def test_after_a_rollback_and_a_new_deploy_a_rollback_returns_to_the_rolled_back_to_release(fake: Fake) -> None:
    # GIVEN A, B, a rollback to A, then a new release C
    fake.release("prod", "20261201T100000Z.yaml", "A")
    fake.release("prod", "20261202T100000Z.yaml", "B")
    fake.release("prod", "20261202T110000Z-rollback-to-20261201T100000Z.yaml", "A")
    fake.release("prod", "20261203T100000Z.yaml", "C")
    # WHEN C is rolled back THEN A is what runs again (B was rolled back from)
    result = fake.run("--rollback", "prod", BUCKET)
    assert result.returncode == 0, result.stderr
    assert fake.deployed() == ["A"]


def test_a_rollback_alias_of_a_stage_without_a_stack_fails_and_says_so(fake: Fake) -> None:
    # GIVEN no stack of the stage (a typo in its name)
    # WHEN its aliases are rolled back
    result = fake.run("--rollback-alias", "prdo")
    # THEN it fails, and never says that it rolled anything back
    assert result.returncode != 0
    assert "settles it" not in result.stdout
    assert "workset-prdo" in result.stderr


@pytest.mark.parametrize("stage", ["Prod", "prod-", "pr--od", "-prod", "1prod", "prod x", "p" * 22, "$(touch x)",
                                   "prod;ls", ""])
@pytest.mark.parametrize("mode", [["--rollback-alias"], ["--rollback"], ["--preview"], []])
def test_a_stage_that_is_no_valid_name_is_refused_before_any_aws_call(fake: Fake, mode: list[str],
                                                                       stage: str) -> None:
    result = fake.run(*mode, stage, *([] if mode == ["--rollback-alias"] else [BUCKET]))
    assert result.returncode != 0
    assert fake.calls() == []
    assert not (ROOT / "x").exists() and not (Path.cwd() / "x").exists()


@pytest.mark.parametrize("extra", [["AlarmEmail=ops@example.com"], ["--tag", "team=ops"], ["Unknown=1"]])
def test_a_rollback_refuses_what_it_would_ignore(fake: Fake, extra: list[str]) -> None:
    # a rollback deploys an old template with the stack's current parameters and tags: an override
    # given to it would be silently dropped, which the operator would read as applied
    fake.release("prod", "20261201T100000Z.yaml", "A")
    fake.release("prod", "20261202T100000Z.yaml", "B")
    result = fake.run("--rollback", "prod", BUCKET, *extra)
    assert result.returncode == 2, result.stderr
    assert fake.deployed() == [] and fake.calls() == []
