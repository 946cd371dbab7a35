"""What a name or a value's shape says is a credential, in one place for every place that hides
one: a tool's literal header in a request shape (what a person approves) and in a dry run's
preview, a log line's field, an exception's message in a log line.

Secrets belong in connections, but a tool's author may paste one into a header anyway
(`X-Api-Key: abc123`). The stored definition keeps it (it is sent as written, and a changed key
still asks a person again); what people and agents are shown of it is `HIDDEN`.
"""

from __future__ import annotations

import re

HIDDEN = "…"  # what is shown in place of a value that may be a credential (a URL's query value too)
# Words that, anywhere in a name and in any case, say its value is a credential: `auth` covers
# Authorization, Proxy-Authorization and X-Auth-Token; `key` X-Api-Key; `session` a session id.
WORDS = ("auth", "cookie", "credential", "key", "passwd", "password", "secret", "session", "signature", "token")
# A plain name: what a tool's header (`definitions`) and a log line's field may be called. Any other
# name, a look-alike spelled with other scripts' letters (`X-Api-Kеy`, a Cyrillic е) or with a
# trailing space, says nothing Workset can read, so its value is hidden too.
PLAIN_NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")
_WORD = "|".join(WORDS)
# What a text may quote that no one may be shown: Workset's own keys and tokens (`wsk_`, `wsa_`,
# `wst_`, `wsr_`, `wss_`, `wsc_`: chalicelib/identity/accounts.py, chalicelib/oauth/), an
# Authorization header's credentials, a URL's user:password, and a secret-named parameter's value.
# A parameter's name is tried only from the start of a run of name characters that an `=` ends (the
# lookahead reads the run once, possessively); a plain `[\w-]*word[\w-]*=` would read the run again
# from each `-` in it, seconds for a header value of 1,000 characters such as `v-v-v-...`.
CREDENTIALS = re.compile(
    r"\b(?P<workset>ws[a-z]_)[\w-]+"
    r"|\b(?P<scheme>Bearer|Basic)\s+[^\s,;\"']+"
    r"|(?<=//)[^/\s@:]+:[^/\s@]+@"
    rf"|(?<![\w-])(?=[\w-]*+=)(?P<name>[\w-]*?(?:{_WORD})[\w-]*+)=[^\s&,;\"']+", re.IGNORECASE)


def secret_named(name: str) -> bool:
    """Whether `name` says its value is a credential: it holds one of WORDS in any case, or it is
    not a PLAIN_NAME (no definition may publish such a header; a stored one may predate that check)."""
    return not PLAIN_NAME.fullmatch(name) or any(word in name.lower() for word in WORDS)


def looks_secret(text: str) -> bool:
    """Whether `text` holds something shaped like a credential (CREDENTIALS): `Bearer abc`, a
    Workset key, `user:password@`, `token=abc`."""
    return CREDENTIALS.search(text) is not None


def withheld(text: str) -> str:
    """`text` with each credential CREDENTIALS finds replaced by `[withheld]`, its kind kept
    (`Bearer [withheld]`, `wsk_[withheld]`, `api_key=[withheld]`)."""
    return CREDENTIALS.sub(_withheld, text)


def shown_header(name: str, value: str) -> str:
    """A header's value as a person or an agent is shown it: HIDDEN when its name or its value's
    shape says it is a credential (`X-Api-Key`, `Cookie`, `X-Custom: Bearer abc`), else as it is
    (`X-HTTP-Method-Override: DELETE` is what a person must see)."""
    return HIDDEN if secret_named(name) or looks_secret(value) else value


def shown_headers(headers: dict[str, str]) -> dict[str, str]:
    """Each of `headers` as `shown_header` shows it, names kept."""
    return {name: shown_header(name, value) for name, value in headers.items()}


def _withheld(match: re.Match[str]) -> str:
    if match["workset"]:
        return f"{match['workset']}[withheld]"
    if match["scheme"]:
        return f"{match['scheme']} [withheld]"
    if match["name"]:
        return f"{match['name']}=[withheld]"
    return "[withheld]@"
