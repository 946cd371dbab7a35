"""Skip, and how messages name places and values: a JSON pointer, a quoted value, cut to fit."""

from __future__ import annotations

from typing import Any

Where = tuple[str | int, ...]  # a place in the document, as the parts of a JSON pointer


class Skip(Exception):
    """The operation cannot become a tool; `reason` says why, for the import's report."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def remote(ref: str) -> str:
    """The reason for an operation that reaches a reference to another document."""
    return f"refers to another document ({cut(ref, 120)}); bundle it into one document first"


def at(where: Where) -> str:
    """`at /paths/~1pets/get`: the place as a JSON pointer."""
    pointer = "".join("/" + str(part).replace("~", "~0").replace("/", "~1") for part in where)
    return f"at {cut(pointer, 80)}" if pointer else "at the top level"


def shown(value: Any) -> str:
    """A value from the document, quoted and cut to fit a message."""
    return repr(cut(plain(value), 60))


def plain(value: Any) -> str:
    """A scalar from the document as text; a mapping or list only named, never written out (it
    may be large, or share its parts many times over)."""
    if isinstance(value, dict | list):
        return f"a {'mapping' if isinstance(value, dict) else 'list'} of {len(value)}"
    return value if isinstance(value, str) else str(value)


def cut(text: str, limit: int = 120) -> str:
    """`text`, at most `limit` characters, "..." marking the cut."""
    return text if len(text) <= limit else text[: limit - 3] + "..."
