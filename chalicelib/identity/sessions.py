"""Console sessions (the domain below the console edge): a cookie holding the account id, an expiry and a random session id, signed
with HMAC-SHA256 under the deployment's console secret, and backed by a stored session so that
signing out ends it for every copy of the cookie. Every form carries a CSRF token derived from
the session id; the sign-in form, which comes before any session, carries one derived from a
short-lived random cookie (double submit).

    cookie  = <account_id>.<expires epoch>.<session id>.<mac("session", the three before)>
    csrf    = mac("csrf", session id)
    stored  = SHA-256(session id) -> account, expiry, the account's console epoch at sign-in

A request's cookie passes two gates, cheapest first: the MAC and expiry (no I/O, so a forged
cookie never costs a DynamoDB read), then the stored session (present, unexpired, the cookie's
account, at the account's current epoch). Signing out deletes the stored session; signing out
everywhere moves the account's epoch on, which ends every session at once.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from urllib.parse import urlsplit

from chalicelib.base.config import settings
from chalicelib.store import sessions as session_store

SESSION_COOKIE = "workset_console"
SIGN_IN_COOKIE = "workset_console_sign_in"
LIFETIME = timedelta(hours=8)
SIGN_IN_LIFETIME = timedelta(minutes=30)


class NotConfigured(Exception):
    """This deployment has no console secret, so no session can be signed or trusted."""


@dataclass(frozen=True)
class Session:
    """A signed-in person: the account they act for, until `expires`."""

    account_id: str
    session_id: str
    expires: int
    actor: str = "admin"  # which admin token signed it in (accounts.admin_actor); plain `admin` before that was kept

    @property
    def csrf(self) -> str:
        """The token every form of this session carries."""
        return _mac("csrf", self.session_id)


def session_key() -> bytes:
    """The signing key: the deployment's console secret (local stages have a fixed default;
    deployed ones read the SecureString /workset/<stage>/console-secret once, unless
    WORKSET_CONSOLE_SECRET is set; without either the console refuses sign-in)."""
    secret = settings().console_secret
    if not secret:
        raise NotConfigured("make /workset/<stage>/console-secret (infra/deploy.sh does) or set "
                            "WORKSET_CONSOLE_SECRET to sign console sessions on this stage")
    return hashlib.sha256(b"workset-console\n" + secret.encode()).digest()


def configured() -> bool:
    """True when sessions can be signed here."""
    return bool(settings().console_secret)


def issue(account_id: str, now: datetime, *, actor: str) -> tuple[Session, str]:
    """A new stored session of `actor` and the Set-Cookie value that carries it."""
    session = Session(account_id, secrets.token_urlsafe(18), int((now + LIFETIME).timestamp()), actor)
    payload = f"{session.account_id}.{session.expires}.{session.session_id}"
    value = f"{payload}.{_mac('session', payload)}"
    session_store.create_session(_stored_hash(session.session_id), account_id, now,
                                 datetime.fromtimestamp(session.expires, UTC), actor=actor)
    return session, set_cookie(SESSION_COOKIE, value, LIFETIME)


def read(cookie_header: str | None, now: datetime) -> Session | None:
    """The session a request's cookie proves, or None (absent, forged, expired, signed out,
    ended everywhere, unconfigured)."""
    value = cookies(cookie_header).get(SESSION_COOKIE)
    if not value or not configured() or value.count(".") != 3:
        return None
    payload, _, mac = value.rpartition(".")
    if not hmac.compare_digest(mac, _mac("session", payload)):
        return None
    account_id, expires, session_id = payload.split(".")
    if not expires.isdigit() or int(expires) <= now.timestamp():
        return None
    stored = session_store.load_session(_stored_hash(session_id))
    if (stored is None or stored.account_id != account_id or stored.expires_at <= now
            or stored.account_epoch is None or stored.epoch != stored.account_epoch):
        return None
    return Session(account_id, session_id, int(expires), stored.actor or "admin")


def sign_out(session: Session) -> str:
    """End this session (every copy of its cookie); answer the Set-Cookie value that removes it."""
    session_store.delete_session(_stored_hash(session.session_id))
    return set_cookie(SESSION_COOKIE, "", timedelta(0))


def sign_out_everywhere(session: Session) -> str:
    """End every console session of the session's account, this one included; answer the
    Set-Cookie value that removes this browser's cookie."""
    session_store.end_all_sessions(session.account_id)
    return sign_out(session)


def sign_in_nonce(cookie_header: str | None) -> tuple[str, str | None]:
    """The sign-in form's nonce: the one the browser holds, or a new one with its Set-Cookie."""
    held = cookies(cookie_header).get(SIGN_IN_COOKIE)
    if held:
        return held, None
    nonce = secrets.token_urlsafe(18)
    return nonce, set_cookie(SIGN_IN_COOKIE, nonce, SIGN_IN_LIFETIME)


def sign_in_csrf(nonce: str) -> str:
    """The token the sign-in form carries for its nonce."""
    return _mac("sign-in", nonce)


def valid(expected: str, given: str | None) -> bool:
    """Constant-time comparison of a CSRF token."""
    return bool(given) and hmac.compare_digest(expected.encode(), (given or "").encode())


def cookies(cookie_header: str | None) -> dict[str, str]:
    """The request's cookies by name (split by hand: other cookies of the site, however odd,
    must not hide the console's)."""
    found: dict[str, str] = {}
    for part in (cookie_header or "").split(";"):
        name, separator, value = part.strip().partition("=")
        if separator and name and name not in found:
            found[name] = value.strip().strip('"')
    return found


def set_cookie(name: str, value: str, lifetime: timedelta) -> str:
    """A console cookie: HttpOnly, SameSite=Lax, scoped to the console, Secure outside the local
    stages (a local browser talks plain HTTP to 127.0.0.1).

    Lax, not Strict: a chat product sends the person to the OAuth consent page by a top-level
    navigation from its own site, and under Strict a signed-in person would arrive signed out.
    Lax still keeps the cookie off every cross-site POST, subresource and frame, and every POST
    carries the session's CSRF token besides; console GETs change nothing."""
    parts = [f"{name}={value}", f"Path={path_prefix()}/console", f"Max-Age={int(lifetime.total_seconds())}",
             "HttpOnly", "SameSite=Lax"]
    if not settings().is_local:
        parts.append("Secure")
    return "; ".join(parts)


def path_prefix() -> str:
    """The path the deployment is served under (an API Gateway stage such as `/api`, or none)."""
    return urlsplit(settings().public_url).path.rstrip("/")


def _stored_hash(session_id: str) -> str:
    # The table holds a hash, never the session id itself (defence in depth beside the MAC).
    return hashlib.sha256(session_id.encode()).hexdigest()


def _mac(purpose: str, message: str) -> str:
    digest = hmac.new(session_key(), f"{purpose}\n{message}".encode(), hashlib.sha256).digest()
    return base64.urlsafe_b64encode(digest).decode().rstrip("=")
