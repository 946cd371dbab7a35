"""Shared plumbing of the store: transactions, cursors and storage-error conversion."""

from __future__ import annotations

import base64
import binascii
import json
import random
import time
import uuid
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from functools import lru_cache
from typing import Any

from botocore.exceptions import HTTPClientError
from pynamodb.connection import Connection
from pynamodb.exceptions import PynamoDBException, QueryError, TransactWriteError, UpdateError
from pynamodb.indexes import Index
from pynamodb.models import Model
from pynamodb.transactions import TransactWrite

from chalicelib.base import jsontext
from chalicelib.base.config import settings
from chalicelib.base.errors import Busy, Conflict, InvalidInput, WorksetError
from chalicelib.store.records import Page

CURSOR_CHARS = 4096  # four key attributes of DynamoDB's size, base64: far below this


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


class WriteRefused(WorksetError):
    """DynamoDB refused a write for what it holds (an item over 400 KB, a value it cannot take):
    sending it again will not help. `reasons` as for ConditionFailed, when it gave them.
    `maybe_written`: no answer said so (a timeout, a connection lost), and the write may have been
    made."""

    code = "write_refused"

    def __init__(self, message: str, reasons: list[str | None] | None = None, *, maybe_written: bool = False) -> None:
        super().__init__(message)
        self.reasons = reasons or []
        self.maybe_written = maybe_written


# Cancellation reasons that say "not now" rather than "no": the same transaction may succeed if
# sent again. DynamoDB's own SDK retries never cover them (they arrive as a cancelled transaction).
TRANSIENT_REASONS = frozenset({"ThrottlingError", "ProvisionedThroughputExceeded", "TransactionConflict"})
TRANSIENT_ERRORS = frozenset({"TransactionInProgressException", "ThrottlingException",
                              "ProvisionedThroughputExceededException", "InternalServerError"})
# Of those, the answers that leave a transaction's outcome unknown: an attempt sent earlier under
# the same token is still being applied, or DynamoDB failed partway and may have committed.
UNKNOWN_OUTCOME_ERRORS = frozenset({"TransactionInProgressException", "InternalServerError"})
ATTEMPTS = 5
BACKOFF_BASE_SECONDS = 0.05
BACKOFF_CAP_SECONDS = 0.8  # with full jitter, five attempts wait at most ~1.55 s in all


class _RetriedWrite(TransactWrite):
    """A TransactWrite sent with one idempotency token (`ClientRequestToken`) for every attempt,
    and sent again, with jittered backoff, while DynamoDB cancels it for transient reasons. The
    items are built once, so every attempt sends the same request, as the token requires: if an
    attempt committed but its answer was lost, the next one is answered from the first."""

    def _commit(self) -> Any:  # pynamodb's hook that sends the transaction on leaving the block
        unknown = False  # an attempt's answer left open whether the transaction was applied
        for attempt in range(1, ATTEMPTS + 1):
            try:
                return super()._commit()
            except TransactWriteError as error:
                unknown = unknown or error_code(error) in UNKNOWN_OUTCOME_ERRORS
                if attempt == ATTEMPTS or not _transient(error):
                    if _transient(error):
                        if unknown:
                            raise Busy("the store is busy and did not confirm the change (it may yet be made); "
                                       "try again shortly", maybe_written=True) from error
                        raise Busy("the store is busy (throttled or contended); nothing was changed, "
                                   "try again shortly") from error
                    raise
                time.sleep(random.uniform(0, min(BACKOFF_CAP_SECONDS, BACKOFF_BASE_SECONDS * 2 ** attempt)))
        raise AssertionError("unreachable")


def error_code(error: PynamoDBException) -> str | None:
    """DynamoDB's code for `error` (`ConditionalCheckFailedException`, ...); None when no answer
    came (a timeout or a lost connection past the SDK's retries: botocore's error then has a
    `response` of None, which pynamodb's `cause_response_code` cannot read)."""
    response = getattr(error.cause, "response", None)
    code = response.get("Error", {}).get("Code") if isinstance(response, Mapping) else None
    return code if isinstance(code, str) else None


def cancellation_codes(error: TransactWriteError) -> list[str | None]:
    """The per-item codes of a cancelled transaction (None for an item that did not cancel it)."""
    return [reason.code if reason else None for reason in (error.cancellation_reasons or [])]


def _transient(error: TransactWriteError) -> bool:
    """True when every item that cancelled the transaction did so for a transient reason."""
    if error_code(error) in TRANSIENT_ERRORS:
        return True
    codes = {code for code in cancellation_codes(error) if code not in (None, "None")}
    return bool(codes) and codes <= TRANSIENT_REASONS


# DynamoDB failing for now rather than refusing: a read that gets one of these past the SDK's own
# retries may work if sent again shortly (and is no fault of the request).
UNAVAILABLE_ERRORS = TRANSIENT_ERRORS | {"ServiceUnavailable", "RequestLimitExceeded"}


def unavailable(error: BaseException) -> bool:
    """True when `error` is the store failing for now (throttled or overloaded past the SDK's
    retries, or timed out, or unreachable) rather than refusing what was asked."""
    if isinstance(error, PynamoDBException):
        return isinstance(error.cause, HTTPClientError) or error_code(error) in UNAVAILABLE_ERRORS
    return isinstance(error, HTTPClientError)


@contextmanager
def transaction() -> Iterator[TransactWrite]:
    """A TransactWrite whose condition failures surface as `ConditionFailed`; transient
    cancellations are retried under one idempotency token (`Busy` once the budget is spent)."""
    try:
        with _RetriedWrite(connection=connection(), client_request_token=uuid.uuid4().hex) as write:
            yield write
    except TransactWriteError as error:
        reasons = cancellation_codes(error)
        if "ConditionalCheckFailed" in reasons:
            raise ConditionFailed(reasons) from error
        raise


KEY_BYTES = 1024  # DynamoDB refuses an empty key, and a sort key over 1,024 bytes


def key_ok(*parts: str) -> bool:
    """True when every part of a key from outside (an id in a path, an argument) is one DynamoDB
    accepts as a key; anything else cannot name a stored item, so the read is not even sent."""
    return all(isinstance(part, str) and part and len(part.encode("utf-8", "surrogatepass")) <= KEY_BYTES
               for part in parts)


BATCH_GET_KEYS = 100  # DynamoDB's BatchGetItem reads at most 100 keys


def batch_get_raw(model: type[Model], keys: list[tuple[str, str]], *, consistent: bool = False) -> list[dict[str, Any]]:
    """The raw items of these (hash, range) keys of `model`'s table, whatever model each item is
    (the caller deserialises each with its own model's `from_raw_data`): one BatchGetItem per 100
    keys, keys DynamoDB left unprocessed asked again, as pynamodb's `Model.batch_get` does."""
    hash_name, range_name = model._hash_key_attribute().attr_name, model._range_key_attribute().attr_name
    wanted = [{hash_name: {"S": hash_key}, range_name: {"S": range_key}} for hash_key, range_key in dict.fromkeys(keys)]
    table = model._get_connection()
    found: list[dict[str, Any]] = []
    for start in range(0, len(wanted), BATCH_GET_KEYS):
        batch: list[dict[str, Any]] | None = wanted[start:start + BATCH_GET_KEYS]
        while batch:
            answer = table.batch_get_item(batch, consistent_read=consistent)  # type: ignore[arg-type]  # key maps, as Model.batch_get sends
            found.extend(answer.get("Responses", {}).get(model.Meta.table_name, []))
            batch = answer.get("UnprocessedKeys", {}).get(model.Meta.table_name, {}).get("Keys")
    return found


def update_if(item: Any, actions: list[Any], condition: Any) -> bool:
    """One conditional UpdateItem; False (and nothing written) when the condition does not hold."""
    try:
        item.update(actions=actions, condition=condition)
    except UpdateError as error:
        if error_code(error) == "ConditionalCheckFailedException":
            return False
        raise
    return True


def update_once_if(item: Any, actions: list[Any], condition: Any) -> bool:
    """`update_if` as a one-item transaction, for a write that must not apply twice: its
    idempotency token answers a retry after a lost answer with the first success (a plain
    UpdateItem's retry would apply again, or fail the condition its first attempt made false).
    Twice the write units of `update_if`."""
    try:
        with transaction() as write:
            write.update(item, actions=actions, condition=condition)
    except ConditionFailed:
        return False
    return True


def encode_cursor(last_evaluated_key: dict[str, Any] | None) -> str | None:
    """An opaque cursor for a page's last key."""
    if not last_evaluated_key:
        return None
    return base64.urlsafe_b64encode(json.dumps(last_evaluated_key, sort_keys=True).encode()).decode()


def page(model: type[Model], hash_key: str, *, limit: int, cursor: str | None, record: Callable[[Any], Any],
         index: Index[Any] | None = None, **query: Any) -> Page:
    """One page of `(index or model).query(hash_key, **query)` from where `cursor` left off: the
    items as records and the next cursor. Every paged query goes through here, so a cursor we did
    not make, one made for another partition or list, or one whose key DynamoDB still rejects
    (ValidationException) is the same bad input on the `cursor` field, never a crash."""
    partition = next(attribute.attr_name for attribute in _key_attributes(index or model) if attribute.is_hash_key)
    start = decode_cursor(cursor, keys=_key_types(model, index), **{partition: hash_key})
    try:
        result = (index or model).query(hash_key, limit=limit, last_evaluated_key=start, **query)
        items = [record(item) for item in result]
    except QueryError as error:
        if start is not None and error_code(error) == "ValidationException":
            raise _bad_cursor() from error
        raise
    return Page(items=items, next=encode_cursor(result.last_evaluated_key))


def filtered_page(model: type[Model], hash_key: str, *, limit: int, cursor: str | None, record: Callable[[Any], Any],
                  reads: int, page_size: int, **query: Any) -> Page:
    """`page` for a query whose `filter_condition` may match few of the items it reads: at most
    `reads` Queries of `page_size` items each (a bounded cost, however rare the matches), and a
    `next` cursor that resumes where the reading stopped (after the last item answered once
    `limit` matched), so paging on reaches every match. A page may hold no item and a cursor."""
    partition = next(attribute.attr_name for attribute in _key_attributes(model) if attribute.is_hash_key)
    start = decode_cursor(cursor, keys=_key_types(model, None), **{partition: hash_key})
    key_names = [attribute.attr_name for attribute in _key_attributes(model)]
    items: list[Any] = []
    try:
        pages = model.query(hash_key, last_evaluated_key=start, page_size=page_size, **query).page_iter
        for _ in range(reads):
            answer = next(pages, None)
            if answer is None:
                break
            found = answer.get("Items", [])
            for index, raw in enumerate(found):
                items.append(record(model.from_raw_data(raw)))
                if len(items) == limit:
                    more = index + 1 < len(found) or pages.last_evaluated_key is not None
                    return Page(items=items, next=encode_cursor({name: raw[name] for name in key_names}) if more else None)
            if pages.last_evaluated_key is None:
                break
    except QueryError as error:
        if start is not None and error_code(error) == "ValidationException":
            raise _bad_cursor() from error
        raise
    return Page(items=items, next=encode_cursor(pages.last_evaluated_key))


def decode_cursor(cursor: str | None, *, keys: Mapping[str, str] | None = None, **scope: str) -> dict[str, Any] | None:
    """The last key a cursor stands for. A cursor we did not make is bad input: not base64 of
    strict JSON (`jsontext.loads`), not a map of attribute name to one typed, non-empty value,
    made for another partition (`scope` names the key attributes it must carry), or (given
    `keys`, attribute name -> DynamoDB type) not exactly the keys of the list it is used on."""
    if not cursor:
        return None
    try:
        if len(cursor) > CURSOR_CHARS:
            raise ValueError("too long")
        key = jsontext.loads(base64.b64decode(cursor, altchars=b"-_", validate=True))
    except (ValueError, binascii.Error) as error:  # JsonRefused is a ValueError
        raise _bad_cursor() from error
    if not isinstance(key, dict) or not key or not all(_typed_value(value) for value in key.values()):
        raise _bad_cursor()
    if keys is not None and {name: next(iter(value)) for name, value in key.items()} != dict(keys):
        raise _bad_cursor()
    if any(key.get(name) != {"S": value} for name, value in scope.items()):
        raise _bad_cursor()
    return key


def _bad_cursor() -> InvalidInput:
    return InvalidInput("cursor is not one this list returned", field="cursor")


def _typed_value(value: Any) -> bool:
    """`{"S": "..."}` or `{"N": "..."}`: one key type and a non-empty string (DynamoDB refuses
    an empty key)."""
    if not isinstance(value, dict) or len(value) != 1:
        return False
    ((kind, text),) = value.items()
    return kind in ("S", "N") and isinstance(text, str) and text != ""


def _key_types(model: type[Model], index: Index[Any] | None) -> dict[str, str]:
    """Attribute name -> DynamoDB type of every key a page of this query ends on: the table's
    keys, and the index's too when it queries an index."""
    attributes = [*_key_attributes(model), *(_key_attributes(index) if index is not None else [])]
    return {attribute.attr_name: attribute.attr_type for attribute in attributes}


def _key_attributes(source: type[Model] | Index[Any]) -> Iterator[Any]:
    attributes = source.get_attributes() if isinstance(source, type) else type(source).Meta.attributes
    return (attribute for attribute in attributes.values() if attribute.is_hash_key or attribute.is_range_key)
