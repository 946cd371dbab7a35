"""The embedded AWS emulator as a process of its own: `python -m local.aws DATA_DIR [PARENT_PID]`
(the local stack starts it; nobody needs to).

moto serves DynamoDB, SQS and KMS here, patched to behave as DynamoDB does (local/emulator.py),
with the tables kept durable in DATA_DIR (local/journal.py: a snapshot and a write-ahead journal)
and the KMS keys beside them (local/keys.py). Its own process is its own interpreter lock: under
many clients, moto's work (most of the stack's, by py-spy) runs on one core while the app runs
on the other.

It prints `AWS <endpoint>` once the tables are restored, then serves until SIGTERM, SIGINT or
SIGHUP, closes the journal and exits. The stop signals are blocked in every thread and taken by
the main loop (`sigtimedwait`), never by a handler: a handler interrupts whatever the main thread
holds, and two signals together once deadlocked one inside `Event.set`. It closes the journal
inside the lock every write takes and exits still holding it: a write that came later would be
answered without being journaled, and the app could acknowledge a write that a restart loses.
It dies with the process that started it (PARENT_PID: a `kill -9` of the stack must not leave it
holding the data folder), and a second one on the same folder waits for the first to finish (a
lock file).
"""

from __future__ import annotations

import ctypes
import fcntl
import logging
import os
import signal
import sys
from pathlib import Path
from typing import Any

from local.environment import private_folder

PR_SET_PDEATHSIG = 1  # linux/prctl.h
LOCK_FILE = "emulator.lock"
STOP_SIGNALS = {signal.SIGTERM, signal.SIGINT, signal.SIGHUP}


def main() -> None:
    data_dir = Path(sys.argv[1]).resolve()
    private_folder(data_dir)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, STOP_SIGNALS)  # the local stack's mask is inherited across exec
    signal.signal(signal.SIGINT, signal.SIG_DFL)  # while unblocked, SIGINT ends it as SIGTERM does (no traceback)
    _die_with_parent(int(sys.argv[2]) if len(sys.argv) > 2 else os.getppid())
    with (data_dir / LOCK_FILE).open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # an emulator still compacting this folder finishes first
        # blocked only now, so a signal still stops one waiting for the lock at once; and before
        # any thread, so each thread inherits the mask and the main loop alone takes them
        signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)
        serve(data_dir)


def serve(data_dir: Path) -> None:
    """Start moto on a free port, restore the tables, say where it is, serve until told to stop."""
    from moto.server import ThreadedMotoServer

    from local import emulator, environment

    environment.prepare()
    emulator.patch()
    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()  # its threads inherit the blocked signals
    host, port = server.get_host_and_port()
    os.environ["AWS_ENDPOINT_URL"] = f"http://{host}:{port}"

    from chalicelib.store import tables, vault  # they read the endpoint at import
    from local.journal import COMPACT_SECONDS, Journal
    from local.keys import KmsKeys

    # Restoring (seconds with a team's data) may end at any point, as after kill -9: the snapshot
    # and the key file are replaced whole, and the journals they fold in go only after. So a stop
    # signal ends it at once (their default action) instead of waiting for the restore to finish.
    signal.pthread_sigmask(signal.SIG_UNBLOCK, STOP_SIGNALS)
    tables.create_all()
    vault.ensure_key()
    journal = Journal(data_dir, _dynamodb_backend())
    journal.restore()
    keys = KmsKeys(data_dir / "kms-keys.json", os.environ["AWS_DEFAULT_REGION"])
    keys.restore()
    keys.save()
    signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)  # from here, the loop below takes them

    print(f"AWS {os.environ['AWS_ENDPOINT_URL']}", flush=True)
    while signal.sigtimedwait(STOP_SIGNALS, COMPACT_SECONDS) is None:
        if journal.due():
            try:
                journal.compact()
            except Exception as error:  # noqa: BLE001 - keep serving: the journal still holds every write
                print(f"compacting the journal failed: {error.__class__.__name__}: {error}", file=sys.stderr,
                      flush=True)
    with emulator.locked():  # held until the exit: no write is answered after the journal closes
        journal.close()
        sys.stdout.flush()
        os._exit(0)  # the interpreter's teardown of the tables would take seconds


def _die_with_parent(parent: int) -> None:
    """Ask Linux to send this process SIGTERM when `parent`, the process that started it, ends."""
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
    if os.getppid() != parent:  # it ended before the request was made (this one was adopted already)
        os.kill(os.getpid(), signal.SIGTERM)


def _dynamodb_backend() -> Any:
    """moto's DynamoDB for this stack's account and region, in this process."""
    from moto.core import DEFAULT_ACCOUNT_ID
    from moto.dynamodb.models import dynamodb_backends

    return dynamodb_backends[DEFAULT_ACCOUNT_ID][os.environ["AWS_DEFAULT_REGION"]]


if __name__ == "__main__":
    main()
