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
