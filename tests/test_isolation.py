"""What lets `./dev test` run the suite in parallel workers (tests/isolation.py, issue 29 goal 4)."""

from __future__ import annotations

import gc
import subprocess
import sys
import weakref
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import cast

import boto3
import pytest

from chalicelib.base import config
from chalicelib.store.models import TABLES
from local.process import ROOT
from tests import conftest
from tests.isolation import lock_path, one_at_a_time

# Another process (a second test worker) trying the lock without waiting: prints "taken" or "free".
TRY = """
import fcntl, sys
with open(sys.argv[1], "a") as handle:
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        print("taken")
    else:
        print("free")
"""


def other_worker_finds(path: Path) -> str:
    return subprocess.run([sys.executable, "-c", TRY, str(path)], capture_output=True, text=True, check=True,
                          timeout=60).stdout.strip()


@pytest.fixture
def name(tmp_path: Path) -> Iterator[str]:
    """A lock name of this test's own (its file is removed afterwards)."""
    chosen = f"test-{tmp_path.name}"
    yield chosen
    lock_path(chosen).unlink(missing_ok=True)


def test_a_second_worker_waits_while_one_holds_the_lock(name: str) -> None:
    # GIVEN a worker holding the lock
    with one_at_a_time(name):
        # WHEN another process tries it, THEN it is taken
        assert other_worker_finds(lock_path(name)) == "taken"
    # and once let go, it is free again
    assert other_worker_finds(lock_path(name)) == "free"


def test_the_lock_lets_go_when_the_block_fails(name: str) -> None:
    with pytest.raises(RuntimeError), one_at_a_time(name):
        raise RuntimeError("a failed build")
    assert other_worker_finds(lock_path(name)) == "free"


def test_each_checkout_has_its_own_lock_outside_the_repo(tmp_path: Path) -> None:
    mine, other = lock_path("packaging"), lock_path("packaging", tmp_path)
    assert mine != other
    assert ROOT.resolve() not in mine.resolve().parents


def test_dev_test_runs_each_file_whole_in_one_worker() -> None:
    # a module's fixtures (a stack, the README's ordered session) rely on it: see tests/isolation.py
    script = (ROOT / "dev").read_text()
    test = script[script.index("  test)"):script.index(";;", script.index("  test)"))]
    assert '-n "${TEST_WORKERS:-auto}" --dist loadfile --no-loadscope-reorder "$@"' in test


def test_the_slowest_files_are_collected_first_and_each_file_stays_whole() -> None:
    # GIVEN tests of a quick file with many tests, a file of few, and two of the slowest files
    # (named out of order, their tests interleaved)
    names = ["tests/test_quick.py::a", "tests/test_few.py::x", "tests/test_package.py::one",
             "tests/test_quick.py::b", "tests/e2e/test_local_stop.py::first", "tests/test_quick.py::c",
             "tests/test_package.py::two"]
    items = [cast(pytest.Item, SimpleNamespace(nodeid=name)) for name in names]
    # WHEN tests/conftest.py orders the collection
    conftest.pytest_collection_modifyitems(items)
    # THEN the slowest files come first, as listed; then the others, more tests first; each in its order
    assert [item.nodeid for item in items] == [
        "tests/e2e/test_local_stop.py::first", "tests/test_package.py::one", "tests/test_package.py::two",
        "tests/test_quick.py::a", "tests/test_quick.py::b", "tests/test_quick.py::c", "tests/test_few.py::x"]
    # and every file the list names is there
    assert [name for name in conftest.SLOWEST_FILES if not (ROOT / name).is_file()] == []


# --- the aws fixture: each test starts with moto as the app's setup leaves it --------------------
# (tests/conftest.py copies moto's tables and key from the process's first test; whatever a test
# changes, in a table, the key or a queue, must be gone for the next)


def _moto_as_just_set_up() -> list[str]:
    """What differs from freshly created tables, secrets key and queues (empty: nothing)."""
    dynamodb, kms, sqs = boto3.client("dynamodb"), boto3.client("kms"), boto3.client("sqs")
    found = []
    for model in TABLES:
        name = model.Meta.table_name
        if dynamodb.describe_table(TableName=name)["Table"]["TableStatus"] != "ACTIVE":
            found.append(f"{name} not active")
        if dynamodb.scan(TableName=name)["Items"]:
            found.append(f"{name} has items")
    aliases = sorted(alias["AliasName"] for alias in kms.list_aliases()["Aliases"]
                     if not alias["AliasName"].startswith("alias/aws/"))
    if aliases != [config.settings().kms_key_id]:
        found.append(f"aliases {aliases}")
    if len(kms.list_keys()["Keys"]) != 1:
        found.append(f"keys {kms.list_keys()['Keys']}")
    if kms.describe_key(KeyId=config.settings().kms_key_id)["KeyMetadata"]["KeyState"] != "Enabled":
        found.append("the secrets key is not enabled")
    urls = sorted(sqs.list_queues().get("QueueUrls", []))
    wanted = sorted(sqs.get_queue_url(QueueName=name)["QueueUrl"]
                    for name in (config.settings().sweep_queue, config.settings().webhook_queue))
    if not set(wanted) <= set(urls) or any(url.endswith("/left-behind") for url in urls):
        found.append(f"queues {urls}")
    for url in wanted:
        if sqs.receive_message(QueueUrl=url, WaitTimeSeconds=0).get("Messages"):
            found.append(f"{url} has messages")
    return found


def _leave_everything_changed() -> None:
    dynamodb, kms, sqs = boto3.client("dynamodb"), boto3.client("kms"), boto3.client("sqs")
    for model in TABLES:
        keys = {attribute["AttributeName"] for attribute in
                dynamodb.describe_table(TableName=model.Meta.table_name)["Table"]["KeySchema"]}
        dynamodb.put_item(TableName=model.Meta.table_name, Item={key: {"S": "left-behind"} for key in keys})
    key_id = kms.describe_key(KeyId=config.settings().kms_key_id)["KeyMetadata"]["KeyId"]
    kms.create_alias(AliasName="alias/left-behind", TargetKeyId=key_id)
    kms.create_key(Description="left behind")
    kms.disable_key(KeyId=key_id)
    sqs.create_queue(QueueName="left-behind")
    sqs.send_message(QueueUrl=sqs.get_queue_url(QueueName=config.settings().sweep_queue)["QueueUrl"],
                     MessageBody="{}")


@pytest.mark.parametrize("turn", ["first", "second", "third"])  # the first of a process makes what the others copy
def test_every_test_starts_with_aws_as_just_set_up_whatever_the_one_before_left(turn: str) -> None:
    # GIVEN moto as this test finds it (the turns run before it changed everything)
    # THEN it holds the app's tables (empty), its key (enabled, the only one) and its empty queues
    assert _moto_as_just_set_up() == []
    # WHEN this test changes all of it, THEN that is seen (the check above can fail), for the next turn
    _leave_everything_changed()
    assert len(_moto_as_just_set_up()) == len(TABLES) + 5


# --- the garbage collector: frozen after each test (tests/conftest.py), never with garbage in it ---

_LEFT: list[weakref.ref[object]] = []


class _Cycle:
    def __init__(self) -> None:
        self.me = self


@pytest.mark.parametrize("turn", ["first", "second", "third"])
def test_what_a_test_leaves_in_a_cycle_is_collected_before_the_freeze(turn: str) -> None:
    # GIVEN the cycle the turn before this one dropped (unreachable, freed only by a collection)
    # WHEN this test starts, THEN it was collected, and what was left is frozen
    assert all(ref() is None for ref in _LEFT), f"{turn}: the last test's garbage was frozen, not collected"
    assert turn == "first" or gc.get_freeze_count() > 0
    # and this one leaves a cycle of its own for the next turn
    _LEFT.append(weakref.ref(_Cycle()))
