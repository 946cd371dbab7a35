"""chalicelib/net/urls.py, the one reading of a URL, held to a real WHATWG parser (ada-url, what a
browser does): whatever `parse` accepts, a browser reads as the same scheme, host, port, path and
query; what the two would read differently is refused."""

from __future__ import annotations

import json
from typing import Any

import ada_url
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from chalicelib.net import urls
from tests.conftest import Admin, tool_spec

# The second attack round's strings, and their neighbours: each is one a browser reads otherwise.
BROWSER_READS_OTHERWISE = [
    "http://evil.example\\ * @127.0.0.1:9/cb",  # `\` ends the host for a browser
    "https://evil.example\\.good.example/cb",
    "http://evil.example\\@127.0.0.1:9/cb",
    "https://good.example\\@evil.example/cb",
    "http://evil.example@127.0.0.1:9/cb",  # user info
    "https://good.example/\u2603",  # non-ASCII: encoded by a browser, unencodable in a Location
    "https://\uff45\uff56\uff49\uff4c.example/",  # full-width letters map to `evil`
    "https://%65vil.example/",  # a browser decodes the host
    "http://0x7f.1:9/cb",  # number forms of 127.0.0.1
    "http://2130706433:9/cb",
    "http://127.1:9/cb",
    "http://0177.0.0.1/cb",
    "https:evil.example/cb",  # no slashes: still a host for a browser
    "https:/evil.example/cb",
    "https:///evil.example/cb",
    "https://good.example/a\tb",  # a browser drops tabs and newlines
    "https://good.example/cb\n",
    "https://good.example/a/../cb",  # a browser removes dot segments
    "https://good.example/a/%2e%2e/cb",
    "https://good.example/cb#frag",
    "http://[::1",
    "http://[::1]x/cb",
    "http://[fe80::1%25eth0]/cb",
    "https://good.example:0/cb",
    "https://good.example:65536/cb",
    "https://good.example:/cb",
    "https://good.example:+443/cb",
    "https://xn--zz.example/",  # not punycode
    "javascript://good.example/%0aalert(1)",
    "HTTPS://good.example/cb?q='x'",  # a browser encodes ' in a query
]


@pytest.mark.parametrize("text", BROWSER_READS_OTHERWISE)
def test_what_a_browser_reads_otherwise_is_refused(text: str) -> None:
    # GIVEN a URL Python's urlsplit and a browser read differently; WHEN it is parsed; THEN refused
    with pytest.raises(ValueError):
        urls.parse(text)


@pytest.mark.parametrize(("text", "origin"), [
    ("https://Good.Example/cb?x=1", "https://good.example"),
    ("https://good.example:443/cb", "https://good.example"),
    ("http://127.0.0.1:9/cb", "http://127.0.0.1:9"),
    ("http://[::1]:9/cb", "http://[::1]:9"),
    ("http://[0:0::1]/", "http://[::1]"),
    ("https://api.vendor.example/v1/x%20y?a=b&c=%2F", "https://api.vendor.example"),
])
def test_plain_urls_are_read_as_a_browser_reads_them(text: str, origin: str) -> None:
    url = urls.parse(text)
    assert url.origin == origin
    assert ada_url.URL(text).origin == origin


HOSTS = st.sampled_from(["good.example", "Good.EXAMPLE", "127.0.0.1", "[::1]", "a.b-c.example", "[::ffff:127.0.0.1]", "localhost",
                         "0x7f.1", "127.1", "evil.example\\", "a_b.example", "xn--bcher-kva.example", "1.2.3.04",
                         "-a.example", "a..b", "e%76il.example", "\u0435vil.example", ""])
SAFE = list("abz09-._~!$&()*+,;=:@/?") + ["%41", "%2F"]
TRICKY = list("'#%\\{}[] \t\u00e9") + ["%2e", "/..", "/.", "%zz"]
PIECES = st.lists(st.sampled_from(SAFE * 4 + TRICKY), max_size=12).map("".join)


@settings(max_examples=500, deadline=None)
@given(scheme=st.sampled_from(["http", "https", "HTTP", "https", "ftp", "https:", "https:/"]), host=HOSTS,
       port=st.sampled_from(["", "", ":443", ":8080", ":80", ":0", ":65536", ":", ":0009"]), path=PIECES, tail=PIECES)
def test_whatever_parse_accepts_a_browser_reads_the_same(scheme: str, host: str, port: str, path: str,
                                                         tail: str) -> None:
    text = f"{scheme}://{host}{port}/{path}{tail}"
    try:
        url = urls.parse(text)
    except ValueError:
        return
    browser = ada_url.URL(text)
    assert browser.origin == url.origin
    assert browser.href == f"{url.origin}{url.path or '/'}{url.query}"
    assert browser.username == "" and browser.password == "" and browser.hash == ""


# --- every URL the API takes is read by `urls.parse`: a malformed one is a 400 naming its field ------

MALFORMED = ["http://[::1", "http://evil.example\\@127.0.0.1/x", "https://0x7f.1/x", "https://a.example:99999/x",
             "https://%61.example/x"]


def _answer(response: Any) -> tuple[int, Any]:
    return response.status_code, json.loads(response.body)


@pytest.mark.parametrize("url", MALFORMED)
def test_a_malformed_webhook_url_is_a_400_naming_the_field(admin: Admin, url: str) -> None:
    status, body = _answer(admin.call("POST", "/v1/agents", {"name": "hermes", "webhook_url": url}))
    assert status == 400 and body["error"]["field"] == "webhook_url"
    agent = admin.create_agent("iris")
    status, body = _answer(admin.call("PATCH", f"/v1/agents/{agent['id']}", {"webhook_url": url}))
    assert status == 400 and body["error"]["field"] == "webhook_url"
    # AND nothing changed: one agent, without a webhook
    [listed] = json.loads(admin.call("GET", "/v1/agents").body)["items"]
    assert listed["name"] == "iris" and listed.get("webhook_url") is None


@pytest.mark.parametrize("url", MALFORMED)
def test_a_malformed_tool_url_is_a_400_naming_the_field(admin: Admin, url: str) -> None:
    status, body = _answer(admin.call("POST", "/v1/tools", tool_spec(request={"method": "GET", "url": url})))
    assert status == 400 and body["error"]["field"] == "request.url"
    assert json.loads(admin.call("GET", "/v1/tools").body)["items"] == []


@pytest.mark.parametrize("url", MALFORMED)
def test_a_malformed_oauth_endpoint_is_a_400_naming_the_field(admin: Admin, url: str) -> None:
    status, body = _answer(admin.call("POST", "/v1/connections", {"vendor": "acme", "auth": {
        "type": "oauth2_client_credentials", "token_url": url, "client_id": "id", "client_secret": "s"}}))
    assert status == 400 and body["error"]["field"] == "auth.oauth2_client_credentials.token_url"
    assert json.loads(admin.call("GET", "/v1/connections").body)["items"] == []


@pytest.mark.parametrize("url", MALFORMED)
def test_a_malformed_upstream_url_is_a_400_naming_the_field(admin: Admin, url: str) -> None:
    status, body = _answer(admin.call("POST", "/v1/upstreams", {"vendor": "acme", "url": url}))
    assert status == 400 and body["error"]["field"] == "url"
    assert json.loads(admin.call("GET", "/v1/upstreams").body)["items"] == []
