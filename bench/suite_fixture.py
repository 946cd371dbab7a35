"""The CPU one test pays for tests/conftest.py's autouse `aws` fixture (setup and teardown), and its
AWS API calls, as the fixture was before issue 29's suite work and as it is now, interleaved in one
process so that both see the same machine.

    .venv/bin/python -m bench.suite_fixture [--rounds 40]

Before: `mock_aws()` (which drops boto3's default session: every client re-reads botocore's files),
moto's RSA pair for the symmetric secrets key, and create_all + ensure_key through the API at every
test. Now: tests/conftest.py's fixture as it is."""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable, Iterator
from typing import Any

import botocore.client
from moto import mock_aws
from moto.kms import models as kms_models
from moto.kms.utils import generate_private_key as moto_generate_private_key

import tests.conftest as harness
from chalicelib.base import config
from chalicelib.catalog import indexes
from chalicelib.store import queues, vault
from chalicelib.store.tables import create_all
from local import emulator

CALLS = {"count": 0}


def _counting(original: Callable[..., Any]) -> Callable[..., Any]:
    def call(client: Any, operation: str, params: dict[str, Any]) -> Any:
        CALLS["count"] += 1
        return original(client, operation, params)

    return call


def before() -> Iterator[None]:
    """The fixture's body before (main at 7181a53)."""
    with mock_aws():
        emulator.forget_tokens()
        create_all()
        vault._kms.cache_clear()
        vault.ensure_key()
        queues._sqs.cache_clear()
        queues._url.cache_clear()
        queues.ensure(config.settings().sweep_queue)
        queues.ensure(config.settings().webhook_queue)
        indexes.clear()
        yield


def now() -> Iterator[None]:
    fixture = harness.aws
    body = fixture._get_wrapped_function() if hasattr(fixture, "_get_wrapped_function") else fixture.__wrapped__
    yield from body()


def one(fixture: Callable[[], Iterator[None]], patched_keys: Any) -> tuple[float, int]:
    """One test's worth of the fixture: (CPU seconds, API calls)."""
    kms_models.generate_private_key = patched_keys
    CALLS["count"] = 0
    started = time.process_time()
    for _ in fixture():
        pass
    return time.process_time() - started, CALLS["count"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=40)
    rounds = parser.parse_args().rounds
    botocore.client.BaseClient._make_api_call = _counting(botocore.client.BaseClient._make_api_call)  # type: ignore[method-assign]
    keys_now = kms_models.generate_private_key
    variants = {"before": (before, moto_generate_private_key), "now": (now, keys_now)}
    for fixture, keys in variants.values():  # warm: imports, the first test's own setup
        one(fixture, keys)
    measured: dict[str, list[tuple[float, int]]] = {name: [] for name in variants}
    for _ in range(rounds):
        for name, (fixture, keys) in variants.items():
            measured[name].append(one(fixture, keys))
    base = statistics.median(cpu for cpu, _ in measured["before"])
    for name, runs in measured.items():
        cpu = statistics.median(seconds for seconds, _ in runs)
        calls = statistics.median(count for _, count in runs)
        print(f"{name:6} median CPU per test {cpu * 1000:6.1f} ms  AWS API calls {calls:.0f}  ratio {cpu / base:.2f}")


if __name__ == "__main__":
    main()
