"""What Lambda's scheduler and event sources do in AWS, done by threads on the local stack: the
sweep on its schedule, and consumers for the queues (with SQS's own retries and dead-letter
queue: a message whose handler fails is left to come back, and is parked after the last try)."""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable

from chalicelib import sweep
from chalicelib.clock import utcnow
from chalicelib.config import settings
from chalicelib.store import queues

Handler = Callable[[str], object]


def start(stop: threading.Event, *, sweep_interval: float) -> None:
    """Start the sweep schedule and the queue consumers as daemon threads."""
    threading.Thread(target=_every, args=(stop, sweep_interval, _sweep), daemon=True, name="sweep").start()
    consumers: dict[str, Handler] = {settings().sweep_queue: lambda body: sweep.handle_batch(body, utcnow())}
    for queue, handler in consumers.items():
        queues.ensure(queue)
        threading.Thread(target=_consume, args=(stop, queue, handler), daemon=True, name=f"consume {queue}").start()


def _sweep() -> None:
    report = sweep.run(utcnow(), dispatch=sweep.queue_dispatch)
    if report.demoted or report.held:
        print(f"sweep: demoted {len(report.demoted)}, held back {len(report.held)}", flush=True)


def _every(stop: threading.Event, seconds: float, job: Callable[[], None]) -> None:
    while not stop.wait(seconds):
        try:
            job()
        except Exception as error:  # keep the schedule alive; the next run tries again
            print(f"{job.__name__} failed: {error.__class__.__name__}: {error}", file=sys.stderr, flush=True)


def _consume(stop: threading.Event, queue: str, handler: Handler) -> None:
    while not stop.is_set():
        try:
            messages = queues.receive(queue, wait_seconds=1)
        except Exception as error:
            print(f"receive from {queue} failed: {error}", file=sys.stderr, flush=True)
            stop.wait(1)
            continue
        for message in messages:
            try:
                handler(message["Body"])
            except Exception as error:  # like Lambda: leave it for SQS to deliver again
                print(f"{queue}: handler failed ({error.__class__.__name__}); SQS will retry", file=sys.stderr,
                      flush=True)
                continue
            queues.delete(queue, message["ReceiptHandle"])
