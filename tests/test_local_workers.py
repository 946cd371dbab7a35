"""local/workers.py's queue consumers keep polling a queue that fails, as Lambda's event source
would, and say so once per outage instead of once per poll (an endpoint that was down once
filled the local stack's log with a thousand "Could not connect" lines in ten minutes)."""

from __future__ import annotations

import threading

import pytest

from local import workers


class _NoWait(threading.Event):
    """A stop flag whose waits return at once: the test drives the polls, not the clock."""

    def wait(self, timeout: float | None = None) -> bool:
        return self.is_set()


def test_an_outage_is_said_once_and_its_end_once(monkeypatch: pytest.MonkeyPatch,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    # GIVEN a queue whose polls fail 50 times, then work, then fail 3 times more
    outcomes = ["down"] * 50 + ["up"] + ["down"] * 3
    stop = _NoWait()

    def consume_once(queue: str, handler: workers.Batch, **options: int) -> int:
        outcome = outcomes.pop(0)
        if not outcomes:
            stop.set()
        if outcome == "down":
            raise ConnectionError("Could not connect to the endpoint URL")
        return 0

    monkeypatch.setattr(workers, "consume_once", consume_once)
    # WHEN its consumer polls it until stopped
    workers._consume(stop, "sweep", lambda deliveries: [])
    # THEN every poll was made, and each outage and its end were said once
    assert outcomes == []
    said = capsys.readouterr().err.splitlines()
    assert [line.split(":")[0] for line in said] == ["consuming sweep failed", "consuming sweep works again",
                                                     "consuming sweep failed"]
