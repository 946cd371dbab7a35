"""What a name or a value's shape says is a credential, in one place for every place that hides
one: a tool's literal header in a request shape (what a person approves) and in a dry run's
preview, a log line's field, an exception's message in a log line, and the values a tool's
definition pastes that no vendor answer may echo back (`echoed_parts`).

Secrets belong in connections, but a tool's author may paste one into a header anyway
(`X-Api-Key: abc123`) or into its URL (`?api_key=abc123`). The stored definition keeps it (it is
sent as written, and a changed key still asks a person again); what people and agents are shown
of it is `HIDDEN`, and a vendor's answer that quotes it has it redacted like a connection's own
secret (`calls/vendor.py`).
"""

from __future__ import annotations

import re
from collections.abc import Iterable

HIDDEN = "…"  # what is shown in place of a value that may be a credential (a URL's query value too)
# Words that, anywhere in a name and in any case, say its value is a credential: `auth` covers
# Authorization, Proxy-Authorization and X-Auth-Token; `key` X-Api-Key; `session` a session id.
WORDS = ("auth", "cookie", "credential", "key", "passwd", "password", "secret", "session", "signature", "token")
# Short words that say so only as a whole part of a name (between `-`, `_` or other non-letters):
# `sig` (an Azure SAS URL's signature), `pwd`, `pass`, `jwt`; anywhere in a name they would hide
# `design`, `bypass`.
PARTS = ("jwt", "pass", "pwd", "sig")
# A pasted value shorter than this is not redacted from a vendor's answer: a definition's
# `X-Api-Key: true` would blank every `true` in it (and a key this short guards nothing).
ECHO_MIN_CHARS = 8
# A plain name: what a tool's header (`definitions`) and a log line's field may be called. Any other
# name, a look-alike spelled with other scripts' letters (`X-Api-Kеy`, a Cyrillic е) or with a
# trailing space, says nothing Workset can read, so its value is hidden too.
PLAIN_NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")
_WORD = "|".join(WORDS)
_PART = "|".join(PARTS)
_PART_SET = frozenset(PARTS)
_NAME_PARTS = re.compile(r"[^a-z0-9]+")
_VALUE_WORDS = re.compile(r"[\s;,]+")
# What a text may quote that no one may be shown: Workset's own keys and tokens (`wsk_`, `wsa_`,
# `wst_`, `wsr_`, `wss_`, `wsc_`: chalicelib/identity/accounts.py, chalicelib/oauth/), an
# Authorization header's credentials, a URL's user:password, and a secret-named parameter's value.
# A parameter's name is tried only from the start of a run of name characters that an `=` ends (the
# lookahead reads the run once, possessively); a plain `[\w-]*word[\w-]*=` would read the run again
# from each `-` in it, seconds for a header value of 1,000 characters such as `v-v-v-...`. The
# lookahead wants a value after the `=` too: a run with a word in it then always matches at its
# first word, where without a value (`-key-key-...-key=`) each word was tried to the run's end. A
# PARTS word counts only between non-letters (`x_sig=`, not `design=`).
CREDENTIALS = re.compile(
    r"\b(?P<workset>ws[a-z]_)[\w-]+"
    r"|\b(?P<scheme>Bearer|Basic)\s+[^\s,;\"']+"
    r"|(?<=//)[^/\s@:]+:[^/\s@]+@"
    rf"|(?<![\w-])(?=[\w-]*+=[^\s&,;\"'])(?P<name>[\w-]*?(?:{_WORD}|(?<![^\W_])(?:{_PART})(?![^\W_]))[\w-]*+)=[^\s&,;\"']+",
    re.IGNORECASE)


def secret_named(name: str) -> bool:
    """Whether `name` says its value is a credential: `names_credential`, or it is not a
    PLAIN_NAME (no definition may publish such a header; a stored one may predate that check)."""
    return not PLAIN_NAME.fullmatch(name) or names_credential(name)


def names_credential(name: str) -> bool:
    """Whether `name`'s words say its value is a credential: one of WORDS anywhere in it, or one of
    PARTS as a whole part of it, in any case (`X-Api-Key`, `access_token`, `sig`, `x_pwd`)."""
    lowered = name.lower()
    return any(word in lowered for word in WORDS) or not _PART_SET.isdisjoint(_NAME_PARTS.split(lowered))


def looks_secret(text: str) -> bool:
    """Whether `text` holds something shaped like a credential (CREDENTIALS): `Bearer abc`, a
    Workset key, `user:password@`, `token=abc`."""
    return CREDENTIALS.search(text) is not None


def withheld(text: str) -> str:
    """`text` with each credential CREDENTIALS finds replaced by `[withheld]`, its kind kept
    (`Bearer [withheld]`, `wsk_[withheld]`, `api_key=[withheld]`)."""
    return CREDENTIALS.sub(_withheld, text)


def shown_header(name: str, value: str) -> str:
    """A header's value as a person or an agent is shown it: HIDDEN when `hidden_header` says so,
    else as it is (`X-HTTP-Method-Override: DELETE` is what a person must see)."""
    return HIDDEN if hidden_header(name, value) else value


def hidden_header(name: str, value: str) -> bool:
    """Whether a header's name or its value's shape says it carries a credential (`X-Api-Key`,
    `Cookie`, `X-Custom: Bearer abc`)."""
    return secret_named(name) or looks_secret(value)


def shown_headers(headers: dict[str, str]) -> dict[str, str]:
    """Each of `headers` as `shown_header` shows it, names kept."""
    return {name: shown_header(name, value) for name, value in headers.items()}


def echoed_parts(value: str) -> tuple[str, ...]:
    """What a vendor's echo of a pasted credential `value` may quote, each part at least
    ECHO_MIN_CHARS long, each once: the whole value, each of its words (split at spaces, `;` and
    `,`: `Bearer abc...`'s token), and what follows the first `=` of each (a cookie's value)."""
    words = [word for word in _VALUE_WORDS.split(value) if word]
    return echoable((value, *words, *(word.partition("=")[2] for word in words)))


def echoable(values: Iterable[str]) -> tuple[str, ...]:
    """Those of `values` that a vendor's echo has redacted: ECHO_MIN_CHARS or more, each once."""
    return tuple(dict.fromkeys(value for value in values if len(value) >= ECHO_MIN_CHARS))


def _withheld(match: re.Match[str]) -> str:
    if match["workset"]:
        return f"{match['workset']}[withheld]"
    if match["scheme"]:
        return f"{match['scheme']} [withheld]"
    if match["name"]:
        return f"{match['name']}=[withheld]"
    return "[withheld]@"
