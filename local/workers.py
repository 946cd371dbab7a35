"""What Lambda's scheduler and event sources do in AWS, done by threads on the local stack: the
sweep on its schedule, and consumers for the queues (with SQS's own retries and dead-letter
queue: a message whose handler fails is left to come back, and is parked after the last try)."""

from __future__ import annotations

import os
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial

from chalicelib.agents import sweep
from chalicelib.base.clock import utcnow
from chalicelib.base.config import settings
from chalicelib.net import notify
from chalicelib.store import queues

Batch = Callable[[list[queues.Message]], list[str]]


@dataclass(frozen=True)
class Consumer:
    """How a queue is consumed: its handler, how many threads poll it, and how many messages each
    takes at once (Lambda's event source `batch_size`, app.py)."""

    handler: Batch
    threads: int = 1
    batch: int = 10


def start(stop: threading.Event, *, sweep_interval: float) -> None:
    """Start the sweep schedule and the queue consumers as daemon threads."""
    threading.Thread(target=_every, args=(stop, sweep_interval, _sweep), daemon=True, name="sweep").start()
    for queue, consumer in plan().items():
        queues.ensure(queue)
        for n in range(consumer.threads):
            threading.Thread(target=_consume, args=(stop, queue, consumer.handler, consumer.batch), daemon=True,
                             name=f"consume {queue} {n + 1}").start()


def work_threads() -> int:
    """Consumers of the work queue: one per core, and one more to fetch and store while the others
    compute (a large import's vectors are its biggest job: numpy's products release the GIL, so
    threads use every core; Lambda runs as many workers as there are messages)."""
    return (os.cpu_count() or 1) + 1


def consumers() -> dict[str, Batch]:
    """Each queue and what Lambda would run for a batch of it (answering the failed message ids)."""
    return {queue: consumer.handler for queue, consumer in plan().items()}


def plan() -> dict[str, Consumer]:
    """Each queue's consumer: the work queue one message at a time (as app.py's sweep_worker),
    by `work_threads()` threads; webhooks ten at a time by one."""
    return {
        settings().sweep_queue: Consumer(lambda deliveries: [
            d.message_id for d in deliveries if not _ok(partial(sweep.handle_message, d.body, utcnow()))],
            threads=work_threads(), batch=1),
        settings().webhook_queue: Consumer(notify.consume),
    }


def consume_once(queue: str, handler: Batch, *, wait_seconds: int = 1, batch: int = 10) -> int:
    """One receive of up to `batch` messages, handled as Lambda's event source would: the ones the
    handler reports failed stay (SQS delivers them again, then parks them in the dead-letter
    queue); the others are deleted. Answers how many were received."""
    messages = queues.receive(queue, wait_seconds=wait_seconds, max_messages=batch)
    deliveries = [queues.Message(m["MessageId"], m["Body"], m["ReceiptHandle"],
                                  int(m.get("Attributes", {}).get("ApproximateReceiveCount", "1"))) for m in messages]
    failed = set(handler(deliveries)) if deliveries else set()
    for delivery in deliveries:
        if delivery.message_id not in failed:
            queues.delete(queue, delivery.receipt_handle)
    return len(deliveries)


def _ok(job: Callable[[], object]) -> bool:
    try:
        job()
    except Exception as error:  # noqa: BLE001 - like Lambda: the message is retried
        print(f"handler failed ({error.__class__.__name__}: {error}); SQS will retry", file=sys.stderr, flush=True)
        return False
    return True


def _sweep() -> None:
    report = sweep.run(utcnow(), dispatch=sweep.queue_dispatch)
    if report.demoted or report.held:
        print(f"sweep: demoted {len(report.demoted)}, held back {len(report.held)}", flush=True)


def _every(stop: threading.Event, seconds: float, job: Callable[[], None]) -> None:
    while not stop.wait(seconds):
        try:
            job()
        except Exception as error:  # noqa: BLE001 - keep the schedule alive; the next run tries again
            print(f"{job.__name__} failed: {error.__class__.__name__}: {error}", file=sys.stderr, flush=True)


def _consume(stop: threading.Event, queue: str, handler: Batch, batch: int = 10) -> None:
    failing = False
    while not stop.is_set():
        try:
            consume_once(queue, handler, batch=batch)
        except Exception as error:  # noqa: BLE001 - the queue itself failed: wait and poll again
            # said once, not every second: an endpoint that is down (AWS_ENDPOINT_URL's own
            # emulator) once filled a log with a thousand lines in ten minutes
            if not failing and not stop.is_set():
                print(f"consuming {queue} failed: {error}; trying again every second, and saying so once it works",
                      file=sys.stderr, flush=True)
            failing = True
            stop.wait(1)
        else:
            if failing:
                print(f"consuming {queue} works again", file=sys.stderr, flush=True)
            failing = False
