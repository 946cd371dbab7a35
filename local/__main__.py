"""The local stack: `python -m local` runs Workset on this machine.

It starts the embedded AWS emulator unless `AWS_ENDPOINT_URL` points elsewhere: moto's DynamoDB,
SQS and KMS in a process of its own (local/aws.py), with the tables restored from the data folder
(a snapshot and a write-ahead journal: local/journal.py). Then it creates any missing table, makes
sure an account and its admin token exist, seeds a demo toolbox on first start, and serves the
Chalice app on 127.0.0.1 with a request handler that answers keep-alive clients without Nagle's
delay. SIGTERM, SIGINT (Ctrl-C) or SIGHUP stops it and its emulator, with every acknowledged write
saved, however it was started; so does the emulator's end, with a message (local/lifecycle.py).
A second stack on the same data folder, or a stack on a taken port, refuses before it starts an
emulator.
"""

from __future__ import annotations

import argparse
import errno
import functools
import os
import secrets
import sys
import threading
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, NoReturn

from local import environment
from local.lifecycle import Lifecycle
from local.progress import Progress

if TYPE_CHECKING:
    from local.http import Server

ROOT = Path(__file__).resolve().parent.parent


def main() -> NoReturn:
    args = _arguments()
    life = Lifecycle()
    life.take_signals()  # before any other thread: see local/lifecycle.py
    try:
        _run(args, life)
    except SystemExit as refused:  # a refusal with its message (the folder or the port is taken)
        message = refused.code if isinstance(refused.code, str) else None
        life.stop(1 if message else int(refused.code or 0), message)
    except BaseException:  # noqa: BLE001 - whatever broke, the emulator must not outlive the stack
        traceback.print_exc()
        life.stop(1)
    life.stop(0)


def _run(args: argparse.Namespace, life: Lifecycle) -> None:
    """Start everything, then serve until a stop signal (or the emulator's end) ends the process."""
    data_dir = Path(args.data).resolve()
    environment.private_folder(data_dir)
    life.hold(data_dir)
    environment.prepare()
    server = _listen(args.host, args.port)  # before the emulator: a taken port starts nothing
    progress = Progress()
    emulator = False
    if not os.environ.get("AWS_ENDPOINT_URL"):
        progress.step("starting the AWS emulator (DynamoDB, SQS, KMS) and restoring the tables")
        os.environ["AWS_ENDPOINT_URL"] = life.start_emulator(data_dir)
        emulator = True
    progress.step("loading Workset")

    # Only now may the app and the store be imported: they read the endpoint at import.
    from chalice.config import Config
    from chalice.local import LocalChalice

    from app import app
    from chalicelib.base.clock import utcnow
    from chalicelib.identity import accounts
    from chalicelib.store import tables, vault
    from local import demo, workers
    from local.http import Handler

    progress.step("creating the tables and the key")
    tables.create_all()
    vault.ensure_key()
    if args.announce_listens:
        _announce_listens()

    token = _admin_token(data_dir)
    account_id = accounts.account_of_admin_token(token)
    if account_id is None:
        account, _ = accounts.create_account("local", utcnow(), token=token)
        account_id = account.account_id

    demo_port = args.demo_port if args.demo_port is not None else (args.port + 1 if args.port else 0)
    vendor = demo.start_vendor(demo_port)
    if not args.no_demo:
        progress.step("checking the demo toolbox (seeded on the first start, with its search vectors)")
        _seed_demo(account_id, f"http://127.0.0.1:{vendor.server_address[1]}")

    class LocalApp(LocalChalice, app.__class__):  # type: ignore[misc]
        pass

    app.__class__ = LocalApp
    # Chalice's LocalDevServer, with the server bound already: the same handler on the same server
    server.RequestHandlerClass = functools.partial(
        Handler, app_object=app, config=Config.create(chalice_stage="local", app_name="workset"))
    port = server.server_address[1]

    stop = threading.Event()
    life.on_stop.append(stop.set)
    progress.step("starting the workers (the sweep, the queues)")
    workers.start(stop, sweep_interval=args.sweep_interval)

    base = f"http://{args.host}:{port}"
    if not os.environ.get("WORKSET_PUBLIC_URL"):  # links in answers (approval_url, MCP URL) use the real port
        os.environ["WORKSET_PUBLIC_URL"] = base
        from chalicelib.base import config

        config.settings.cache_clear()
    print(ready_block(base, token, data_dir, emulator=emulator, seconds=progress.done()), flush=True)
    print(f"READY {base}", flush=True)
    server.serve_forever(poll_interval=0.1)


def ready_block(base: str, token: str, data_dir: Path, *, emulator: bool, seconds: float | None = None) -> str:
    """What a person needs once the stack serves: where, how to sign in, where the token is, how to stop."""
    saved = data_dir / "admin-token"
    where = f"saved in {_shown(saved)}" if not os.environ.get("WORKSET_ADMIN_TOKEN") else "from WORKSET_ADMIN_TOKEN"
    state = "" if emulator else f" (the state lives at {os.environ.get('AWS_ENDPOINT_URL')})"
    return "\n".join([
        "",
        f"Workset is ready on {base}" + (f" (started in {seconds:.0f} s)" if seconds is not None else ""),
        f"  MCP endpoint   {base}/mcp",
        f"  Console        {base}/console   (sign in with the admin token)",
        f"  Admin API      {base}/v1   (Authorization: Bearer <admin token>)",
        f"  Admin token    {token}   ({where})",
        f"  Data           {_shown(data_dir)}{state}",
        f"  Stop           Ctrl-C here, or kill {os.getpid()}; every acknowledged write is kept",
        "  Next           the README's Walk-through creates an agent and connects a client",
        "",
    ])


def _shown(path: Path) -> str:
    """`path` relative to the current folder when it is inside it (`.workset/admin-token`)."""
    try:
        return str(path.relative_to(Path.cwd()))
    except ValueError:
        return str(path)


def _listen(host: str, port: int) -> Server:
    """The app's HTTP server, bound to `host:port` (its handler is set once the app is loaded: no
    request is accepted before it serves); a clear refusal when the port is taken or cannot be had."""
    from local.http import Server

    try:
        return Server((host, port), None)  # type: ignore[arg-type]
    except OSError as error:
        if error.errno == errno.EADDRINUSE:
            raise SystemExit(f"workset: {host}:{port} is taken by another process; stop it, or start on "
                             "another port with --port N (or PORT=N)") from None
        raise SystemExit(f"workset: cannot listen on {host}:{port} ({error.strerror}); "
                         "choose another with --host or --port") from None


def _arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m local", description="Run Workset on this machine.")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=int(os.environ.get("PORT", "8000")))
    parser.add_argument("--data", default=os.environ.get("WORKSET_DATA_DIR", str(ROOT / ".workset")),
                        help="folder for the tables (snapshot and journal) and the admin token (default .workset/)")
    parser.add_argument("--demo-port", type=int, default=None,
                        help="port of the demo vendor API (default: the app's port + 1)")
    parser.add_argument("--no-demo", action="store_true", help="do not seed the demo toolbox")
    parser.add_argument("--sweep-interval", type=float,
                        default=float(os.environ.get("WORKSET_SWEEP_INTERVAL_SECONDS", "300")),
                        help="seconds between sweeps (default 300, as in AWS)")
    parser.add_argument("--announce-listens", action="store_true",
                        help="print `LISTENING <agent id>` once a listen has read the agent's working set and "
                             "holds (tests order a change after it)")
    return parser.parse_args()


def _announce_listens() -> None:
    """Print `LISTENING <agent id>` as each listen starts to hold: the working set it compares
    against has been read, so a change made after the line is one the listen reports."""
    from chalicelib.agents import workingset
    from chalicelib.store.records import AgentState

    hold = workingset.wait_for_change

    def announced(state: AgentState, *, hold_seconds: float) -> bool:
        print(f"LISTENING {state.agent.agent_id}", flush=True)
        return hold(state, hold_seconds=hold_seconds)

    workingset.wait_for_change = announced


def _admin_token(data_dir: Path) -> str:
    """WORKSET_ADMIN_TOKEN if set; else the token saved in the data folder; else a new one."""
    if os.environ.get("WORKSET_ADMIN_TOKEN"):
        return os.environ["WORKSET_ADMIN_TOKEN"]
    saved = data_dir / "admin-token"
    if saved.exists():
        return saved.read_text().strip()
    token = f"wsa_{secrets.token_urlsafe(32)}"
    environment.write_private(saved, token)
    return token


SEED_ATTEMPTS = 3  # the demo import's tries: a store hiccup at start passes; a lasting failure is said
SEED_BACKOFF_SECONDS = 0.5  # before the second try; doubled before each next one


def _seed_demo(account_id: str, vendor_url: str, sleep: Callable[[float], None] = time.sleep) -> None:
    """On a first start (an empty toolbox), the demo tools written by hand and the demo API's
    import, tried SEED_ATTEMPTS times; if it still fails the stack runs without it and stderr says so."""
    from chalicelib.base.clock import utcnow
    from chalicelib.base.config import settings
    from chalicelib.base.errors import WorksetError
    from chalicelib.catalog import imports, toolbox
    from chalicelib.store import queues
    from chalicelib.tools import definitions
    from local.demo import DEMO_API_VENDOR, demo_import, demo_tools

    if toolbox.page(account_id, limit=1, cursor=None).items:
        return  # the toolbox has tools already: never overwrite a person's work
    for definition in demo_tools(vendor_url):
        toolbox.publish(account_id, definitions.parse_spec(definition), published_by="demo", now=utcnow())
    queues.ensure(settings().sweep_queue)  # the import hands its search vectors to the work queue
    print(f"  Seeding the demo toolbox: importing {DEMO_API_VENDOR}'s public API (first start only; "
          "a few seconds)", flush=True)
    problem = ""
    for attempt in range(SEED_ATTEMPTS):
        if attempt:
            sleep(SEED_BACKOFF_SECONDS * 2 ** (attempt - 1))
        try:  # again it writes only what the last attempt did not (the rest is unchanged)
            report = imports.import_openapi(account_id, demo_import(vendor_url), published_by="demo", now=utcnow())
        except Exception as error:  # noqa: BLE001 - a store hiccup at start: tried again, then said, never fatal
            problem = error.message if isinstance(error, WorksetError) else f"{type(error).__name__}: {error}"
            continue
        if failed := report.failures():
            problem = f"{len(failed)} operations not written ({failed[0].reason})"
            continue
        imported = sum(1 for line in report.lines if line.outcome in (imports.PUBLISHED, imports.UNCHANGED))
        print(f"  Seeded a demo toolbox ({len(demo_tools(vendor_url))} tools written by hand and {imported} "
              f"operations of {DEMO_API_VENDOR}'s public API, all calling {vendor_url})", flush=True)
        return
    print(f"  The demo toolbox's import of {DEMO_API_VENDOR}'s public API failed {SEED_ATTEMPTS} times "
          f"({problem[:300]}): Workset runs with {len(demo_tools(vendor_url))} demo tools written by hand and "
          "without some or all of that API's operations. Import an OpenAPI document from the console, or start "
          "again on an empty data folder to seed it again.", file=sys.stderr, flush=True)


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    main()
