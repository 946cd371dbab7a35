"""Where moto's DynamoDB falls short of a guarantee Workset relies on, and the fix: applied to the
in-process backend the tests use and to the embedded server of the local stack (`patch()`).

- **Atomic writes, consistent reads.** DynamoDB applies each write, and each transaction,
  atomically; moto's backend does not guard itself against threads (a read iterating a table
  while a write changes it fails with "dictionary changed size during iteration"). Every write
  and read goes through one lock, as DynamoDB's own serialisation per item would.
- **A query costs its partition.** moto answers a query of a table's partition by listing and
  sorting every item of the table, so each query's cost grew with the table. Here it reads the
  partition's own items; index queries still walk the table, as moto keeps no index.
- **Transactions that cost what they touch.** moto deep-copies every table a transaction
  touches before applying it, to roll back on failure: each transaction's cost grows with the
  tables' size (seconds at 200,000 items, and the copies held memory). Here only the touched
  items are copied, and restored on failure; what a transaction decides is moto's own logic.
- **Idempotent transactions.** DynamoDB answers a TransactWriteItems that repeats a succeeded
  one's `ClientRequestToken` (within ten minutes, with the same items) with success and changes
  nothing; with other items, `IdempotentParameterMismatchException`. moto ignores the token, so
  a retry after a lost answer would apply the transaction twice, or fail its conditions. A
  cancelled transaction is not remembered: sending it again tries again.
  (TransactWriteItems, ClientRequestToken, in the DynamoDB API reference.)
"""

from __future__ import annotations

import inspect
import json
import threading
import time
from typing import Any

TOKEN_WINDOW_SECONDS = 600.0
WRITES = ("put_item", "update_item", "delete_item", "transact_write_items")
READS = ("get_item", "query", "scan")

_lock = threading.RLock()
_tokens: dict[tuple[str, str, str], tuple[str, float, Any]] = {}  # (account, region, token) -> (items, at, answer)
_patched = False


def patch() -> None:
    """Apply both fixes to moto's DynamoDB (once per process)."""
    global _patched
    with _lock:
        if _patched:
            return
        _serialise()
        _partition_queries()
        _lean_transactions()
        _honour_request_tokens()
        _patched = True


def forget_tokens() -> None:
    """Drop every remembered token (a fresh emulator: each test starts with empty tables)."""
    with _lock:
        _tokens.clear()


def _serialise() -> None:
    from moto.dynamodb.models import DynamoDBBackend

    for name in (*WRITES, *READS):
        original = getattr(DynamoDBBackend, name)

        def locked(self: Any, *args: Any, __original: Any = original, **kwargs: Any) -> Any:
            with _lock:
                return __original(self, *args, **kwargs)

        setattr(DynamoDBBackend, name, locked)


def _partition_queries() -> None:
    from moto.dynamodb.models.table import Table

    every_item = Table.all_items
    query = Table.query
    partition = threading.local()  # the table and hash key a table query is reading, on this thread

    def all_items(self: Any) -> list[Any]:
        if getattr(partition, "table", None) is not self:
            return every_item(self)
        found = self.items.get(partition.hash_key)  # .get: the partitions are a defaultdict
        if found is None:
            return []
        return list(found.values()) if self.range_key_attr else [found]

    parameters = inspect.signature(query)

    def partition_query(self: Any, hash_key: Any, *args: Any, **kwargs: Any) -> Any:
        if parameters.bind(self, hash_key, *args, **kwargs).arguments.get("index_name"):
            return query(self, hash_key, *args, **kwargs)  # moto passes index_name by position
        partition.table, partition.hash_key = self, hash_key
        try:
            return query(self, hash_key, *args, **kwargs)
        finally:
            partition.table = partition.hash_key = None

    Table.all_items = all_items
    Table.query = partition_query


def _lean_transactions() -> None:
    import copy

    from moto.dynamodb.comparisons import get_filter_expression
    from moto.dynamodb.exceptions import (
        ConditionalCheckFailed,
        MockValidationException,
        MultipleTransactionsException,
        TooManyTransactionsException,
        TransactionCanceledException,
        TransactWriteSingleOpException,
    )
    from moto.dynamodb.models import DynamoDBBackend
    from moto.dynamodb.models.dynamo_type import DynamoType

    def transact_write_items(self: Any, transact_items: list[dict[str, Any]]) -> None:
        # moto's DynamoDBBackend.transact_write_items (5.2), with a copy of each touched item
        # where it copies each touched table
        if len(transact_items) > 100:
            raise TooManyTransactionsException()
        before: dict[str, tuple[Any, Any, Any, Any]] = {}  # item identity -> (table, hash, range, copy or None)

        def roll_back() -> None:
            for table, hash_key, range_key, kept in before.values():
                if kept is None:
                    table.delete_item(hash_key, range_key)
                elif range_key is None:
                    table.items[hash_key] = kept
                else:
                    table.items[hash_key][range_key] = kept

        errors: list[tuple[Any, Any, Any]] = []
        for item in transact_items:
            original_item = None
            if len(item) > 1:
                raise TransactWriteSingleOpException
            try:
                op_type, op = next(iter(item.items()))
                if op_type not in {"ConditionCheck", "Put", "Delete", "Update"}:
                    raise ValueError("Unsupported transaction operation")
                table_name = op["TableName"]
                table = self.get_table(table_name)
                if op_type == "Put":
                    key = {table.hash_key_attr: op["Item"][table.hash_key_attr]}
                    if table.range_key_attr is not None:
                        key[table.range_key_attr] = op["Item"][table.range_key_attr]
                else:
                    key = op["Key"]
                identity = f"{table_name} {dict(sorted(key.items()))}"
                if identity in before:
                    raise MultipleTransactionsException()
                current = self.get_item(table_name, key)
                range_key = DynamoType(key[table.range_key_attr]) if table.range_key_attr else None
                before[identity] = (table, DynamoType(key[table.hash_key_attr]), range_key, copy.deepcopy(current))
                names, values = op.get("ExpressionAttributeNames"), op.get("ExpressionAttributeValues")
                condition = op.get("ConditionExpression")
                if condition is not None and not get_filter_expression(condition, names, values).expr(current):
                    if op.get("ReturnValuesOnConditionCheckFailure") == "ALL_OLD" and current:
                        original_item = current.to_json()["Attributes"]
                    raise ConditionalCheckFailed(item=original_item)
                expressions = {"condition_expression": condition, "expression_attribute_names": names,
                               "expression_attribute_values": values}
                if op_type == "Put":
                    self.put_item(table_name, op["Item"], **expressions)
                elif op_type == "Delete":
                    self.delete_item(table_name, key, **expressions)
                elif op_type == "Update":
                    self.update_item(table_name, key, update_expression=op["UpdateExpression"], **expressions)
                errors.append((None, None, None))
            except (MultipleTransactionsException, MockValidationException):
                roll_back()
                raise
            except ConditionalCheckFailed as error:
                errors.append(("ConditionalCheckFailed", str(error.message), original_item))
            except Exception as error:  # noqa: BLE001 - moto reports any other failure as a cancellation reason
                errors.append((type(error).__name__, str(error), original_item))
        if any(code is not None for code, _, _ in errors):
            roll_back()
            raise TransactionCanceledException(errors)

    original = DynamoDBBackend.transact_write_items

    def locked(self: Any, transact_items: list[dict[str, Any]]) -> None:
        with _lock:
            return transact_write_items(self, transact_items)

    locked.__wrapped__ = original  # type: ignore[attr-defined]
    DynamoDBBackend.transact_write_items = locked


def _honour_request_tokens() -> None:
    from moto.dynamodb.exceptions import DynamodbException
    from moto.dynamodb.responses import DynamoHandler

    original = DynamoHandler.transact_write_items

    def transact_write_items(self: Any) -> Any:
        token = self.body.get("ClientRequestToken")
        if not token:
            return original(self)
        items = json.dumps(self.body.get("TransactItems"), sort_keys=True, default=repr)  # B values are bytes
        key = (self.current_account, self.region, token)
        with _lock:
            now = time.monotonic()
            for stale in [k for k, (_, at, _) in _tokens.items() if now - at > TOKEN_WINDOW_SECONDS]:
                del _tokens[stale]
            if key in _tokens:
                remembered, _, answer = _tokens[key]
                if remembered != items:
                    raise DynamodbException(
                        "com.amazonaws.dynamodb.v20120810#IdempotentParameterMismatchException",
                        "the token was used with other parameters within its idempotency window")
                return answer  # it succeeded before: the same answer, nothing applied again
            answer = original(self)  # a cancellation raises, and is not remembered
            _tokens[key] = (items, now, answer)
            return answer

    DynamoHandler.transact_write_items = transact_write_items
