"""One operation into a ToolSpec payload (chalicelib.catalog.toolbox), or Skip saying why Workset cannot
call it as described: its method, security, parameters, URL and request. Callbacks are not read:
they describe what the vendor later sends to a URL the caller gives, not the call itself."""

from __future__ import annotations

import re
from typing import Any
from urllib.parse import quote

from chalicelib.base.errors import InvalidInput
from chalicelib.base.text import visible
from chalicelib.net.outbound import is_client_header
from chalicelib.openapi.bodies import Body, json_media, media_type_schema, read_body, text
from chalicelib.openapi.inputs import Fields, Param, input_schema
from chalicelib.openapi.operations import Operation
from chalicelib.openapi.problems import Skip, Where, at, cut, plain, shown
from chalicelib.openapi.schemas import Schemas
from chalicelib.openapi.servers import Servers

# The security schemes a connection can carry today: (type, scheme or `in`), lower-case. A
# `header` connection sends any one header, so also `Authorization: Basic ...`.
CARRIABLE_AUTH = frozenset({("http", "bearer"), ("http", "basic"), ("apikey", "header")})
_SENDABLE = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE"})  # RequestTemplate's methods
_IGNORED_HEADERS = frozenset({"accept", "content-type", "authorization"})  # OpenAPI: described elsewhere
_PLACES = ("path", "query", "header", "cookie")
_HEADER_NAME = re.compile(r"[A-Za-z0-9-]{1,64}")
_PARAM_NAME = re.compile(r"[\x21-\x7e]{1,200}")  # what RequestTemplate's params send: printable ASCII
_MAX_PARAMS = 200
_PATH_SAFE = "/:@!$&'()*+,;=-._~%?"  # a path's literal text keeps these; braces outside placeholders are encoded


class Builder:
    """Turns operations into ToolSpec payloads; raises Skip for what Workset cannot call."""

    def __init__(self, schemas: Schemas, servers: Servers, *, vendor: str) -> None:
        self.schemas, self.servers, self.vendor = schemas, servers, vendor
        self.refs = schemas.refs

    def definition(self, operation: Operation, name: str) -> dict[str, Any]:
        """The tool definition of `operation`, named `name`."""
        try:
            return self._definition(operation, name)
        except RecursionError:  # a schema nested near MAX_NESTING, converted a few frames per level
            raise Skip("its schemas are nested too deeply to convert") from None

    def _definition(self, operation: Operation, name: str) -> dict[str, Any]:
        method = operation.method.upper()
        if method not in _SENDABLE:
            raise Skip(f"is an {method} operation; Workset sends GET, HEAD, POST, PUT, PATCH and DELETE")
        self._check_security(operation)
        fields = Fields()
        params = self._parameters(operation, fields)
        request: dict[str, Any] = {"method": method, "url": self._url(operation, params)}
        body = read_body(self.schemas, operation)
        if body is not None and body.media_types:
            params, request["headers"] = _with_media_type(body, params, fields)
        schema, body_field = input_schema(self.schemas, method, params, body, fields)
        if sent := [_wire(param) for param in params if param.place != "path"]:
            request["params"] = sent
        if len(sent) > _MAX_PARAMS:
            raise Skip(f"has {len(sent)} query and header parameters; a tool sends at most {_MAX_PARAMS}")
        if body_field:
            request["body"] = body_field
        if body is not None and body.form:
            request["body_format"] = "form"
        if body is not None and body.multipart:
            request["body_format"] = "multipart"
        if body is not None and body.media_types:
            request["body_format"] = "binary"
        if not request.get("headers"):
            request.pop("headers", None)
        return {"vendor": self.vendor, "name": name, "description": _description(operation),
                "input_schema": schema, "annotations": _annotations(operation, method), "request": request}

    def _check_security(self, operation: Operation) -> None:
        """Skip only when every alternative needs a scheme a connection cannot carry ({} is anonymous)."""
        alternatives = operation.spec.get("security", self.refs.root.get("security"))
        if not isinstance(alternatives, list) or not alternatives:
            return
        missing: list[str] = []
        for requirement in alternatives:
            if not isinstance(requirement, dict) or not requirement:
                return
            kinds = [self._scheme(name) for name in requirement]
            if all(kind in CARRIABLE_AUTH for kind, _ in kinds):
                return
            missing += [label for kind, label in kinds if kind not in CARRIABLE_AUTH]
        raise Skip(f"needs {' or '.join(dict.fromkeys(missing))} auth, which connections do not carry yet")

    def _scheme(self, name: str) -> tuple[tuple[str, str], str]:
        """((type, detail), label) of a named security scheme."""
        components = self.refs.root.get("components")
        schemes = components.get("securitySchemes") if isinstance(components, dict) else None
        scheme, _ = self.refs.deref(schemes.get(name) if isinstance(schemes, dict) else None,
                                    ("components", "securitySchemes", name))
        if not isinstance(scheme, dict) or not isinstance(scheme.get("type"), str):
            return ("undeclared", name), f"the undeclared scheme {shown(name)}"
        kind = cut(scheme["type"], 60)
        detail = cut(plain(scheme.get("scheme" if kind == "http" else "in", "")), 60).lower()
        label = f"http {detail}" if kind == "http" else f"apiKey in {detail}" if kind == "apiKey" else kind
        return (kind.lower(), detail if kind in ("http", "apiKey") else ""), cut(label, 60)

    def _parameters(self, operation: Operation, fields: Fields) -> list[Param]:
        """Path item and operation parameters (the operation's win on the same name and place),
        each with its input field; placeholders the document forgot to declare as strings."""
        merged: dict[tuple[str, str], tuple[dict[str, Any], Where]] = {}
        for owner, where in ((operation.item, operation.item_where), (operation.spec, operation.where)):
            listed = owner.get("parameters", [])
            if not isinstance(listed, list):
                raise InvalidInput(f"parameters {at((*where, 'parameters'))} must be a list")
            for index, raw in enumerate(listed):
                param, found = self.refs.deref(raw, (*where, "parameters", index))
                if not (isinstance(param, dict) and isinstance(param.get("name"), str) and param.get("in") in _PLACES):
                    raise InvalidInput(f"the parameter {at(found)} needs a name and `in` (path, query, header, cookie)")
                name = param["name"].lower() if param["in"] == "header" else param["name"]  # headers ignore case
                merged[(name, param["in"])] = (param, found)
        placeholders = re.findall(r"\{([^{}]+)\}", operation.path)
        params = [param for raw, found in merged.values()
                  if (param := self._parameter(raw, found, placeholders, fields))]
        declared = {param.name for param in params if param.place == "path"}
        params += [Param(name, "path", fields.claim(name, "path"), True, {"type": "string"}, None)
                   for name in dict.fromkeys(placeholders) if name not in declared]
        return params

    def _parameter(self, raw: dict[str, Any], where: Where, placeholders: list[str], fields: Fields) -> Param | None:
        name, place = raw["name"], raw["in"]
        required = place == "path" or raw.get("required") is True
        if (place == "path" and name not in placeholders) or (place == "header" and name.lower() in _IGNORED_HEADERS):
            return None  # nothing to fill; or a header OpenAPI says to ignore
        problem = _unsendable(name, place, raw)
        if problem and required:
            raise Skip(problem)
        if problem:
            return None  # optional: the tool goes without it
        return Param(name, place, fields.claim(name, place), required, self._parameter_schema(raw, where),
                     text(raw, "description"), raw.get("explode", True) is not False)

    def _parameter_schema(self, raw: dict[str, Any], where: Where) -> Any:
        if "schema" in raw:
            return self.schemas.schema(raw["schema"], (*where, "schema"))
        content: dict[str, Any] = raw["content"] if isinstance(raw.get("content"), dict) else {}
        media = json_media(content)
        if media is not None and isinstance(content[media], dict) and "schema" in content[media]:
            return self.schemas.schema(content[media]["schema"], (*where, "content", media, "schema"))
        return {"type": "string"}

    def _url(self, operation: Operation, params: list[Param]) -> str:
        """The server and the path, each path parameter's placeholder named by its field."""
        fields = {param.name: param.field for param in params if param.place == "path"}
        path = "".join(f"{{{fields[piece[1:-1]]}}}" if piece[1:-1] in fields and piece.startswith("{")
                       else quote(piece, safe=_PATH_SAFE) for piece in re.split(r"(\{[^{}]+\})", operation.path))
        url = self.servers.url(operation).rstrip("/") + path
        if len(url) > 2000:
            raise Skip("its URL is longer than 2,000 characters")
        return url


def _with_media_type(body: Body, params: list[Param], fields: Fields) -> tuple[list[Param], dict[str, str]]:
    """Raw bytes say their type in Content-Type: a fixed header when the document names one type,
    else an input field the caller fills (one of those named, or fitting a wildcard)."""
    if len(body.media_types) == 1 and "*" not in body.media_types[0]:
        return params, {"Content-Type": body.media_types[0]}
    field = fields.claim("content_type", "header")
    return [*params, Param("Content-Type", "header", field, body.required, media_type_schema(body.media_types),
                           None)], {}


def _unsendable(name: str, place: str, raw: dict[str, Any]) -> str | None:
    """Why Workset cannot send this parameter, or None."""
    if place == "cookie":
        return f"needs cookie parameter {shown(name)}, which Workset does not send"
    if place == "header" and not _HEADER_NAME.fullmatch(name):
        return f"needs header {shown(name)}, which is not a valid HTTP header name"
    if place == "header" and is_client_header(name):
        return f"needs header {shown(name)}, which only Workset's HTTP client sets"
    if place == "query" and not _PARAM_NAME.fullmatch(name):
        return f"needs query parameter {shown(name)}, whose name is not printable ASCII (at most 200 characters)"
    if place == "query" and raw.get("style", "form") != "form":
        return f"needs query parameter {shown(name)} in style {shown(raw['style'])}, which Workset does not send"
    return None


def _wire(param: Param) -> dict[str, Any]:
    entry: dict[str, Any] = {"field": param.field, "name": param.name, "in": param.place}
    if param.place == "query":
        entry["explode"] = param.explode
    return entry


def _description(operation: Operation) -> str:
    texts = [visible(part) for part in (operation.spec.get("summary"), operation.spec.get("description"))
             if isinstance(part, str)]
    return ("\n\n".join(part.strip() for part in texts if part.strip()) or visible(operation.key))[:4000]


def _annotations(operation: Operation, method: str) -> dict[str, Any]:
    notes: dict[str, Any] = {}
    summary = visible(operation.spec["summary"]) if isinstance(operation.spec.get("summary"), str) else ""
    if summary.strip():
        notes["title"] = summary.strip()[:200]
    if method in ("GET", "HEAD"):
        notes["readOnlyHint"] = True
    if method == "DELETE":
        notes["destructiveHint"] = True
    if method in ("PUT", "DELETE"):
        notes["idempotentHint"] = True
    return notes
