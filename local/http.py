"""The local stack's HTTP server and request handler: Chalice's own, with room for many clients
connecting at once, without Nagle's delay, refusing a body over the size limit from its headers,
before reading it (API Gateway caps bodies the same way in AWS), and telling the app the socket's
peer as the source address (`requestContext.identity.sourceIp`, as API Gateway tells the
connection's; Chalice's own says 127.0.0.1 for everyone)."""

from __future__ import annotations

import json
from urllib.parse import urlsplit

from chalice.local import ChaliceRequestHandler, ThreadedHTTPServer

from chalicelib.base.config import body_limit


class Server(ThreadedHTTPServer):
    """Chalice's threaded server, with a listen backlog for many clients connecting at once (the
    standard library's 5 resets connections when 32 clients connect together)."""

    request_queue_size = 128
    daemon_threads = True


class Handler(ChaliceRequestHandler):
    """Chalice's local handler with the changes the local stack needs."""

    disable_nagle_algorithm = True  # keep-alive MCP clients otherwise wait ~40 ms per answer

    def _checked_handle(self) -> None:
        refusal = self._refusal()
        if refusal is None:
            # what the app counts open registrations by: the peer, never a header the client wrote
            self.local_gateway.event_converter.LOCAL_SOURCE_IP = str(self.client_address[0])
            self._generic_handle()
            return
        status, code, message = refusal
        body = json.dumps({"error": {"code": code, "message": message}}).encode()
        self.close_connection = True  # the unread body must not be taken for the next request
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Connection", "close")
        self.end_headers()
        self.wfile.write(body)

    def _refusal(self) -> tuple[int, str, str] | None:
        """Why the request's body must not be read, from its headers alone."""
        if self.headers.get("transfer-encoding"):
            return 411, "length_required", "send the body with a Content-Length (chunked bodies are not accepted)"
        declared = self.headers.get("content-length", "0").strip()
        if not declared.isascii() or not declared.isdigit():
            return 400, "invalid_input", "Content-Length must be a number of bytes"
        limit = body_limit(urlsplit(self.path).path)
        if int(declared) > limit:
            return 413, "too_large", f"the body is larger than {limit} bytes"
        return None

    do_GET = do_PUT = do_POST = do_HEAD = do_DELETE = do_PATCH = do_OPTIONS = _checked_handle
