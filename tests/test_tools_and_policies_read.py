"""The store's one read of some tools and the approval policies that can apply to them
(`store.tools.get_with_policies`): each item comes back as its own kind, keys DynamoDB leaves
unprocessed are asked again, keys from outside that no item can have are never sent."""

from __future__ import annotations

from typing import Any

import pytest

from chalicelib.base.clock import utcnow
from chalicelib.store import accounts, policies, tools
from chalicelib.store.models import ToolboxItem


@pytest.fixture
def stored() -> None:
    now = utcnow()
    accounts.create_account("acct", "Acme", "token-hash", now)
    for name in ("orders", "refunds", "invoices"):
        tools.put_version("acct", tools.NewVersion("acme", name, {"name": name}, 0), "admin", now)
    policies.put("acct", "acme", "refunds", "every_call", "admin", now)
    policies.put("acct", "acme", None, "first_call", "admin", now)
    policies.put("other", "acme", "orders", "every_call", "admin", now)  # another account's: never read


def test_the_tools_and_their_policies_come_back_each_as_its_own_kind(stored: None) -> None:
    found = tools.get_with_policies("acct", heads=[("acme", "orders"), ("acme", "refunds"), ("acme", "gone")],
                                    versions=[("acme", "invoices", 1)])
    assert sorted(found.heads) == [("acme", "orders"), ("acme", "refunds")]
    assert found.heads[("acme", "refunds")].definition == {"name": "refunds"}
    assert list(found.versions) == [("acme", "invoices", 1)]
    assert {key: setting.policy for key, setting in found.policies.items()} == {
        ("acme", "refunds"): "every_call", ("acme", None): "first_call"}


def test_unprocessed_keys_are_asked_again(stored: None, monkeypatch: pytest.MonkeyPatch) -> None:
    # GIVEN DynamoDB answers only the first key of each request, leaving the others unprocessed
    table = ToolboxItem._get_connection()
    real = table.batch_get_item
    sent: list[int] = []

    def one_at_a_time(keys: list[dict[str, Any]], **kwargs: Any) -> dict[str, Any]:
        sent.append(len(keys))
        answer = real(keys[:1], **kwargs)
        answer["UnprocessedKeys"] = {ToolboxItem.Meta.table_name: {"Keys": keys[1:]}} if keys[1:] else {}
        return answer

    monkeypatch.setattr(table, "batch_get_item", one_at_a_time)
    found = tools.get_with_policies("acct", heads=[("acme", "orders"), ("acme", "refunds")])
    # THEN every key was asked until answered: two heads, two tool policies, one vendor default
    assert sent == [5, 4, 3, 2, 1]
    assert sorted(found.heads) == [("acme", "orders"), ("acme", "refunds")]
    assert sorted(found.policies, key=str) == [("acme", "refunds"), ("acme", None)]


def test_keys_no_item_can_have_are_not_sent(stored: None) -> None:
    # a name over DynamoDB's key size would fail the whole batch: it names nothing, so it is left out
    found = tools.get_with_policies("acct", heads=[("acme", "x" * 2000), ("acme", "orders"), ("", "orders")])
    assert list(found.heads) == [("acme", "orders")]
    assert tools.get_with_policies("acct", heads=[("acme", "x" * 2000)]).heads == {}
