"""Signing in with the admin token (which stores a session), and out again (which deletes it).
The only pages reachable without a session."""

from __future__ import annotations

from chalice import Response

from chalicelib.base.clock import utcnow
from chalicelib.base.errors import Unauthorized
from chalicelib.console.common import FORM, HOME, Ctx, action, bp, read_form, redirect, render, safe_next
from chalicelib.identity import accounts, sessions


@bp.route("/console", methods=["GET"])
def console_home() -> Response:
    return redirect(HOME)


@bp.route("/console/sign-in", methods=["GET"])
def sign_in_form() -> Response:
    request = bp.current_request
    if sessions.read(request.headers.get("cookie"), utcnow()) is not None:
        return redirect(HOME)
    wanted = request.query_params.get("next") if request.query_params else None
    return _form(request.headers.get("cookie"), safe_next(wanted))


@bp.route("/console/sign-in", methods=["POST"], content_types=FORM)
def sign_in() -> Response:
    request = bp.current_request
    form = read_form()
    target = safe_next(form.get("next"))
    if not sessions.configured():
        return _form(request.headers.get("cookie"), target, status=503)
    nonce = sessions.cookies(request.headers.get("cookie")).get(sessions.SIGN_IN_COOKIE)
    if not nonce or not sessions.valid(sessions.sign_in_csrf(nonce), form.get("csrf")):
        return _form(request.headers.get("cookie"), target, status=403,
                     error="The sign-in form expired or did not come from this page. Try again.")
    try:
        account_id = accounts.authenticate_admin(form.get("token", "").strip() or None)
    except Unauthorized:
        return _form(request.headers.get("cookie"), target, status=401, error="That admin token is not valid.")
    _, cookie = sessions.issue(account_id, utcnow(), actor=accounts.admin_actor(form.get("token", "").strip()))
    return redirect(target, cookie=cookie)


@action("/console/sign-out")
def sign_out(ctx: Ctx) -> Response:
    return redirect("/console/sign-in", cookie=sessions.sign_out(ctx.session))


def _form(cookie_header: str | None, target: str, *, status: int = 200, error: str | None = None) -> Response:
    if not sessions.configured():
        return render("sign_in.html", 503, signed_in=False, csrf="", next=target, configured=False, error=None)
    nonce, set_cookie = sessions.sign_in_nonce(cookie_header)
    return render("sign_in.html", status, headers={"Set-Cookie": set_cookie} if set_cookie else None,
                  signed_in=False, csrf=sessions.sign_in_csrf(nonce), next=target, configured=True, error=error)
