"""The accepted guard: the read-only and destructive hints Workset enforces for a tool version.

A definition's hints are its author's claims, and the authors of most versions are not people: an
MCP server's sync, an OpenAPI document (even in an import a person started: the document wrote
it), an agent's `acquire`. So every version carries the guard Workset enforces, and a new version
never loosens it without a person:

    version 1                        its declared hints; but a tool that first appears in an
                                     unattended sync (the hourly one) is held to MCP's defaults,
                                     a destructive write, until a person accepts its hints
    a later version                  the tighter of its declared hints and the previous version's
                                     guard, hint by hint: read-only only if both are, destructive if
                                     either is (tightening takes effect at once)
    a version a person publishes     its declared hints; a loosening is accepted by that person
    directly (POST /v1/tools)        (recorded: accepted_by, accepted_at)
    a person accepts the newest      its declared hints (API, console; recorded the same way)
    version's pending loosening

A version whose declared hints are looser than its guard has a *pending loosening* until a person
accepts it. Everything that decides on hints reads the guard, never the declared hints: whether a
call waits for a person, whether a dry run may reach the vendor, the hints agents read (tools/list,
promote, find_tool), and the request shape an approval is bound to (`shape`). `accepted_in`, the
version whose loosening a person accepted last, is carried from version to version and is part of
the shape too, so an approval given before a loosening is never reused after it, even when a
later version tightens the tool back to what was approved.

MCP's defaults apply to absent hints: a tool writes unless `readOnlyHint` is true, and a write is
destructive unless `destructiveHint` is false (read-only tools are never destructive).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from chalicelib.store.records import ToolVersion

READ_ONLY, DESTRUCTIVE, ACCEPTED_IN = "readOnlyHint", "destructiveHint", "accepted_in"


@dataclass(frozen=True)
class Guard:
    """The hints Workset enforces for a version (`destructive` is False for a read-only tool)."""

    read_only: bool
    destructive: bool
    accepted_in: int | None = None  # the version whose loosening a person accepted last

    @classmethod
    def declared(cls, annotations: Mapping[str, Any] | None) -> Guard:
        """What a definition's annotations claim, under MCP's defaults."""
        notes = annotations or {}
        read_only = notes.get(READ_ONLY) is True
        return cls(read_only, not read_only and notes.get(DESTRUCTIVE) is not False)

    @classmethod
    def of_version(cls, version: ToolVersion) -> Guard:
        """A stored version's guard; a version stored before guards were kept is guarded as it
        declares (as it always was)."""
        stored = version.guard
        if not stored:
            return cls.declared(version.definition.get("annotations"))
        accepted_in = stored.get(ACCEPTED_IN)
        return replace(cls.declared(stored), accepted_in=int(accepted_in) if accepted_in is not None else None)

    @property
    def writes(self) -> bool:
        """A tool writes unless it is guarded read-only."""
        return not self.read_only

    @property
    def hints(self) -> dict[str, bool]:
        """The two hints, as MCP names them."""
        return {READ_ONLY: self.read_only, DESTRUCTIVE: self.destructive}

    def looser_than(self, other: Guard) -> bool:
        """True when this guard lets through something `other` holds: read-only where `other`
        writes, or not destructive where `other` is."""
        return (self.read_only and not other.read_only) or (other.destructive and not self.destructive)

    def tightened_by(self, previous: Guard) -> Guard:
        """These declared hints held to `previous` hint by hint (`previous`'s acceptance carried on)."""
        read_only = self.read_only and previous.read_only
        destructive = not read_only and (self.destructive or previous.destructive)
        return Guard(read_only, destructive, previous.accepted_in)

    def stored(self) -> dict[str, Any]:
        """The guard as a version item keeps it."""
        return {**self.hints, **({ACCEPTED_IN: self.accepted_in} if self.accepted_in is not None else {})}

    def shape(self) -> dict[str, Any]:
        """The guard's part of a request shape: only what differs from MCP's default hints (a
        destructive write) and from a tool never loosened by a person, so that decisions stored
        before guards were part of the shape keep matching the tools they were made for."""
        shape: dict[str, Any] = {}
        if self.read_only:
            shape[READ_ONLY] = True
        elif not self.destructive:
            shape[DESTRUCTIVE] = False
        if self.accepted_in is not None:
            shape["annotations_accepted_in"] = self.accepted_in
        return shape

    def shown(self, annotations: Mapping[str, Any] | None) -> dict[str, Any]:
        """A definition's annotations as agents and people read them: the declared ones, with the
        two hints Workset enforces in place of looser claims."""
        shown = dict(annotations or {})
        if Guard.declared(shown).hints != self.hints:
            shown[READ_ONLY] = self.read_only
            if self.read_only:
                shown.pop(DESTRUCTIVE, None)
            else:
                shown[DESTRUCTIVE] = self.destructive
        return shown


# What a request shape without the guard's keys implies (`Guard.shape`), for showing changes.
IMPLIED_SHAPE = {READ_ONLY: False, DESTRUCTIVE: True, "annotations_accepted_in": None}


UNREVIEWED = Guard(read_only=False, destructive=True)  # MCP's defaults: what a tool no one looked at is


def for_new_version(declared: Guard, previous: ToolVersion | None, version: int, *,
                    by_person: bool, attended: bool = True) -> tuple[Guard, bool]:
    """The guard of a version about to be published after `previous` (None for a new tool), and
    whether publishing it accepts a loosening: only a person publishing the definition directly
    does; any other author's looser claims wait for a person (`Guard.tightened_by`). A new tool
    takes its declared hints when a person started the publish (an import, a registration, a
    sync they asked for); one an unattended sync brings is held to UNREVIEWED, so a server cannot
    dodge a held loosening by listing the tool again under a new name."""
    if previous is None:
        return (declared, False) if attended or by_person else (declared.tightened_by(UNREVIEWED), False)
    before = Guard.of_version(previous)
    if by_person and declared.looser_than(before):
        return replace(declared, accepted_in=version), True
    return declared.tightened_by(before), False  # not looser: the declared hints, held to `before`


def pending(declared: Guard, accepted: Guard) -> bool:
    """True when a version claims less than Workset enforces for it: a loosening a person has not
    accepted."""
    return declared.looser_than(accepted)
