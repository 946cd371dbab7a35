"""DynamoDB calls per console page, with the local stack's demo toolbox (204 tools), as agents and
their History grow: the pictures' reads are bounded (chalicelib/console/activity.py). An agent
with 2 events in its History, and one with 600 (all in the last 30 days).

    python bench/console_calls.py

In-process moto through the real entry points (the console's pages via the Chalice test client);
counts are machine-independent.
"""

from __future__ import annotations

import logging
import sys
from collections import Counter
from datetime import timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
AGENT_COUNTS = (1, 12, 30)
BUSY_EVENTS = 600  # past the 500 an agent's picture reads at most (5 pages of 100)


def main() -> None:
    sys.path.insert(0, str(ROOT))
    from moto import mock_aws

    from bench.dynamo_calls import DynamoCalls
    from tests.conftest import Admin, Console

    with mock_aws():
        from chalice.test import Client

        from app import app
        from chalicelib.agents import workingset
        from chalicelib.base import log
        from chalicelib.base.causes import Cause, PromotedBy
        from chalicelib.base.clock import utcnow
        from chalicelib.base.config import settings
        from chalicelib.catalog import imports, toolbox
        from chalicelib.identity import accounts
        from chalicelib.store import queues
        from chalicelib.store.tables import create_all
        from chalicelib.tools import definitions
        from local import demo

        logging.getLogger(log.LOGGER).setLevel(logging.WARNING)  # the figures only, not a line per request
        create_all()
        queues.ensure(settings().sweep_queue)
        account, token = accounts.create_account("bench", utcnow())
        base = "http://127.0.0.1:9"
        for definition in demo.demo_tools(base):
            toolbox.publish(account.account_id, definitions.parse_spec(definition), published_by="demo", now=utcnow())
        imports.import_openapi(account.account_id, demo.demo_import(base), "demo", utcnow())
        def grow(agent_id: str, events: int) -> None:
            """Promote and demote one tool until the agent's History holds at least `events` events."""
            listed = workingset.history(agent_id, limit=1000).items
            for n in range((events - len(listed) + 1) // 2):
                moment = utcnow() - timedelta(days=n % 25, minutes=n)
                state = accounts.get_state(account.account_id, agent_id)
                workingset.promote(state, "square", "list-locations", by=PromotedBy.AGENT, actor=agent_id, now=moment)
                state = accounts.get_state(account.account_id, agent_id)
                workingset.demote(state, "square", "list-locations", cause=Cause.IDLE, actor="sweep", now=moment)

        with Client(app) as client:
            admin = Admin(client, token)
            console = Console(client)
            console.sign_in(token)
            counter = DynamoCalls().install()
            agents: list[str] = []
            print(f"{'page':52} {'calls':>5}  by API operation")
            for count in AGENT_COUNTS:
                while len(agents) < count:
                    agent_id = admin.create_agent(f"agent-{len(agents)}")["id"]
                    for name in ("list-sales-orders", "get-sales-order"):
                        state = accounts.get_state(account.account_id, agent_id)
                        workingset.promote(state, "unleashed", name, by=PromotedBy.CONSOLE, actor="admin", now=utcnow())
                    agents.append(agent_id)
                grow(agents[0], BUSY_EVENTS)
                for agent_id, events in ((agents[-1], "2 events"), (agents[0], f"{BUSY_EVENTS} events")):
                    with counter.measure() as made:
                        answer = console.get(f"/console/agents/{agent_id}")
                    assert answer.status_code == 200
                    print(f"{f'agent page ({count} agents; this one: {events})':52} {len(made):5}  {dict(Counter(made))}")
                with counter.measure() as made:
                    answer = console.get("/console/tools")
                assert answer.status_code == 200
                print(f"{f'toolbox page ({count} agents)':52} {len(made):5}  {dict(Counter(made))}")


if __name__ == "__main__":
    main()
