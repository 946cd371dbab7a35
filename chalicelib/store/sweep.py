"""What the sweep reads and the bookkeeping it writes. Everything here is a query of a sparse
index or a write to one item: the due and review indexes cost 2 x SHARDS queries per sweep
(the outbox drain another SHARDS), whatever the size of the fleet."""

from __future__ import annotations

from datetime import datetime

from chalicelib.store.agents import due_fields, review_actions
from chalicelib.store.base import update_if
from chalicelib.store.models import AGENT_SK, SHARDS, AgentSettingsItem, PromotionItem, promotion_sk


def due_agents(now: datetime) -> dict[str, str | None]:
    """Agents with a promotion whose idle deadline has passed (agent id -> account id, if known)."""
    found: dict[str, str | None] = {}
    for index in range(SHARDS):
        for item in PromotionItem.due.query(f"s{index}", PromotionItem.due_at <= now):
            found[item.agent_id] = (item.tool_key or "").split("#", 1)[0] or None
    return found


def agents_to_review() -> dict[str, str | None]:
    """Agents flagged for a whole review (agent id -> account id)."""
    found: dict[str, str | None] = {}
    for index in range(SHARDS):
        for item in AgentSettingsItem.to_review.query(f"s{index}"):
            found[item.agent_id] = item.account_id
    return found


def clear_review(agent_id: str, token: str) -> bool:
    """Drop the flag the sweep acted on; a flag set again meanwhile (another token) stays."""
    return update_if(
        AgentSettingsItem(agent_id=agent_id, sk=AGENT_SK),
        [AgentSettingsItem.review_shard.remove(), AgentSettingsItem.review_token.remove()],
        AgentSettingsItem.review_token == token,
    )


def move_deadline(agent_id: str, vendor: str, name: str, due_at: datetime, *,
                  last_used_at: datetime | None) -> bool:
    """Correct a promotion's idle deadline, unless it was used (or pinned) since it was read."""
    condition = PromotionItem.sk.exists() & PromotionItem.pinned_at.does_not_exist() & (
        PromotionItem.last_used_at == last_used_at if last_used_at is not None
        else PromotionItem.last_used_at.does_not_exist()
    )
    actions = [getattr(PromotionItem, key).set(value) for key, value in due_fields(agent_id, due_at).items()]
    return update_if(PromotionItem(agent_id=agent_id, sk=promotion_sk(vendor, name)), actions, condition)


def leave_due(agent_id: str, vendor: str, name: str) -> bool:
    """Take a pinned promotion out of the `due` index (a use that raced its pin put it back), unless
    it was unpinned, or made due by a revocation, since it was read."""
    condition = PromotionItem.pinned_at.exists() & PromotionItem.due_cause.does_not_exist()
    return update_if(PromotionItem(agent_id=agent_id, sk=promotion_sk(vendor, name)),
                     [PromotionItem.due_at.remove(), PromotionItem.due_shard.remove()], condition)


def make_due(agent_id: str, vendor: str, name: str, now: datetime, cause: str) -> bool:
    """Make a promotion due at once with its own cause, and flag its agent for the sweep."""
    actions = [PromotionItem.due_cause.set(cause),
               *(getattr(PromotionItem, key).set(value) for key, value in due_fields(agent_id, now).items())]
    marked = update_if(PromotionItem(agent_id=agent_id, sk=promotion_sk(vendor, name)), actions,
                     PromotionItem.sk.exists())
    if marked:
        update_if(AgentSettingsItem(agent_id=agent_id, sk=AGENT_SK), review_actions(agent_id),
                AgentSettingsItem.agent_id.exists())
    return marked
