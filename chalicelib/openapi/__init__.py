"""OpenAPI 3.x documents into tool definitions, one per operation. Pure: no store, no network.

A document comes from whoever describes an API, so it is read as hostile: at most 25 MB, a node
budget and a nesting limit that a YAML alias bomb meets before it is expanded, local `$ref`s
resolved and converted once each however many operations share them (GitHub's 12 MB description
has 1,000+), an inline budget per operation against fan-out, recursive schemas kept in `$defs`
instead of inlined forever, and nothing fetched: a reference to another document skips its
operation. An operation Workset cannot call as described still becomes a Candidate, with the
reason instead of a definition, so an import can say what it left out. One import reads at most
MAX_LISTED operations and converts at most MAX_OPERATIONS (include and exclude choose them), and
the definitions it builds come to at most `expansion_limit` of the document's size: a schema that
thousands of operations `$ref` is repeated into each of them.

The package, in the order a document goes through it:

    __init__.py     read_document and candidates(): the interface chalicelib.catalog.imports uses
    reading.py      text -> document: the size limit, JSON or YAML, the alias-bomb guard, the version
    operations.py   the document's operations in order, their tool names, include/exclude
    definitions.py  one operation -> a ToolSpec payload, or Skip: method, security, parameters, URL
    servers.py      the base URL of an operation: the server given, else the nearest `servers`
    inputs.py       the input schema: parameters, the body flattened or nested
    bodies.py       the body's media type: JSON, form, multipart (files as base64), raw bytes
    schemas.py      schemas -> JSON Schema 2020-12 (oneOf read as anyOf), once per $ref; inlined or in $defs
    refs.py         local $ref resolution (JSON pointers); nothing is fetched
    problems.py     Skip, and how messages name places and values
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from chalicelib.base.errors import InvalidInput
from chalicelib.base.validation import VENDOR_PATTERN
from chalicelib.openapi import operations
from chalicelib.openapi.definitions import CARRIABLE_AUTH, Builder
from chalicelib.openapi.inputs import MAX_INPUT_NESTING
from chalicelib.openapi.problems import Skip, shown
from chalicelib.openapi.reading import MAX_DOCUMENT_BYTES, check_version, expansion_limit, read_document
from chalicelib.openapi.refs import Refs
from chalicelib.openapi.schemas import Schemas, json_size
from chalicelib.openapi.servers import Servers

__all__ = ["CARRIABLE_AUTH", "MAX_DOCUMENT_BYTES", "MAX_INPUT_NESTING", "Candidate", "candidates", "expansion_limit",
           "read_document"]

# An import converts, checks and writes each operation in one request (about 1.5 ms of CPU an
# operation here, 5 ms on a small Lambda): 2,000 fit its timeout with room. GitHub's description
# has about 1,100; a document listing more than MAX_LISTED is not read at all.
MAX_OPERATIONS = 2_000
MAX_LISTED = 10_000


@dataclass(frozen=True)
class Candidate:
    """One operation of the document: its definition, or why it has none."""

    key: str  # identifies the operation across imports: "GET /pets/{petId}"
    operation_id: str | None  # bounded and one line (operations.label): what the tool's origin keeps
    name: str  # the tool name; given also when skipped
    definition: dict[str, Any] | None  # a ToolSpec payload; None when skipped
    reason: str | None  # why skipped
    tags: tuple[str, ...] = ()  # the operation's tags, bounded (operations.tags): a field search reads


def candidates(document: dict[str, Any], *, vendor: str, base_url: str | None = None, server: str | None = None,
               include: Sequence[str] = (), exclude: Sequence[str] = (),
               keep_names: Mapping[str, str] = {}, budget: int | None = None) -> list[Candidate]:
    """One Candidate per operation, in document order (paths in order, methods in the order get, put,
    post, delete, options, head, patch, trace). Raises InvalidInput for a bad document (not OpenAPI
    3.x, Swagger 2.0, a local $ref that does not resolve, a relative server URL with no base_url or
    server to resolve it against, more operations than one import takes, definitions that come to
    more than `budget` bytes...)."""
    check_version(document)
    if not operations.VENDOR.fullmatch(vendor):
        raise InvalidInput(f"vendor {shown(vendor)} must match {VENDOR_PATTERN}", field="vendor")
    refs = Refs(document)
    found = operations.listed(refs, limit=MAX_LISTED)
    reasons = [operations.filtered(operation, include, exclude) for operation in found]
    if (chosen := reasons.count(None)) > MAX_OPERATIONS:
        raise InvalidInput(f"{chosen:,} of the document's operations are to be imported; one import takes at most "
                           f"{MAX_OPERATIONS:,}: choose some with include or exclude (tags, operationIds, or path "
                           "prefixes starting with /), and import the rest in another call", field="include")
    builder = Builder(Schemas(refs), Servers(document, base_url=base_url, server=server), vendor=vendor)
    left = budget if budget is not None else MAX_DOCUMENT_BYTES
    answer = []
    for operation, name, reason in zip(found, operations.names(found, keep_names, vendor), reasons, strict=True):
        definition = None
        if reason is None:
            try:
                definition = builder.definition(operation, name)
            except Skip as skip:
                reason = skip.reason
            else:
                left -= json_size(definition)
                if left < 0:
                    raise InvalidInput(_over_budget(budget), field="document")
        answer.append(Candidate(operation.key, operations.label(operation), name, definition, reason,
                                operations.tags(operation)))
    return answer


def _over_budget(budget: int | None) -> str:
    most = budget if budget is not None else MAX_DOCUMENT_BYTES
    return (f"the operations' tool definitions come to more than {most / 2**20:.3g} MB: the schemas they $ref are "
            "repeated into every operation that uses them, and an import builds at most a few times the document's "
            "size; import fewer operations at a time with include or exclude")
