"""An account holds at most WORKSET_MAX_LISTENS_PER_ACCOUNT `subscriptions/listen` requests at once
(each holds one Lambda execution: README.md, "Deploying to AWS", what a listen costs). Past it a
listen is refused at once with a JSON-RPC error and holds nothing; a slot comes back when its listen
ends, and by the clock when the Lambda that held it died.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from pynamodb.exceptions import UpdateError

from chalicelib.agents import workingset
from chalicelib.base.clock import utcnow
from chalicelib.base.config import settings
from chalicelib.base.errors import ListenLimit
from chalicelib.mcp import server
from chalicelib.store import agents, listens
from tests.conftest import Mcp


def test_an_account_holds_at_most_its_limit_and_a_slot_comes_back(settings_env: Any) -> None:
    now = utcnow()
    until = now + timedelta(seconds=30)
    held = [listens.take("acct-1", limit=3, now=now, until=until) for _ in range(3)]
    assert None not in held and len({h.split(":")[0] for h in held if h}) == 3  # three different slots
    assert listens.take("acct-1", limit=3, now=now, until=until) is None  # the fourth waits
    assert listens.take("acct-2", limit=3, now=now, until=until) is not None  # another account's are its own
    listens.give_back("acct-1", held[0] or "")
    assert listens.take("acct-1", limit=3, now=now, until=until) is not None


def test_a_dead_holders_slot_frees_by_the_clock_and_a_late_give_back_frees_nothing() -> None:
    now = utcnow()
    first = listens.take("acct-1", limit=1, now=now, until=now + timedelta(seconds=30))
    assert first is not None
    later = now + timedelta(seconds=31)  # the holder died: its time ran out
    second = listens.take("acct-1", limit=1, now=later, until=later + timedelta(seconds=30))
    assert second is not None
    listens.give_back("acct-1", first)  # the dead holder's late give-back
    assert listens.take("acct-1", limit=1, now=later, until=later) is None  # the second still holds it


def _listen(mcp: Mcp) -> Any:
    mcp.modern = True
    return mcp.post("subscriptions/listen", {"notifications": {"toolsListChanged": True}})


def test_past_the_limit_a_listen_is_refused_and_holds_nothing(
        mcp: Mcp, agent: dict[str, Any], settings_env: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    # GIVEN an account allowed one held listen, which another request holds
    settings_env(WORKSET_MAX_LISTENS_PER_ACCOUNT="1")
    held: list[bool] = []
    monkeypatch.setattr(workingset, "wait_for_change", lambda state, hold_seconds: held.append(True) or False)
    state = agents.load_state(agent["id"])
    assert state is not None
    with workingset.listen_slot(state, utcnow(), hold_seconds=settings().listen_hold_seconds):
        # WHEN the agent listens again
        answer = _listen(mcp)
        # THEN it is refused with a JSON-RPC error that says why, and nothing was held
        assert answer.json_body["error"]["code"] == server.LISTEN_LIMITED, answer.json_body
        assert "1 listens at once" in answer.json_body["error"]["message"]
        assert held == []
    # AND once that listen ended, the next one is held (and gives its slot back)
    answer = _listen(mcp)
    assert "error" not in answer.json_body and held == [True]
    answer = _listen(mcp)
    assert "error" not in answer.json_body and held == [True, True]
    with pytest.raises(ListenLimit), workingset.listen_slot(state, utcnow(), hold_seconds=1), \
            workingset.listen_slot(state, utcnow(), hold_seconds=1):
        pass


def test_a_slot_that_cannot_be_given_back_does_not_fail_the_answer(
        mcp: Mcp, settings_env: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    # GIVEN a store that fails when the listen gives its slot back (the slot frees by the clock)
    settings_env(WORKSET_LISTEN_HOLD_SECONDS="0")
    monkeypatch.setattr(workingset, "wait_for_change", lambda state, hold_seconds: False)

    def failing(account_id: str, taken: str) -> None:
        raise UpdateError("UpdateItem", "throttled")

    monkeypatch.setattr(listens, "give_back", failing)
    # WHEN the agent listens
    answer = _listen(mcp)
    # THEN the listen is answered as it would be (acknowledged, then closed), not crashed
    assert answer.status_code == 200 and answer.json_body["result"]["resultType"] == "complete", answer.json_body


# --- what a slot costs, and what it leaves in the table ----------------------------------------------

@pytest.mark.parametrize("pool", ["", workingset.APPROVAL_HOLDS])
def test_a_refusal_costs_one_write_and_one_read_whatever_the_limit(pool: str) -> None:
    # GIVEN an account whose 25 slots of the pool are all held
    from bench.dynamo_calls import DynamoCalls

    now = utcnow()
    until = now + timedelta(seconds=30)
    held = [listens.take("acct-1", limit=25, now=now, until=until, pool=pool) for _ in range(25)]
    assert None not in held
    counter = DynamoCalls().install()
    # WHEN another take is refused
    with counter.measure() as made:
        refused = listens.take("acct-1", limit=25, now=now, until=until, pool=pool)
    # THEN it cost one conditional write (the guess) and one read of the pool, not a write per slot
    assert refused is None
    assert sorted(made) == ["BatchGetItem", "UpdateItem"], made


def test_a_take_in_a_busy_pool_writes_only_to_the_free_slot() -> None:
    # GIVEN 9 of an account's 10 slots held
    from bench.dynamo_calls import DynamoCalls

    now = utcnow()
    until = now + timedelta(seconds=30)
    held = [listens.take("acct-1", limit=10, now=now, until=until) for _ in range(10)]
    listens.give_back("acct-1", held[4] or "")
    counter = DynamoCalls().install()
    # WHEN another listen takes one
    with counter.measure() as made:
        taken = listens.take("acct-1", limit=10, now=now, until=until)
    # THEN it has the free slot, after at most two writes (its guess, then the slot the read found free)
    assert taken is not None and taken.split(":")[0] == (held[4] or "").split(":")[0]
    assert made.count("UpdateItem") <= 2 and made.count("BatchGetItem") <= 1, made


def test_a_slot_given_back_keeps_its_ttl_so_dynamodb_drops_it() -> None:
    # GIVEN a slot taken and given back
    from chalicelib.store.models import LISTEN_SLOT_PREFIX, ListenSlotItem

    now = utcnow()
    taken = listens.take("acct-1", limit=1, now=now, until=now + timedelta(seconds=30))
    assert taken is not None
    listens.give_back("acct-1", taken)
    # THEN its item still carries the TTL (else it would stay in the table forever), and it is free
    item = ListenSlotItem.get(f"{LISTEN_SLOT_PREFIX}acct-1#0", consistent_read=True)
    assert item.ttl is not None and item.holder is None
    assert listens.take("acct-1", limit=1, now=now, until=now + timedelta(seconds=30)) is not None


def test_a_slot_freed_before_slots_kept_their_ttl_is_free() -> None:
    # GIVEN a slot given back the old way: its holder kept, its ttl removed
    from chalicelib.store.models import LISTEN_SLOT_PREFIX, ListenSlotItem

    ListenSlotItem(token_hash=f"{LISTEN_SLOT_PREFIX}acct-1#0", holder="0123456789abcdef").save()
    # WHEN a listen takes a slot THEN it gets it
    now = utcnow()
    assert listens.take("acct-1", limit=1, now=now, until=now + timedelta(seconds=30)) is not None


def test_a_stale_read_never_lets_two_hold_one_slot(monkeypatch: pytest.MonkeyPatch) -> None:
    # GIVEN a full pool, and a read that (stale, or raced) says every slot is free
    now = utcnow()
    until = now + timedelta(seconds=30)
    held = {listens.take("acct-1", limit=5, now=now, until=until) for _ in range(5)}
    assert None not in held
    monkeypatch.setattr(listens, "_held", lambda account_id, slots, now: set())
    # WHEN another take tries those slots THEN each conditional write refuses, and it holds nothing
    assert listens.take("acct-1", limit=5, now=now, until=until) is None
