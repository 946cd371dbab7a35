"""A failing end-to-end test's report shows what the local stacks printed while it ran
(tests/e2e/conftest.py): the crash line of a -32603 is not lost with the stack."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from tests.e2e import conftest as e2e


def _report(item: Any, *, failed: bool) -> Any:
    """The harness's makereport wrapper run around a report pytest would have made."""
    made = SimpleNamespace(failed=failed, sections=[])
    wrapper = e2e.pytest_runtest_makereport(item, None)
    next(wrapper)
    with pytest.raises(StopIteration) as done:
        wrapper.send(made)
    return done.value.value


def _started(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A stack's output file, as `start_stack` makes one, under a test folder."""
    monkeypatch.setattr(e2e, "ARTIFACTS", tmp_path)
    monkeypatch.setattr(e2e, "ROOT", tmp_path)
    monkeypatch.setattr(e2e, "_logs", [])
    return e2e.stack_log(tmp_path / "stack0")


def test_a_failing_test_shows_only_what_the_stack_printed_while_it_ran(tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    # GIVEN a stack that printed before the test began, then a crash line during it
    log = _started(tmp_path, monkeypatch)
    log.write_text("READY http://127.0.0.1:1\n")
    item = SimpleNamespace(stash=pytest.Stash())
    wrapper = e2e.pytest_runtest_protocol(item, None)
    next(wrapper)
    with log.open("a") as out:
        out.write('{"kind":"mcp.internal_error","error":"AssertionError"}\n')
    # WHEN the test fails
    report = _report(item, failed=True)
    # THEN its report ends with the crash line, and not what came before
    [(title, text)] = report.sections
    assert log.name in title and text == '{"kind":"mcp.internal_error","error":"AssertionError"}'


def test_a_passing_test_shows_nothing_and_a_long_output_is_cut_to_its_tail(tmp_path: Path,
                                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    # GIVEN a stack that printed more lines than a report shows
    log = _started(tmp_path, monkeypatch)
    log.write_text("".join(f"line {number}\n" for number in range(e2e.TAIL_LINES + 5)))
    item = SimpleNamespace(stash=pytest.Stash())  # the stack started during the test: all of it counts
    # WHEN a test passes, and when one fails
    # THEN the passing one's report is untouched, the failing one's shows the last lines and says where the rest is
    assert _report(item, failed=False).sections == []
    [(_, text)] = _report(item, failed=True).sections
    shown = text.splitlines()
    assert shown[0] == "[5 earlier lines are in the file]" and shown[1] == "line 5"
    assert shown[-1] == f"line {e2e.TAIL_LINES + 4}" and len(shown) == e2e.TAIL_LINES + 1
