"""The working set, declared as an MCP extension (SEP-2133; 2026-07-28 basic/versioning,
"Extension Negotiation": the `extensions` capability maps an identifier with a vendor prefix to
a settings object). It tells a client, in `server/discover` and `initialize` alike, what the
2026-07-28 tools page would otherwise forbid silently: the list varies by the agent the request
authenticates as, and changes when that agent asks (`promote`, `demote`, `acquire`) or when the
rule, a person or a revocation moves its tools (every `causes.Cause`), and how each change is
announced. A client that does not know the extension loses nothing ("revert to core protocol
behavior"): `tools/list` is never cached (`ttlMs: 0`), and `run_tool` calls any tool by name.
The identifier uses Workset's own prefix, as its `_meta` keys do (`io.workset/runId`).
"""

from __future__ import annotations

from typing import Any

from chalicelib.base.causes import Cause

WORKING_SET = "io.workset/working-set"
CHANGING_TOOLS = ("promote", "demote", "acquire")  # the meta-tools whose call changes the caller's list
LIST_CHANGED = "notifications/tools/list_changed"


def working_set(list_ttl_ms: int) -> dict[str, Any]:
    """The extension's settings object: what changes the list, and how a change is announced."""
    return {
        "version": 1,
        "listVariesBy": "authorization",  # the authenticated agent's own list, never per connection
        "changedByTools": list(CHANGING_TOOLS),
        "changeCauses": [cause.value for cause in Cause],  # as History records them
        "announcements": {
            "2026-07-28": {"method": "subscriptions/listen", "notifications": {"toolsListChanged": True},
                           "notification": LIST_CHANGED},
            "2025-11-25": {"on": "response", "notification": LIST_CHANGED,
                           "note": "before the result of the call that changed the list; a change made "
                                   "elsewhere rides on the agent's next response, once"},
            "webhook": {"notification": LIST_CHANGED, "note": "to the agent's webhook_url, signed"},
        },
        "listTtlMs": list_ttl_ms,
        "fallback": "run_tool calls any toolbox tool by name; promote answers the promoted tool's definition",
    }
