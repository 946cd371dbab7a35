"""Counting DynamoDB calls per operation with a botocore event hook (machine-independent cost).

    python bench/dynamo_calls.py

Runs each operation against in-process moto through the real entry points (POST /mcp via the
Chalice test client) and prints the calls it made, by API operation, next to the target.
"""

from __future__ import annotations

import os
import sys
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


class DynamoCalls:
    """Records every DynamoDB API call the store's clients make."""

    def __init__(self) -> None:
        self.calls: list[str] = []

    def install(self) -> DynamoCalls:
        """Hook every client the store uses (idempotent)."""
        from pynamodb.models import Model

        from chalicelib.store import models
        from chalicelib.store.base import connection

        kinds = [kind for kind in vars(models).values() if isinstance(kind, type) and issubclass(kind, Model)]
        clients = [connection().client] + [kind._get_connection().connection.client for kind in kinds if kind is not Model]
        for client in clients:
            client.meta.events.register("after-call.dynamodb", self._record, unique_id=f"bench-{id(self)}")
        return self

    def _record(self, model, **_: object) -> None:
        self.calls.append(model.name)

    @contextmanager
    def measure(self) -> Iterator[list[str]]:
        """The calls made inside the block (the list fills in when the block ends)."""
        start = len(self.calls)
        made: list[str] = []
        yield made
        made.extend(self.calls[start:])


OPERATIONS = [
    # (label, target from the issue; None where the issue sets none)
    ("tools/list (5 promoted)", 2),
    # issue 2 said 3; a 2025-11-25 client is marked told once its answer exists (issue 11): +1
    ("promote", 4),
    ("demote", 3),
    ("first-class call of a promoted read tool", 4),  # issue 2 said 3; durable runs add the end write
    # issue 2 said 2; the index no longer holds every definition (issue 14): the hits are one BatchGetItem
    # issue 25 (learning from use): +1 PutItem remembers what the search answered, so a follow-up
    # can credit it; what the account learned is read with the revision's GetItem
    ("find_tool, warm instance", 4),
    ("find_tool, cold instance", None),
    ("run_tool (read tool, not promoted)", None),
    ("promote of a tool find_tool just listed (learns the pair)", None),
    ("find_tool, warm, after the account learned a pair", None),
    # issue 26: an agent whose 5 promoted tools write (approval policy first_call, a person's policy
    # set on one tool and on the vendor's default): the policies are read in the same BatchGetItem
    # as the tools they apply to, so each costs what it costs for reads
    ("tools/list (5 promoted writes)", 2),
    ("promote of a write tool", 4),
    ("first-class call of an approved write tool", 4),
    ("find_tool, warm, hits that write", 4),
    # issue 15: OAuth (Workset as its own authorization server)
    ("OAuth: redeem a code at /oauth/token", None),
    ("tools/list with an OAuth access token (nothing promoted)", 1),  # one Query authenticates it too
    ("OAuth: refresh (rotation) at /oauth/token", None),
]


def main() -> None:
    sys.path.insert(0, str(ROOT))
    from moto import mock_aws

    from tests.conftest import Admin, Mcp  # the test harness (it also fakes the AWS environment)

    with mock_aws():
        from chalice.test import Client

        from app import app
        from chalicelib.base.clock import utcnow
        from chalicelib.catalog import indexes
        from chalicelib.identity import accounts
        from chalicelib.store.tables import create_all

        create_all()
        account, token = accounts.create_account("bench", utcnow())
        with Client(app) as client:
            admin = Admin(client, token)
            vendor_url = _start_vendor()
            for index in range(6):
                admin.publish(name=f"tool-{index}", request={"method": "GET", "url": f"{vendor_url}/x"})
            mcp = Mcp(client, admin.create_agent()["api_key"])
            for index in range(5):
                mcp.call("promote", {"vendor": "unleashed", "name": f"tool-{index}"})
            counter = DynamoCalls().install()
            runs = {
                "tools/list (5 promoted)": lambda: mcp.post("tools/list"),
                "promote": lambda: mcp.call("promote", {"vendor": "unleashed", "name": "tool-5"}),
                "demote": lambda: mcp.call("demote", {"vendor": "unleashed", "name": "tool-5"}),
                "first-class call of a promoted read tool": lambda: mcp.call(
                    "unleashed__tool-0", {"customer": "acme"}),
                "find_tool, warm instance": lambda: mcp.call("find_tool", {"query": "sales orders"}),
                "find_tool, cold instance": lambda: (indexes.clear(),
                                                     mcp.call("find_tool", {"query": "sales orders"})),
                "run_tool (read tool, not promoted)": lambda: mcp.call(
                    "run_tool", {"vendor": "unleashed", "name": "tool-5", "input": {"customer": "a"}}),
                "promote of a tool find_tool just listed (learns the pair)": lambda: mcp.call(
                    "promote", {"vendor": "unleashed", "name": "tool-5"}),
                "find_tool, warm, after the account learned a pair": lambda: mcp.call(
                    "find_tool", {"query": "sales orders"}),
            }
            # unmeasured steps before an operation
            prepare = {"promote of a tool find_tool just listed (learns the pair)": lambda: (
                mcp.call("demote", {"vendor": "unleashed", "name": "tool-5"}),
                mcp.call("find_tool", {"query": "unleashed sales orders tool 5"}))}
            writer = _writer(client, admin, vendor_url)
            runs |= {
                "tools/list (5 promoted writes)": lambda: writer.post("tools/list"),
                "promote of a write tool": lambda: writer.call("promote", {"vendor": "writes", "name": "write-5"}),
                "first-class call of an approved write tool": lambda: writer.call("writes__write-0", {"customer": "a"}),
                "find_tool, warm, hits that write": lambda: writer.call("find_tool", {"query": "create sales order"}),
            }
            oauth_client = _OAuthClient(client, account.account_id, admin.create_agent("chat")["id"])
            runs |= {
                "OAuth: redeem a code at /oauth/token": oauth_client.redeem,
                "tools/list with an OAuth access token (nothing promoted)": lambda: Mcp(client, oauth_client.access).post("tools/list"),
                "OAuth: refresh (rotation) at /oauth/token": oauth_client.refresh,
            }
            mcp.call("find_tool", {"query": "warm up"})
            print(f"{'operation':45} {'calls':>5} {'target':>6}  by API operation")
            for label, target in OPERATIONS:
                prepare.get(label, lambda: None)()
                with counter.measure() as made:
                    runs[label]()
                verdict = "" if target is None else ("ok" if len(made) <= target else "OVER")
                shown = "-" if target is None else f"<= {target}"
                print(f"{label:45} {len(made):5} {shown:>6}  {dict(Counter(made))} {verdict}")


def _writer(client, admin, vendor_url: str):
    """An agent with five promoted write tools of vendor `writes` (a sixth unpromoted), a person's
    policy on one of them and on the vendor's default, and the first call of write-0 approved."""
    from tests.conftest import Mcp

    for index in range(6):
        admin.publish(vendor="writes", name=f"write-{index}", description=f"Create sales order {index}.",
                      annotations={"destructiveHint": False}, request={"method": "POST", "url": f"{vendor_url}/x"})
    admin.call("PUT", "/v1/tools/writes/write-1/approval-policy", {"policy": "every_call"})
    admin.call("PUT", "/v1/vendors/writes/approval-policy", {"policy": "first_call"})
    writer = Mcp(client, admin.create_agent("writer")["api_key"])
    for index in range(5):
        writer.call("promote", {"vendor": "writes", "name": f"write-{index}"})
    run_id = writer.call("writes__write-0", {"customer": "a"})["structuredContent"]["run_id"]
    admin.call("POST", f"/v1/approvals/{run_id}/approve")
    return writer


class _OAuthClient:
    """A public client consented to for `agent_id` (the consent itself is not counted)."""

    REDIRECT = "https://chat.example/cb"

    def __init__(self, client, account_id: str, agent_id: str) -> None:
        import base64
        import hashlib
        import json
        from urllib.parse import parse_qs, urlsplit

        from chalicelib.base.clock import utcnow
        from chalicelib.base.config import settings
        from chalicelib.oauth import authorization

        self.client, self.verifier = client, "v" * 64
        registered = client.http.post("/oauth/register", headers={"Content-Type": "application/json"}, body=json.dumps(
            {"redirect_uris": [self.REDIRECT], "token_endpoint_auth_method": "none"}))
        self.client_id = json.loads(registered.body)["client_id"]
        challenge = base64.urlsafe_b64encode(hashlib.sha256(self.verifier.encode()).digest()).decode().rstrip("=")
        pending = authorization.check_request({"response_type": "code", "client_id": self.client_id, "redirect_uri": self.REDIRECT,
                                       "code_challenge": challenge, "code_challenge_method": "S256",
                                       "resource": settings().mcp_url}, utcnow())
        location = authorization.consent(pending, account_id, agent_id, actor="admin", now=utcnow())
        self.code = parse_qs(urlsplit(location).query)["code"][0]
        self.access = self.refresh_token = ""

    def _token(self, **form: str) -> dict[str, str]:
        import json
        from urllib.parse import urlencode

        answer = self.client.http.post("/oauth/token", headers={"Content-Type": "application/x-www-form-urlencoded"},
                                       body=urlencode({"client_id": self.client_id, **form}))
        tokens = json.loads(answer.body)
        self.access, self.refresh_token = tokens["access_token"], tokens["refresh_token"]
        return tokens

    def redeem(self) -> dict[str, str]:
        return self._token(grant_type="authorization_code", code=self.code, redirect_uri=self.REDIRECT,
                           code_verifier=self.verifier)

    def refresh(self) -> dict[str, str]:
        return self._token(grant_type="refresh_token", refresh_token=self.refresh_token)


def _start_vendor() -> str:
    from local.demo import start_vendor

    server = start_vendor(0)
    return f"http://127.0.0.1:{server.server_address[1]}"


if __name__ == "__main__":
    os.environ.setdefault("WORKSET_STAGE", "test")
    main()
