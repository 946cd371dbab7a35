"""Point the API at APIHandler's alias: `python infra/alias_api.py OUT_DIR` (after `chalice
package`, from infra/build.sh; the infra tests' packaged fixture runs it too).

The functions publish a version on every deploy behind the alias `live` (AutoPublishAlias in
infra/resources.json), and SAM points their event sources at it; Chalice's API names the function
itself (`${APIHandler.Arn}`, which invokes $LATEST) in each route's integration. This rewrites those
to `${APIHandlerAliaslive}`, so that every caller runs the version the alias names, and moving the
alias (infra/deploy.sh --rollback-alias) moves them all. The invoke permission names the alias
(the fragment's overlay on APIHandlerInvokePermission).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

FUNCTION = "${APIHandler.Arn}"
ALIAS = "${APIHandlerAliaslive}"  # the AWS::Lambda::Alias SAM makes (AutoPublishAlias: live); its Ref is its ARN


def alias_integrations(template: dict[str, object]) -> int:
    """Rewrite every route's integration URI of the template's RestAPI; how many were rewritten."""
    api = template["Resources"]["RestAPI"]["Properties"]  # type: ignore[index]
    rewritten = 0
    for methods in api["DefinitionBody"]["paths"].values():
        for method in methods.values():
            uri = method.get("x-amazon-apigateway-integration", {}).get("uri") if isinstance(method, dict) else None
            if isinstance(uri, dict) and isinstance(uri.get("Fn::Sub"), str) and FUNCTION in uri["Fn::Sub"]:
                uri["Fn::Sub"] = uri["Fn::Sub"].replace(FUNCTION, ALIAS)
                rewritten += 1
    return rewritten


def main(out: Path) -> int:
    path = out / "sam.json"
    template = json.loads(path.read_text())
    rewritten = alias_integrations(template)
    if rewritten == 0:
        raise SystemExit(f"{path}: no route of RestAPI invokes {FUNCTION}")
    path.write_text(json.dumps(template, indent=2) + "\n")
    print(f"sam.json: {rewritten} API integrations invoke APIHandler's alias")
    return 0


if __name__ == "__main__":
    if len(sys.argv) != 2:
        raise SystemExit("usage: python infra/alias_api.py OUT_DIR (holding sam.json)")
    sys.exit(main(Path(sys.argv[1])))
