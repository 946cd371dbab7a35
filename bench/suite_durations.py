"""Where the suite's time goes: sums pytest's `--durations=0` report by test file and by phase
(setup, call, teardown), as shares of the whole, and compares two reports side by side.

    .venv/bin/python -m pytest -n 2 --dist loadfile -q --durations=0 > /tmp/before.txt
    .venv/bin/python -m bench.suite_durations /tmp/before.txt [/tmp/after.txt] [--top 15]

On a busy machine the seconds are the machine's, not the suite's: read the shares (and, with two
reports, the ratio of each file's time to the run's whole)."""

from __future__ import annotations

import argparse
import re
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

LINE = re.compile(r"^(?P<seconds>\d+(?:\.\d+)?)s (?P<phase>setup|call|teardown)\s+(?P<test>\S.*)$")


@dataclass
class Report:
    """One `--durations=0` report: seconds by file, by phase, and by (file, phase)."""

    by_file: dict[str, float] = field(default_factory=lambda: defaultdict(float))
    by_phase: dict[str, float] = field(default_factory=lambda: defaultdict(float))
    by_file_phase: dict[tuple[str, str], float] = field(default_factory=lambda: defaultdict(float))
    tests: dict[str, int] = field(default_factory=lambda: defaultdict(int))

    @property
    def total(self) -> float:
        return sum(self.by_phase.values())


def parse(text: str) -> Report:
    """The report's lines summed (pytest omits durations under 5 ms; they count as nothing)."""
    report = Report()
    for line in text.splitlines():
        found = LINE.match(line.strip())
        if found is None:
            continue
        seconds = float(found["seconds"])
        test_file = found["test"].split("::", 1)[0]
        phase = found["phase"]
        report.by_file[test_file] += seconds
        report.by_phase[phase] += seconds
        report.by_file_phase[(test_file, phase)] += seconds
        if phase == "call":
            report.tests[test_file] += 1
    return report


def table(before: Report, after: Report | None, top: int) -> list[str]:
    """Markdown: the top files by share of the first report, with the second beside it."""
    rows = ["| file | setup s | call s | share | " + ("after share | after/before (of each run's whole) |" if after else ""),
            "| --- | --- | --- | --- |" + (" --- | --- |" if after else "")]
    for test_file, seconds in sorted(before.by_file.items(), key=lambda item: -item[1])[:top]:
        share = seconds / before.total
        row = (f"| {test_file} | {before.by_file_phase[(test_file, 'setup')]:.1f} | "
               f"{before.by_file_phase[(test_file, 'call')]:.1f} | {share:.1%} |")
        if after is not None:
            later = after.by_file.get(test_file, 0.0) / after.total if after.total else 0.0
            row += f" {later:.1%} | {later / share:.2f} |" if share else " | |"
        rows.append(row)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("before", type=Path)
    parser.add_argument("after", type=Path, nargs="?")
    parser.add_argument("--top", type=int, default=15)
    arguments = parser.parse_args()
    before = parse(arguments.before.read_text())
    after = parse(arguments.after.read_text()) if arguments.after else None
    for name, report in (("before", before), ("after", after)):
        if report is None:
            continue
        phases = ", ".join(f"{phase} {seconds:.0f} s ({seconds / report.total:.0%})"
                           for phase, seconds in sorted(report.by_phase.items()))
        print(f"{name}: {report.total:.0f} s summed over {sum(report.tests.values())} tests; {phases}")
    print("\n".join(table(before, after, arguments.top)))


if __name__ == "__main__":
    main()
