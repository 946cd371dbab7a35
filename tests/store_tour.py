"""Every public store function run once under moto, and the authorizations its AWS calls need: the
fixture `store_calls`, to which tests/test_infra_policy_calls.py holds the stage policies. Each
recorded call (`record_aws`) becomes a `Call` (tests/infra.py): a DynamoDB action on a table or
index, a KMS action on the secrets key with its encryption context, an SQS action on a queue. A
public store function the tour does not run fails the fixture.

A test module imports `store_calls_fixture` (and `record_aws_fixture`, which it needs) with
`# noqa: F401`.
"""

from __future__ import annotations

import importlib
import inspect
import json
import pkgutil
from collections.abc import Callable
from typing import Any

import boto3
import pytest

import chalicelib.store
from chalicelib.base import config as app_config
from chalicelib.store import queues
from tests.iam import Call, dynamodb_calls, kms_call, sqs_call, unrecorded
from tests.infra import QUEUES, AwsCall


def exercise_store() -> set[str]:
    """Run every public store function once against the tables and the key; answer the names run."""
    from dataclasses import replace
    from datetime import timedelta

    from chalicelib.base.clock import utcnow
    from chalicelib.base.outcomes import RunStatus
    from chalicelib.store import (
        accounts,
        agents,
        connections,
        daycounts,
        history,
        listens,
        oauth,
        outbox,
        policies,
        runs,
        sessions,
        sweep,
        tools,
        upstreams,
        usage,
        vault,
    )
    from chalicelib.store.agents import DemotionGuard, News
    from chalicelib.store.records import (
        Agent,
        AuthorizationCode,
        Connection,
        Grant,
        HistoryEvent,
        OAuthClient,
        Promotion,
        Run,
        SeenSearch,
        Upstream,
    )

    ran: set[str] = set()

    def run(function: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        ran.add(f"{function.__module__}.{function.__name__}")
        return function(*args, **kwargs)

    now = utcnow()
    event = HistoryEvent(vendor="acme", name="orders", action="promote", cause="agent", actor="a1", at=now)
    run(accounts.create_account, "acct", "Acme", "token-hash-1", now)
    run(accounts.add_admin_token, "acct", "token-hash-2", now)
    assert run(accounts.account_of_token, "token-hash-2") == "acct"
    assert run(accounts.get_account, "acct") is not None
    run(accounts.set_allowed_hosts, "acct", ["api.acme.test"])
    assert run(accounts.get_allowed_hosts, "acct") == ("api.acme.test",)
    # Console sessions live beside the admin tokens; ending all of them moves the account's epoch.
    run(sessions.create_session, "session-hash", "acct", now, now + timedelta(hours=1))
    assert run(sessions.load_session, "session-hash").account_id == "acct"
    assert run(sessions.console_epoch, "acct") == 0
    run(sessions.end_all_sessions, "acct")
    assert sessions.console_epoch("acct") == 1
    run(sessions.delete_session, "session-hash")
    assert sessions.load_session("session-hash") is None
    agent = Agent(agent_id="a1", account_id="acct", name="hermes", cap=5, idle_window_days=7, created_at=now,
                  webhook_url="https://hooks.acme.test/workset")
    # The webhook's signing secret is sealed as notify.seal_secret does: the agent id goes in the
    # encryption context as connection_id (the consumer decrypts it so, further down).
    signing_secret = "whsec_c2lnbmluZy1zZWNyZXQtb2YtdGhlLWFnZW50"
    sealed = run(vault.encrypt, signing_secret, account_id="acct", connection_id="a1")
    run(agents.create_agent, agent, "key-hash", webhook_secret=sealed)
    run(agents.update_settings, "a1", {"name": "iris"})
    assert len(run(agents.list_agents, "acct", limit=10).items) == 1
    run(tools.put_version, "acct", tools.NewVersion("acme", "orders", {"name": "orders"}, 0), "admin", now)
    assert run(tools.get_head, "acct", "acme", "orders") is not None
    assert run(tools.get_version, "acct", "acme", "orders", 1).version == 1
    assert len(run(tools.get_heads, "acct", [("acme", "orders")])) == 1
    assert len(run(tools.list_heads, "acct")) == 1
    assert len(list(run(tools.iter_heads, "acct"))) == 1
    assert len(run(tools.page_heads, "acct", limit=10).items) == 1
    assert len(run(tools.list_versions, "acct", "acme", "orders")) == 1
    assert [found.version for found in run(tools.get_versions, "acct", [("acme", "orders", 1), ("acme", "x", 1)])] == [1]
    assert run(tools.toolbox_revision, "acct") == 1
    assert run(tools.changed_since, "acct", 0, 1) == {("acme", "orders")}
    # Imports: batches of versions, marking heads unavailable, vectors filled in later, and the
    # registered MCP servers beside the tools (the sparse `upstreams` index lists the fleet's).
    new = [tools.NewVersion("acme", f"bulk-{n}", {"name": "bulk"}, 0) for n in range(2)]
    assert [len(batch) for batch in run(tools.version_batches, new)] == [2]  # how put_versions batches them
    run(tools.put_versions, "acct", new, "admin", now)
    bulk = run(tools.list_vendor_heads, "acct", "acme")
    assert [head.name for head in bulk] == ["bulk-0", "bulk-1", "orders"]
    run(tools.set_unavailable, "acct", bulk[:2], "gone from the document")
    run(tools.set_vectors, "acct", [(bulk[0], b"v" * 768)], "test-vectors")
    # A person accepting the newest version's looser hints (its guard, on the version and its head).
    orders = run(tools.get_head, "acct", "acme", "orders")
    run(tools.accept_guard, "acct", orders, {"readOnlyHint": True, "destructiveHint": False, "accepted_in": 1},
        "admin:0123456789ab", now)
    # What find_tool learns from use: an agent's last searches, a credited pair, the memory's
    # listing and its reset (issue 25).
    assert run(tools.search_revisions, "acct")[1] == usage.Memory(0, 0)
    assert run(usage.memory, "acct") == usage.Memory(0, 0)
    seen = SeenSearch("orders please", ("acme/orders",), now, 0)
    run(usage.save_searches, "a1", [seen])
    run(usage.credit, "acct", 0, "orders please", "acme", "orders", b"q" * 768, now, evict=["M#gone"], agent_id="a1",
        searches=[replace(seen, credited=("acme/orders",))], retention=timedelta(days=1))
    assert [pair.count for pair in run(usage.pairs, "acct", 0)] == [1]
    assert list(run(usage.ages, "acct", 0)) == [usage.pair_sk("orders please", "acme", "orders")]
    assert run(usage.count, "acct", 0) == 1
    assert len(run(usage.page_pairs, "acct", 0, limit=10, cursor=None).items) == 1
    assert run(usage.reset, "acct") == 1
    run(upstreams.put, Upstream("acct", "docs", "https://mcp.acme.test/mcp", now))
    assert run(upstreams.get, "acct", "docs").url == "https://mcp.acme.test/mcp"
    assert [found.vendor for found in run(upstreams.list_all, "acct", limit=10).items] == ["docs"]
    assert [found.vendor for found in run(upstreams.list_fleet)] == ["docs"]
    run(upstreams.record_sync, "acct", "docs", now, {"ok": True}, "2025-11-25")
    assert run(daycounts.count, "acct", "docs", "2025-11-25", 2, 5)
    run(daycounts.give_back, "acct", "docs", "2025-11-25", 1)
    assert run(daycounts.counted, "acct", "docs", "2025-11-25") == 1
    week = now + timedelta(days=7)
    promotion = Promotion("acme", "orders", now, "a1")
    assert run(outbox.pending) == []
    assert run(outbox.change_seq, "a1") == 0
    webhook = News(webhook=True)
    assert run(agents.add_promotion, "a1", "acct", promotion, event, due_at=week, over_cap=False, news=webhook)
    assert agents.add_promotion("a1", "acct", promotion, event, due_at=week, over_cap=True,
                                news=webhook) is False  # promoted already: nothing written, no news
    state = run(agents.load_state, "a1")
    assert state.promotion("acme", "orders").due_at == week
    assert (state.change_seq, state.mcp_seen_seq, state.webhook_url) == (1, 0, agent.webhook_url)

    # The webhook's outbox (the sparse `outbox` index): the change put the agent there; a drain
    # clears only the change it announced, and the consumer decrypts the signing secret.
    assert outbox.pending() == ["a1"] and outbox.change_seq("a1") == 1
    assert run(outbox.clear, "a1", 0) is False  # a newer change than the one announced: it stays
    assert outbox.pending() == ["a1"]
    assert outbox.clear("a1", 1) is True
    assert outbox.pending() == []
    assert state.webhook_secret == sealed and signing_secret.encode() not in sealed
    assert vault.decrypt(state.webhook_secret, account_id=state.agent.account_id,
                         connection_id=state.agent.agent_id) == signing_secret
    # What an MCP response told the client: moves forward only.
    run(outbox.mark_seen, "a1", 1)
    assert agents.load_state("a1").mcp_seen_seq == 1
    outbox.mark_seen("a1", 0)
    assert agents.load_state("a1").mcp_seen_seq == 1

    # Runs: each start/approve/end is one transaction over the run, the agent's settings item
    # (its leases) and, for a promoted tool, its promotion item or, for an approval, its approval.
    lease = now + timedelta(minutes=5)

    def new_run(number: int, status: str, lease_expires_at: Any = lease) -> Run:
        created = now + timedelta(seconds=number)
        return Run(run_id=f"r{number}", agent_id="a1", account_id="acct", vendor="acme", name="orders", version=1,
                   input={"customer": "c1"}, status=status, created_at=created, updated_at=created,
                   lease_expires_at=lease_expires_at)

    r1 = new_run(1, RunStatus.RUNNING)
    run(runs.start, r1, use_due_at=week)
    assert set(agents.load_state("a1").leases) == {"r1"}
    assert run(runs.finish, r1, "succeeded", now, result={"orders": []}) is True
    assert run(runs.finish, r1, "failed", now, error={"code": "x"}) is False  # ended already
    assert run(runs.get, "r1").result == {"orders": []}
    r2, r3 = new_run(2, RunStatus.AWAITING), new_run(3, RunStatus.AWAITING)
    runs.start(r2, use_due_at=None)
    runs.start(r3, use_due_at=None)
    assert [r.run_id for r in run(runs.list_pending, "acct", limit=10).items] == ["r2", "r3"]
    shape = {"method": "POST", "host": "api.acme.test"}
    assert run(runs.approve, r2, "admin", lease, now, shape=shape) is True
    assert runs.approve(r2, "admin", lease, now, shape=shape) is False  # only one approval wins
    assert agents.load_state("a1").decision("acme", "orders").shape == shape
    assert run(runs.deny, r3, "admin", now, shape=shape) is True
    assert runs.get("r3").status == "denied"
    # the denial is news for the webhook until announced; the sweep's index holds it till then
    assert "r3" in {found.run_id for found in run(runs.to_sweep, now + timedelta(seconds=1)) if found.unannounced}
    assert run(runs.announced, "r3") is True
    assert "r3" not in {found.run_id for found in runs.to_sweep(now + timedelta(seconds=1))}
    assert agents.load_state("a1").decision("acme", "orders").decision == "deny"
    assert run(agents.remove_decision, "a1", "acme", "orders") is True
    assert agents.remove_decision("a1", "acme", "orders") is False
    assert run(agents.count_acquire, "a1", "2026-11-30", 1) is True
    assert agents.count_acquire("a1", "2026-11-30", 1) is False  # the day's quota is spent
    assert agents.count_acquire("a1", "2026-12-01", 1) is True  # a new day
    assert runs.list_pending("acct", limit=10).items == []
    r4 = new_run(4, RunStatus.RUNNING, lease_expires_at=now)
    runs.start(r4, use_due_at=week)
    assert run(runs.expire, r4, now + timedelta(seconds=1), cutoff=now + timedelta(seconds=1), announce=False) is True
    assert runs.get("r4").status == "expired"
    assert set(agents.load_state("a1").leases) == {"r2"}
    assert runs.finish(r2, "succeeded", now, result={}) is True
    # a large result is written apart from the run, before the transaction that ends it
    r6 = new_run(6, RunStatus.RUNNING)
    runs.start(r6, use_due_at=None)
    assert runs.finish(r6, "succeeded", now, result={"big": "x" * (runs.INLINE_RESULT_BYTES + 1)}) is True
    assert runs.get("r6").result["big"].startswith("xxx")
    assert run(runs.approval_policies, ["r6", "r1"]) == {"r6": None, "r1": None}  # asked under no policy
    # approval policies: a person's setting and its record of who made it
    run(policies.put, "acct", "acme", "orders", "every_call", "admin", now)
    assert run(policies.get_many, "acct", [("acme", "orders"), ("acme", None)])[("acme", "orders")].policy == "every_call"
    # the tools and the policies that can apply to them, in one batch read of the tools table
    both = run(tools.get_with_policies, "acct", heads=[("acme", "orders")], versions=[("acme", "orders", 1)])
    assert ("acme", "orders") in both.heads and ("acme", "orders", 1) in both.versions
    assert both.policies[("acme", "orders")].policy == "every_call" and ("acme", None) not in both.policies
    assert [setting.name for setting in run(policies.list_all, "acct", limit=10).items] == ["orders"]
    assert len(run(policies.history, "acct", limit=10).items) == 1
    assert [event.name for event in run(policies.tool_history, "acct", "acme", "orders", limit=10).items] == ["orders"]
    assert [r.run_id for r in run(runs.list_for_agent, "a1", limit=10).items] == ["r6", "r4", "r3", "r2", "r1"]
    assert run(runs.get, "nope") is None

    # The sweep's reads (sparse, sharded indexes) and its bookkeeping writes.
    assert run(agents.agents_with_tool, "acct", "acme", "orders") == ["a1"]
    assert run(sweep.due_agents, now) == {}
    assert sweep.due_agents(week) == {"a1": "acct"}
    used = agents.load_state("a1").promotion("acme", "orders").last_used_at
    assert used == r4.created_at
    assert run(sweep.move_deadline, "a1", "acme", "orders", now, last_used_at=now) is False  # used since
    assert sweep.move_deadline("a1", "acme", "orders", now, last_used_at=used) is True
    assert sweep.due_agents(now) == {"a1": "acct"}
    assert run(sweep.agents_to_review) == {}
    assert run(sweep.make_due, "a1", "acme", "orders", now, "connection_revoked") is True
    assert sweep.agents_to_review() == {"a1": "acct"}
    state = agents.load_state("a1")
    assert state.promotion("acme", "orders").due_cause == "connection_revoked" and state.review_token
    assert run(sweep.clear_review, "a1", "another-token") is False
    assert sweep.clear_review("a1", state.review_token) is True
    assert sweep.agents_to_review() == {}
    # Pins: one transaction over the promotion, the settings item's pin count (held under the
    # limit) and the history event; a promotion a revocation made due keeps its deadline
    assert run(agents.pin_promotion, "a1", "acme", "orders", event, limit=1, keep_due=True) is True
    assert agents.pin_promotion("a1", "acme", "orders", event, limit=1, keep_due=True) is False  # pinned
    assert run(sweep.leave_due, "a1", "acme", "orders") is False  # due by a revocation: it stays due
    assert agents.load_state("a1").promotion("acme", "orders").pinned
    assert run(agents.unpin_promotion, "a1", "acme", "orders", event, due_at=None, over_cap=False) is True

    stale = DemotionGuard(lease_rev=state.lease_rev - 1, last_used_at=used)
    seq = outbox.change_seq("a1")
    assert run(agents.remove_promotion, "a1", "acme", "orders", event, guard=stale, news=webhook) is False
    assert outbox.change_seq("a1") == seq and outbox.pending() == []  # nothing written
    # a demotion for an agent without a webhook: counted, not in the outbox; what an MCP client
    # was told is marked apart, once its answer exists (outbox.mark_seen)
    quiet = News(webhook=False)
    assert agents.remove_promotion("a1", "acme", "orders", event, news=quiet,
                                   guard=DemotionGuard(lease_rev=state.lease_rev, last_used_at=used)) is True
    after = agents.load_state("a1")
    assert (after.change_seq, after.mcp_seen_seq, after.promotions) == (seq + 1, state.mcp_seen_seq, ())
    assert outbox.pending() == []
    run(outbox.mark_seen, "a1", seq + 1)
    assert agents.load_state("a1").mcp_seen_seq == seq + 1
    actions = sorted(event.action for event in run(history.list_events, "a1", limit=10).items)
    # the tour's four promotion changes (promoted, pinned, unpinned, demoted: all written with the
    # tour's one event) and the person's decisions on r2 and r3 (an expired RUNNING run decides nothing)
    assert actions == ["approved", "denied", "promote", "promote", "promote", "promote"], actions
    assert run(sweep.make_due, "a1", "acme", "orders", now, "idle") is False  # not promoted any more
    runs.start(new_run(5, RunStatus.RUNNING), use_due_at=week)  # demoted meanwhile: the run starts, unmarked
    assert set(agents.load_state("a1").leases) == {"r5"}

    # OAuth: a client and a code beside the admin tokens, the grant in a second agent's partition;
    # redeeming is one transaction over the code, the grant and the agent's settings item.
    client = OAuthClient("oc1", "Chat", ("https://chat.acme.test/cb",), "none", now)
    run(oauth.put_client, client, expires_at=now + timedelta(days=1))
    assert run(oauth.get_client, "oc1", now) == client
    run(oauth.keep_client, "oc1")
    # open registration's quota: a counter beside them, made by its first count
    quota = {"limit": 1, "expires_at": now + timedelta(hours=1)}
    assert run(oauth.count_up, "register#203.0.113.7#2026-11-30T07", **quota) is True
    assert oauth.count_up("register#203.0.113.7#2026-11-30T07", **quota) is False  # the quota holds
    # held listens: an account's slots beside them, taken and given back by conditional writes; a
    # take that finds its guess held reads the pool's other slots (BatchGetItem)
    taken = run(listens.take, "acct", limit=2, now=now, until=now + timedelta(seconds=30))
    assert listens.take("acct", limit=2, now=now, until=now + timedelta(seconds=30)) is not None
    assert taken is not None and listens.take("acct", limit=2, now=now, until=now) is None  # both slots are held
    run(listens.give_back, "acct", taken)
    code = AuthorizationCode("oc1", "https://chat.acme.test/cb", "c" * 43, "https://w.test/mcp", "mcp", "acct", "a2",
                             "g1", "admin", now + timedelta(minutes=5))
    run(oauth.put_code, "code-hash", code, forget_at=now + timedelta(days=1))
    assert run(oauth.get_code, "code-hash") == code
    run(agents.create_agent, replace(agent, agent_id="a2"), "key-hash-2")
    grant = Grant("g1", "oc1", "Chat", "mcp", "https://w.test/mcp", now, "admin", access_hash="at-1",
                  access_expires_at=now + timedelta(hours=1), refresh_hash="rt-1", refresh_expires_at=week)
    assert run(oauth.redeem, "code-hash", code, grant, now) is True
    assert oauth.redeem("code-hash", code, grant, now) is False  # once only
    assert run(oauth.rotate, "a2", "g1", presented_hash="rt-1", access_hash="at-2", access_expires_at=week,
               refresh_hash="rt-2", refresh_expires_at=week, now=now, spent_until=week) is True
    assert agents.load_state("a2").grants[0].previous_refresh_hash == "rt-1"
    assert run(oauth.spent_refresh, "rt-1", now) == ("a2", "g1")
    assert run(oauth.revoke_grant, "a2", "g1", now) is True
    assert run(agents.replace_key, "a2", "key-hash-3") is True
    assert run(agents.revoke_agent, "a2", now) is True
    assert agents.replace_key("a2", "key-hash-4") is False  # revoked: no new key
    assert run(agents.archive_agent, "a2", now) is True
    assert agents.load_state("a2").agent.archived_at == now

    # Connections: the secret goes to KMS with the account and connection as encryption context.
    ciphertext = run(vault.encrypt, "s3cret", account_id="acct", connection_id="cn1")
    assert b"s3cret" not in ciphertext
    run(connections.put, Connection(
        connection_id="cn1", account_id="acct", vendor="acme", auth_type="bearer", header_name="Authorization",
        hosts=("api.acme.test",), status=connections.ACTIVE, created_at=now, ciphertext=ciphertext,
    ))
    stored = run(connections.get, "acct", "cn1")
    assert stored is not None and stored.ciphertext == ciphertext and stored.hosts == ("api.acme.test",)
    assert run(vault.decrypt, stored.ciphertext, account_id="acct", connection_id="cn1") == "s3cret"
    assert [c.connection_id for c in run(connections.list_all, "acct", limit=10).items] == ["cn1"]
    assert run(connections.revoke, "acct", "cn1", now) is True
    assert connections.revoke("acct", "cn1", now) is False
    assert connections.get("acct", "cn1").status == connections.REVOKED
    assert run(connections.get, "other", "cn1") is None
    # Reconnected in place; an authorization's state used once; tokens kept over the version read.
    assert run(connections.replace_secret, "acct", "cn1", auth_type="bearer", ciphertext=ciphertext, oauth=None,
               status=connections.ACTIVE, now=now) is True
    assert run(connections.begin_authorization, "acct", "cn1", state_hash="h", session_hash="s",
               expires_at=now + timedelta(minutes=10)) is True
    assert run(connections.take_authorization, "acct", "cn1", state_hash="h", session_hash="s", now=now) is True
    assert connections.take_authorization("acct", "cn1", state_hash="h", session_hash="s", now=now) is False
    tokens = run(vault.encrypt, "{}", account_id="acct", connection_id="cn1", purpose="tokens")
    assert run(connections.connect, "acct", "cn1", token_ciphertext=tokens, expires_at=now, issued_at=now,
               now=now) is True
    read = connections.get("acct", "cn1").token_version
    # One call at a time holds the refresh lease; a lapsed one is taken over.
    assert run(connections.take_refresh, "acct", "cn1", read_version=read, owner="o1", now=now,
               until=now + timedelta(seconds=15)) is True
    assert connections.take_refresh("acct", "cn1", read_version=read, owner="o2", now=now, until=now) is False
    assert run(connections.release_refresh, "acct", "cn1", owner="o1") is True
    assert connections.release_refresh("acct", "cn1", owner="o1") is False
    assert run(connections.save_tokens, "acct", "cn1", token_ciphertext=tokens, expires_at=None, issued_at=None,
               read_version=read) is True
    assert connections.save_tokens("acct", "cn1", token_ciphertext=tokens, expires_at=None, issued_at=None,
                                   read_version=read) is False
    assert run(connections.mark_needs_reconnect, "acct", "cn1", reason="r", read_version=read + 1) is True
    assert run(connections.recent_calls, "acct", "cn1", limit=20).items == []

    # Queues: the sweep's batches (the queue made by `queues.ensure`, as conftest does; in AWS the
    # template declares it). Eleven bodies take two SendMessageBatch calls; the URL is looked up.
    queues._url.cache_clear()
    sweep_queue = app_config.settings().sweep_queue
    run(queues.send, sweep_queue, [{"agent_ids": [f"a{number}"]} for number in range(11)])
    sqs = unrecorded("sqs")
    attributes = sqs.get_queue_attributes(QueueUrl=sqs.get_queue_url(QueueName=sweep_queue)["QueueUrl"],
                                          AttributeNames=["ApproximateNumberOfMessages"])["Attributes"]
    assert attributes["ApproximateNumberOfMessages"] == "11"

    # The webhook deliveries: the API function and the sweep send them; the consumer puts a failed
    # one back after its backoff (sqs:ChangeMessageVisibility), on the queues that do so alone.
    for queue in (queue for queue in QUEUES if queue.retried_later):
        name = getattr(app_config.settings(), queue.setting)
        run(queues.send, name, [{"type": "tools_list_changed", "agent_id": "a1", "event_id": "evt_a1_1"}])
        url = sqs.get_queue_url(QueueName=name)["QueueUrl"]
        (message,) = sqs.receive_message(QueueUrl=url, VisibilityTimeout=600)["Messages"]
        assert json.loads(message["Body"])["event_id"] == "evt_a1_1"
        assert sqs.receive_message(QueueUrl=url).get("Messages", []) == []  # in flight
        run(queues.retry_later, name, message["ReceiptHandle"], 0)  # visible again at once
        (again,) = sqs.receive_message(QueueUrl=url, AttributeNames=["ApproximateReceiveCount"])["Messages"]
        assert again["MessageId"] == message["MessageId"] and again["Attributes"]["ApproximateReceiveCount"] == "2"
    return ran


# Store modules that talk to AWS only through the functions of the others, or not at all
# (`tables` creates tables: the operator CLI and tests do that, never the function).
NOT_CALLED_BY_THE_FUNCTION = {"base", "models", "records", "tables"}
# Public store functions that build items, attributes or update actions without calling AWS.
PURE = {"chalicelib.store.history.new_item", "chalicelib.store.history.decision_item", "chalicelib.store.agents.due_fields",
        "chalicelib.store.agents.review_actions", "chalicelib.store.agents.decision_record",
        "chalicelib.store.agents.idle_deadline",
        "chalicelib.store.base.page", "chalicelib.store.usage.pair_sk", "chalicelib.store.usage.memory_of",
        "chalicelib.store.usage.searches_of", "chalicelib.store.policies.setting_of",
        "chalicelib.store.history.history_record"}
# Public store functions that only the local stack and tests call: the deployed function must
# not be able to (the template makes the key and its alias), or need not (the template makes the
# queues, and Lambda's event sources receive and delete their messages).
NOT_DEPLOYED = {"chalicelib.store.vault.ensure_key", "chalicelib.store.queues.ensure",
                "chalicelib.store.queues.receive", "chalicelib.store.queues.delete"}


def public_store_functions() -> set[str]:
    names = set()
    for module_info in pkgutil.iter_modules(chalicelib.store.__path__):
        if module_info.name in NOT_CALLED_BY_THE_FUNCTION:
            continue
        module = importlib.import_module(f"chalicelib.store.{module_info.name}")
        for name, function in inspect.getmembers(module, inspect.isfunction):
            if function.__module__ == module.__name__ and not name.startswith("_"):
                names.add(f"{module.__name__}.{name}")
    return names - PURE - NOT_DEPLOYED


@pytest.fixture(name="store_calls")
def store_calls_fixture(record_aws: list[AwsCall]) -> list[Call]:
    """The authorizations every AWS call made by every store function needs."""
    key_arn = boto3.client("kms").describe_key(KeyId=app_config.settings().kms_key_id)["KeyMetadata"]["Arn"]
    del record_aws[:]
    ran = exercise_store()
    missing = public_store_functions() - ran
    assert not missing, f"store functions the policy check does not run (add them to exercise_store): {missing}"
    prefix = app_config.settings().table_prefix + "-"
    needed = []
    for service, operation, params, answer in record_aws:
        if service == "dynamodb":
            for call in dynamodb_calls(operation, params):
                assert call.table is not None and call.table.startswith(prefix), call
                needed.append(Call(call.action, call.table[len(prefix):], call.index))
        elif service == "kms":
            needed.append(kms_call(operation, params, answer, key_arn))
        elif service == "sqs":
            call = sqs_call(operation, params)
            assert call.queue is not None and call.queue.startswith(prefix), call
            needed.append(Call(call.action, queue=call.queue[len(prefix):]))
        else:
            raise AssertionError(f"the store calls {service}:{operation}; the policies know nothing of {service}")
    return needed
