"""local/emulator.py makes moto honour TransactWriteItems' ClientRequestToken as DynamoDB does: a
repeat of a succeeded transaction (same token, same items) is answered with success and changes
nothing; the same token with other items is IdempotentParameterMismatchException; a cancelled
transaction is not remembered. And its transactions copy only the items they touch for their
rollback (moto's own copies whole tables), rolling back exactly as before. Driven through boto3
and pynamodb against the in-process moto the harness wraps every test in (conftest's `aws`,
which also forgets every token)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import boto3
import botocore.exceptions
import pytest
from pynamodb.attributes import NumberAttribute, UnicodeAttribute
from pynamodb.connection import Connection
from pynamodb.exceptions import TransactWriteError
from pynamodb.models import Model
from pynamodb.transactions import TransactWrite

from local import emulator
from tests.faults import Faults

TABLE = "emulator-counters"
REGION = "us-east-1"


class Counter(Model):
    class Meta:
        table_name = TABLE
        region = REGION

    pk = UnicodeAttribute(hash_key=True)
    n = NumberAttribute(null=True)


@pytest.fixture
def dynamodb() -> Iterator[Any]:
    """A boto3 client over a fresh counter table in moto."""
    client = boto3.client("dynamodb", region_name=REGION)
    client.create_table(TableName=TABLE, KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}],
                        AttributeDefinitions=[{"AttributeName": "pk", "AttributeType": "S"}],
                        BillingMode="PAY_PER_REQUEST")
    yield client


def _add(pk: str = "c", by: int = 1, condition: str | None = None) -> dict[str, Any]:
    """A transaction item: ADD `by` to counter `pk`, if `condition` holds."""
    update: dict[str, Any] = {"TableName": TABLE, "Key": {"pk": {"S": pk}}, "UpdateExpression": "ADD n :by",
                              "ExpressionAttributeValues": {":by": {"N": str(by)}}}
    if condition:
        update["ConditionExpression"] = condition
    return {"Update": update}


def _count(client: Any, pk: str = "c") -> int | None:
    item = client.get_item(TableName=TABLE, Key={"pk": {"S": pk}}, ConsistentRead=True).get("Item")
    return int(item["n"]["N"]) if item and "n" in item else None


def _token() -> str:
    return uuid.uuid4().hex


def test_a_repeat_of_a_succeeded_token_is_answered_and_applies_nothing(dynamodb: Any) -> None:
    # GIVEN a transaction that committed under a token
    token = _token()
    first = dynamodb.transact_write_items(TransactItems=[_add()], ClientRequestToken=token)
    # WHEN the same request is sent again under that token
    again = dynamodb.transact_write_items(TransactItems=[_add()], ClientRequestToken=token)
    # THEN it is answered with success, and the counter moved once
    assert first["ResponseMetadata"]["HTTPStatusCode"] == again["ResponseMetadata"]["HTTPStatusCode"] == 200
    assert _count(dynamodb) == 1


def test_a_repeat_is_answered_success_even_where_its_condition_now_fails(dynamodb: Any) -> None:
    # GIVEN a put-if-absent that committed under a token (so its condition no longer holds)
    token = _token()
    put = [{"Put": {"TableName": TABLE, "Item": {"pk": {"S": "c"}, "n": {"N": "7"}},
                    "ConditionExpression": "attribute_not_exists(pk)"}}]
    dynamodb.transact_write_items(TransactItems=put, ClientRequestToken=token)
    # WHEN it is sent again under the same token
    dynamodb.transact_write_items(TransactItems=put, ClientRequestToken=token)
    # THEN no cancellation: the repeat is answered from the first
    assert _count(dynamodb) == 7
    # AND under a new token the condition is evaluated again, and fails
    with pytest.raises(botocore.exceptions.ClientError) as failed:
        dynamodb.transact_write_items(TransactItems=put, ClientRequestToken=_token())
    assert failed.value.response["Error"]["Code"] == "TransactionCanceledException"


def test_the_same_token_with_other_items_is_a_parameter_mismatch(dynamodb: Any) -> None:
    # GIVEN a transaction that committed under a token
    token = _token()
    dynamodb.transact_write_items(TransactItems=[_add(by=1)], ClientRequestToken=token)
    # WHEN other items are sent under that token
    with pytest.raises(botocore.exceptions.ClientError) as refused:
        dynamodb.transact_write_items(TransactItems=[_add(by=2)], ClientRequestToken=token)
    # THEN they are refused, and nothing of them is applied
    assert refused.value.response["Error"]["Code"] == "IdempotentParameterMismatchException"
    assert _count(dynamodb) == 1


def test_a_cancelled_transaction_is_not_remembered(dynamodb: Any) -> None:
    # GIVEN a transaction cancelled by its condition (the counter does not exist yet)
    token, items = _token(), [_add(condition="attribute_exists(pk)")]
    with pytest.raises(botocore.exceptions.ClientError) as cancelled:
        dynamodb.transact_write_items(TransactItems=items, ClientRequestToken=token)
    assert cancelled.value.response["Error"]["Code"] == "TransactionCanceledException"
    assert _count(dynamodb) is None
    # WHEN the state changes so its condition holds, and the identical request is sent under the same token
    dynamodb.put_item(TableName=TABLE, Item={"pk": {"S": "c"}, "n": {"N": "10"}})
    dynamodb.transact_write_items(TransactItems=items, ClientRequestToken=token)
    # THEN it is tried again and applied
    assert _count(dynamodb) == 11


def test_tokens_are_the_identity_not_the_items(dynamodb: Any) -> None:
    # WHEN the same items are sent under two tokens, and twice without a token (boto3 fills in a fresh one)
    dynamodb.transact_write_items(TransactItems=[_add()], ClientRequestToken=_token())
    dynamodb.transact_write_items(TransactItems=[_add()], ClientRequestToken=_token())
    dynamodb.transact_write_items(TransactItems=[_add()])
    dynamodb.transact_write_items(TransactItems=[_add()])
    # THEN each is a transaction of its own
    assert _count(dynamodb) == 4


def test_a_token_past_its_window_is_forgotten(dynamodb: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    # GIVEN a transaction that committed under a token, and a window that has passed
    token = _token()
    dynamodb.transact_write_items(TransactItems=[_add()], ClientRequestToken=token)
    monkeypatch.setattr(emulator, "TOKEN_WINDOW_SECONDS", -1.0)
    # WHEN it is sent again under that token
    dynamodb.transact_write_items(TransactItems=[_add()], ClientRequestToken=token)
    # THEN it is a new transaction, as DynamoDB treats a token older than ten minutes
    assert _count(dynamodb) == 2


def test_forget_tokens_starts_afresh(dynamodb: Any) -> None:
    # GIVEN a transaction that committed under a token, then a fresh emulator (as each test starts)
    token = _token()
    dynamodb.transact_write_items(TransactItems=[_add()], ClientRequestToken=token)
    emulator.forget_tokens()
    # WHEN it is sent again under that token, THEN it is a new transaction
    dynamodb.transact_write_items(TransactItems=[_add()], ClientRequestToken=token)
    assert _count(dynamodb) == 2


def test_a_lost_answer_is_answered_by_botocores_retry_and_applied_once(dynamodb: Any, faults: Faults) -> None:
    # GIVEN a transaction whose first answer is lost (applied, then a 500)
    faults.lose_answer("TransactWriteItems", times=1)
    # WHEN boto3 sends it (botocore retries the 500 with the same request and token)
    answer = dynamodb.transact_write_items(TransactItems=[_add()], ClientRequestToken=_token())
    # THEN the retry is answered with success, and the counter moved once
    assert faults.hits == 1 and faults.seen[("dynamodb", "TransactWriteItems")] == 2
    assert answer["ResponseMetadata"]["HTTPStatusCode"] == 200
    assert _count(dynamodb) == 1


def test_pynamodb_transactions_under_one_token_apply_once(dynamodb: Any) -> None:
    # GIVEN a pynamodb transaction committed under a token
    token = _token()
    for _ in range(2):
        # WHEN the same transaction is committed twice under that token
        with TransactWrite(connection=Connection(region=REGION), client_request_token=token) as write:
            write.update(Counter(pk="c"), actions=[Counter.n.add(1)])
    # THEN it was applied once
    assert Counter.get("c", consistent_read=True).n == 1


def test_pynamodb_sees_a_mismatch_as_a_transact_write_error(dynamodb: Any) -> None:
    # GIVEN a pynamodb transaction committed under a token
    token = _token()
    with TransactWrite(connection=Connection(region=REGION), client_request_token=token) as write:
        write.update(Counter(pk="c"), actions=[Counter.n.add(1)])
    # WHEN another transaction is committed under that token
    with pytest.raises(TransactWriteError) as refused, \
            TransactWrite(connection=Connection(region=REGION), client_request_token=token) as write:
        write.update(Counter(pk="other"), actions=[Counter.n.add(1)])
    # THEN pynamodb raises the mismatch, and nothing of the second is applied
    assert refused.value.cause_response_code == "IdempotentParameterMismatchException"
    assert Counter.get("c", consistent_read=True).n == 1
    assert Counter.count("other") == 0


# Transactions that cost what they touch: moto's own copies every touched table for its rollback.

def test_a_cancelled_transaction_leaves_every_item_as_it_was(dynamodb: Any) -> None:
    # GIVEN two counters, and a transaction that adds to both, creates a third and deletes one,
    # whose last item's condition fails
    dynamodb.transact_write_items(TransactItems=[_add("a", 5), _add("b", 7), _add("gone", 1)])
    items = [_add("a", 1), _add("b", 1),
             {"Put": {"TableName": TABLE, "Item": {"pk": {"S": "new"}, "n": {"N": "1"}}}},
             {"Delete": {"TableName": TABLE, "Key": {"pk": {"S": "gone"}}}},
             _add("c", 1, condition="attribute_exists(pk)")]
    # WHEN it is sent
    with pytest.raises(botocore.exceptions.ClientError) as cancelled:
        dynamodb.transact_write_items(TransactItems=items)
    # THEN DynamoDB's answer names the failed item, and nothing of the others stayed
    reasons = [reason["Code"] for reason in cancelled.value.response["CancellationReasons"]]
    assert reasons == ["None", "None", "None", "None", "ConditionalCheckFailed"]
    assert (_count(dynamodb, "a"), _count(dynamodb, "b"), _count(dynamodb, "gone")) == (5, 7, 1)
    assert _count(dynamodb, "new") is None and _count(dynamodb, "c") is None


def test_an_invalid_item_rolls_back_what_came_before_it(dynamodb: Any) -> None:
    # GIVEN a counter, and a transaction whose second item is invalid (ADD to a string)
    dynamodb.put_item(TableName=TABLE, Item={"pk": {"S": "text"}, "n": {"S": "not a number"}})
    dynamodb.transact_write_items(TransactItems=[_add("a", 5)])
    # WHEN it is sent
    with pytest.raises(botocore.exceptions.ClientError):
        dynamodb.transact_write_items(TransactItems=[_add("a", 1), _add("text", 1)])
    # THEN the first item's change is undone
    assert _count(dynamodb, "a") == 5


def test_a_transaction_copies_the_items_it_touches_not_the_tables(dynamodb: Any,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    # GIVEN a table of many counters, and every deep copy made from now on watched
    import copy

    from moto.dynamodb.models.table import Table

    dynamodb.transact_write_items(TransactItems=[_add(f"k{number}") for number in range(100)])
    copied: list[type] = []
    deepcopy = copy.deepcopy

    def watched(value: Any, memo: Any = None) -> Any:
        copied.append(type(value))
        return deepcopy(value, memo)

    monkeypatch.setattr(copy, "deepcopy", watched)
    # WHEN a transaction of two items commits, and one is cancelled
    dynamodb.transact_write_items(TransactItems=[_add("k1"), _add("k2")])
    with pytest.raises(botocore.exceptions.ClientError):
        dynamodb.transact_write_items(TransactItems=[_add("k3"), _add("absent", condition="attribute_exists(pk)")])
    # THEN no table was copied, and the cancelled one changed nothing
    assert Table not in copied and copied
    assert (_count(dynamodb, "k1"), _count(dynamodb, "k2"), _count(dynamodb, "k3")) == (2, 2, 1)


# A query costs its partition: moto's own lists and sorts every item of the table.

def test_a_partition_query_reads_only_its_partition_and_answers_as_before(monkeypatch: pytest.MonkeyPatch) -> None:
    # GIVEN a table with a range key, three partitions of several items, and every item moto's
    # table-wide listing hands out from now on counted
    from moto.dynamodb.models.table import Table

    client = boto3.client("dynamodb", region_name=REGION)
    client.create_table(TableName="emulator-pairs", BillingMode="PAY_PER_REQUEST",
                        KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}, {"AttributeName": "sk", "KeyType": "RANGE"}],
                        AttributeDefinitions=[{"AttributeName": "pk", "AttributeType": "S"},
                                              {"AttributeName": "sk", "AttributeType": "S"}])
    for pk in ("a", "b", "c"):
        for sk in ("3", "1", "2"):
            client.put_item(TableName="emulator-pairs", Item={"pk": {"S": pk}, "sk": {"S": sk}})
    listed: list[int] = []
    every_item = Table.all_items

    def counted(self: Any) -> Any:
        items = every_item(self)
        listed.append(len(items))
        return items

    monkeypatch.setattr(Table, "all_items", counted)
    # WHEN one partition is queried, whole and with a range condition, forwards and back
    def keys(**extra: Any) -> list[str]:
        found = client.query(TableName="emulator-pairs", KeyConditionExpression="pk = :pk" + extra.pop("and", ""),
                             ExpressionAttributeValues={":pk": {"S": "b"}, **extra.pop("values", {})}, **extra)
        return [item["sk"]["S"] for item in found["Items"]]

    whole, backwards = keys(), keys(ScanIndexForward=False)
    after_one = keys(**{"and": " AND sk > :s", "values": {":s": {"S": "1"}}})
    absent = client.query(TableName="emulator-pairs", KeyConditionExpression="pk = :pk",
                          ExpressionAttributeValues={":pk": {"S": "zzz"}})["Items"]
    # THEN the answers are DynamoDB's, and no query listed more than its own partition
    assert (whole, after_one, backwards, absent) == (["1", "2", "3"], ["2", "3"], ["3", "2", "1"], [])
    assert listed and max(listed) <= 3
