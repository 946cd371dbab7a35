"""The daily cap on a vendor's new versions (`imports.MAX_VERSIONS_PER_DAY`) holds for OpenAPI
imports as for MCP server syncs: a document imported again and again, each time with every
operation changed, stops publishing at the cap, changes nothing, and says how many more the day
allows; the count is the vendor's, in its account, and starts again the next UTC day."""

from __future__ import annotations

import html
import json
import re
from datetime import timedelta
from typing import Any

import pytest

from chalicelib.base.clock import utcnow
from chalicelib.catalog import imports
from tests.conftest import Admin, Console

CAP = 7  # three imports of three changed operations: 3, 6, then 9 would pass it
CHECKED = re.compile(r'name="checked" value="([0-9a-f]{64})"')


@pytest.fixture(autouse=True)
def small_cap(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(imports, "MAX_VERSIONS_PER_DAY", CAP)


def _document(revision: int, *, operations: int = 3, drop: int | None = None) -> dict[str, Any]:
    """A document whose every operation's summary names `revision`: each revision is a new
    version of every tool (a hostile or careless source re-published in a loop)."""
    paths = {f"/items{index}": {"get": {"operationId": f"item{index}", "summary": f"Item {index}, revision {revision}",
                                        "responses": {"200": {"description": "ok"}}}}
             for index in range(operations) if index != drop}
    return {"openapi": "3.0.3", "info": {"title": "Items", "version": str(revision)},
            "servers": [{"url": "http://127.0.0.1:9"}], "paths": paths}


def _import(admin: Admin, revision: int, vendor: str = "items", **options: Any) -> Any:
    return admin.call("POST", "/v1/imports/openapi", {"vendor": vendor, "document": _document(revision, **options)})


def _toolbox(admin: Admin) -> list[tuple[str, str, int, bool]]:
    """Every tool of the account with its newest version and whether it can be called."""
    found = []
    for tool in admin.call("GET", "/v1/tools").json_body["items"]:
        detail = admin.call("GET", f"/v1/tools/{tool['vendor']}/{tool['name']}").json_body
        found.append((tool["vendor"], tool["name"], len(detail["versions"]), "unavailable" not in tool))
    return sorted(found)


def test_a_reimport_past_the_days_cap_is_refused_and_leaves_the_toolbox_as_it_was(admin: Admin) -> None:
    # GIVEN a document imported, then imported again with every operation changed (6 of 7 versions)
    assert _import(admin, 1).status_code == 200
    assert _import(admin, 2).json_body["counts"]["new_version"] == 3
    before = _toolbox(admin)
    # WHEN it is imported a third time, changed again and with one operation dropped
    refused = _import(admin, 3, drop=1)
    # THEN it is refused as over the day's quota, saying how many more versions the day allows
    assert refused.status_code == 429, refused.body
    error = refused.json_body["error"]
    assert error["code"] == "quota_exceeded" and error["message"].startswith("too many changes")
    assert f"at most {CAP} a day (UTC), 1 more today" in error["message"]
    assert "nothing was published" in error["message"]
    # AND nothing changed: no new version, and the dropped operation's tool is not withdrawn
    assert _toolbox(admin) == before
    assert all(versions == 2 and available for _, _, versions, available in before)
    # AND an import that brings no new version still runs (the cap counts versions, not imports)
    unchanged = _import(admin, 2)
    assert unchanged.status_code == 200 and unchanged.json_body["counts"]["unchanged"] == 3


def test_a_dry_run_past_the_cap_answers_and_takes_nothing_from_the_day(admin: Admin) -> None:
    # GIVEN two imports (6 of 7 versions)
    _import(admin, 1)
    _import(admin, 2)
    # WHEN the next revision is checked as a dry run, twice
    for _ in range(2):
        checked = admin.call("POST", "/v1/imports/openapi", {"vendor": "items", "document": _document(3),
                                                             "dry_run": True})
        # THEN it answers what publishing would do, and writes nothing
        assert checked.status_code == 200 and checked.json_body["counts"]["new_version"] == 3
    # AND the day still has room for exactly one more version
    one = _import(admin, 3, operations=1)
    assert one.status_code == 200 and one.json_body["counts"]["new_version"] == 1
    assert _import(admin, 4, operations=1).status_code == 429


def test_the_cap_is_per_vendor_and_per_account(admin: Admin, other_admin: Admin) -> None:
    # GIVEN a vendor whose day is all but full (6 of 7)
    _import(admin, 1)
    _import(admin, 2)
    assert _import(admin, 3).status_code == 429
    # WHEN another vendor of the account, and the same vendor in another account, import as much
    other_vendor = [_import(admin, revision, vendor="gadgets").status_code for revision in (1, 2)]
    other_account = [_import(other_admin, revision).status_code for revision in (1, 2)]
    # THEN each has its own day's count
    assert other_vendor == [200, 200] and other_account == [200, 200]
    assert _import(admin, 3, vendor="gadgets").status_code == 429
    assert _import(other_admin, 3).status_code == 429
    assert {versions for vendor, _, versions, _ in _toolbox(other_admin) if vendor == "items"} == {2}


def test_the_next_utc_day_allows_again(admin: Admin, monkeypatch: pytest.MonkeyPatch) -> None:
    # GIVEN a vendor whose day is full
    _import(admin, 1)
    _import(admin, 2)
    assert _import(admin, 3).status_code == 429
    # WHEN the clock passes into the next UTC day
    tomorrow = utcnow() + timedelta(days=1)
    monkeypatch.setattr("chalicelib.api.imports.utcnow", lambda: tomorrow)
    answer = _import(admin, 3)
    # THEN the import publishes, and the new day has its own cap
    assert answer.status_code == 200 and answer.json_body["counts"]["new_version"] == 3
    assert _import(admin, 4).status_code == 200
    assert _import(admin, 5).status_code == 429


def test_publishing_past_the_cap_in_the_console_says_why_and_stores_nothing(console: Console, admin: Admin) -> None:
    # GIVEN a vendor whose day is all but full
    _import(admin, 1)
    _import(admin, 2)
    before = _toolbox(admin)
    document = ("openapi: 3.0.3\ninfo: {title: Items, version: '3'}\nservers: [{url: 'http://127.0.0.1:9'}]\npaths:\n"
                + "".join(f"  /items{index}:\n    get: {{operationId: item{index}, summary: 'Item {index}, revision 3',"
                          " responses: {'200': {description: ok}}}\n" for index in range(3)))
    fields = {"vendor": "items", "document": document}
    # WHEN a person checks the next revision, then presses Publish
    checked = console.post("/console/import", {**fields, "step": "check"})
    assert checked.status_code == 200
    digest = CHECKED.search(checked.body.decode()).group(1)  # type: ignore[union-attr]
    answer = console.post("/console/import", {**fields, "step": "publish", "checked": digest})
    # THEN the form comes back with the reason and how many more the day allows
    assert answer.status_code == 429
    alert = re.search(r'<p class="notice error" role="alert">(.*?)</p>', answer.body.decode(), re.DOTALL)
    assert alert is not None and "1 more today" in html.unescape(alert.group(1))
    # AND nothing changed
    assert _toolbox(admin) == before


def _day_count(admin: Admin, vendor: str = "items") -> int:
    """The day's count of the vendor's new versions (the test's one account)."""
    from chalicelib.store.models import DayCountItem, day_count_sk

    sk = day_count_sk(vendor, f"{utcnow():%Y-%m-%d}")
    return sum(int(item.published) for item in DayCountItem.scan(DayCountItem.sk == sk))


def _versions_written(admin: Admin) -> int:
    return sum(versions for _, _, versions, _ in _toolbox(admin))


def test_a_batch_written_in_parts_counts_the_parts_written_before_a_later_part_lost_a_race(
        admin: Admin, monkeypatch: pytest.MonkeyPatch) -> None:
    from chalicelib.store import tools as tool_store

    # GIVEN three imported tools, and a store that writes each tool of a batch in its own
    # transaction (as it does for large definitions: BATCH_BYTES)
    assert _import(admin, 1).status_code == 200
    monkeypatch.setattr(tool_store, "BATCH_BYTES", 1)
    # WHEN the next import's last tool is published by someone else after the import read the toolbox
    real = tool_store.put_versions
    raced: list[str] = []

    def racing(account_id: str, versions: Any, published_by: str, now: Any) -> Any:
        if not raced:
            raced.append(versions[-1].name)
            real(account_id, [versions[-1]], "someone-else", now)
        return real(account_id, versions, published_by, now)

    monkeypatch.setattr(tool_store, "put_versions", racing)
    answer = _import(admin, 2)
    # THEN the two versions the import wrote are answered as published and stay counted against
    # the day (a count given back for a version written would let the day pass its cap)
    assert answer.status_code == 200, answer.body
    assert answer.json_body["counts"]["new_version"] == 2, answer.json_body
    assert _versions_written(admin) == 3 + 3
    assert _day_count(admin) == 3 + 2


def test_a_write_the_store_may_have_made_is_not_given_back(admin: Admin, monkeypatch: pytest.MonkeyPatch) -> None:
    from chalicelib.base.errors import Busy
    from chalicelib.store import tools as tool_store

    # GIVEN three imported tools
    assert _import(admin, 1).status_code == 200
    # WHEN the store commits the next import's batch but the answer is an error that leaves the
    # outcome unknown (a transaction still in progress past every retry)
    real = tool_store.put_versions

    def committed_then_busy(*args: Any) -> Any:
        real(*args)
        raise Busy("the store did not confirm the write", maybe_written=True)

    monkeypatch.setattr(tool_store, "put_versions", committed_then_busy)
    answer = _import(admin, 2)
    # THEN the versions stay counted: the day's count never falls below what was written
    assert answer.status_code == 200, answer.body
    assert _versions_written(admin) == 6
    assert _day_count(admin) == 6


@pytest.mark.parametrize("answer", ["in_progress", "timeout"])
def test_a_batch_committed_whose_answer_was_lost_stays_counted(admin: Admin, monkeypatch: pytest.MonkeyPatch,
                                                               answer: str) -> None:
    import botocore.exceptions

    from chalicelib.store import base

    # GIVEN three imported tools
    assert _import(admin, 1).status_code == 200
    # WHEN DynamoDB commits the next import's versions, but its answer is lost: every retry
    # under the same token hears the transaction is still in progress, or the request timed out
    client = base.connection().client
    original = client._make_api_call
    monkeypatch.setattr(base, "BACKOFF_BASE_SECONDS", 0.001)
    committed: list[str] = []  # the token of the transaction applied, its answer lost

    def make_api_call(operation: str, params: dict[str, Any]) -> Any:
        token = params.get("ClientRequestToken")
        publishing = operation == "TransactWriteItems" and any("Put" in item for item in params["TransactItems"])
        if not publishing or (committed and token != committed[0]):
            return original(operation, params)
        if not committed:
            original(operation, params)
            committed.append(token)
        elif answer == "timeout":  # a later request under the token: answered from the first
            return {}
        if answer == "timeout":
            raise botocore.exceptions.ReadTimeoutError(endpoint_url="http://127.0.0.1:1")
        raise botocore.exceptions.ClientError(
            {"Error": {"Code": "TransactionInProgressException", "Message": "in progress"}}, operation)

    monkeypatch.setattr(client, "_make_api_call", make_api_call)
    answered = _import(admin, 2)
    monkeypatch.setattr(client, "_make_api_call", original)
    # THEN whatever the import answers, the three versions written stay counted against the day
    assert answered.status_code in (200, 503), answered.body
    assert _versions_written(admin) == 6
    assert _day_count(admin) == 6


def test_a_give_back_the_store_fails_costs_slots_not_the_import(admin: Admin, monkeypatch: pytest.MonkeyPatch) -> None:
    from chalicelib.base.errors import Busy
    from chalicelib.store import daycounts
    from chalicelib.store import tools as tool_store

    # GIVEN three imported tools, and a store that refuses one of the next import's versions
    assert _import(admin, 1).status_code == 200
    real = tool_store.put_versions

    def refuse_first(account_id: str, versions: Any, published_by: str, now: Any) -> Any:
        if versions[0].name == "item0":
            raise Busy("the store is busy")
        return real(account_id, versions, published_by, now)

    def failing_give_back(*args: Any) -> None:
        raise Busy("the store is busy")

    monkeypatch.setattr(tool_store, "BATCH_BYTES", 1)
    monkeypatch.setattr(tool_store, "put_versions", refuse_first)
    # WHEN the count of the refused version cannot be given back, in an import that also drops an operation
    monkeypatch.setattr(daycounts, "give_back", failing_give_back)
    answer = _import(admin, 2, drop=2)
    # THEN the import still answers what it wrote, and marks the dropped operation's tool unavailable
    assert answer.status_code == 200, answer.body
    assert answer.json_body["counts"]["new_version"] == 1 and answer.json_body["counts"]["failed"] == 1
    assert answer.json_body["counts"]["unavailable"] == 1
    assert [available for _, name, _, available in _toolbox(admin) if name == "item2"] == [False]
    # AND the slot it could not give back stays counted (the day's cap reached sooner, never passed)
    assert _day_count(admin) == 3 + 2


def test_an_import_counted_before_midnight_and_written_after_it_stays_on_its_first_day(
        admin: Admin, monkeypatch: pytest.MonkeyPatch) -> None:
    from datetime import datetime

    from chalicelib.base.errors import Busy
    from chalicelib.store import tools as tool_store
    from chalicelib.store.models import DayCountItem, day_count_sk

    # GIVEN an import that starts in the last microsecond of a UTC day (its writes and its give-back
    # land after midnight), and whose first version the store refuses
    last = datetime(2026, 12, 3, 23, 59, 59, 999999, tzinfo=utcnow().tzinfo)
    monkeypatch.setattr("chalicelib.api.imports.utcnow", lambda: last)
    real = tool_store.put_versions

    def refuse_first(account_id: str, versions: Any, published_by: str, now: Any) -> Any:
        if versions[0].name == "item0":
            raise Busy("the store is busy")
        return real(account_id, versions, published_by, now)

    monkeypatch.setattr(tool_store, "BATCH_BYTES", 1)
    monkeypatch.setattr(tool_store, "put_versions", refuse_first)
    # WHEN it is imported
    answer = _import(admin, 1)
    # THEN the day it started on holds its two written versions (the refused one given back to that
    # day), and the next day starts with nothing counted
    assert answer.status_code == 200 and answer.json_body["counts"]["failed"] == 1

    def counted(day: str) -> int:
        sk = day_count_sk("items", day)
        return sum(int(item.published) for item in DayCountItem.scan(DayCountItem.sk == sk))

    assert (counted("2026-12-03"), counted("2026-12-04")) == (2, 0)


def _typed(revision: int) -> str:
    """`_document` as a person pastes it into the console's form (JSON is YAML too)."""
    return json.dumps(_document(revision))


def _day_cap(page: str) -> tuple[str, int, int, str] | None:
    """The check's day-cap paragraph: its class, the new versions, the day's room, and its text."""
    found = re.search(r'<p class="([^"]*)" id="day-cap" data-new="(\d+)" data-allows="(\d+)">(.*?)</p>', page, re.DOTALL)
    if found is None:
        return None
    words = html.unescape(re.sub(r"<[^>]+>", "", found.group(4)))
    return found.group(1), int(found.group(2)), int(found.group(3)), " ".join(words.split())


def test_a_console_check_past_the_cap_says_publish_would_be_refused(console: Console, admin: Admin) -> None:
    # GIVEN a vendor whose day is all but full (6 of 7)
    _import(admin, 1)
    _import(admin, 2)
    # WHEN a person checks a revision that changes every one of its 3 operations
    checked = console.post("/console/import", {"vendor": "items", "document": _typed(3), "step": "check"})
    # THEN the check says plainly, before Publish, that publishing would be refused, and why
    assert checked.status_code == 200
    shown = _day_cap(checked.body.decode())
    assert shown is not None
    kind, new, allows, words = shown
    assert (kind, new, allows) == ("notice error", 3, 1)
    assert words.startswith("Publishing would be refused: it would add 3 new versions of items's tools")
    assert f"may add only 1 more today, as of this check (at most {CAP} a day, UTC)" in words
    assert "Nothing would be published" in words
    # AND the check took nothing from the day: a one-operation change still publishes
    assert _import(admin, 3, operations=1).json_body["counts"]["new_version"] == 1


def test_a_console_check_within_the_cap_shows_the_days_room(console: Console, admin: Admin) -> None:
    # GIVEN a vendor with 3 of its 7 versions used today
    _import(admin, 1)
    fields = {"vendor": "items", "document": _typed(2)}
    # WHEN a person checks a revision that changes its 3 operations
    checked = console.post("/console/import", {**fields, "step": "check"})
    # THEN the check shows how many it would publish and how many the day allows, with no warning
    shown = _day_cap(checked.body.decode())
    assert shown is not None and shown[:3] == ("muted", 3, 4)
    assert shown[3] == (f"Publishing adds 3 new versions of items's tools; the vendor's imports and syncs may add 4 more "
                        f"today, as of this check (at most {CAP} a day, UTC).")
    assert "would be refused" not in checked.body.decode()
    # AND Publish publishes them
    digest = CHECKED.search(checked.body.decode()).group(1)  # type: ignore[union-attr]
    published = console.post("/console/import", {**fields, "step": "publish", "checked": digest})
    assert published.status_code == 200 and 'id="day-cap"' not in published.body.decode()
    assert all(versions == 2 for _, _, versions, _ in _toolbox(admin))


def test_a_check_with_nothing_new_shows_no_days_count(console: Console, admin: Admin) -> None:
    # GIVEN a vendor whose day is full
    _import(admin, 1)
    _import(admin, 2)
    assert _import(admin, 3).status_code == 429
    # WHEN a person checks the document as it was last published (nothing new to publish)
    checked = console.post("/console/import", {"vendor": "items", "document": _typed(2), "step": "check"})
    # THEN no day's count is shown: publishing it counts nothing, and is never refused
    assert checked.status_code == 200 and _day_cap(checked.body.decode()) is None


def test_an_api_dry_run_answers_the_days_room(admin: Admin) -> None:
    # GIVEN a vendor with 6 of its 7 versions used today
    _import(admin, 1)
    _import(admin, 2)
    # WHEN a dry run would publish new versions, and another would publish none
    over = admin.call("POST", "/v1/imports/openapi", {"vendor": "items", "document": _document(3), "dry_run": True})
    same = admin.call("POST", "/v1/imports/openapi", {"vendor": "items", "document": _document(2), "dry_run": True})
    # THEN the first says the day allows 1 more (fewer than its 3), the second has nothing to count
    assert (over.json_body["counts"]["new_version"], over.json_body["day_allows"]) == (3, 1)
    assert same.json_body["day_allows"] is None
    # AND an import that publishes says nothing of it
    assert "day_allows" not in _import(admin, 3, operations=1).json_body
