"""The local stack: `python -m local` runs Workset on this machine.

It starts the embedded AWS emulator unless `AWS_ENDPOINT_URL` points elsewhere: moto's DynamoDB,
SQS and KMS in a process of its own (local/aws.py), with the tables restored from the data folder
(a snapshot and a write-ahead journal: local/journal.py). Then it creates any missing table, makes
sure an account and its admin token exist, seeds a demo toolbox on first start, and serves the
Chalice app on 127.0.0.1 with a request handler that answers keep-alive clients without Nagle's
delay. SIGTERM or SIGINT (Ctrl-C) stops it, with everything saved.
"""

from __future__ import annotations

import _thread
import argparse
import os
import secrets
import signal
import subprocess
import sys
import threading
from pathlib import Path

from local import environment

ROOT = Path(__file__).resolve().parent.parent
STOP_SIGNALS = {signal.SIGTERM, signal.SIGINT}


def main() -> None:
    args = _arguments()
    signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)  # before any thread: only `_interrupt_on_signal` takes them
    threading.Thread(target=_interrupt_on_signal, daemon=True).start()
    data_dir = Path(args.data).resolve()
    data_dir.mkdir(parents=True, exist_ok=True)
    environment.prepare()
    emulator = None
    if not os.environ.get("AWS_ENDPOINT_URL"):
        emulator = _start_emulator(data_dir)

    # Only now may the app and the store be imported: they read the endpoint at import.
    from chalice.config import Config
    from chalice.local import LocalChalice, LocalDevServer

    from app import app
    from chalicelib import accounts
    from chalicelib.clock import utcnow
    from chalicelib.store import tables, vault
    from local import demo, workers
    from local.http import Handler, Server

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
        _seed_demo(account_id, f"http://127.0.0.1:{vendor.server_address[1]}")

    class LocalApp(LocalChalice, app.__class__):  # type: ignore[misc]
        pass

    app.__class__ = LocalApp
    server = LocalDevServer(app, Config.create(chalice_stage="local", app_name="workset"), args.host,
                            args.port, handler_cls=Handler, server_cls=Server)
    port = server.server.server_address[1]

    stop = threading.Event()
    workers.start(stop, sweep_interval=args.sweep_interval)

    base = f"http://{args.host}:{port}"
    if not os.environ.get("WORKSET_PUBLIC_URL"):  # links in answers (approval_url, MCP URL) use the real port
        os.environ["WORKSET_PUBLIC_URL"] = base
        from chalicelib import config

        config.settings.cache_clear()
    print(f"Workset is running on {base}", flush=True)
    print(f"  Console        {base}/console   (sign in with the admin token)", flush=True)
    print(f"  MCP endpoint   {base}/mcp", flush=True)
    print(f"  Admin API      {base}/v1   (Authorization: Bearer <admin token>)", flush=True)
    print(f"  Admin token    {token}", flush=True)
    print(f"  Data           {data_dir}" + ("" if emulator else f" (state lives at {os.environ['AWS_ENDPOINT_URL']})"),
          flush=True)
    print(f"  Create an agent: curl -s -X POST {base}/v1/agents -H 'Authorization: Bearer {token}' "
          "-H 'Content-Type: application/json' -d '{\"name\": \"my-agent\"}'", flush=True)
    print(f"READY {base}", flush=True)
    try:
        server.server.serve_forever(poll_interval=0.1)
    except KeyboardInterrupt:
        pass
    finally:
        stop.set()
        vendor.shutdown()
        if emulator:
            _stop(emulator)
    # Stopped cleanly and everything is saved: skip the interpreter's teardown of a large heap
    # (seconds with a team's data, for nothing).
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


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


def _interrupt_on_signal() -> None:
    """Wait for SIGTERM (a service manager) or SIGINT (Ctrl-C), blocked in every thread so that
    only this one takes them, then interrupt the main thread once (KeyboardInterrupt), whether it
    is starting up or serving: no handler runs inside the main thread's locks, and a second
    signal changes nothing."""
    signal.sigwait(STOP_SIGNALS)
    _thread.interrupt_main()


def _announce_listens() -> None:
    """Print `LISTENING <agent id>` as each listen starts to hold: the working set it compares
    against has been read, so a change made after the line is one the listen reports."""
    from chalicelib import workingset
    from chalicelib.store.records import AgentState

    hold = workingset.wait_for_change

    def announced(state: AgentState, *, hold_seconds: float) -> bool:
        print(f"LISTENING {state.agent.agent_id}", flush=True)
        return hold(state, hold_seconds=hold_seconds)

    workingset.wait_for_change = announced


def _start_emulator(data_dir: Path) -> subprocess.Popen:
    """The embedded AWS emulator in its own process (local/aws.py), once it has restored the
    tables; its endpoint goes into AWS_ENDPOINT_URL for this process's clients."""
    child = subprocess.Popen([sys.executable, "-m", "local.aws", str(data_dir)], cwd=ROOT,
                             stdout=subprocess.PIPE, text=True)
    assert child.stdout is not None
    for line in child.stdout:
        if line.startswith("AWS "):
            os.environ["AWS_ENDPOINT_URL"] = line.split()[1]
            threading.Thread(target=child.stdout.read, daemon=True).start()  # keep the pipe drained
            return child
    raise SystemExit(f"the AWS emulator did not start (exit code {child.wait()})")


def _stop(child: subprocess.Popen) -> None:
    """Stop the emulator: it compacts its journal first."""
    child.terminate()
    try:
        child.wait(timeout=30)
    except subprocess.TimeoutExpired:
        child.kill()  # every acknowledged write is in the journal already


def _admin_token(data_dir: Path) -> str:
    """WORKSET_ADMIN_TOKEN if set; else the token saved in the data folder; else a new one."""
    if os.environ.get("WORKSET_ADMIN_TOKEN"):
        return os.environ["WORKSET_ADMIN_TOKEN"]
    saved = data_dir / "admin-token"
    if saved.exists():
        return saved.read_text().strip()
    token = f"wsa_{secrets.token_urlsafe(32)}"
    saved.write_text(token)
    saved.chmod(0o600)
    return token


def _seed_demo(account_id: str, vendor_url: str) -> None:
    from chalicelib import definitions, toolbox
    from chalicelib.clock import utcnow
    from local.demo import demo_tools

    if toolbox.page(account_id, limit=1, cursor=None).items:
        return  # the toolbox has tools already: never overwrite a person's work
    for definition in demo_tools(vendor_url):
        toolbox.publish(account_id, definitions.parse_spec(definition), published_by="demo", now=utcnow())
    print(f"  Seeded a demo toolbox ({len(demo_tools(vendor_url))} tools calling {vendor_url})", flush=True)


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    main()
