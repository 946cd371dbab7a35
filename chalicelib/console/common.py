"""What every console route shares: the blueprint, the templates, the session and CSRF check,
reading forms, redirects, and turning domain errors into pages.

Path and query parameters and form fields that are not text (a lone surrogate, a control
character) are refused with a 400 page before a view sees them; pages are scrubbed of lone
surrogates before they are encoded; a crash is a 500 page whose log line carries the request id."""

from __future__ import annotations

import secrets
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import datetime
from functools import lru_cache, wraps
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qs, quote, urlencode

from chalice import Response

from chalicelib.access import connections
from chalicelib.base import jsontext
from chalicelib.base.clock import utcnow
from chalicelib.base.config import body_limit, settings
from chalicelib.base.errors import InvalidInput, WorksetError
from chalicelib.base.responses import GuardedBlueprint
from chalicelib.base.validation import VENDOR_PATTERN
from chalicelib.catalog import toolbox
from chalicelib.console import present
from chalicelib.identity import accounts, sessions
from chalicelib.net import urls
from chalicelib.store.records import ACTIVE, Connection, Page
from chalicelib.tools.definitions import Tool

if TYPE_CHECKING:
    from jinja2 import Environment


def _crashed(request_id: str) -> Response:
    return render("error.html", 500, signed_in=False, csrf="", title="Something went wrong", message=(
        "Workset failed while answering this page; the change you asked for may not have been made. "
        f"Reload to check, and quote request id {request_id} when reporting it."))


bp = GuardedBlueprint(__name__, edge="console", on_crash=_crashed)

FORM = ["application/x-www-form-urlencoded"]
HOME = "/console/agents"
PAGE_SIZE = 25
ALL_PAGE = 100  # page size when a view needs a whole list (names of agents, the toolbox)


@dataclass
class Ctx:
    """One signed-in request: who, the form it posted, the query it asked, and the clock."""

    session: sessions.Session
    now: datetime
    form: dict[str, str] = field(default_factory=dict)
    params: dict[str, str] = field(default_factory=dict)

    @property
    def account_id(self) -> str:
        """The account the person acts for."""
        return self.session.account_id

    def render(self, template: str, status: int = 200, *, form_targets: tuple[str, ...] = (),
               **values: Any) -> Response:
        """A page of the signed-in console (navigation, CSRF token)."""
        return render(template, status, csrf=self.session.csrf, signed_in=True, now=self.now,
                      form_targets=form_targets, **values)


def page(path: str) -> Callable[[Callable[..., Response]], Any]:
    """Register a GET page that needs a session; without one, the browser goes to sign in."""
    return _route(path, "GET")


def action(path: str) -> Callable[[Callable[..., Response]], Any]:
    """Register a POST form handler that needs a session and the session's CSRF token."""
    return _route(path, "POST")


def _route(path: str, method: str) -> Callable[[Callable[..., Response]], Any]:
    def register(view: Callable[..., Response]) -> Any:
        @wraps(view)
        def wrapped(**params: str) -> Response:
            request = bp.current_request
            now = utcnow()
            session = sessions.read(request.headers.get("cookie"), now)
            query = dict(request.query_params or {})
            try:  # before the sign-in redirect, which quotes them
                _check_text(params, escaped=True)
                _check_text(query)
                _check_single(request.query_params)
            except InvalidInput as error:
                if session is None:
                    return render("error.html", 400, signed_in=False, csrf="", title=_TITLES[400],
                                  message=error.message)
                return Ctx(session, now).render("error.html", 400, title=_TITLES[400], message=error.message)
            if session is None:
                return redirect("/console/sign-in", next=_current_path(path, params) if method == "GET" else None)
            ctx = Ctx(session, now, params=query)
            if method == "POST":
                limit = body_limit(path)  # an import's form may carry a whole document
                if len(bp.current_request.raw_body or b"") > limit:
                    return ctx.render("error.html", 413, title=_TITLES[413], message=(
                        f"The form is larger than {_size(limit)}, so nothing was read or changed."))
                ctx.form = read_form(limit)
                if not sessions.valid(session.csrf, ctx.form.get("csrf")):
                    return ctx.render("error.html", 403, title="Form refused", message=(
                        "This form did not carry a valid token for your session. Nothing was changed; "
                        "go back, reload the page and try again."))
            try:
                _check_text(ctx.form, lines=True)
                return view(ctx, **params)
            except WorksetError as error:
                return ctx.render("error.html", error.status, title=_TITLES.get(error.status, "Refused"),
                                  message=error.message)

        return bp.route(path, methods=[method], content_types=FORM if method == "POST" else ["application/json"])(
            wrapped)

    return register


def _origin_only(target: str) -> bool:
    """`target` is an origin as `urls.parse` reads it (nothing else may reach a policy: a space or a
    bare `*` in it would admit any target)."""
    try:
        return urls.parse(target).origin == target
    except ValueError:
        return False


_TITLES = {400: "Not accepted", 404: "Not found", 409: "Conflict", 413: "Too large"}


def render(template: str, status: int = 200, headers: dict[str, str] | None = None, *,
           form_targets: tuple[str, ...] = (), **values: Any) -> Response:
    """An HTML page. Styles and the one script carry a per-response nonce that the Content
    Security Policy requires, so injected markup could not run even if escaping failed. Lone
    surrogates (stored before they were refused) become U+FFFD so the page always encodes.
    `form_targets` are origins a form's answer may redirect to besides ours (the consent page's
    OAuth client)."""
    nonce = secrets.token_urlsafe(12)
    body = jsontext.scrub(_environment().get_template(template).render(nonce=nonce, **values))
    form_action = " ".join(("'self'", *(target for target in form_targets if _origin_only(target))))
    policy = (f"default-src 'none'; style-src 'nonce-{nonce}'; script-src 'nonce-{nonce}'; img-src 'self' data:; "
              f"form-action {form_action}; frame-ancestors 'none'; base-uri 'none'")
    return Response(body=body, status_code=status, headers={
        "Content-Type": "text/html; charset=utf-8", "Cache-Control": "no-store", "Content-Security-Policy": policy,
        "X-Content-Type-Options": "nosniff", "Referrer-Policy": "same-origin", **(headers or {}),
    })


def redirect(path: str, cookie: str | None = None, **query: str | None) -> Response:
    """303 See Other to a console path (after a form, the browser GETs the page)."""
    headers: dict[str, str | list[str]] = {"Location": url(path, **query), "Cache-Control": "no-store"}
    if cookie:
        headers["Set-Cookie"] = cookie
    return Response(body="", status_code=303, headers=headers)


def leave(location: str) -> Response:
    """303 See Other to another site (an OAuth client's redirect URI, checked by the caller)."""
    return Response(body="", status_code=303, headers={"Location": location, "Cache-Control": "no-store"})


def url(path: str, **query: Any) -> str:
    """A console link, under the path the deployment is served at; None values are left out."""
    kept = {name: value for name, value in query.items() if value is not None and value != ""}
    return f"{sessions.path_prefix()}{path}" + (f"?{urlencode(kept)}" if kept else "")


def safe_next(value: str | None) -> str:
    """Where to go after signing in: only a console path (never another site)."""
    if value and value.startswith("/console/") and value.isprintable() and not any(c in value for c in " \\"):
        return value
    return HOME


def read_form(limit: int | None = None) -> dict[str, str]:
    """The urlencoded body as a dict (the first value of each field); nothing of a body over
    `limit` bytes (the deployment's request limit unless given)."""
    raw = bp.current_request.raw_body or b""
    if isinstance(raw, str):
        raw = raw.encode()
    if len(raw) > (settings().max_request_bytes if limit is None else limit):
        return {}
    fields = parse_qs(raw.decode("utf-8", "replace"), keep_blank_values=True)
    return {name: values[0] for name, values in fields.items()}


def _check_single(query: Any) -> None:
    """Refuse a query parameter sent twice: which copy counts would be the reader's guess (an
    OAuth request's parameters must not repeat, RFC 6749 3.1)."""
    for name in query or {}:
        if len(query.getlist(name)) > 1:
            raise InvalidInput(f"{name[:40]} is sent twice", field=name)


def _size(limit: int) -> str:
    return f"{limit / 2**20:g} MB" if limit >= 2**20 else f"{limit // 1024} KB"


def _check_text(fields: dict[str, str], *, lines: bool = False, escaped: bool = False) -> None:
    """Refuse parameters or form fields that are not text (`jsontext.text_fault`)."""
    for name, value in fields.items():
        if jsontext.text_fault(name) is not None:
            raise InvalidInput("a field's name is not text")
        if (fault := jsontext.text_fault(value, lines=lines, escaped=escaped)) is not None:
            raise InvalidInput(f"{name[:40]} {fault}", field=name)


def every(fetch: Callable[[str | None], Page]) -> Iterator[Any]:
    """Every item of a paged list (`fetch(cursor)` answers one page)."""
    cursor: str | None = None
    while True:
        result = fetch(cursor)
        yield from result.items
        if not result.next:
            return
        cursor = result.next


def agent_names(account_id: str) -> dict[str, str]:
    """Agent id -> name for the whole account."""
    agents = every(lambda cursor: accounts.list_agents(account_id, limit=ALL_PAGE, cursor=cursor))
    return {agent.agent_id: agent.name for agent in agents}


def whole_toolbox(account_id: str) -> list[Tool]:
    """Every tool of the account at its newest version."""
    heads = every(lambda cursor: toolbox.page(account_id, limit=ALL_PAGE, cursor=cursor))
    return toolbox.resolve_many(account_id, [(head.vendor, head.name) for head in heads])


def active_connections(account_id: str) -> list[Connection]:
    """The account's connections that are not revoked (what a form may offer to attach)."""
    listing = every(lambda cursor: connections.list_all(account_id, limit=ALL_PAGE, cursor=cursor))
    return [connection for connection in listing if connection.status == ACTIVE]


def _current_path(path: str, params: dict[str, str]) -> str:
    here = path.format(**{name: quote(value, safe="") for name, value in params.items()})
    query = bp.current_request.query_params
    return here + (f"?{urlencode(dict(query))}" if query else "")


@lru_cache(maxsize=1)
def _environment() -> Environment:
    # jinja2 is imported on the first page, not with the app: MCP and API requests never render.
    from jinja2 import Environment, FileSystemLoader, StrictUndefined

    environment = Environment(loader=FileSystemLoader(Path(__file__).parent / "templates"), autoescape=True,
                              undefined=StrictUndefined, trim_blocks=True, lstrip_blocks=True)
    environment.filters.update(present.FILTERS)
    environment.globals.update(url=url, public_url=lambda: settings().public_url,
                               vendor_pattern=VENDOR_PATTERN.removeprefix("^").removesuffix("$"))
    return environment
