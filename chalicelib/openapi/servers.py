"""The base URL an operation's path goes after: the server given to the import, else the nearest
`servers` (operation, path item, document), variables filled from their defaults, a relative one
resolved against the document's own URL. It must be a plain http(s) base URL."""

from __future__ import annotations

import re
from typing import Any
from urllib.parse import urljoin, urlsplit

from chalicelib.base.errors import InvalidInput
from chalicelib.openapi.operations import Operation
from chalicelib.openapi.problems import Where, at, cut, shown


class Servers:
    """Resolves each operation's server; each `servers` entry of the document once."""

    def __init__(self, root: dict[str, Any], *, base_url: str | None, server: str | None) -> None:
        self.root, self.base_url, self.server = root, base_url, server
        self._resolved: dict[int, str] = {}  # id of a server object in the document -> its URL

    def url(self, operation: Operation) -> str:
        """The operation's base URL; InvalidInput when it cannot be one."""
        if self.server is not None:
            return self._absolute(self.server, f"the server {shown(self.server)} given")
        for owner, where in ((operation.spec, operation.where), (operation.item, operation.item_where),
                             (self.root, ())):
            servers = owner.get("servers")
            if isinstance(servers, list) and servers:
                key = id(servers[0])
                if key not in self._resolved:
                    self._resolved[key] = self._filled(servers[0], (*where, "servers", 0))
                return self._resolved[key]
        return self._absolute("/", "the document names no server, so its URL '/'")

    def _filled(self, server: Any, where: Where) -> str:
        if not (isinstance(server, dict) and isinstance(server.get("url"), str)):
            raise InvalidInput(f"the server {at(where)} has no url")
        variables = server.get("variables") if isinstance(server.get("variables"), dict) else {}

        def default(match: re.Match[str]) -> str:
            found = variables.get(match.group(1))  # type: ignore[union-attr]
            if not (isinstance(found, dict) and isinstance(found.get("default"), str)):
                raise InvalidInput(f"the server URL {at(where)} uses {{{cut(match.group(1), 40)}}}, "
                                   "which has no default value")
            return str(found["default"])

        url = re.sub(r"\{([^{}]*)\}", default, server["url"])
        return self._absolute(url, f"the document's server URL {shown(url)} ({at(where)})")

    def _absolute(self, url: str, what: str) -> str:
        try:
            if not urlsplit(url).scheme:
                if self.base_url is None:
                    raise InvalidInput(f"{what} is relative; give `server`, the API's base URL")
                url = urljoin(self.base_url, url)
            parts = urlsplit(url)
            parts.port  # noqa: B018 - raises ValueError for a port out of range
        except ValueError:
            raise InvalidInput(f"{what} is not a valid URL") from None
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise InvalidInput(f"{what} is not an http or https URL")
        if parts.username is not None or parts.query or parts.fragment or "#" in url:
            raise InvalidInput(f"{what} must be a plain base URL (no credentials, query or fragment)")
        if "{" in url or "}" in url:
            raise InvalidInput(f"{what} has a {{variable}} left in it")
        return url
