"""The console's pictures, laid out: plain geometry (boxes, lines of text) computed here from
`activity`'s figures and drawn by `templates/charts.html` as inline SVG (autoescaped, styled by
the console's stylesheet: no script, nothing fetched). Each picture carries its text
alternative: a title, a one-sentence description and the figures as a table."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import date

from chalicelib.base.causes import Cause
from chalicelib.console import present
from chalicelib.console.activity import AgentActivity, Day, ToolboxActivity, ToolUse

WIDTH = 720  # the viewBox's width; the picture scales to its card
LABEL_WIDTH = 250  # a bar chart's label column
ROW = 24  # a bar chart's row height
CAUSES = [cause.value for cause in Cause]  # the stacking order of demotions (one class each)


@dataclass(frozen=True)
class Box:
    """A rectangle of the picture, its style class and its hover text."""

    x: float
    y: float
    width: float
    height: float
    css: str
    tip: str = ""


@dataclass(frozen=True)
class Text:
    """A line of text in the picture."""

    x: float
    y: float
    text: str
    css: str = ""
    anchor: str = "start"
    tip: str = ""


@dataclass(frozen=True)
class Picture:
    """One SVG: its size, what it draws, and its text alternative (`title`, `description`, and
    `table`: a header row then rows of figures)."""

    key: str
    height: float
    title: str
    description: str
    boxes: list[Box] = field(default_factory=list)
    texts: list[Text] = field(default_factory=list)
    table: list[list[str]] = field(default_factory=list)
    legend: list[tuple[str, str]] = field(default_factory=list)  # (css class, words)
    width: float = WIDTH


def working_set(activity: AgentActivity) -> Picture:
    """The agent's last 30 days: the size at each day's end above; promotions (up) and
    demotions by cause (down, stacked) below."""
    days = activity.days
    left, right = 36.0, WIDTH - 8.0
    step = (right - left) / len(days)
    top, size_bottom = 14.0, 120.0  # the size panel
    moves_mid, moves_half = 190.0, 50.0  # the moves panel: its baseline and half height
    peak = max([day.size or 0 for day in days] + [1])
    most = max([max(day.promoted, day.demotions) for day in days] + [1])
    boxes: list[Box] = []
    for index, day in enumerate(days):
        x = left + index * step + 1
        width = max(step - 2, 1)
        said = _day_words(day)
        if day.size is not None and day.size > 0:
            height = (size_bottom - top) * day.size / peak
            boxes.append(Box(x, size_bottom - height, width, height, "size", said))
        if day.promoted:
            height = moves_half * day.promoted / most
            boxes.append(Box(x, moves_mid - height, width, height, "promoted", said))
        below = moves_mid
        for cause in sorted(day.demoted, key=_cause_order):
            height = moves_half * day.demoted[cause] / most
            boxes.append(Box(x, below, width, height, f"demoted cause-{_css(cause)}", said))
            below += height
    texts = [Text(left - 4, top + 4, str(peak), "axis", "end"), Text(left - 4, size_bottom, "0", "axis", "end"),
             Text(left, top - 4, "size at each day's end", "axis"),
             Text(left - 4, moves_mid - moves_half + 8, f"+{most}", "axis", "end"),
             Text(left - 4, moves_mid + moves_half, f"−{most}", "axis", "end"),
             Text(left, moves_mid - moves_half - 6, "promoted ↑   demoted ↓ (by cause)", "axis"),
             Text(left, 262, _short(days[0].day), "axis"), Text(right, 262, _short(days[-1].day), "axis", "end")]
    lines = [Box(left, size_bottom, right - left, 0.8, "rule"), Box(left, moves_mid, right - left, 0.8, "rule")]
    demoted = activity.demoted
    description = (f"Over the last {len(days)} days the working set went from {_size_words(days[0])} to "
                   f"{days[-1].size} tools (largest {peak}); {activity.promotions} promoted and "
                   f"{sum(demoted.values())} demoted" + (f" ({_by_cause(demoted)})" if demoted else "") + "."
                   + ("" if activity.events_complete else " Only the newest events were read: older days' sizes are left out."))
    table = [["Day", "Size at the end", "Promoted", "Demoted"]] + [
        [day.day.isoformat(), "" if day.size is None else str(day.size), str(day.promoted),
         _by_cause(day.demoted) if day.demoted else "0"] for day in days if day.promoted or day.demoted or day is days[-1]]
    legend = [("size", "size"), ("promoted", "promoted")] + [
        (f"demoted cause-{_css(cause)}", f"demoted: {present.cause_label(cause)}") for cause in CAUSES
        if cause in demoted]
    return Picture("working-set", 270, "The working set over the last 30 days", description,
                   lines + boxes, texts, table, legend)


def tool_use(activity: AgentActivity) -> Picture:
    """Calls of each tool over the window, the most called first (promoted tools never called
    show an empty row)."""
    uses = activity.uses
    rows = [_row(use.key, [(use.calls, "calls")], f"{use.calls:,}" + (" · promoted" if use.promoted else ""),
                 _use_words(use)) for use in uses]
    description = (f"{activity.calls:,} calls over the last 30 days across {sum(1 for u in uses if u.calls)} tools"
                   + (f"; the most called is {uses[0].key} ({uses[0].calls:,})" if uses and uses[0].calls else "")
                   + "." + ("" if activity.runs_complete else " Only the newest runs were read."))
    table = [["Tool", "Calls", "Dry runs", "Failed", "Promoted now"]] + [
        [use.key, str(use.calls), str(use.dry_runs), str(use.failed), "yes" if use.promoted else "no"] for use in uses]
    return _bars("tool-use", "Each tool's calls over the last 30 days", description, rows, table,
                 [("calls", "calls")])


def toolbox_calls(activity: ToolboxActivity) -> Picture:
    """Calls per tool across the charted agents over the window."""
    rows = [_row(use.key, [(use.calls, "calls")], f"{use.calls:,}", _use_words(use)) for use in activity.uses]
    total = sum(use.calls for use in activity.uses) + activity.other_calls
    description = (f"{total:,} calls over the last 30 days" + (
        f"; the most called tool is {activity.uses[0].key} ({activity.uses[0].calls:,})" if activity.uses else "")
        + (f"; {activity.other_tools} more tools had {activity.other_calls:,} calls" if activity.other_tools else "")
        + "." + ("" if activity.agents_complete and activity.runs_complete else
                 f" Counted over the first {activity.agents_charted} agents and their newest runs."))
    table = [["Tool", "Calls", "Dry runs", "Failed"]] + [
        [use.key, str(use.calls), str(use.dry_runs), str(use.failed)] for use in activity.uses]
    return _bars("toolbox-calls", "Calls per tool over the last 30 days", description, rows, table,
                 [("calls", "calls")])


def spared(activity: ToolboxActivity) -> Picture:
    """Per agent, the whole toolbox's tokens split into what its tools/list carries and what the
    working set spares it."""
    rows = [_row(item.agent.name, [(item.listed_tokens, "listed"), (max(item.spared_tokens, 0), "spared")],
                 f"≈ {item.spared_tokens:,} spared" if item.spared_tokens > 0 else "nothing spared",
                 f"{item.agent.name}: lists ≈ {item.listed_tokens:,} tokens, spared ≈ {max(item.spared_tokens, 0):,}")
            for item in activity.spared]
    best = max(activity.spared, key=lambda item: item.spared_tokens, default=None)
    description = (f"Listing the whole toolbox would cost ≈ {activity.toolbox_tokens:,} tokens on every request"
                   + (f"; {best.agent.name}'s working set spares it ≈ {best.spared_tokens:,}" if best and best.spared_tokens > 0
                      else "") + "."
                   + ("" if activity.agents_complete else f" The first {activity.agents_charted} agents are shown."))
    table = [["Agent", "Its tools/list (tokens)", "Spared (tokens)"]] + [
        [item.agent.name, f"{item.listed_tokens:,}", f"{max(item.spared_tokens, 0):,}"] for item in activity.spared]
    return _bars("spared", "Context tokens each agent is spared", description, rows, table,
                 [("listed", "what its tools/list carries"), ("spared", "spared by the working set")])


@dataclass(frozen=True)
class _Row:
    label: str
    segments: list[tuple[int, str]]
    value: str
    tip: str


def _row(label: str, segments: list[tuple[int, str]], value: str, tip: str) -> _Row:
    return _Row(label, segments, value, tip)


def _bars(key: str, title: str, description: str, rows: list[_Row], table: list[list[str]],
          legend: list[tuple[str, str]]) -> Picture:
    """Horizontal bars, one row each: the label, the segments end to end, the value after them."""
    bar_left, bar_right = LABEL_WIDTH + 8, WIDTH - 120
    peak = max([sum(value for value, _ in row.segments) for row in rows] + [1])
    boxes, texts = [], []
    for index, row in enumerate(rows):
        y = 6 + index * ROW
        x = float(bar_left)
        for value, css in row.segments:
            width = (bar_right - bar_left) * value / peak
            if width > 0:
                boxes.append(Box(x, y + 3, max(width, 1.5), ROW - 8, css, row.tip))
            x += width
        texts.append(Text(LABEL_WIDTH, y + ROW / 2 + 4, _cut(row.label, 34), "label", "end", row.label))
        texts.append(Text(x + 6, y + ROW / 2 + 4, row.value, "value"))
    height = 12 + max(len(rows), 1) * ROW
    if not rows:
        texts.append(Text(WIDTH / 2, 24, "nothing yet", "axis", "middle"))
    return Picture(key, height, title, description, boxes, texts, table, legend)


def _day_words(day: Day) -> str:
    moved = [f"{day.promoted} promoted"] if day.promoted else []
    moved += [f"{count} demoted ({present.cause_label(cause)})" for cause, count in day.demoted.items()]
    size = "" if day.size is None else f"size {day.size}"
    return f"{day.day.isoformat()}: " + ", ".join(part for part in [size, *moved] if part)


def _use_words(use: ToolUse) -> str:
    extra = [f"{use.dry_runs} dry runs"] if use.dry_runs else []
    extra += [f"{use.failed} failed"] if use.failed else []
    return f"{use.key}: {use.calls:,} calls" + (f" ({', '.join(extra)})" if extra else "")


def _by_cause(demoted: dict[str, int]) -> str:
    return ", ".join(f"{count} {present.cause_label(cause)}" for cause, count in demoted.items())


def _size_words(day: Day) -> str:
    return "an unknown size" if day.size is None else f"{day.size}"


def _cause_order(cause: str) -> int:
    return CAUSES.index(cause) if cause in CAUSES else len(CAUSES)


def _css(cause: str) -> str:
    """A cause as a class name (an unknown one is `other`)."""
    return cause.replace("_", "-") if cause in CAUSES else "other"


def _short(day: date) -> str:
    return day.strftime("%b %-d")


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[:limit - 1] + "…"
