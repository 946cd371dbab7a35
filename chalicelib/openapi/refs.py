"""Local `$ref`s: JSON pointers into the document, each resolved once. Nothing is fetched: a
reference to another document skips the operation that reaches it."""

from __future__ import annotations

from typing import Any
from urllib.parse import unquote

from chalicelib.base.errors import InvalidInput
from chalicelib.openapi.problems import Skip, Where, at, remote, shown

MAX_HOPS = 32  # $refs followed in a row


class Refs:
    """The document's local references, resolved once each however many operations share them."""

    def __init__(self, root: dict[str, Any]) -> None:
        self.root = root
        self._targets: dict[str, tuple[Any, Where]] = {}

    def target(self, ref: Any, where: Where) -> tuple[Any, Where]:
        """What a local `$ref` points at, and where; InvalidInput naming it when it does not resolve."""
        if not isinstance(ref, str):
            raise InvalidInput(f"a $ref {at(where)} is not a string")
        if ref not in self._targets:
            self._targets[ref] = self._resolve(ref, where)
        return self._targets[ref]

    def deref(self, node: Any, where: Where) -> tuple[Any, Where]:
        """A parameter, request body, path item or security scheme, its `$ref`s followed."""
        for _ in range(MAX_HOPS):
            if not (isinstance(node, dict) and "$ref" in node):
                return node, where
            if isinstance(node["$ref"], str) and not node["$ref"].startswith("#"):
                raise Skip(remote(node["$ref"]))
            node, where = self.target(node["$ref"], where)
        raise InvalidInput(f"the $refs {at(where)} go round in a loop")

    def _resolve(self, ref: str, where: Where) -> tuple[Any, Where]:
        if ref != "#" and not ref.startswith("#/"):
            raise InvalidInput(f"the $ref {shown(ref)} {at(where)} is not a JSON pointer such as "
                               "'#/components/schemas/Pet'")
        node, path = self.root, []
        for raw in unquote(ref[2:]).split("/") if ref != "#" else ():
            step = raw.replace("~1", "/").replace("~0", "~")
            if isinstance(node, dict) and step in node:
                node = node[step]
                path.append(step)
            elif isinstance(node, list) and step.isascii() and step.isdigit() and int(step) < len(node):
                node = node[int(step)]
                path.append(int(step))
            else:
                raise InvalidInput(f"the $ref {shown(ref)} {at(where)} does not resolve in this document")
        return node, tuple(path)
