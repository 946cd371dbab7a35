"""JSON text in and out, strictly. Every entrance reads with `loads`; every exit writes with
`dumps`, so text that cannot be encoded neither gets in nor breaks an answer on the way out.

Python's `json` accepts what no other party can use: lone UTF-16 surrogates ("\\ud800" is valid
JSON but no UTF-8 encoder will write it), NaN and Infinity (not JSON at all), 1e999 (a float that
becomes infinity) and arbitrary nesting (a RecursionError deep enough). `loads` refuses all of
them with one exception, `JsonRefused`, whose `kind` says which.
"""

from __future__ import annotations

import json
import math
import re
from typing import Any, Literal
from urllib.parse import unquote

MAX_DEPTH = 64  # objects and arrays inside each other; tool schemas need a handful

Kind = Literal["encoding", "syntax", "number", "depth", "surrogate"]
Path = tuple[str | int, ...]

_SURROGATE = re.compile(r"[\ud800-\udfff]")
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")
_CONTROL_BUT_LINES = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f]")
_WHERE_CHARS = 120


class JsonRefused(ValueError):
    """A JSON text `loads` will not accept. `reason` is for people (it never quotes the text);
    `path` locates a lone surrogate: keys and indexes from the top, a key's own surrogate being
    reported at the object that holds the key."""

    def __init__(self, kind: Kind, reason: str, path: Path = ()) -> None:
        super().__init__(reason)
        self.kind = kind
        self.reason = reason
        self.path = path

    @property
    def where(self) -> str:
        """`path` as `params.arguments[2].name` (shortened), or "" at the top."""
        text = "".join(f"[{step}]" if isinstance(step, int) else f".{step}" for step in self.path).lstrip(".")
        return text if len(text) <= _WHERE_CHARS else text[: _WHERE_CHARS - 1] + "…"


def loads(raw: bytes | bytearray | str) -> Any:
    """Parse one JSON text: UTF-8 only, finite numbers only, at most `MAX_DEPTH` levels, no lone
    surrogate in any string or key. Raises `JsonRefused`."""
    text = _utf8(raw)
    try:
        value = json.loads(text, parse_constant=_constant, parse_float=_float, parse_int=_int)
    except JsonRefused:
        raise
    except RecursionError:
        raise JsonRefused("depth", f"the JSON is nested deeper than {MAX_DEPTH} levels") from None
    except json.JSONDecodeError as error:
        where = f"line {error.lineno} column {error.colno}"
        raise JsonRefused("syntax", f"not valid JSON ({error.msg} at {where})") from None
    except ValueError:  # an integer too long for Python to read
        raise JsonRefused("number", "a number is too large") from None
    _inspect(value)
    return value


COMPACT = (",", ":")  # no spaces: what an agent reads costs it context, and a space says nothing


def dumps(value: Any) -> str:
    """Compact JSON text that always encodes as UTF-8: non-finite numbers become null and lone
    surrogates U+FFFD (only when they occur; clean values are dumped as they are)."""
    try:
        text = json.dumps(value, ensure_ascii=False, allow_nan=False, separators=COMPACT)
    except ValueError:  # NaN or infinity somewhere
        text = json.dumps(sanitize(value), ensure_ascii=False, allow_nan=False, separators=COMPACT)
    return scrub(text)


def sanitize(value: Any) -> Any:
    """A copy of a JSON-like value with non-finite floats as None and strings scrubbed."""
    if isinstance(value, str):
        return scrub(value)
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {sanitize(key) if isinstance(key, str) else key: sanitize(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [sanitize(item) for item in value]
    return value


def scrub(text: str) -> str:
    """`text` with every lone surrogate replaced by U+FFFD, so it encodes as UTF-8."""
    return _SURROGATE.sub("\ufffd", text) if has_surrogate(text) else text


def has_surrogate(text: str) -> bool:
    """True when `text` holds a UTF-16 surrogate code point (no encoder will write it)."""
    return _SURROGATE.search(text) is not None


def text_fault(text: str, *, lines: bool = False, escaped: bool = False) -> str | None:
    """Why `text` is unfit as an id, a path or query parameter, or a form value (a lone
    surrogate, a control character), or None. `lines` lets tabs and line breaks through (a
    textarea). `escaped` also judges what the text's percent-escapes stand for: API Gateway
    hands path parameters over decoded, but `chalice local` and Chalice's test client hand
    them over as sent (`%ED%A0%80` literally), and either way the same thing must be refused."""
    if has_surrogate(text):
        return "holds a lone UTF-16 surrogate, which is not text"
    if (_CONTROL_BUT_LINES if lines else _CONTROL).search(text):
        return "holds a control character"
    if escaped and "%" in text:
        try:
            decoded = unquote(text, errors="strict")
        except UnicodeDecodeError:
            return "holds percent-escapes that are not UTF-8 text"
        return text_fault(decoded, lines=lines)
    return None


def _utf8(raw: bytes | bytearray | str) -> str:
    if isinstance(raw, str):
        return raw
    try:
        # strict: refuses invalid sequences, overlong forms and encoded surrogates (ED A0 80)
        return bytes(raw).decode("utf-8")
    except UnicodeDecodeError:
        raise JsonRefused("encoding", "the JSON is not UTF-8 text") from None


def _constant(name: str) -> Any:
    raise JsonRefused("number", f"{name} is not a JSON number")


def _float(text: str) -> float:
    number = float(text)
    if not math.isfinite(number):
        raise JsonRefused("number", "a number is too large to be finite")
    return number


def _int(text: str) -> int:
    number = int(text)
    try:
        float(number)  # every consumer may turn it into a float (schemas, DynamoDB, JavaScript)
    except OverflowError:
        raise JsonRefused("number", "a number is too large to be finite") from None
    return number


def _inspect(value: Any) -> None:
    """Depth and surrogates, without recursion: a stack of (value, path, depth)."""
    stack: list[tuple[Any, Path, int]] = [(value, (), 0)]
    while stack:
        item, path, depth = stack.pop()
        if isinstance(item, str):
            if has_surrogate(item):
                raise JsonRefused("surrogate", _surrogate_reason(path), path)
        elif isinstance(item, dict):
            _deeper(depth)
            for key, member in item.items():
                if has_surrogate(key):
                    raise JsonRefused("surrogate", _surrogate_reason(path, key=True), path)
                stack.append((member, (*path, key), depth + 1))
        elif isinstance(item, list):
            _deeper(depth)
            stack.extend((member, (*path, index), depth + 1) for index, member in enumerate(item))


def _deeper(depth: int) -> None:
    if depth >= MAX_DEPTH:
        raise JsonRefused("depth", f"the JSON is nested deeper than {MAX_DEPTH} levels")


def _surrogate_reason(path: Path, *, key: bool = False) -> str:
    where = JsonRefused("surrogate", "", path).where
    subject = "a key" if key else "a string"
    return f"{subject}{f' in {where}' if where else ''} holds a lone UTF-16 surrogate, which is not text"
