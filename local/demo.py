"""A demo toolbox for newcomers: a small fake vendor API on 127.0.0.1, five tools written by hand
that call it (the README's walk-through uses them), and a real public API description imported
whole (Square's, 200 operations: `local/data/README.md` says where it comes from and its
licence), pointed at the same fake vendor. A first `find_tool` searches a toolbox worth
searching, and the agent page's token card shows what a small working set spares."""

from __future__ import annotations

import errno
import gzip
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

DEMO_API = Path(__file__).parent / "data" / "squareup.com.json.gz"
DEMO_API_VENDOR = "square"
DEMO_API_PREFIX = "/square"  # the imported operations call the demo vendor under this path

ORDERS = [
    {"id": "SO-1001", "customer": "acme", "total": 1250.0, "status": "open"},
    {"id": "SO-1002", "customer": "globex", "total": 310.5, "status": "shipped"},
    {"id": "SO-1003", "customer": "acme", "total": 89.9, "status": "open"},
]


def demo_tools(base_url: str) -> list[dict[str, Any]]:
    """Tool definitions pointing at the demo vendor at `base_url`."""
    customer = {"type": "object", "properties": {"customer": {"type": "string", "description": "Customer code"}}}
    return [
        {
            "vendor": "unleashed", "name": "list-sales-orders",
            "description": "List sales orders in Unleashed, optionally filtered by customer code.",
            "input_schema": customer, "annotations": {"readOnlyHint": True},
            "request": {"method": "GET", "url": f"{base_url}/unleashed/sales-orders"},
        },
        {
            "vendor": "unleashed", "name": "get-sales-order",
            "description": "Get one Unleashed sales order by its order number.",
            "input_schema": {"type": "object", "properties": {"order_id": {"type": "string"}},
                             "required": ["order_id"]},
            "annotations": {"readOnlyHint": True},
            "request": {"method": "GET", "url": f"{base_url}/unleashed/sales-orders/{{order_id}}"},
        },
        {
            "vendor": "unleashed", "name": "create-sales-order",
            "description": "Create a sales order in Unleashed for a customer.",
            "input_schema": {"type": "object", "properties": {"customer": {"type": "string"},
                                                               "total": {"type": "number", "minimum": 0}},
                             "required": ["customer", "total"]},
            "annotations": {"destructiveHint": False},
            "request": {"method": "POST", "url": f"{base_url}/unleashed/sales-orders"},
        },
        {
            "vendor": "notion", "name": "search-pages",
            "description": "Search Notion pages by title text.",
            "input_schema": {"type": "object", "properties": {"query": {"type": "string"}}, "required": ["query"]},
            "annotations": {"readOnlyHint": True},
            "request": {"method": "GET", "url": f"{base_url}/notion/search"},
        },
        {
            "vendor": "stripe", "name": "list-invoices",
            "description": "List Stripe invoices for a customer, newest first.",
            "input_schema": customer, "annotations": {"readOnlyHint": True},
            "request": {"method": "GET", "url": f"{base_url}/stripe/invoices"},
        },
    ]


def demo_api() -> dict[str, Any]:
    """The public API description the demo imports (parsed; a fresh copy each call)."""
    with gzip.open(DEMO_API, "rt", encoding="utf-8") as document:
        loaded: dict[str, Any] = json.load(document)
    return loaded


def demo_import(base_url: str) -> dict[str, Any]:
    """The import request (as `POST /v1/imports/openapi` takes it) that brings the demo API's
    operations in, calling the demo vendor at `base_url`. The document's security requirements
    are left out: the demo vendor asks for no credential (and Square's OAuth 2 scheme is one an
    import skips, since connections do not carry it)."""
    document = demo_api()
    document["security"] = []
    for item in document.get("paths", {}).values():
        for operation in item.values():
            if isinstance(operation, dict):
                operation.pop("security", None)
    return {"vendor": DEMO_API_VENDOR, "document": document, "server": f"{base_url}{DEMO_API_PREFIX}"}


MAX_BODY = 1 << 20  # what the demo vendor reads of a request's body


class DemoVendor(BaseHTTPRequestHandler):
    """Answers the demo tools' requests from fixed data, and every imported operation with a
    placeholder that says what was asked."""

    timeout = 30  # seconds a connection may stall (a body promised and not sent) before it is dropped

    def do_GET(self) -> None:
        parts = urlsplit(self.path)
        if parts.path.startswith(f"{DEMO_API_PREFIX}/"):
            return self._imported()
        query = {key: values[0] for key, values in parse_qs(parts.query).items()}
        if parts.path == "/unleashed/sales-orders":
            found = [o for o in ORDERS if query.get("customer") in (None, o["customer"])]
            return self._send(200, {"orders": found})
        if parts.path.startswith("/unleashed/sales-orders/"):
            order = next((o for o in ORDERS if o["id"] == parts.path.rsplit("/", 1)[1]), None)
            return self._send(200 if order else 404, order or {"error": "no such order"})
        if parts.path == "/notion/search":
            return self._send(200, {"pages": [{"title": f"{query.get('query', '')} planning", "id": "p1"}]})
        if parts.path == "/stripe/invoices":
            return self._send(200, {"invoices": [{"id": "in_1", "customer": query.get("customer"), "amount": 4200}]})
        return self._send(404, {"error": "not found"})

    def do_POST(self) -> None:
        if urlsplit(self.path).path.startswith(f"{DEMO_API_PREFIX}/"):
            return self._imported()
        received = self._body()
        if received is None:
            return None
        try:
            body = json.loads(received or b"{}")
        except ValueError:
            return self._send(400, {"error": "the body is not JSON"})
        if not isinstance(body, dict):
            return self._send(400, {"error": "the body is not a JSON object"})
        if urlsplit(self.path).path == "/unleashed/sales-orders":
            return self._send(201, {"id": f"SO-{1000 + len(ORDERS) + 1}", **body, "status": "open"})
        return self._send(404, {"error": "not found"})

    def do_PUT(self) -> None:
        self._imported()

    def do_PATCH(self) -> None:
        self._imported()

    def do_DELETE(self) -> None:
        self._imported()

    def _imported(self) -> None:
        """An imported operation's call: a 200 naming the request (the demo has no Square data)."""
        parts = urlsplit(self.path)
        if not parts.path.startswith(f"{DEMO_API_PREFIX}/"):
            return self._send(404, {"error": "not found"})
        received = self._body()
        if received is None:
            return None
        return self._send(200, {"demo": True, "method": self.command, "path": parts.path.removeprefix(DEMO_API_PREFIX),
                                "query": {key: values[0] for key, values in parse_qs(parts.query).items()},
                                "body_bytes": len(received),
                                "note": "the demo vendor answers every imported operation with this placeholder"})

    def _body(self) -> bytes | None:
        """The request's body; None once a 400 has answered a Content-Length that is no count of
        at most MAX_BODY bytes (read as given, a negative one waits for the connection to end)."""
        declared = (self.headers.get("Content-Length") or "0").strip()
        if not (declared.isascii() and declared.isdigit() and len(declared) <= 12) or int(declared) > MAX_BODY:
            self.close_connection = True
            self._send(400, {"error": f"Content-Length must be a count of at most {MAX_BODY} bytes"})
            return None
        return self.rfile.read(int(declared)) if int(declared) else b""

    def _send(self, status: int, payload: Any) -> None:
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args: Any) -> None:
        pass


def start_vendor(port: int) -> ThreadingHTTPServer:
    """Serve the demo vendor on 127.0.0.1:`port` in a background thread; on a free port instead
    (said on the console) when that one is taken."""
    try:
        server = ThreadingHTTPServer(("127.0.0.1", port), DemoVendor)
    except OSError as error:
        if error.errno != errno.EADDRINUSE:
            raise
        server = ThreadingHTTPServer(("127.0.0.1", 0), DemoVendor)
        print(f"  The demo vendor's port {port} is taken; it serves on {server.server_address[1]} instead "
              f"(demo tools seeded earlier still call port {port})", flush=True)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True, name="demo-vendor").start()
    return server
