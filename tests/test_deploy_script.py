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
    if [[ " $* " == *" --no-execute-changeset "* ]]; then cat "$FAKE/change-set-answer"; exit 0; fi
    request=$*
    while [ $# -gt 0 ]; do
      if [ "$1" = --template-file ]; then template=$(cat "$2"); fi
      shift
    done
    # as the CLI does with --no-fail-on-empty-changeset: the same template, parameters and tags
    # again are an empty change set, said so, exit 0
    if [ -f "$FAKE/deployed" ] && [ "$(tail -1 "$FAKE/deployed")" = "deployed $template" ] &&
       [ "$(cat "$FAKE/last-request")" = "$request" ]; then
      printf '\nWaiting for changeset to be created..\n\nNo changes to deploy. Stack workset-prod is up to date\n'
    else
      echo "deployed $template" >> "$FAKE/deployed"
      echo "$request" > "$FAKE/last-request"
      printf '\nWaiting for stack create/update to complete\nSuccessfully created/updated stack - workset-prod\n'
    fi ;;
  "apigateway get-account") echo "arn:aws:iam::123456789012:role/api-gateway-logs" ;;
  "ssm describe-parameters") echo SecureString ;;
  "cloudformation describe-stacks")
    if [ ! -f "$FAKE/deployed" ]; then echo "Stack with id workset-x does not exist" >&2; exit 254; fi
    echo "Outputs" ;;
  "cloudformation describe-stack-resource") echo "APIHandlerLogGroup" ;;
  "cloudformation package")
    while [ $# -gt 0 ]; do
      case $1 in --template-file) from=$2 ;; --output-template-file) to=$2 ;; esac
      shift
    done
    cp "$from" "$to" ;;
  "cloudformation list-change-sets") echo "arn:aws:cloudformation:us-east-1:123456789012:changeSet/someone-elses/1" ;;
  "cloudformation describe-change-set") echo "Modify APIHandler" ;;
  "lambda get-alias") echo 3 ;;
  "lambda list-versions-by-function")
    shift 2
    while [ "$1" != --function-name ]; do shift; done
    tr '\n' '\t' < "$FAKE/versions-$2"; echo ;;
  "lambda update-alias") ;;
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


def test_a_rollback_alias_moves_every_alias_or_none(fake: Fake) -> None:
    # GIVEN two functions whose alias names version 3; only the first has a version before it
    (fake.home / "functions").write_text("workset-prod-APIHandler\nworkset-prod-Sweep\n")
    (fake.home / "versions-workset-prod-APIHandler").write_text("$LATEST\n1\n2\n3\n")
    (fake.home / "versions-workset-prod-Sweep").write_text("$LATEST\n3\n")
    # WHEN the aliases are rolled back
    result = fake.run("--rollback-alias", "prod")
    # THEN it fails naming the function, and no alias moved (not the API's alone: a mixed release)
    assert result.returncode == 1 and "workset-prod-Sweep: no version before 3" in result.stderr
    assert not any(call.startswith("lambda update-alias") for call in fake.calls())
    # WHEN both have one THEN both move, each to the version before its own
    (fake.home / "versions-workset-prod-Sweep").write_text("$LATEST\n1\n3\n")
    result = fake.run("--rollback-alias", "prod")
    assert result.returncode == 0, result.stderr
    moved = [call for call in fake.calls() if call.startswith("lambda update-alias")]
    assert moved == ["lambda update-alias --function-name workset-prod-APIHandler --name live --function-version 2",
                     "lambda update-alias --function-name workset-prod-Sweep --name live --function-version 1"]


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


# --preview, run from a copy of the tree whose infra/build.sh only writes a template (the real one
# builds for three minutes with the package index)
CREATED = ("Waiting for changeset to be created..\nChangeset created successfully. Run the following command to "
           "review changes:\naws cloudformation describe-change-set --change-set-name "
           "arn:aws:cloudformation:us-east-1:123456789012:changeSet/samcli-deploy1764770000/5f0e\n")
EMPTY = "Waiting for changeset to be created..\n\nNo changes to deploy. Stack workset-prod is up to date\n"


def _built(fake: Fake, *arguments: str, template: str = "{}") -> subprocess.CompletedProcess[str]:
    """deploy.sh run from a copy of the tree whose build writes TEMPLATE as the stage's SAM template."""
    tree = fake.home / "tree"
    (tree / "infra").mkdir(parents=True, exist_ok=True)
    (tree / "infra" / "deploy.sh").write_text((ROOT / "infra" / "deploy.sh").read_text())
    build = tree / "infra" / "build.sh"
    build.write_text('#!/usr/bin/env bash\nmkdir -p "$2" && cat "$FAKE/template" > "$2/sam.json"\n')
    build.chmod(0o755)
    (fake.home / "template").write_text(template)
    environment = {**os.environ, "PATH": f"{fake.home / 'bin'}:{os.environ['PATH']}", "FAKE": str(fake.home),
                   "AWS_DEFAULT_REGION": "us-east-1"}
    return subprocess.run(["bash", str(tree / "infra" / "deploy.sh"), *arguments], capture_output=True,
                          text=True, env=environment, timeout=HANG_GUARD, check=False)


def _preview(fake: Fake, answer: str) -> subprocess.CompletedProcess[str]:
    (fake.home / "change-set-answer").write_text(answer)
    return _built(fake, "--preview", "prod", BUCKET)


def test_a_preview_describes_the_change_set_it_made_not_the_stacks_newest(fake: Fake) -> None:
    # GIVEN a stack with another change set pending (someone else's preview, or an older one)
    # WHEN a preview makes its own
    result = _preview(fake, CREATED)
    # THEN the one it describes and says how to apply is its own
    assert result.returncode == 0, result.stderr
    own = "arn:aws:cloudformation:us-east-1:123456789012:changeSet/samcli-deploy1764770000/5f0e"
    assert f"cloudformation describe-change-set --change-set-name {own}" in "\n".join(fake.calls())
    assert f"execute-change-set --change-set-name {own}" in result.stdout
    assert "someone-elses" not in result.stdout and fake.deployed() == []


def test_a_preview_with_nothing_to_change_says_so_and_offers_nothing_to_apply(fake: Fake) -> None:
    # GIVEN a stack that already runs this release (CloudFormation keeps the empty change set, failed)
    # WHEN it is previewed
    result = _preview(fake, EMPTY)
    # THEN it says there is nothing to change, and offers no change set to execute
    assert result.returncode == 0, result.stderr
    assert "no change" in result.stdout.lower()
    assert "execute-change-set" not in result.stdout
    assert not any("describe-change-set" in call for call in fake.calls())


def _releases(fake: Fake) -> dict[str, str]:
    folder = fake.home / "bucket" / BUCKET / "workset-prod" / "releases"
    return {path.name: path.read_text() for path in sorted(folder.iterdir())} if folder.exists() else {}


def test_a_deploy_with_nothing_changed_says_so_and_keeps_no_new_release(fake: Fake) -> None:
    # GIVEN a stage deployed once, its release kept
    first = _built(fake, "prod", BUCKET, template="A")
    assert first.returncode == 0, first.stderr
    assert list(_releases(fake).values()) == ["A"]
    kept = fake.home / "bucket" / BUCKET / "workset-prod" / "releases"
    next(kept.iterdir()).rename(kept / "20261201T100000Z.yaml")  # a day ago: a new copy would get a new name
    # WHEN it is deployed again with the same build, parameters and tags
    again = _built(fake, "prod", BUCKET, template="A")
    # THEN it says nothing changed, and the only release is still the first (a rollback goes nowhere new)
    assert again.returncode == 0, again.stderr
    assert "nothing changed" in again.stdout
    assert _releases(fake) == {"20261201T100000Z.yaml": "A"}
    assert fake.deployed() == ["A"]


def test_a_deploy_of_a_new_template_keeps_it_as_the_newest_release(fake: Fake) -> None:
    # GIVEN release A kept and running
    fake.release("prod", "20261201T100000Z.yaml", "A")
    (fake.home / "deployed").write_text("deployed A\n")
    # WHEN a changed build B is deployed
    result = _built(fake, "prod", BUCKET, template="B")
    # THEN B is kept after A, and a rollback would go back to A
    assert result.returncode == 0, result.stderr
    assert "nothing changed" not in result.stdout
    assert list(_releases(fake).values()) == ["A", "B"]
    rollback = fake.run("--rollback", "prod", BUCKET)
    assert rollback.returncode == 0, rollback.stderr
    assert fake.deployed()[-1] == "A"


def test_a_deploy_changing_only_a_parameter_keeps_no_copy_of_the_same_template(fake: Fake) -> None:
    # GIVEN release A deployed by this script
    assert _built(fake, "prod", BUCKET, template="A").returncode == 0
    # WHEN only a parameter changes
    result = _built(fake, "prod", BUCKET, "LogRetentionInDays=90", template="A")
    # THEN the stack is updated, but no second copy of A becomes a rollback target
    assert result.returncode == 0, result.stderr
    assert fake.deployed() == ["A", "A"]
    assert "no new release kept" in result.stdout and "nothing changed" not in result.stdout
    assert list(_releases(fake).values()) == ["A"]


def test_a_deploy_with_nothing_changed_keeps_a_release_not_kept_before(fake: Fake) -> None:
    # GIVEN a stack running B (a preview's change set executed by hand, its copy never kept) over release A
    fake.release("prod", "20261201T100000Z.yaml", "A")
    assert _built(fake, "prod", BUCKET, template="B").returncode == 0
    (fake.home / "bucket" / BUCKET / "workset-prod" / "releases").joinpath(
        next(name for name, text in _releases(fake).items() if text == "B")).unlink()
    # WHEN B is deployed again (CloudFormation: nothing to change)
    result = _built(fake, "prod", BUCKET, template="B")
    # THEN B is kept as the newest release: a rollback from it goes to A, not to B again
    assert result.returncode == 0, result.stderr
    assert list(_releases(fake).values()) == ["A", "B"]
