"""The one test harness: a fake AWS (moto) around every test, the app's tables created, the
Chalice test client, helper actions for the admin API and MCP, and a real local vendor server."""

from __future__ import annotations

import copy
import gc
import json
import logging
import os
import re
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import urlencode

# The environment must be fake before anything imports boto3, pynamodb or the settings.
os.environ.pop("AWS_ENDPOINT_URL", None)
os.environ.pop("AWS_ENDPOINT_URL_DYNAMODB", None)
os.environ.update(
    AWS_DEFAULT_REGION="us-east-1",
    AWS_ACCESS_KEY_ID="testing",
    AWS_SECRET_ACCESS_KEY="testing",
    WORKSET_STAGE="test",
    WORKSET_TABLE_PREFIX="workset-test",
    WORKSET_PUBLIC_URL="http://127.0.0.1:8000",
)

import pytest
from chalice.test import Client
from moto import mock_aws
from moto.core.config import DefaultConfig, default_user_config

from app import app
from chalicelib.base import config
from chalicelib.catalog import indexes
from chalicelib.store import queues, vault
from chalicelib.store.tables import create_all
from local import emulator
from tests.faults import faults  # noqa: F401 - AWS faults between botocore and moto, for any test

MODERN = "2026-07-28"
LEGACY = "2025-11-25"


emulator.patch()  # moto as DynamoDB: atomic writes, idempotent transactions (local/emulator.py)


def _a_request_per_thread() -> None:
    """Chalice keeps the request being served in one attribute of the app (aws/chalice#759):
    Lambda serves one request at a time, and the local stack serves through LocalChalice, whose
    request is per thread. Tests that call from threads at once (racing approvals) get the same,
    else a request may read the one another thread began meanwhile: its token, a 401 under load
    (tests/test_concurrent_requests.py)."""
    from chalice.local import LocalChalice

    if not isinstance(app, LocalChalice):
        app.__class__ = type("TestChalice", (LocalChalice, type(app)), {})


_a_request_per_thread()


def _lambda_time_as_configured() -> None:
    """Chalice's test client gives every invocation 3 s (its LambdaContext's default); Lambda gives
    ours the configured `lambda_timeout`, and handlers that plan by the time left (the webhook
    consumer) must see that."""
    import functools

    import chalice.test
    from chalice.local import LambdaContext

    timeout = json.loads((Path(__file__).resolve().parent.parent / ".chalice" / "config.json").read_text())
    chalice.test.LambdaContext = functools.partial(LambdaContext, max_runtime_ms=timeout["lambda_timeout"] * 1000)


_lambda_time_as_configured()


SCREENSHOTS = Path(__file__).resolve().parent.parent / "test-artifacts" / "console"
_STARTED = pytest.StashKey[float]()


def pytest_sessionstart(session: pytest.Session) -> None:
    session.config.stash[_STARTED] = time.time()


# The files that take longest, longest first (`--durations=0` of a whole run, 2026-12-03; BENCHMARKS.md,
# "The suite"). `./dev test` hands whole files to the workers in the order collected
# (--no-loadscope-reorder): these start first, and the files of few quick tests come last, so no
# worker is left running a long one alone at the end. A file missing here only runs later.
SLOWEST_FILES = [
    "tests/e2e/test_local_stop.py", "tests/test_package.py", "tests/e2e/test_console_browser.py",
    "tests/e2e/test_local_stack.py", "tests/test_usage.py", "tests/test_readme.py", "tests/test_unauthenticated.py",
    "tests/test_cold_start.py", "tests/test_console.py", "tests/test_costs.py", "tests/test_indexes.py",
    "tests/test_attack_pins_scopes.py", "tests/test_trust.py", "tests/e2e/test_runs_client.py",
    "tests/test_vendor_refresh.py", "tests/test_mcp.py", "tests/test_infra_policy_calls.py",
    "tests/e2e/test_approvals_client.py", "tests/test_vendor_auth.py", "tests/e2e/test_local_concurrency.py",
    "tests/test_local_start.py", "tests/test_upstreams.py", "tests/e2e/test_revision_client.py",
    "tests/test_sweep_property.py",
]


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """SLOWEST_FILES first, in that order; then the other files, those with more tests first (as
    pytest-xdist orders them itself); each file's tests in their own order."""
    rank = {name: place for place, name in enumerate(SLOWEST_FILES)}
    sizes: dict[str, int] = {}
    for item in items:
        sizes[_file_of(item)] = sizes.get(_file_of(item), 0) + 1
    items.sort(key=lambda item: (rank.get(_file_of(item), len(rank)), -sizes[_file_of(item)], _file_of(item)))


def _file_of(item: pytest.Item) -> str:
    return item.nodeid.split("::")[0]


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    """Once a test and its fixtures are torn down: collect its garbage, then freeze what is left,
    as app.py does after import. What a worker holds for good (botocore's service models, moto,
    both models, the app) then is not scanned again by each later full collection, and the app
    makes one at every index build or eviction (chalicelib/catalog/indexes.py's
    `_release_freed_memory`): about 0.6 s each in a worker, a sixth of some files' time. Garbage
    is collected before anything is frozen, so nothing a test leaves behind is kept
    (tests/test_isolation.py checks it)."""
    yield
    gc.collect()
    gc.freeze()


def pytest_terminal_summary(terminalreporter: Any, config: pytest.Config) -> None:
    """Name the console's screenshot folder when this run made it (tests/e2e/test_console_browser.py):
    here, in the process that prints, since a parallel run's workers print nothing of their own."""
    started = config.stash.get(_STARTED, None)
    if started is not None and SCREENSHOTS.is_dir() and SCREENSHOTS.stat().st_mtime >= started - 1:
        terminalreporter.write_line(f"Console screenshots: {SCREENSHOTS}")


def _one_key_pair_for_symmetric_keys() -> None:
    """moto makes an RSA key pair for every KMS key it creates, symmetric ones too (which never
    use it): 2048 bits, 50-150 ms of CPU, once per test for the secrets key (`aws` below). A
    symmetric key gets one pair made once per process instead; its own key material (what
    encrypts and decrypts) is still new for every key, and asymmetric keys still get their own."""
    from moto.kms import models as kms_models

    original = kms_models.generate_private_key
    made: dict[str, Any] = {}

    def generate_private_key(key_spec: str) -> Any:
        if key_spec != "SYMMETRIC_DEFAULT":
            return original(key_spec)
        if key_spec not in made:
            made[key_spec] = original(key_spec)
        return made[key_spec]

    kms_models.generate_private_key = generate_private_key


_one_key_pair_for_symmetric_keys()

# moto drops boto3's default session at every start unless told not to, so every test's first
# client of a service read botocore's endpoint and service files again (about as long as the
# tables take to create). The session stays; what moto holds (tables, keys, queues) is still
# emptied at every start, and the credentials are the fake ones above either way.
KEEP_SESSION: DefaultConfig = {"core": {**default_user_config["core"], "reset_boto3_session": False}}


_MADE: dict[str, dict[str, Any]] = {}  # moto's DynamoDB and KMS state once the tables and key exist


def _moto_backends() -> dict[str, Any]:
    """This process's moto DynamoDB and KMS (the default account, the settings' region)."""
    from moto.core import DEFAULT_ACCOUNT_ID
    from moto.dynamodb.models import dynamodb_backends
    from moto.kms.models import kms_backends

    region = config.settings().aws_region
    return {"dynamodb": dynamodb_backends[DEFAULT_ACCOUNT_ID][region], "kms": kms_backends[DEFAULT_ACCOUNT_ID][region]}


def _tables_and_key() -> None:
    """The app's tables (`create_all`) and secrets key (`ensure_key`) in a just-emptied moto. The
    process's first test makes them through the API and keeps a deep copy of what moto then
    holds; every later test gets a fresh deep copy of that (a few ms, where the 24 API calls took
    60-100 ms of CPU): the same empty tables and key as if just created, nothing shared between tests."""
    if not _MADE:
        create_all()
        vault.ensure_key()
        _MADE.update({name: copy.deepcopy(backend.__dict__) for name, backend in _moto_backends().items()})
        return
    for name, backend in _moto_backends().items():
        backend.__dict__ = copy.deepcopy(_MADE[name])


@pytest.fixture(autouse=True)
def aws() -> Iterator[None]:
    """Every test gets fresh, empty tables in moto, and a cold search cache."""
    with mock_aws(config=KEEP_SESSION):
        emulator.forget_tokens()
        vault._kms.cache_clear()
        _tables_and_key()
        queues._sqs.cache_clear()
        queues._url.cache_clear()
        queues.ensure(config.settings().sweep_queue)
        queues.ensure(config.settings().webhook_queue)
        indexes.clear()
        yield


@pytest.fixture
def logged(caplog: pytest.LogCaptureFixture) -> Iterator[pytest.LogCaptureFixture]:
    """The structured lines of the events logger (it does not propagate to the root)."""
    from chalicelib.base import log

    logger = logging.getLogger(log.LOGGER)
    logger.addHandler(caplog.handler)
    caplog.set_level(logging.INFO, logger=log.LOGGER)
    yield caplog
    logger.removeHandler(caplog.handler)


def log_lines(caplog: pytest.LogCaptureFixture, kind: str | None = None) -> list[dict[str, Any]]:
    """The JSON lines the events logger wrote, optionally only those of one `kind`."""
    from chalicelib.base import log

    found = [json.loads(record.getMessage()) for record in caplog.records if record.name == log.LOGGER]
    return [line for line in found if kind is None or line["kind"] == kind]


@pytest.fixture
def settings_env(monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """Change settings for one test: `settings_env(WORKSET_VENDOR_TIMEOUT_SECONDS="0.2")`."""

    def change(**values: str) -> None:
        for name, value in values.items():
            monkeypatch.setenv(name, value)
        config.settings.cache_clear()

    yield change
    monkeypatch.undo()
    config.settings.cache_clear()


@pytest.fixture
def client() -> Iterator[Client]:
    # project_dir without a .chalice/: the deployment stages' environment variables must not
    # leak into tests, which set their own above.
    with Client(app, project_dir=str(Path(__file__).parent)) as test_client:
        yield test_client


@dataclass
class Admin:
    """Admin API actions for one account."""

    client: Client
    token: str

    def call(self, method: str, path: str, body: Any = None, *, token: str | None = None) -> Any:
        headers = {"Authorization": f"Bearer {token or self.token}", "Content-Type": "application/json"}
        raw = json.dumps(body) if body is not None else None
        response = getattr(self.client.http, method.lower())(path, headers=headers, body=raw)
        return response

    def create_agent(self, name: str = "hermes", **settings: Any) -> dict[str, Any]:
        response = self.call("POST", "/v1/agents", {"name": name, **settings})
        assert response.status_code == 201, response.body
        return response.json_body

    def publish(self, **overrides: Any) -> dict[str, Any]:
        response = self.call("POST", "/v1/tools", tool_spec(**overrides))
        assert response.status_code == 201, response.body
        return response.json_body


def tool_spec(**overrides: Any) -> dict[str, Any]:
    """A valid read tool definition; override any field."""
    spec: dict[str, Any] = {
        "vendor": "unleashed",
        "name": "list-sales-orders",
        "description": "List sales orders in Unleashed, filtered by customer.",
        "input_schema": {
            "type": "object",
            "properties": {"customer": {"type": "string"}, "page": {"type": "integer"}},
            "required": ["customer"],
        },
        "annotations": {"readOnlyHint": True},
        "request": {"method": "GET", "url": "http://127.0.0.1:9/orders"},
    }
    spec.update(overrides)
    return spec


@pytest.fixture
def admin(client: Client) -> Admin:
    """A fresh account and its admin token."""
    from chalicelib.base.clock import utcnow
    from chalicelib.identity import accounts

    _, token = accounts.create_account("acme", utcnow())
    return Admin(client, token)


@pytest.fixture
def other_admin(client: Client) -> Admin:
    """A second account, to show that nothing crosses accounts."""
    from chalicelib.base.clock import utcnow
    from chalicelib.identity import accounts

    _, token = accounts.create_account("globex", utcnow())
    return Admin(client, token)


FORM = {"Content-Type": "application/x-www-form-urlencoded"}
CSRF = re.compile(r'name="csrf" value="([^"]+)"')


@dataclass
class Console:
    """A browser's view of the console: its cookie jar (one session cookie) and CSRF token."""

    client: Client
    cookie: str = ""
    csrf: str = ""

    def get(self, path: str) -> Any:
        return self.client.http.get(path, headers={"Cookie": self.cookie})

    def post(self, path: str, fields: dict[str, Any] | None = None, *, csrf: str | None = None) -> Any:
        body = urlencode({"csrf": self.csrf if csrf is None else csrf, **(fields or {})})
        return self.client.http.post(path, headers={**FORM, "Cookie": self.cookie}, body=body)

    def sign_in(self, token: str, next_path: str = "") -> Any:
        form = self.client.http.get("/console/sign-in")
        sign_in_cookie = form.headers["Set-Cookie"].split(";")[0]
        body = urlencode({"csrf": CSRF.search(form.body.decode()).group(1), "token": token, "next": next_path})
        answer = self.client.http.post("/console/sign-in", headers={**FORM, "Cookie": sign_in_cookie}, body=body)
        if answer.status_code == 303:
            self.cookie = answer.headers["Set-Cookie"].split(";")[0]
            self.csrf = CSRF.search(self.get("/console/agents").body.decode()).group(1)
        return answer


@pytest.fixture
def console(client: Client, admin: Admin) -> Console:
    """A browser signed in to `admin`'s account."""
    signed_in = Console(client)
    assert signed_in.sign_in(admin.token).status_code == 303
    return signed_in


@dataclass
class McpAnswer:
    """An HTTP answer from /mcp: JSON, or a text/event-stream whose last message is the response."""

    status_code: int
    headers: dict[str, str]
    body: bytes
    json_body: Any
    notifications: list[dict[str, Any]]

    @classmethod
    def of(cls, response: Any) -> McpAnswer:
        if response.headers.get("Content-Type", "").startswith("text/event-stream"):
            messages = [json.loads(line[len("data: "):]) for line in response.body.decode().splitlines()
                        if line.startswith("data: ")]
            return cls(response.status_code, response.headers, response.body, messages[-1], messages[:-1])
        return cls(response.status_code, response.headers, response.body, response.json_body, [])


@dataclass
class Mcp:
    """JSON-RPC over POST /mcp with an agent key, in either protocol revision."""

    client: Client
    key: str
    modern: bool = False
    next_id: int = 0
    capabilities: dict[str, Any] = field(default_factory=dict)

    def post(self, method: str, params: dict[str, Any] | None = None, *, headers: dict[str, str] | None = None,
             raw: bytes | None = None, key: str | None = None) -> Any:
        self.next_id += 1
        params = dict(params or {})
        sent = {"Content-Type": "application/json", "Authorization": f"Bearer {key or self.key}"}
        if self.modern:
            params["_meta"] = {
                "io.modelcontextprotocol/protocolVersion": MODERN,
                "io.modelcontextprotocol/clientCapabilities": self.capabilities,
            }
            sent.update({"MCP-Protocol-Version": MODERN, "Mcp-Method": method})
            if method == "tools/call":
                sent["Mcp-Name"] = params["name"]
        else:
            sent["MCP-Protocol-Version"] = LEGACY
        sent.update(headers or {})
        body = raw if raw is not None else json.dumps(
            {"jsonrpc": "2.0", "id": self.next_id, "method": method, "params": params}
        )
        return McpAnswer.of(self.client.http.post("/mcp", headers=sent, body=body))

    def call(self, name: str, arguments: dict[str, Any] | None = None) -> dict[str, Any]:
        """tools/call; answers the result (asserting it is not a JSON-RPC error)."""
        response = self.post("tools/call", {"name": name, "arguments": arguments or {}})
        assert "result" in response.json_body, response.json_body
        return response.json_body["result"]

    def tool_names(self) -> list[str]:
        return [tool["name"] for tool in self.post("tools/list").json_body["result"]["tools"]]


@pytest.fixture
def agent(admin: Admin) -> dict[str, Any]:
    return admin.create_agent()


@pytest.fixture
def mcp(client: Client, agent: dict[str, Any]) -> Mcp:
    return Mcp(client, agent["api_key"])


@contextmanager
def serving(handler: type[BaseHTTPRequestHandler]) -> Iterator[str]:
    """A threaded HTTP server on 127.0.0.1 with `handler`; yields its base URL."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


class JsonHandler(BaseHTTPRequestHandler):
    """A fake server's request handler that answers JSON (`reply`) and logs nothing."""

    def reply(self, status: int, body: Any) -> None:
        """Answer `body` as JSON (None: an empty body) with `status`."""
        raw = json.dumps(body).encode() if body is not None else b""
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(raw)))
        self.end_headers()
        self.wfile.write(raw)

    def log_message(self, *args: Any) -> None:
        pass


class HandshakeHandler(JsonHandler):
    """A fake handshake-era MCP server (2025-11-25): it refuses `server/discover`, so a client
    falls back to `initialize`, which it answers; it acknowledges notifications; every other
    method goes to `answer`, which replies (`result` for a JSON-RPC result)."""

    def do_POST(self) -> None:
        message = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        method = message["method"]
        if method == "server/discover":
            self.reply(400, {"jsonrpc": "2.0", "id": None, "error": {"code": -32000, "message": "no"}})
        elif method.startswith("notifications/"):
            self.reply(202, None)
        elif method == "initialize":
            self.result(message, {"protocolVersion": "2025-11-25", "capabilities": {}})
        else:
            self.answer(message)

    def result(self, message: dict[str, Any], value: Any) -> None:
        self.reply(200, {"jsonrpc": "2.0", "id": message["id"], "result": value})

    def answer(self, message: dict[str, Any]) -> None:
        raise NotImplementedError


@dataclass
class Vendor:
    """A real HTTP server on 127.0.0.1 standing in for a vendor API; records what it receives."""

    url: str
    received: list[dict[str, Any]] = field(default_factory=list)
    status: int = 200
    body: Any = field(default_factory=lambda: {"orders": [{"id": 1}]})
    delay: float = 0.0


@pytest.fixture
def vendor() -> Iterator[Vendor]:
    state = Vendor(url="")
    release = threading.Event()

    class Handler(BaseHTTPRequestHandler):
        def _serve(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length) if length else b""
            state.received.append(
                {"method": self.command, "path": self.path, "headers": dict(self.headers), "body": body}
            )
            if state.delay:
                release.wait(state.delay)
            payload = state.body if isinstance(state.body, bytes) else json.dumps(state.body).encode()
            self.send_response(state.status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(payload)

        do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = do_HEAD = _serve

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    state.url = f"http://127.0.0.1:{server.server_address[1]}"
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    yield state
    release.set()
    server.shutdown()
    server.server_close()


T = TypeVar("T")


def within(seconds: float, work: Callable[[], T]) -> T:
    """Run `work` in a worker thread; fail instead of hanging if it has not finished in time."""
    outcome: list[tuple[bool, Any]] = []

    def run() -> None:
        try:
            outcome.append((True, work()))
        except Exception as error:  # noqa: BLE001 - handed back to the test's thread
            outcome.append((False, error))

    worker = threading.Thread(target=run, daemon=True)
    worker.start()
    worker.join(seconds)
    assert not worker.is_alive(), f"still running after {seconds} s"
    finished, value = outcome[0]
    if not finished:
        raise value
    return value
