"""Shared plumbing of the store: transactions, cursors and storage-error conversion."""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from contextlib import contextmanager
from functools import lru_cache
from typing import Any

from pynamodb.connection import Connection
from pynamodb.exceptions import TransactWriteError, UpdateError
from pynamodb.transactions import TransactWrite

from chalicelib.config import settings
from chalicelib.errors import Conflict, InvalidInput


@lru_cache(maxsize=1)
def connection() -> Connection:
    """The low-level connection transactions run on (built once per process)."""
    return Connection(region=settings().aws_region)


class ConditionFailed(Conflict):
    """A transaction's condition did not hold; `reasons` are the per-item codes in the order
    pynamodb sends the items: condition checks, then deletes, then puts, then updates (each
    group in call order), whatever order the calls were made in."""

    def __init__(self, reasons: list[str | None]) -> None:
        super().__init__("the change conflicts with the current state")
        self.reasons = reasons


@contextmanager
def transaction() -> Iterator[TransactWrite]:
    """A TransactWrite whose condition failures surface as `ConditionFailed`."""
    try:
        with TransactWrite(connection=connection()) as write:
            yield write
    except TransactWriteError as error:
        reasons = [reason.code if reason else None for reason in (error.cancellation_reasons or [])]
        if "ConditionalCheckFailed" in reasons:
            raise ConditionFailed(reasons) from error
        raise


def update_if(item: Any, actions: list[Any], condition: Any) -> bool:
    """One conditional UpdateItem; False (and nothing written) when the condition does not hold."""
    try:
        item.update(actions=actions, condition=condition)
    except UpdateError as error:
        if error.cause_response_code == "ConditionalCheckFailedException":
            return False
        raise
    return True


def encode_cursor(last_evaluated_key: dict[str, Any] | None) -> str | None:
    """An opaque cursor for a page's last key."""
    if not last_evaluated_key:
        return None
    return base64.urlsafe_b64encode(json.dumps(last_evaluated_key, sort_keys=True).encode()).decode()


def decode_cursor(cursor: str | None, **scope: str) -> dict[str, Any] | None:
    """The last key a cursor stands for. A cursor we did not make, or one made for another
    partition (`scope` names the key attributes it must carry), is bad input."""
    if not cursor:
        return None
    bad = InvalidInput("cursor is not one this list returned", field="cursor")
    try:
        key = json.loads(base64.urlsafe_b64decode(cursor.encode()))
    except (ValueError, UnicodeDecodeError) as error:
        raise bad from error
    if not isinstance(key, dict) or any(key.get(name) != {"S": value} for name, value in scope.items()):
        raise bad
    return key
