"""What the console's pictures show, read from what the store already keeps: an agent's History
(its working set's size, promotions and demotions by cause, day by day over the last 30 days)
and runs (each tool's calls), and for the toolbox the calls per tool and the context tokens each
agent is spared.

Every read is bounded, whatever the data: an agent's picture reads at most READ_PAGES pages of
its History and READ_PAGES of its runs (READ_PAGE items each, newest first, stopping at the
window's start); the toolbox's reads the first CHART_AGENTS agents, each agent's working set
(one query) and one page of its runs. What a bound cut short is said (`complete`)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import date, datetime, time, timedelta
from typing import Any

from chalicelib.agents import workingset
from chalicelib.base.causes import Action
from chalicelib.base.outcomes import RunStatus
from chalicelib.calls import runs
from chalicelib.console import present
from chalicelib.identity import accounts
from chalicelib.mcp.metatools import META_TOOLS, tool_definition
from chalicelib.store.records import Agent, AgentState, HistoryEvent, Page, Run
from chalicelib.tools.definitions import Tool

WINDOW_DAYS = 30
READ_PAGE = 100  # items per query
READ_PAGES = 5  # queries per list at most: 500 events and 500 runs of one agent
CHART_AGENTS = 25  # agents the toolbox's pictures read (the first of the list; a page of the agents list)
CHART_TOOLS = 15  # bars in a calls-per-tool picture; the rest are summed in a note


@dataclass(frozen=True)
class Day:
    """One day of an agent's working set: its size at the day's end (None when the events read
    do not reach back that far), and what moved that day."""

    day: date
    size: int | None
    promoted: int = 0
    demoted: dict[str, int] = field(default_factory=dict)  # cause -> count

    @property
    def demotions(self) -> int:
        """Demotions that day, whatever their cause."""
        return sum(self.demoted.values())


@dataclass(frozen=True)
class ToolUse:
    """A tool's calls in the window (dry runs apart), and whether the agent has it promoted now."""

    vendor: str
    name: str
    calls: int
    dry_runs: int = 0
    failed: int = 0
    promoted: bool = False
    last: datetime | None = None

    @property
    def key(self) -> str:
        """`vendor__name`, as the agent calls it."""
        return f"{self.vendor}__{self.name}"


@dataclass(frozen=True)
class AgentActivity:
    """An agent's last WINDOW_DAYS days, oldest day first."""

    days: list[Day]
    uses: list[ToolUse]
    events_complete: bool  # every event of the window was read
    runs_complete: bool  # every run of the window was read
    reads: int  # queries it took

    @property
    def promotions(self) -> int:
        """Promotions in the window."""
        return sum(day.promoted for day in self.days)

    @property
    def demoted(self) -> dict[str, int]:
        """Demotions in the window by cause, the most frequent first."""
        total: Counter[str] = Counter()
        for day in self.days:
            total.update(day.demoted)
        return dict(total.most_common())

    @property
    def calls(self) -> int:
        """Calls in the window."""
        return sum(use.calls for use in self.uses)


@dataclass(frozen=True)
class Spared:
    """What one agent's tools/list carries against listing the whole toolbox."""

    agent: Agent
    listed_tokens: int
    spared_tokens: int


@dataclass(frozen=True)
class ToolboxActivity:
    """Calls per tool (the charted agents' runs of the window) and tokens spared per agent."""

    uses: list[ToolUse]
    other_tools: int  # tools called beyond the CHART_TOOLS shown
    other_calls: int
    spared: list[Spared]
    toolbox_tokens: int
    agents_charted: int
    agents_complete: bool  # every agent of the account was charted
    runs_complete: bool  # every charted agent's runs of the window were read
    reads: int


def window_start(now: datetime) -> datetime:
    """Midnight UTC of the first day of the window (today is its last day)."""
    first = now.date() - timedelta(days=WINDOW_DAYS - 1)
    return datetime.combine(first, time(), tzinfo=now.tzinfo)


def agent_activity(state: AgentState, now: datetime) -> AgentActivity:
    """The agent's working set day by day and its tools' calls, over the window."""
    start = window_start(now)
    counter = _Reads()
    events, events_complete = _since(lambda cursor: counter(workingset.history(
        state.agent.agent_id, limit=READ_PAGE, cursor=cursor)), start, lambda event: event.at)
    recent, runs_complete = _since(lambda cursor: counter(runs.list_for_agent(
        state.agent.agent_id, limit=READ_PAGE, cursor=cursor)), start, lambda run: run.created_at)
    promoted = {(p.vendor, p.name) for p in state.promotions}
    uses = _uses(recent, promoted, {(p.vendor, p.name): p.last_used_at for p in state.promotions})
    return AgentActivity(_days(events, len(state.promotions), now, reaches_start=events_complete), uses,
                         events_complete, runs_complete, counter.count)


def toolbox_activity(account_id: str, every_tool: Iterable[Tool], now: datetime) -> ToolboxActivity:
    """Calls per tool and the context tokens each charted agent is spared (`every_tool`: the whole
    toolbox, read by the caller)."""
    start = window_start(now)
    counter = _Reads()
    definitions = {tool.key: tool_definition(tool) for tool in every_tool}
    sizes = {key: present.definition_bytes(definition) for key, definition in definitions.items()}
    meta = present.definition_bytes(*(meta.definition for meta in META_TOOLS.values()))
    whole = present.definition_bytes(*definitions.values())  # every tool listed first-class, as the agent card counts it
    listing = counter(accounts.list_agents(account_id, limit=CHART_AGENTS, cursor=None))
    spared, recent, runs_complete = [], [], True
    for agent in listing.items[:CHART_AGENTS]:
        state = counter.one(accounts.get_state(account_id, agent.agent_id))
        listed = meta + sum(sizes.get((p.vendor, p.name), 0) for p in state.promotions)
        spared.append(Spared(agent, present.tokens(listed), present.tokens(whole - listed)))
        page = counter(runs.list_for_agent(agent.agent_id, limit=READ_PAGE, cursor=None))
        within = [run for run in page.items if run.created_at >= start]
        runs_complete &= len(within) < len(page.items) or not page.next
        recent += within
    uses = _uses(recent, set(), {})
    shown = uses[:CHART_TOOLS]
    return ToolboxActivity(shown, len(uses) - len(shown), sum(use.calls for use in uses[CHART_TOOLS:]), spared,
                           present.tokens(whole), len(spared), not listing.next and len(listing.items) <= CHART_AGENTS,
                           runs_complete, counter.count)


class _Reads:
    """Counts the queries a picture makes (each page read is one)."""

    def __init__(self) -> None:
        self.count = 0

    def __call__(self, page: Page) -> Page:
        self.count += 1
        return page

    def one(self, state: AgentState) -> AgentState:
        self.count += 1
        return state


def _since(fetch: Callable[[str | None], Page], start: datetime, moment: Callable[[Any], datetime]) -> tuple[list[Any], bool]:
    """The items of a newest-first list down to `start`, in at most READ_PAGES pages; and whether
    the window was read whole."""
    found: list[Any] = []
    cursor: str | None = None
    for _ in range(READ_PAGES):
        page = fetch(cursor)
        for item in page.items:
            if moment(item) < start:
                return found, True
            found.append(item)
        if not page.next:
            return found, True
        cursor = page.next
    return found, False


def _days(events: list[HistoryEvent], size_now: int, now: datetime, *, reaches_start: bool) -> list[Day]:
    """Day by day, oldest first: the size at each day's end, walked back from the size now (a
    promotion made the set one bigger, a demotion one smaller), and the day's moves."""
    promoted: Counter[date] = Counter()
    demoted: dict[date, Counter[str]] = {}
    for event in events:
        if event.action == Action.PROMOTED:
            promoted[event.at.date()] += 1
        elif event.action == Action.DEMOTED:
            demoted.setdefault(event.at.date(), Counter())[event.cause] += 1
    oldest_read = min((event.at.date() for event in events), default=now.date())
    days, size = [], size_now
    for back in range(WINDOW_DAYS):
        day = now.date() - timedelta(days=back)
        known = reaches_start or day >= oldest_read
        moved = demoted.get(day, Counter())
        days.append(Day(day, size if known else None, promoted[day], dict(moved)))
        size = max(0, size - promoted[day] + sum(moved.values()))
    return days[::-1]


def _uses(recent: Iterable[Run], promoted: set[tuple[str, str]],
          last_used: dict[tuple[str, str], datetime | None]) -> list[ToolUse]:
    """Per tool: calls, dry runs and failures, the most called first (promoted tools never called
    are listed too, with none)."""
    calls: Counter[tuple[str, str]] = Counter()
    dry: Counter[tuple[str, str]] = Counter()
    failed: Counter[tuple[str, str]] = Counter()
    for run in recent:
        key = (run.vendor, run.name)
        if run.dry_run:
            dry[key] += 1
            continue
        calls[key] += 1
        if run.status in (RunStatus.FAILED, RunStatus.EXPIRED):
            failed[key] += 1
    keys = sorted(set(calls) | set(dry) | promoted, key=lambda key: (-calls[key], -dry[key], key))
    return [ToolUse(vendor, name, calls[(vendor, name)], dry[(vendor, name)], failed[(vendor, name)],
                    (vendor, name) in promoted, last_used.get((vendor, name))) for vendor, name in keys]
