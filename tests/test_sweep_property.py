"""Property: whatever the schedule of promotions, pins, calls, runs and sweeps, the sweep never
demotes a tool used inside the idle window, nor a pinned tool (for idle or for cap: the cap's
candidates are only the unpinned), nor anything while the agent has a run in flight."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from chalicelib.agents import sweep, workingset
from chalicelib.base.causes import Cause, PromotedBy
from chalicelib.base.clock import utcnow
from chalicelib.base.errors import NotPromoted, PinLimit
from chalicelib.calls import runs
from chalicelib.identity import accounts
from chalicelib.store import agents as agent_store
from tests.conftest import Admin, Vendor

TOOLS = ["t0", "t1", "t2", "t3"]
APPROVAL_WAIT = timedelta(hours=24)  # the default approval TTL: a waiting run's lease

# weighted so that the interesting interleavings (several promotions, a run in flight, a sweep
# a day or two later) come up within a few dozen examples
steps = st.lists(
    st.one_of(
        st.tuples(st.sampled_from(["advance", "advance"]), st.integers(min_value=6, max_value=60)),
        st.tuples(st.sampled_from(["promote", "promote", "promote", "call", "call", "pin", "pin", "unpin"]),
                  st.sampled_from(TOOLS)),
        st.tuples(st.sampled_from(["start_run", "end_run", "sweep", "sweep"]), st.just("")),
    ),
    min_size=3,
    max_size=16,
)


@dataclass
class Model:
    """What the test knows happened: promotions, last uses, pins, runs in flight."""

    promoted_at: dict[str, datetime] = field(default_factory=dict)
    last_use: dict[str, datetime] = field(default_factory=dict)
    pinned: set[str] = field(default_factory=set)
    waiting: list[tuple[str, datetime]] = field(default_factory=list)  # run id, lease expiry


class Clock:
    """One clock for all examples, always moving forward (old agents stay in the shared tables)."""

    now = utcnow()


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(cap=st.integers(min_value=1, max_value=3), window=st.integers(min_value=1, max_value=2),
       first=st.permutations(TOOLS), pins=st.lists(st.sampled_from(TOOLS), max_size=2), schedule=steps)
def test_the_sweep_never_demotes_a_tool_in_use(admin: Admin, vendor: Vendor, cap: int, window: int,
                                               first: list[str], pins: list[str],
                                               schedule: list[tuple[str, object]]) -> None:
    """Every schedule starts with all four tools promoted (above any cap) and some pinned, then
    anything goes."""
    account_id = accounts.authenticate_admin(admin.token)
    _publish_once(admin, vendor)
    agent = accounts.create_agent(account_id, {"name": "prop", "cap": cap, "idle_window_days": window},
                                  Clock.now).agent
    model = Model()
    Clock.now += timedelta(days=30)
    start = [("promote", name) for name in first] + [("pin", name) for name in pins]
    for action, argument in start + schedule:
        now = Clock.now
        state = agent_store.load_state(agent.agent_id)
        assert state is not None
        if action == "advance":
            Clock.now += timedelta(hours=int(argument))  # type: ignore[call-overload]
        elif action == "promote":
            if workingset.promote(state, "shop", str(argument), by=PromotedBy.AGENT, actor="prop", now=now).changed:
                model.promoted_at[str(argument)] = now
                model.last_use.pop(str(argument), None)
        elif action == "pin":
            try:
                if workingset.pin(state, "shop", str(argument), cause=Cause.AGENT_ASKED, actor="prop", now=now).changed:
                    model.pinned.add(str(argument))
            except (NotPromoted, PinLimit):
                assert str(argument) not in model.promoted_at or len(model.pinned) >= workingset.pin_limit(cap)
        elif action == "unpin":
            workingset.unpin(state, "shop", str(argument), cause=Cause.AGENT_ASKED, actor="prop", now=now)
            model.pinned.discard(str(argument))
        elif action == "call":
            runs.call(state, "shop", str(argument), {}, dry_run=False, now=now)
            if str(argument) in model.promoted_at:
                model.last_use[str(argument)] = now
        elif action == "start_run":
            answer = runs.call(state, "shop", "write", {}, dry_run=False, now=now)
            model.waiting.append((answer.structured["run_id"], now + APPROVAL_WAIT))
        elif action == "end_run" and model.waiting:
            run_id, expiry = model.waiting.pop(0)
            if expiry > now:
                runs.deny(account_id, run_id, "admin", now)
                # the denial would stand; a person withdraws it so the next call waits again
                runs.withdraw_decision(account_id, agent.agent_id, "shop", "write")
        elif action == "sweep":
            report = sweep.run(now, account_id=account_id)
            _check(report, agent.agent_id, model, now, timedelta(days=window), in_flight_before=state.in_flight(now))
        Clock.now += timedelta(seconds=1)


def _check(report: sweep.Report, agent_id: str, model: Model, now: datetime, window: timedelta, *,
           in_flight_before: bool) -> None:
    mine = [d for d in report.demoted if d["agent_id"] == agent_id]
    in_flight = any(expiry > now for _, expiry in model.waiting)
    assert not (mine and in_flight), f"demoted {mine} while a run was in flight"
    for demotion in mine:
        name = demotion["name"]
        assert name not in model.pinned, f"demoted the pinned {name}: {demotion}"
        last_use = model.last_use.get(name)
        assert last_use is None or last_use + window < now, f"{name} was used inside the window: {demotion}"
        if demotion["cause"] == "idle":
            assert (last_use or model.promoted_at[name]) + window < now
        else:
            assert demotion["cause"] == "cap" and last_use is None
        model.promoted_at.pop(name)
        model.last_use.pop(name, None)
    state = agent_store.load_state(agent_id)
    assert state is not None
    assert {p.name for p in state.promotions if p.pinned} == model.pinned  # every pin survived the sweep
    if not in_flight_before:  # the cap's candidates ran out before the set fit, or it fits
        unpinned_never_called = [p.name for p in state.promotions if not p.pinned and p.last_used_at is None]
        assert len(state.promotions) <= state.agent.cap or not unpinned_never_called, state.promotions


def _publish_once(admin: Admin, vendor: Vendor) -> None:
    if admin.call("GET", "/v1/tools/shop/write").status_code == 200:
        return
    for name in TOOLS:
        admin.publish(vendor="shop", name=name, description=f"Tool {name}.", annotations={"readOnlyHint": True},
                      input_schema={"type": "object"}, request={"method": "GET", "url": f"{vendor.url}/{name}"})
    admin.publish(vendor="shop", name="write", description="A write.", annotations={"destructiveHint": False},
                  input_schema={"type": "object"}, request={"method": "POST", "url": f"{vendor.url}/write"})
