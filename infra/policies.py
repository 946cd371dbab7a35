"""Each stage's IAM policy (`.chalice/policy-<stage>.json`, which `.chalice/config.json` names),
written from the one template `infra/policy.json`, whose `{stage}` is the stage's name:

    python infra/policies.py dev prod      write them (infra/build.sh writes its stage's)
    python infra/policies.py --check       fail if a committed one differs from the template's

The stages' policies differ only in the names they grant (tables, queues, key alias, parameters,
log groups): one template keeps a grant from reaching one stage and not the other.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TEMPLATE = ROOT / "infra" / "policy.json"
STAGE = re.compile(r"[a-z][a-z0-9-]{0,20}")


def render(stage: str) -> str:
    """The policy of `stage`, as the file holds it."""
    if not STAGE.fullmatch(stage):
        raise ValueError(f"a stage is lower-case letters, digits and dashes: {stage!r}")
    text = TEMPLATE.read_text().replace("{stage}", stage)
    json.loads(text)  # the template stays valid JSON whatever the stage
    return text


def path(stage: str) -> Path:
    """Where Chalice reads the stage's policy."""
    return ROOT / ".chalice" / f"policy-{stage}.json"


def stages() -> list[str]:
    """The stages `.chalice/config.json` declares."""
    return sorted(json.loads((ROOT / ".chalice" / "config.json").read_text())["stages"])


def main(arguments: list[str]) -> int:
    if arguments == ["--check"]:
        stale = [stage for stage in stages() if not path(stage).exists() or path(stage).read_text() != render(stage)]
        for stage in stale:
            print(f".chalice/{path(stage).name} differs from infra/policy.json: run python infra/policies.py {stage}")
        return 1 if stale else 0
    for stage in arguments or stages():
        path(stage).write_text(render(stage))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
