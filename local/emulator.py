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
- **Answers that cost their size.** moto 5.2 writes every DynamoDB answer through a generic
  serializer that walks the API's model attribute by attribute: under many clients, a third of
  the emulator's time. The items it answers with are already DynamoDB's wire JSON, so the answers
  of the item operations are written with `json.dumps` (binary as base64, as the generic one
  does); every other answer and every error still goes through moto's serializer.
- **Idempotent transactions.** DynamoDB answers a TransactWriteItems that repeats a succeeded
  one's `ClientRequestToken` (within ten minutes, with the same items) with success and changes
  nothing; with other items, `IdempotentParameterMismatchException`. moto ignores the token, so
  a retry after a lost answer would apply the transaction twice, or fail its conditions. A
  cancelled transaction is not remembered: sending it again tries again.
  (TransactWriteItems, ClientRequestToken, in the DynamoDB API reference.)
"""

from __future__ import annotations

import base64
import inspect
import json
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

TOKEN_WINDOW_SECONDS = 600.0
WRITES = ("put_item", "update_item", "delete_item")  # one item each; transactions: _lean_transactions
READS = ("get_item", "query", "scan")

Record = tuple[str, dict[str, Any], dict[str, Any] | None]  # table, key, the item after a write (None: deleted)

_lock = threading.RLock()
_journal: Callable[[list[Record]], None] | None = None
_in_transaction = threading.local()  # its own writes are recorded as one, when it commits
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
        _fast_answers()
        _patched = True


def record_to(journal: Callable[[list[Record]], None] | None) -> None:
    """Hand every committed write, from now on, to `journal` (None: stop): one call per write or
    per transaction, made inside the lock and before moto answers, with each touched item as it
    now is (local/journal.py makes these durable)."""
    global _journal
    with _lock:
        _journal = journal


@contextmanager
def locked() -> Iterator[None]:
    """No read or write happens while this is held (a consistent copy of the tables)."""
    with _lock:
        yield


def forget_tokens() -> None:
    """Drop every remembered token (a fresh emulator: each test starts with empty tables)."""
    with _lock:
        _tokens.clear()


def _serialise() -> None:
    from moto.dynamodb.models import DynamoDBBackend

    for name in READS:
        original = getattr(DynamoDBBackend, name)

        def serialised(self: Any, *args: Any, __original: Any = original, **kwargs: Any) -> Any:
            with _lock:
                return __original(self, *args, **kwargs)

        setattr(DynamoDBBackend, name, serialised)
    for name in WRITES:
        original = getattr(DynamoDBBackend, name)
        parameters = inspect.signature(original)

        def recorded(self: Any, *args: Any, __original: Any = original,
                     __parameters: inspect.Signature = parameters, **kwargs: Any) -> Any:
            with _lock:
                answer = __original(self, *args, **kwargs)
                if _journal is not None and not getattr(_in_transaction, "on", False):
                    given = __parameters.bind(self, *args, **kwargs).arguments
                    table = given["table_name"]
                    key = given.get("key") or _key_of(self.get_table(table), given["item_attrs"])
                    _journal([_record(self, table, key)])
                return answer

        setattr(DynamoDBBackend, name, recorded)


def _key_of(table: Any, item: dict[str, Any]) -> dict[str, Any]:
    names = [table.hash_key_attr] + ([table.range_key_attr] if table.range_key_attr else [])
    return {name: item[name] for name in names}


def _record(backend: Any, table: str, key: dict[str, Any]) -> Record:
    """The item at `key` as it is now, in DynamoDB's wire JSON (None: there is none)."""
    item = backend.get_item(table, key)
    return table, key, item.to_json()["Attributes"] if item is not None else None


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
        # where it copies each touched table; its writes are recorded as one, once it commits
        if len(transact_items) > 100:
            raise TooManyTransactionsException()
        before: dict[str, tuple[Any, Any, Any, Any]] = {}  # item identity -> (table, hash, range, copy or None)
        written: list[tuple[str, dict[str, Any]]] = []  # table and key of each item written
        errors: list[tuple[Any, Any, Any]] = []
        _in_transaction.on = True
        try:
            for item in transact_items:
                if len(item) > 1:
                    raise TransactWriteSingleOpException
                errors.append(apply(self, item, before, written))
        except (MultipleTransactionsException, MockValidationException):
            roll_back(before)
            raise
        finally:
            _in_transaction.on = False
        if any(code is not None for code, _, _ in errors):
            roll_back(before)
            raise TransactionCanceledException(errors)
        if _journal is not None and written:
            _journal([_record(self, table, key) for table, key in written])

    def apply(self: Any, item: dict[str, Any], before: dict[str, Any],
              written: list[tuple[str, dict[str, Any]]]) -> tuple[Any, Any, Any]:
        """One item of the transaction: (None, None, None), or its cancellation reason."""
        original_item = None
        try:
            op_type, op = next(iter(item.items()))
            if op_type not in {"ConditionCheck", "Put", "Delete", "Update"}:
                raise ValueError("Unsupported transaction operation")
            table_name = op["TableName"]
            table = self.get_table(table_name)
            key = _key_of(table, op["Item"]) if op_type == "Put" else op["Key"]
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
            if op_type != "ConditionCheck":
                written.append((table_name, key))
            return None, None, None
        except (MultipleTransactionsException, MockValidationException):
            raise
        except ConditionalCheckFailed as error:
            return "ConditionalCheckFailed", str(error.message), original_item
        except Exception as error:  # noqa: BLE001 - moto reports any other failure as a cancellation reason
            return type(error).__name__, str(error), original_item

    def roll_back(before: dict[str, tuple[Any, Any, Any, Any]]) -> None:
        for table, hash_key, range_key, kept in before.values():
            if kept is None:
                table.delete_item(hash_key, range_key)
            elif range_key is None:
                table.items[hash_key] = kept
            else:
                table.items[hash_key][range_key] = kept

    original = DynamoDBBackend.transact_write_items

    def serialised(self: Any, transact_items: list[dict[str, Any]]) -> None:
        with _lock:
            return transact_write_items(self, transact_items)

    serialised.__wrapped__ = original  # type: ignore[attr-defined]
    DynamoDBBackend.transact_write_items = serialised


ITEM_OPERATIONS = frozenset({"GetItem", "PutItem", "UpdateItem", "DeleteItem", "Query", "Scan", "BatchGetItem",
                             "BatchWriteItem", "TransactWriteItems", "TransactGetItems"})


def _fast_answers() -> None:
    from moto.dynamodb.responses import DynamoResult

    original = DynamoResult.execute_result

    def execute_result(self: Any, context: Any) -> Any:
        if context.operation_model.name not in ITEM_OPERATIONS or isinstance(self.result, Exception):
            return original(self, context)
        answer = {name: value for name, value in self.result.items() if value is not None}
        return 200, {"Content-Type": "application/x-amz-json-1.0"}, json.dumps(answer, default=_wire)

    DynamoResult.execute_result = execute_result


def _wire(value: Any) -> Any:
    """JSON for what moto keeps as Python objects: binary as base64 text."""
    if isinstance(value, bytes):
        return base64.b64encode(value).decode()
    raise TypeError(f"cannot answer with a {type(value).__name__}")


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
