"""DynamoDB calls of an OpenAPI import through the admin API, by API operation: what the daily cap
on a vendor's new versions (`imports.MAX_VERSIONS_PER_DAY`) costs each import.

    python bench/import_cap_calls.py            # this checkout
    WORKSET_ROOT=/path/to/other python bench/import_cap_calls.py   # another checkout, side by side

In-process moto through the Chalice test client (machine-independent counts, as
bench/dynamo_calls.py). A document of 3 operations is imported, imported again unchanged, then
imported changed (3 new versions) until the cap refuses it (the cap set to 7 where there is one);
dry runs (what the console's check step sends) between them.
"""

from __future__ import annotations

import os
import sys
from collections import Counter
from pathlib import Path

ROOT = Path(os.environ.get("WORKSET_ROOT") or Path(__file__).resolve().parent.parent)


def _document(revision: int) -> dict[str, object]:
    paths = {f"/items{index}": {"get": {"operationId": f"item{index}", "summary": f"Item {index}, revision {revision}",
                                        "responses": {"200": {"description": "ok"}}}} for index in range(3)}
    return {"openapi": "3.0.3", "info": {"title": "Items", "version": str(revision)},
            "servers": [{"url": "http://127.0.0.1:9"}], "paths": paths}


def main() -> None:
    sys.path.insert(0, str(ROOT))
    os.chdir(ROOT)
    from moto import mock_aws

    from tests.conftest import Admin  # the test harness (it also fakes the AWS environment)

    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    from bench.dynamo_calls import DynamoCalls

    with mock_aws():
        from chalice.test import Client

        from app import app
        from chalicelib.base.clock import utcnow
        from chalicelib.catalog import imports
        from chalicelib.identity import accounts
        from chalicelib.store.tables import create_all

        create_all()
        capped = hasattr(imports, "MAX_VERSIONS_PER_DAY")
        if capped:
            imports.MAX_VERSIONS_PER_DAY = 7  # type: ignore[attr-defined]
        _, token = accounts.create_account("bench", utcnow())
        with Client(app) as client:
            admin = Admin(client, token)
            counter = DynamoCalls().install()
            steps = [("first import (3 published)", 1, False), ("again, unchanged", 1, False),
                     ("dry run, unchanged", 1, True), ("dry run, changed (3 new versions)", 2, True),
                     ("changed (3 new versions)", 2, False), ("dry run, changed again (past the cap)", 3, True),
                     ("changed again (past the cap of 7 where there is one)", 3, False)]
            print(f"root {ROOT} ({'a daily cap' if capped else 'no daily cap'})")
            print(f"{'import':55} {'status':>6} {'calls':>5}  by API operation")
            for label, revision, dry in steps:
                with counter.measure() as made:
                    answer = admin.call("POST", "/v1/imports/openapi", {"vendor": "items", "dry_run": dry,
                                                                        "document": _document(revision)})
                print(f"{label:55} {answer.status_code:>6} {len(made):5}  {dict(Counter(made))}")


if __name__ == "__main__":
    main()
