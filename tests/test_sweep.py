"""The rule, case by case from the seed: idle, then cap, never while a run is in flight."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

import pytest

from chalicelib.base.clock import iso, utcnow
from chalicelib.store import agents as agent_store
from tests.conftest import Admin, Mcp, Vendor

DAY = timedelta(days=1)


class World:
    """One agent over a toolbox of read tools, and the sweep run at chosen moments."""

    def __init__(self, admin: Admin, mcp: Mcp, vendor: Vendor, agent: dict[str, Any]) -> None:
        self.admin, self.mcp, self.vendor, self.agent = admin, mcp, vendor, agent

    def publish(self, *names: str, write: bool = False) -> None:
        for name in names:
            annotations = {"destructiveHint": False} if write else {"readOnlyHint": True}
            self.admin.publish(vendor="shop", name=name, description=f"The {name} tool.", annotations=annotations,
                               input_schema={"type": "object"},
                               request={"method": "POST" if write else "GET", "url": f"{self.vendor.url}/{name}"})

    def promote(self, *names: str, mcp: Mcp | None = None) -> None:
        for name in names:
            (mcp or self.mcp).call("promote", {"vendor": "shop", "name": name})

    def use(self, name: str, mcp: Mcp | None = None) -> dict[str, Any]:
        """A call of the tool (a use, when it is promoted); run_tool also reaches a demoted one."""
        return (mcp or self.mcp).call("run_tool", {"vendor": "shop", "name": name, "input": {}})

    def sweep(self, at: datetime) -> dict[str, Any]:
        response = self.admin.call("POST", "/v1/sweep", {"now": iso(at)})
        assert response.status_code == 200, response.body
        return response.json_body

    def working_set(self, agent: dict[str, Any] | None = None) -> list[str]:
        agent_id = (agent or self.agent)["id"]
        return [i["name"] for i in self.admin.call("GET", f"/v1/agents/{agent_id}/working-set").json_body["items"]]

    def demotions(self, agent: dict[str, Any] | None = None) -> list[tuple[str, str]]:
        agent_id = (agent or self.agent)["id"]
        events = self.admin.call("GET", f"/v1/agents/{agent_id}/history").json_body["items"]
        return [(e["name"], e["cause"]) for e in reversed(events) if e["action"] == "demoted"]

    def settings(self, **changes: Any) -> None:
        assert self.admin.call("PATCH", f"/v1/agents/{self.agent['id']}", changes).status_code == 200

    def other_agent(self) -> tuple[dict[str, Any], Mcp]:
        agent = self.admin.create_agent("other")
        return agent, Mcp(self.mcp.client, agent["api_key"])


@pytest.fixture
def world(admin: Admin, mcp: Mcp, vendor: Vendor, agent: dict[str, Any]) -> World:
    return World(admin, mcp, vendor, agent)


def test_never_used_tool_past_the_window_is_demoted_idle(world: World) -> None:
    world.publish("a")
    world.promote("a")
    assert world.sweep(utcnow() + 20 * DAY)["demoted"] == []
    report = world.sweep(utcnow() + 22 * DAY)
    assert [(d["name"], d["cause"]) for d in report["demoted"]] == [("a", "idle")]
    assert world.working_set() == []
    assert world.demotions() == [("a", "idle")]


def test_used_tool_past_the_window_is_demoted_idle_and_counts_from_its_use(world: World) -> None:
    world.publish("a")
    world.promote("a")
    world.use("a")
    used_at = utcnow()
    assert world.sweep(used_at + 20 * DAY)["demoted"] == []
    assert world.sweep(used_at + 22 * DAY)["demoted"][0]["cause"] == "idle"
    assert world.working_set() == []


def test_promoted_and_forgotten_goes_before_used_yesterday_under_the_cap(world: World) -> None:
    # GIVEN cap 1, one tool promoted and never called, one promoted and called
    world.settings(cap=1)
    world.publish("forgotten", "used")
    world.promote("forgotten", "used")
    world.use("used")
    # WHEN the sweep runs a day later
    report = world.sweep(utcnow() + DAY)
    # THEN the cap demotes the forgotten one only
    assert [(d["name"], d["cause"]) for d in report["demoted"]] == [("forgotten", "cap")]
    assert world.working_set() == ["used"]


def test_a_set_whose_tools_are_all_in_use_stays_above_the_cap(world: World) -> None:
    world.settings(cap=1)
    world.publish("a", "b", "c")
    world.promote("a", "b", "c")
    for name in ("a", "b", "c"):
        world.use(name)
    assert world.sweep(utcnow() + DAY)["demoted"] == []
    assert world.working_set() == ["a", "b", "c"]


def test_cap_demotes_oldest_promotion_first_until_the_set_fits(world: World) -> None:
    world.settings(cap=1)
    world.publish("first", "second", "third")
    world.promote("first", "second", "third")
    report = world.sweep(utcnow() + DAY)
    assert [d["name"] for d in report["demoted"]] == ["first", "second"]
    assert world.working_set() == ["third"]


def test_a_sweep_that_started_before_the_promotion_over_the_cap_lists_its_demotion_after_it(world: World) -> None:
    # GIVEN a cap of 1 and two promotions, the second made after the sweep's clock was read
    world.settings(cap=1)
    world.publish("first", "second")
    started = utcnow()
    world.promote("first", "second")
    # WHEN that sweep demotes for the cap
    world.sweep(started - timedelta(seconds=5))
    # THEN History lists the demotion after the promotion that caused it, not before
    events = world.admin.call("GET", f"/v1/agents/{world.agent['id']}/history").json_body["items"]
    assert [(e["name"], e["action"]) for e in events] == [("first", "demoted"), ("second", "promoted"),
                                                          ("first", "promoted")]
    assert events[0]["at"] >= events[1]["at"]


def test_a_lowered_cap_is_applied_by_the_next_sweep_and_only_by_it(world: World) -> None:
    world.publish("a", "b", "c")
    world.promote("a", "b", "c")
    world.settings(cap=1)
    assert world.working_set() == ["a", "b", "c"]  # the edit itself demotes nothing
    world.sweep(utcnow())
    assert world.working_set() == ["c"]
    assert world.demotions() == [("a", "cap"), ("b", "cap")]


def test_a_shortened_window_is_applied_by_the_next_sweep(world: World) -> None:
    world.publish("a")
    world.promote("a")
    assert world.sweep(utcnow() + 5 * DAY)["demoted"] == []
    world.settings(idle_window_days=3)
    assert world.working_set() == ["a"]
    assert world.sweep(utcnow() + 5 * DAY)["demoted"][0]["cause"] == "idle"


def test_a_lengthened_window_keeps_a_tool_that_was_due(world: World) -> None:
    world.publish("a")
    world.promote("a")
    world.settings(idle_window_days=60)
    assert world.sweep(utcnow() + 30 * DAY)["demoted"] == []
    assert world.working_set() == ["a"]
    assert world.sweep(utcnow() + 61 * DAY)["demoted"][0]["cause"] == "idle"


@pytest.mark.parametrize("kind", ["awaiting_approval", "running"])
def test_a_run_in_flight_blocks_every_demotion_of_that_agent_and_not_of_others(
    world: World, settings_env, monkeypatch: pytest.MonkeyPatch, kind: str
) -> None:
    # GIVEN two agents with idle tools, and the first agent with a run in flight for 60 days
    settings_env(WORKSET_APPROVAL_TTL_SECONDS=str(60 * 86400), WORKSET_LEASE_MARGIN_SECONDS=str(60 * 86400))
    world.publish("a", "b", "r")
    world.publish("w", write=True)
    other, other_mcp = world.other_agent()
    world.promote("a", "b")
    world.promote("a", mcp=other_mcp)
    if kind == "awaiting_approval":
        assert world.use("w")["structuredContent"]["status"] == "awaiting_approval"
    else:
        _start_a_run_that_never_ends(world, monkeypatch)
    # WHEN the sweep runs past the window
    report = world.sweep(utcnow() + 22 * DAY)
    # THEN nothing of the first agent is demoted (it is reported held) and the other agent's is
    assert {d["agent_id"] for d in report["demoted"]} == {other["id"]}
    assert {(h["name"], h["reason"]) for h in report["held"]} == {("a", "run_in_flight"), ("b", "run_in_flight")}
    assert world.working_set() == ["a", "b"]
    assert world.working_set(other) == []


def test_a_run_starting_between_the_sweeps_read_and_write_wins(world: World, monkeypatch: pytest.MonkeyPatch) -> None:
    # GIVEN an idle tool, and a run of the same agent that starts right after the sweep read it
    world.publish("a", "b")
    world.promote("a", "b")
    original = agent_store.remove_promotion
    interleaved = []

    def run_starts_first(*args: Any, **kwargs: Any) -> bool:
        if not interleaved:
            interleaved.append(world.use("b"))  # a run starts (and ends) between read and write
        return original(*args, **kwargs)

    monkeypatch.setattr(agent_store, "remove_promotion", run_starts_first)
    # WHEN the sweep tries to demote
    report = world.sweep(utcnow() + 22 * DAY)
    # THEN the demotion failed, was not retried, and everything stays
    assert report["demoted"] == []
    assert report["held"][0]["reason"] == "changed_since_read"
    assert world.working_set() == ["a", "b"]
    assert interleaved


def test_an_expired_lease_no_longer_blocks(world: World, monkeypatch: pytest.MonkeyPatch) -> None:
    world.publish("a", "r")
    world.promote("a")
    _start_a_run_that_never_ends(world, monkeypatch)
    report = world.sweep(utcnow() + 22 * DAY)  # the lease (vendor timeout + margin) ran out long ago
    assert [d["name"] for d in report["demoted"]] == ["a"]
    state = agent_store.load_state(world.agent["id"])
    assert state is not None and state.leases == {}


def test_nothing_is_deleted_and_a_demoted_tool_comes_back_with_its_approval(world: World) -> None:
    # GIVEN an approved write tool that ages out
    world.publish("w", write=True)
    world.promote("w")
    run_id = world.use("w")["structuredContent"]["run_id"]
    world.admin.call("POST", f"/v1/approvals/{run_id}/approve")
    world.sweep(utcnow() + 22 * DAY)
    assert world.working_set() == []
    # THEN find_tool still finds it, promote brings it back, and it runs without asking again
    hit = world.mcp.call("find_tool", {"query": "w tool"})["structuredContent"]["hits"][0]
    assert (hit["name"], hit["promoted"]) == ("w", False)
    world.promote("w")
    assert world.use("w")["structuredContent"] == {"orders": [{"id": 1}]}


def test_revocation_demotes_for_every_agent_except_one_in_flight_until_a_later_sweep(
    world: World, settings_env, monkeypatch: pytest.MonkeyPatch
) -> None:
    # GIVEN a tool with a connection, promoted by two agents, the first one in flight
    settings_env(WORKSET_LEASE_MARGIN_SECONDS=str(3600))
    connection = world.admin.call("POST", "/v1/connections",
                                  {"vendor": "shop", "auth": {"type": "bearer", "token": "secret"}}).json_body
    world.admin.publish(vendor="shop", name="charges", description="Charges.", annotations={"readOnlyHint": True},
                        input_schema={"type": "object"}, connection=connection["id"],
                        request={"method": "GET", "url": f"{world.vendor.url}/charges"})
    world.publish("r")
    other, other_mcp = world.other_agent()
    world.promote("charges")
    world.promote("charges", mcp=other_mcp)
    _start_a_run_that_never_ends(world, monkeypatch)
    # WHEN the connection is revoked
    revoked = world.admin.call("POST", f"/v1/connections/{connection['id']}/revoke").json_body
    # THEN the other agent's tool is demoted now, the first agent's is held
    assert [(d["agent_id"], d["cause"]) for d in revoked["demoted"]] == [(other["id"], "connection_revoked")]
    assert world.working_set(other) == []
    assert world.working_set() == ["charges"]
    # AND a later sweep, once the run is over, demotes it with the same cause
    world.sweep(utcnow() + 2 * 3600 * timedelta(seconds=1))
    assert world.working_set() == []
    assert world.demotions() == [("charges", "connection_revoked")]


def test_now_override_is_refused_outside_local_stages(world: World, settings_env) -> None:
    settings_env(WORKSET_STAGE="prod")
    response = world.admin.call("POST", "/v1/sweep", {"now": iso(utcnow())})
    assert response.status_code == 400
    assert response.json_body["error"]["field"] == "now"


def test_the_scheduled_function_runs_the_sweep(world: World, client) -> None:
    # GIVEN a tool whose idle deadline has passed (a one-day window, promoted two days ago)
    world.publish("a")
    world.promote("a")
    world.settings(idle_window_days=1)
    _backdate_promotion(world.agent["id"], "shop", "a", utcnow() - 2 * DAY)
    # WHEN the schedule fires
    event = client.events.generate_cw_event(source="aws.events", detail_type="Scheduled Event", detail={},
                                            resources=["arn:aws:events:us-east-1:123456789012:rule/sweep"])
    client.lambda_.invoke("sweep", event)
    # THEN the rule ran
    assert world.working_set() == []


def _start_a_run_that_never_ends(world: World, monkeypatch: pytest.MonkeyPatch) -> None:
    """A read run whose Lambda dies after the run started: its lease is left to expire."""

    def dies(*args: Any, **kwargs: Any) -> None:
        raise SystemExit("the Lambda died mid-run")

    with monkeypatch.context() as patch:
        patch.setattr("chalicelib.calls.vendor.perform", dies)
        with pytest.raises(SystemExit):
            world.mcp.call("run_tool", {"vendor": "shop", "name": "r", "input": {}})


def _backdate_promotion(agent_id: str, vendor: str, name: str, when: datetime) -> None:
    from chalicelib.store.models import PromotionItem, promotion_sk

    PromotionItem(agent_id=agent_id, sk=promotion_sk(vendor, name)).update(
        actions=[PromotionItem.promoted_at.set(when)])



def test_a_large_sweep_is_fanned_out_to_workers_through_sqs(world: World, client, monkeypatch) -> None:
    # GIVEN three agents over their cap, and a sweep that handles at most one agent inline
    from chalicelib.agents import sweep
    from chalicelib.base.config import settings
    from chalicelib.store import queues

    monkeypatch.setattr(sweep, "INLINE_AGENTS", 1)
    world.publish("a", "b")
    agents = [world.other_agent() for _ in range(3)]
    for agent, mcp in agents:
        world.admin.call("PATCH", f"/v1/agents/{agent['id']}", {"cap": 1})
        world.promote("a", "b", mcp=mcp)
    # WHEN the scheduled sweep runs, then the worker takes what it queued
    report = sweep.run(utcnow(), dispatch=sweep.queue_dispatch)
    messages = queues.receive(settings().sweep_queue)
    event = client.events.generate_sqs_event(message_bodies=[m["Body"] for m in messages],
                                             queue_name=settings().sweep_queue)
    client.lambda_.invoke("sweep_worker", event)
    # THEN the planner demoted nothing itself, one message carried the batch, the worker applied the rule
    assert (report.dispatched, report.demoted, len(messages)) == (3, [], 1)
    for agent, _ in agents:
        assert world.working_set(agent) == ["b"]
