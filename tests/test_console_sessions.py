"""Console sessions backed by the store, attacked: copied cookies after sign-out, sign out
everywhere (console and API), forged, re-signed and expired cookies; and the account page and
admin routes for the allow list of keyless hosts."""

from __future__ import annotations

import hashlib
import html
import json
import re
from datetime import timedelta
from typing import Any
from urllib.parse import urlencode

import pytest
from chalice.test import Client

from bench.dynamo_calls import DynamoCalls
from chalicelib.base.clock import utcnow
from chalicelib.identity import accounts, sessions
from chalicelib.store.models import AccountItem, ConsoleSessionItem
from tests.conftest import Admin
from tests.test_console import Console, text

SIGN_IN = "/console/sign-in"
HOME = "/console/agents"


def signed_in(client: Client, admin: Admin) -> Console:
    """A browser with its own session of `admin`'s account."""
    browser = Console(client)
    assert browser.sign_in(admin.token).status_code == 303
    return browser


def copy_of(browser: Console) -> Console:
    """Another browser holding a copy of `browser`'s cookie (stolen, or synced elsewhere)."""
    return Console(browser.client, cookie=browser.cookie, csrf=browser.csrf)


def cookie_parts(browser: Console) -> tuple[str, str, str, str]:
    """account id, expiry, session id, mac."""
    account_id, expires, session_id, mac = browser.cookie.split("=", 1)[1].split(".")
    return account_id, expires, session_id, mac


def stored_key(session_id: str) -> str:
    return "session#" + hashlib.sha256(session_id.encode()).hexdigest()


def opens(browser: Console) -> bool:
    """True when the browser's cookie opens the console; False when it is sent to sign in."""
    answer = browser.get(HOME)
    assert answer.status_code in (200, 303), answer.status_code
    if answer.status_code == 303:
        assert answer.headers["Location"].startswith(SIGN_IN)
    return answer.status_code == 200


def account_of(admin: Admin) -> str:
    return accounts.authenticate_admin(admin.token)


@pytest.fixture
def console(client: Client, admin: Admin) -> Console:
    return signed_in(client, admin)


# --- signing out ends the session, not just the cookie ----------------------------------------------

def test_a_copied_cookie_stops_working_after_sign_out(console: Console) -> None:
    # GIVEN a copy of a signed-in browser's cookie
    copy = copy_of(console)
    assert opens(copy)
    # WHEN the person signs out in their browser
    assert console.post("/console/sign-out").status_code == 303
    # THEN the copy is sent to sign in, and comes back to where it was going
    answer = copy.get(HOME)
    assert answer.status_code == 303
    assert answer.headers["Location"] == f"{SIGN_IN}?" + urlencode({"next": HOME})


def test_a_copied_cookie_cannot_post_a_form_after_sign_out(console: Console, admin: Admin) -> None:
    # GIVEN a copied cookie and CSRF token, and the person then signs out
    copy = copy_of(console)
    console.post("/console/sign-out")
    # WHEN the copy posts a form with the session's valid token
    answer = copy.post("/console/agents", {"name": "intruder"})
    # THEN it goes to sign in and nothing was created
    assert answer.status_code == 303 and answer.headers["Location"].startswith(SIGN_IN)
    assert admin.call("GET", "/v1/agents").json_body["items"] == []


def test_sign_out_forgets_the_stored_session(console: Console) -> None:
    # GIVEN a signed-in browser's stored session
    _, _, session_id, _ = cookie_parts(console)
    assert ConsoleSessionItem.count(stored_key(session_id)) == 1
    # WHEN it signs out
    console.post("/console/sign-out")
    # THEN the stored session is gone, not merely the cookie
    assert ConsoleSessionItem.count(stored_key(session_id)) == 0


def test_one_sign_out_leaves_another_session_of_the_account_working(client: Client, console: Console,
                                                                   admin: Admin) -> None:
    # GIVEN a second browser signed in to the same account
    other = signed_in(client, admin)
    # WHEN the first signs out
    console.post("/console/sign-out")
    # THEN the second is still signed in, and its forms still work
    assert opens(other)
    assert other.post("/console/agents", {"name": "athena", "cap": "5", "idle_window_days": "7"}).status_code == 200
    assert [agent["name"] for agent in admin.call("GET", "/v1/agents").json_body["items"]] == ["athena"]


# --- sign out everywhere ---------------------------------------------------------------------------

def test_sign_out_everywhere_from_the_console_ends_every_session_of_the_account_only(
        client: Client, console: Console, admin: Admin, other_admin: Admin) -> None:
    # GIVEN two sessions of the account, a copy of one, and a session of another account
    second, copy, elsewhere = signed_in(client, admin), copy_of(console), signed_in(client, other_admin)
    # WHEN the person signs out everywhere
    answer = console.post("/console/account/sign-out-everywhere")
    # THEN their browser goes to sign in with its cookie removed
    assert answer.status_code == 303 and answer.headers["Location"] == SIGN_IN
    assert answer.headers["Set-Cookie"].startswith(f"{sessions.SESSION_COOKIE}=;")
    # AND every session of the account is over, the caller's included; the other account's is not
    assert [opens(browser) for browser in (console, second, copy)] == [False, False, False]
    assert opens(elsewhere)


def test_signing_in_again_after_sign_out_everywhere_works(client: Client, console: Console, admin: Admin) -> None:
    # GIVEN every session of the account ended
    console.post("/console/account/sign-out-everywhere")
    # WHEN the person signs in again with the admin token
    fresh = signed_in(client, admin)
    # THEN the new session opens the console (it is at the account's new epoch)
    assert opens(fresh)


def test_sign_out_everywhere_without_the_sessions_token_ends_nothing(client: Client, console: Console,
                                                                     admin: Admin) -> None:
    # GIVEN a second session of the account
    second = signed_in(client, admin)
    # WHEN a page elsewhere posts "sign out everywhere" with the browser's cookie but no valid token
    answer = console.post("/console/account/sign-out-everywhere", csrf="forged")
    # THEN it is refused and both sessions still work
    assert answer.status_code == 403
    assert opens(console) and opens(second)


def test_revoking_console_sessions_through_the_api_ends_them_all(client: Client, console: Console, admin: Admin,
                                                                 other_admin: Admin) -> None:
    # GIVEN two sessions of the account and one of another account
    second, elsewhere = signed_in(client, admin), signed_in(client, other_admin)
    # WHEN the admin API revokes the account's console sessions
    answer = admin.call("POST", "/v1/console-sessions/revoke")
    # THEN it says so, both sessions of the account are over, the other account's is not
    assert answer.status_code == 200 and answer.json_body == {"revoked": True}
    assert not opens(console) and not opens(second)
    assert opens(elsewhere)


# --- cookies that were never a live session ---------------------------------------------------------

def test_a_forged_cookie_is_refused_without_a_dynamodb_call(console: Console) -> None:
    # GIVEN the browser's cookie with its MAC changed
    account_id, expires, session_id, mac = cookie_parts(console)
    forged = Console(console.client, cookie=f"{sessions.SESSION_COOKIE}={account_id}.{expires}.{session_id}."
                                            f"{mac[:-2]}{'AA' if not mac.endswith('AA') else 'BB'}")
    counter = DynamoCalls().install()
    for model in (ConsoleSessionItem, AccountItem):
        model._get_connection().connection.client.meta.events.register(
            "after-call.dynamodb", counter._record, unique_id=f"bench-{id(counter)}")
    # WHEN it is used
    with counter.measure() as made:
        answer = forged.get(HOME)
    # THEN it is refused before any read: forging costs the attacker's time, not the table's
    assert answer.status_code == 303
    assert made == []


def test_a_signed_cookie_of_another_account_over_ones_own_session_is_refused(console: Console,
                                                                           other_admin: Admin) -> None:
    # GIVEN someone who holds the signing secret and their own session, and re-signs its cookie
    # naming another account (the MAC is right; only the stored session can tell)
    _, expires, session_id, _ = cookie_parts(console)
    payload = f"{account_of(other_admin)}.{expires}.{session_id}"
    minted = Console(console.client, cookie=f"{sessions.SESSION_COOKIE}={payload}.{sessions._mac('session', payload)}")
    # WHEN it is used
    # THEN the other account's console does not open
    assert not opens(minted)


def test_a_signed_cookie_with_no_stored_session_is_refused(client: Client, admin: Admin) -> None:
    # GIVEN a correctly signed cookie whose session was never stored (a stateless cookie from
    # before stored sessions, or one minted with a leaked secret)
    expires = int((utcnow() + timedelta(hours=1)).timestamp())
    payload = f"{account_of(admin)}.{expires}.never-stored-session-id"
    minted = Console(client, cookie=f"{sessions.SESSION_COOKIE}={payload}.{sessions._mac('session', payload)}")
    # WHEN it is used
    # THEN it is sent to sign in
    assert not opens(minted)


def test_a_cookie_whose_stored_session_expired_is_refused(console: Console) -> None:
    # GIVEN a cookie whose own expiry is still ahead, but whose stored session has expired
    _, _, session_id, _ = cookie_parts(console)
    ConsoleSessionItem(token_hash=stored_key(session_id)).update(
        actions=[ConsoleSessionItem.expires_at.set(utcnow() - timedelta(seconds=1))])
    # WHEN it is used
    # THEN it is sent to sign in
    assert not opens(console)


def test_sessions_work_for_an_account_stored_before_console_epochs(client: Client, admin: Admin) -> None:
    # GIVEN an account item written before console_epoch existed
    AccountItem(account_id=account_of(admin)).update(actions=[AccountItem.console_epoch.remove()])
    # WHEN a person signs in
    browser = signed_in(client, admin)
    # THEN the session opens the console, and signing out everywhere still ends it
    assert opens(browser)
    browser.post("/console/account/sign-out-everywhere")
    assert not opens(browser)


# --- the account page: keyless hosts ---------------------------------------------------------------

def test_the_account_page_explains_the_allow_list_and_is_in_the_navigation(console: Console, admin: Admin) -> None:
    # GIVEN an allow list saved through the API
    admin.call("PUT", "/v1/account/allowed-hosts", {"allowed_hosts": ["api.example.com", "status.example.org:8443"]})
    # WHEN the person opens the account page
    page = text(console.get("/console/account"))
    # THEN it says what the list is for, shows the list one host a line, and is linked from the navigation
    assert ("Agents may author tools (acquire) only for hosts a person allowed: a connection's hosts, or these\n"
            "    keyless hosts (https only on a deployed stage)") in page
    assert ">api.example.com\nstatus.example.org:8443</textarea>" in page
    assert 'href="/console/account" aria-current="page">Account</a>' in page


def test_the_account_page_saves_a_valid_allow_list(console: Console, admin: Admin) -> None:
    # WHEN hosts are typed one a line and comma separated, with blanks and a repeat
    typed = "api.example.com\n\n  status.example.org:8443, 10.0.0.7:8080 ,api.example.com\n"
    answer = console.post("/console/account/allowed-hosts", {"allowed_hosts": typed})
    # THEN the page confirms it, and the domain holds each host once, in the order typed
    assert answer.status_code == 303 and answer.headers["Location"] == "/console/account?done=saved"
    assert "Allowed hosts saved." in text(console.get("/console/account?done=saved"))
    assert admin.call("GET", "/v1/account").json_body == {
        "allowed_hosts": ["api.example.com", "status.example.org:8443", "10.0.0.7:8080"]}


def test_the_account_page_clears_the_allow_list(console: Console, admin: Admin) -> None:
    # GIVEN a saved list
    admin.call("PUT", "/v1/account/allowed-hosts", {"allowed_hosts": ["api.example.com"]})
    # WHEN the textarea is emptied and saved
    console.post("/console/account/allowed-hosts", {"allowed_hosts": "  \n"})
    # THEN no host is allowed
    assert admin.call("GET", "/v1/account").json_body == {"allowed_hosts": []}


BAD_HOSTS = [
    "https://api.example.com",
    "api.example.com/orders",
    "API.example.com",
    "api.example.com:0",
    "api.example.com:99999",
    "user@api.example.com",
    "<script>alert(1)</script>",
    "\n".join(f"h{index}.example.com" for index in range(accounts.MAX_ALLOWED_HOSTS + 1)),
]


@pytest.mark.parametrize("typed", BAD_HOSTS, ids=["scheme", "path", "upper-case", "port-0", "port-too-big",
                                                  "userinfo", "markup", "too-many"])
def test_the_account_page_refuses_a_bad_allow_list_and_saves_nothing(console: Console, admin: Admin,
                                                                     typed: str) -> None:
    # GIVEN a saved list
    admin.call("PUT", "/v1/account/allowed-hosts", {"allowed_hosts": ["keep.example.com"]})
    # WHEN a list with a bad entry beside a good one is saved
    answer = console.post("/console/account/allowed-hosts", {"allowed_hosts": f"ok.example.com\n{typed}"})
    # THEN the page says why and that nothing was saved, keeps what was typed (escaped), and the
    # saved list is unchanged
    page = text(answer)
    alert = re.search(r'<p class="notice error" role="alert">(.*?)</p>', page, re.DOTALL)
    assert answer.status_code == 400 and alert is not None
    assert alert.group(1).startswith("allowed_hosts") and alert.group(1).endswith("Nothing was saved.")
    assert html.escape(f"ok.example.com\n{typed}", quote=False) in page
    assert "<script>alert(1)" not in page
    assert admin.call("GET", "/v1/account").json_body == {"allowed_hosts": ["keep.example.com"]}


def test_the_allow_list_form_without_the_sessions_token_saves_nothing(console: Console, admin: Admin) -> None:
    # WHEN the form arrives with a forged token
    answer = console.post("/console/account/allowed-hosts", {"allowed_hosts": "evil.example.com"}, csrf="forged")
    # THEN it is refused and nothing is allowed
    assert answer.status_code == 403
    assert admin.call("GET", "/v1/account").json_body == {"allowed_hosts": []}


def test_the_account_page_without_a_session_goes_to_sign_in(client: Client) -> None:
    answer = client.http.get("/console/account")
    assert answer.status_code == 303
    assert answer.headers["Location"] == f"{SIGN_IN}?" + urlencode({"next": "/console/account"})


# --- the admin API ---------------------------------------------------------------------------------

ROUTES = [("GET", "/v1/account", None), ("PUT", "/v1/account/allowed-hosts", {"allowed_hosts": ["evil.example.com"]}),
          ("POST", "/v1/console-sessions/revoke", None)]


@pytest.mark.parametrize(("method", "path", "body"), ROUTES, ids=[route[1] for route in ROUTES])
@pytest.mark.parametrize("token", [None, "wsa_not-a-real-token-at-all"], ids=["no-token", "wrong-token"])
def test_account_routes_without_a_valid_token_are_refused_and_change_nothing(
        client: Client, console: Console, admin: Admin, method: str, path: str, body: Any, token: str | None) -> None:
    # WHEN an account route is called without a valid admin token
    headers = {"Content-Type": "application/json", **({"Authorization": f"Bearer {token}"} if token else {})}
    answer = getattr(client.http, method.lower())(path, headers=headers, body=json.dumps(body) if body else None)
    # THEN it is refused, the allow list is empty and the console session still works
    assert answer.status_code == 401 and answer.json_body["error"]["code"] == "unauthorized"
    assert admin.call("GET", "/v1/account").json_body == {"allowed_hosts": []}
    assert opens(console)


def test_the_api_saves_and_reads_the_allow_list_per_account(admin: Admin, other_admin: Admin) -> None:
    # WHEN one account saves its allow list
    answer = admin.call("PUT", "/v1/account/allowed-hosts",
                        {"allowed_hosts": ["api.example.com", "api.example.com", "localhost:8080"]})
    # THEN it answers the list as saved (repeats dropped), reads it back, and the other account has none
    assert answer.status_code == 200 and answer.json_body == {"allowed_hosts": ["api.example.com", "localhost:8080"]}
    assert admin.call("GET", "/v1/account").json_body == {"allowed_hosts": ["api.example.com", "localhost:8080"]}
    assert other_admin.call("GET", "/v1/account").json_body == {"allowed_hosts": []}


BAD_BODIES = [
    ({"allowed_hosts": ["https://api.example.com"]}, "allowed_hosts"),
    ({"allowed_hosts": ["api.example.com", "a b"]}, "allowed_hosts"),
    ({"allowed_hosts": "api.example.com"}, "allowed_hosts"),
    ({"allowed_hosts": [7]}, "allowed_hosts.0"),
    ({"allowed_hosts": [f"h{index}.example.com" for index in range(accounts.MAX_ALLOWED_HOSTS + 1)]}, "allowed_hosts"),
    ({}, "allowed_hosts"),
    ({"allowed_hosts": [], "hosts": ["api.example.com"]}, "hosts"),
    (["api.example.com"], None),
]


@pytest.mark.parametrize(("body", "field"), BAD_BODIES,
                         ids=["scheme", "space", "not-a-list", "not-a-string", "too-many", "missing", "extra-field",
                              "not-an-object"])
def test_a_bad_allow_list_is_refused_naming_the_field_and_saves_nothing(admin: Admin, body: Any,
                                                                        field: str | None) -> None:
    # GIVEN a saved list
    admin.call("PUT", "/v1/account/allowed-hosts", {"allowed_hosts": ["keep.example.com"]})
    # WHEN a bad body is sent
    answer = admin.call("PUT", "/v1/account/allowed-hosts", body)
    # THEN 400 names the field, and the saved list is unchanged
    assert answer.status_code == 400, answer.body
    assert answer.json_body["error"]["code"] == "invalid_input"
    named = answer.json_body["error"].get("field")
    assert named == field or (field is not None and named.startswith(f"{field}."))  # the list, or its entry
    assert admin.call("GET", "/v1/account").json_body == {"allowed_hosts": ["keep.example.com"]}


@pytest.mark.parametrize("raw", [None, b"{not json"], ids=["no-body", "not-json"])
def test_an_unreadable_allow_list_body_is_refused(admin: Admin, client: Client, raw: bytes | None) -> None:
    answer = client.http.put("/v1/account/allowed-hosts", body=raw, headers={
        "Authorization": f"Bearer {admin.token}", "Content-Type": "application/json"})
    assert answer.status_code == 400 and answer.json_body["error"]["code"] == "invalid_input"
    assert admin.call("GET", "/v1/account").json_body == {"allowed_hosts": []}
