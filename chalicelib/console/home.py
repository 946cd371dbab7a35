"""The site's front door: `/` sends a browser to the console (and tells any other client where
the endpoints are), and `/favicon.ico` is the console's icon, so neither is API Gateway's 403."""

from __future__ import annotations

import json

from chalice import Response

from chalicelib.console.common import HOME, bp, url

# Three bars, the middle one short: a small working set drawn out of a larger box.
ICON = ('<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 32 32">'
        '<rect width="32" height="32" rx="7" fill="#1d2330"/>'
        '<rect x="7" y="8" width="18" height="4" rx="2" fill="#fff"/>'
        '<rect x="7" y="14" width="11" height="4" rx="2" fill="#7fa2ff"/>'
        '<rect x="7" y="20" width="18" height="4" rx="2" fill="#fff"/></svg>')


@bp.route("/", methods=["GET"])
def front_door() -> Response:
    """A browser (it asks for HTML) goes to the console; any other client is told where the MCP
    endpoint, the admin API and the console are (paths on this host: nothing is read to answer)."""
    accepted = bp.current_request.headers.get("accept", "")
    if "text/html" in accepted:
        return Response(body="", status_code=302, headers={"Location": url(HOME), "Cache-Control": "no-store"})
    where = {"name": "Workset", "mcp": url("/mcp"), "admin_api": url("/v1"), "console": url(HOME)}
    return Response(body=json.dumps(where), status_code=200, headers={"Content-Type": "application/json"})


@bp.route("/favicon.ico", methods=["GET"])
def favicon() -> Response:
    """The console's icon (SVG, which browsers take at this path by its content type)."""
    return Response(body=ICON, status_code=200, headers={
        "Content-Type": "image/svg+xml", "Cache-Control": "public, max-age=86400", "X-Content-Type-Options": "nosniff"})
