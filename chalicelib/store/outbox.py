"""The outbox of working-set changes: which agents have news for their webhook, and which change
each MCP client of an agent has been told about."""

from __future__ import annotations

from chalicelib.store.base import update_if
from chalicelib.store.models import AGENT_SK, SHARDS, AgentSettingsItem


def pending() -> list[str]:
    """Agents whose latest change has not been handed to the webhook queue."""
    return [item.agent_id for index in range(SHARDS) for item in AgentSettingsItem.outbox.query(f"s{index}")]


def clear(agent_id: str, seq: int) -> bool:
    """Take the agent out of the outbox if no change came after `seq` (else it stays, and the
    next drain announces the newer change too)."""
    return update_if(AgentSettingsItem(agent_id=agent_id, sk=AGENT_SK), [AgentSettingsItem.outbox_shard.remove()],
                     AgentSettingsItem.change_seq == seq)


def change_seq(agent_id: str) -> int:
    """The agent's change counter now (one strongly consistent read)."""
    item = AgentSettingsItem.get(agent_id, AGENT_SK, consistent_read=True, attributes_to_get=["change_seq"])
    return int(item.change_seq or 0)


def mark_seen(agent_id: str, seq: int) -> None:
    """Record that an MCP response carried the news up to `seq` (never moves backwards)."""
    update_if(AgentSettingsItem(agent_id=agent_id, sk=AGENT_SK), [AgentSettingsItem.mcp_seen_seq.set(seq)],
              AgentSettingsItem.mcp_seen_seq < seq)
