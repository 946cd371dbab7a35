"""Turning pydantic and JSON Schema failures into InvalidInput that names the field, without
Python or library internals in the message."""

from __future__ import annotations

from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from chalicelib.base.errors import InvalidInput

M = TypeVar("M", bound=BaseModel)
# A tool is `vendor__name` in MCP: at most TOOL_NAME_MAX characters (Claude's and OpenAI's limit
# for a tool name). A vendor is at most 31 characters, a name at most NAME_MAX, and the two
# together at most TOOL_NAME_MAX: `name_budget(vendor)` is what a name may use beside its vendor.
TOOL_NAME_MAX = 64
SEPARATOR = "__"
VENDOR_MAX = 31
NAME_MAX = TOOL_NAME_MAX - len(SEPARATOR) - 1
VENDOR_PATTERN = rf"^[a-z0-9][a-z0-9-]{{0,{VENDOR_MAX - 1}}}$"
NAME_PATTERN = rf"^[a-z0-9][a-z0-9-]{{0,{NAME_MAX - 1}}}$"
MESSAGE_CHARS = 300


def name_budget(vendor: str) -> int:
    """The most characters a tool name may have beside `vendor`."""
    return min(NAME_MAX, TOOL_NAME_MAX - len(SEPARATOR) - len(vendor))


def check_tool_name(vendor: str, name: str) -> None:
    """ValueError (starting with the field, as model-level checks do) when `vendor__name` is over
    TOOL_NAME_MAX characters."""
    if len(name) > (budget := name_budget(vendor)):
        raise ValueError(f"name: {vendor}{SEPARATOR}{name} is {len(vendor) + len(SEPARATOR) + len(name)} characters; "
                         f"an MCP tool name has at most {TOOL_NAME_MAX}, so beside vendor {vendor} a name has at "
                         f"most {budget}")


def parse(model: type[M], payload: Any) -> M:
    """Validate `payload` as `model`; the first problem becomes InvalidInput naming its field."""
    if not isinstance(payload, dict):
        raise InvalidInput("the body must be a JSON object")
    try:
        return model.model_validate(payload)
    except ValidationError as error:
        raise _invalid(error) from None


def _invalid(error: ValidationError) -> InvalidInput:
    first = error.errors(include_url=False, include_context=False, include_input=False)[0]
    field = ".".join(str(part) for part in first["loc"])
    message = first["msg"].removeprefix("Value error, ")
    if first["type"] == "extra_forbidden":
        message = "is not a known field"
    elif first["type"] == "missing":
        message = "is required"
    if not field:
        # A model-level check; its message starts with the field it is about.
        field = message.split(":", 1)[0] if ":" in message else ""
        return InvalidInput(message, field=field or None)
    return InvalidInput(f"{field}: {message}", field=field)


def check_instance(schema: dict[str, Any], instance: Any, *, root: str = "input") -> None:
    """Validate a tool's input against its JSON Schema; the most relevant error names its field.
    A schema that cannot be applied safely (it refers outside itself, recursion, too much work)
    is InvalidInput too, never a crash or a fetch."""
    from chalicelib.base import schemas  # jsonschema and RE2: loaded by the first call, not at import

    try:
        error = schemas.best_error(schema, instance)
    except schemas.SchemaUnusable as problem:
        raise InvalidInput(f"{root}: {problem}", field=root) from None
    if error is None:
        return
    path = [str(part) for part in error.absolute_path]
    if error.validator == "required" and isinstance(error.instance, dict):
        missing = next((name for name in error.validator_value if name not in error.instance), None)
        if missing is not None:
            path.append(str(missing))
            field = ".".join([root, *path])
            raise InvalidInput(f"{field} is required", field=field)
    if error.validator == "additionalProperties" and isinstance(error.instance, dict):
        allowed = set(error.schema.get("properties", {}))
        extra = next((name for name in error.instance if name not in allowed), None)
        if extra is not None:
            field = ".".join([root, *path, str(extra)])
            raise InvalidInput(f"{field} is not a known field", field=field)
    field = ".".join([root, *path])
    raise InvalidInput(f"{field}: {_short(error.message)}", field=field)


def _short(message: str) -> str:
    """jsonschema's messages quote the offending value whole (up to the size of a request)."""
    return message if len(message) <= MESSAGE_CHARS else message[: MESSAGE_CHARS - 1] + "…"
