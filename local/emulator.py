"""Where moto's DynamoDB falls short of a guarantee Workset relies on, and the fix: applied to the
in-process backend the tests use and to the embedded server of the local stack (`patch()`).

- **Atomic writes.** DynamoDB applies each write, and each transaction, atomically; moto's
  backend does not guard itself against threads. Every write goes through one lock, as
  DynamoDB's own serialisation per item would.
- **Idempotent transactions.** DynamoDB answers a TransactWriteItems that repeats a succeeded
  one's `ClientRequestToken` (within ten minutes, with the same items) with success and changes
  nothing; with other items, `IdempotentParameterMismatchException`. moto ignores the token, so
  a retry after a lost answer would apply the transaction twice, or fail its conditions. A
  cancelled transaction is not remembered: sending it again tries again.
  (TransactWriteItems, ClientRequestToken, in the DynamoDB API reference.)
"""

from __future__ import annotations

import json
import threading
import time
from typing import Any

TOKEN_WINDOW_SECONDS = 600.0
WRITES = ("put_item", "update_item", "delete_item", "transact_write_items")

_lock = threading.RLock()
_tokens: dict[tuple[str, str, str], tuple[str, float, Any]] = {}  # (account, region, token) -> (items, at, answer)
_patched = False


def patch() -> None:
    """Apply both fixes to moto's DynamoDB (once per process)."""
    global _patched
    with _lock:
        if _patched:
            return
        _serialise_writes()
        _honour_request_tokens()
        _patched = True


def forget_tokens() -> None:
    """Drop every remembered token (a fresh emulator: each test starts with empty tables)."""
    with _lock:
        _tokens.clear()


def _serialise_writes() -> None:
    from moto.dynamodb.models import DynamoDBBackend

    for name in WRITES:
        original = getattr(DynamoDBBackend, name)

        def locked(self: Any, *args: Any, __original: Any = original, **kwargs: Any) -> Any:
            with _lock:
                return __original(self, *args, **kwargs)

        setattr(DynamoDBBackend, name, locked)


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
