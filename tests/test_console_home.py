"""The front door and the console's polish: `/` sends a browser to the console, `/favicon.ico`
is an icon (not API Gateway's 403), and the Connections form marks each field with the kinds
of credential it belongs to (CSS shows only the checked kind's; no script)."""

from __future__ import annotations

import re

import pytest
from chalice.test import Client

from tests.conftest import Console


def test_a_browser_opening_the_root_is_sent_to_the_console(client: Client) -> None:
    # WHEN a browser opens /
    answer = client.http.get("/", headers={"Accept": "text/html,application/xhtml+xml,*/*;q=0.8"})
    # THEN it is redirected to the console's home (which signs it in first)
    assert answer.status_code == 302
    assert answer.headers["Location"] == "/console/agents"


def test_another_client_opening_the_root_is_told_where_the_endpoints_are(client: Client) -> None:
    # WHEN a client that does not ask for HTML opens /
    answer = client.http.get("/", headers={"Accept": "application/json"})
    # THEN it gets the paths of the MCP endpoint, the admin API and the console
    assert answer.status_code == 200
    assert answer.json_body == {"name": "Workset", "mcp": "/mcp", "admin_api": "/v1", "console": "/console/agents"}


def test_the_favicon_is_an_svg_icon(client: Client) -> None:
    # WHEN a browser asks for /favicon.ico
    answer = client.http.get("/favicon.ico")
    # THEN it is an SVG image, not an error
    assert answer.status_code == 200
    assert answer.headers["Content-Type"] == "image/svg+xml"
    assert answer.body.decode().startswith("<svg") and answer.body.decode().endswith("</svg>")


def test_every_console_page_links_the_icon(console: Console) -> None:
    # WHEN a signed-in page is opened
    page = console.get("/console/agents").body.decode()
    # THEN it names the icon (so the browser never asks a path that is an error)
    assert '<link rel="icon" href="/favicon.ico" type="image/svg+xml">' in page


def _kinds(page: str) -> dict[str, bool]:
    """Each credential kind's radio and whether it is checked."""
    radios = re.finditer(r'<input type="radio" class="kind" id="kind-[^"]+" name="auth_type" value="([^"]+)"'
                         r'[^>]*?( checked)?>', page)
    return {radio[1]: bool(radio[2]) for radio in radios}


def test_the_connections_form_offers_the_kinds_as_radios_with_bearer_checked(console: Console) -> None:
    # WHEN the Connections page is opened
    page = console.get("/console/connections").body.decode()
    # THEN the kinds are one radio group, bearer checked, and each kind-specific field names its kinds
    kinds = _kinds(page)
    assert list(kinds) == ["bearer", "header", "basic", "query", "oauth2_client_credentials",
                           "oauth2_authorization_code"]
    assert [kind for kind, checked in kinds.items() if checked] == ["bearer"]
    assert re.search(r'class="field for for-header"><label for="header_name">', page)
    assert re.search(r'class="field for for-oauth2_authorization_code"><label for="authorize_url">', page)
    assert 'type="url" id="token_url"' in page


@pytest.mark.parametrize("kind", ["header", "basic", "query", "oauth2_client_credentials", "nonsense"])
def test_a_refused_form_comes_back_with_its_kind_checked(console: Console, kind: str) -> None:
    # WHEN a form with a bad vendor is posted for a kind
    answer = console.post("/console/connections", {"vendor": "Not A Vendor!", "auth_type": kind, "secret": "s3cret-x"})
    # THEN it is refused, the same kind is checked again (an unknown kind: bearer), and the secret is not shown
    page = answer.body.decode()
    assert answer.status_code == 400
    assert [name for name, checked in _kinds(page).items() if checked] == [kind if kind != "nonsense" else "bearer"]
    assert "s3cret-x" not in page
