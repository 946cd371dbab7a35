"""Operator CLI for any deployment's tables (uses the usual AWS credentials and region).

    python manage.py create-account "Acme" [--stage prod] [--token-file PATH | --print-token]
    python manage.py create-tables [--stage dev]

`--stage` picks the table prefix `workset-<stage>` (or set WORKSET_TABLE_PREFIX).

The admin token never goes to stdout (CI logs keep stdout): it is written to a new file readable by
its owner only (0600; `--token-file`, by default ./workset-<stage>-admin-token), unless
`--print-token` asks for it on stdout. A chosen token is read from a file (`--token-from`), never
from the command line, where the process list and the shell's history would keep it.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path


def write_secret(path: Path, secret: str) -> None:
    """Write `secret` to a new file only its owner can read; an existing file is left alone."""
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(descriptor, "w") as file:
        file.write(secret + "\n")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python manage.py", description=__doc__.split("\n\n")[0])
    parser.add_argument("--stage", default=os.environ.get("WORKSET_STAGE", "dev"))
    commands = parser.add_subparsers(dest="command", required=True)
    account = commands.add_parser("create-account", help="create an account; its admin token goes to a 0600 file")
    account.add_argument("name")
    account.add_argument("--token-from", type=Path, help="use the admin token this file holds instead of a new one")
    shown = account.add_mutually_exclusive_group()
    shown.add_argument("--token-file", type=Path, help="where to write the admin token (a new file, mode 0600)")
    shown.add_argument("--print-token", action="store_true", help="print the admin token on stdout instead")
    commands.add_parser("create-tables", help="create any missing tables (local or test deployments)")
    args = parser.parse_args(argv)

    os.environ["WORKSET_STAGE"] = args.stage
    os.environ.setdefault("WORKSET_TABLE_PREFIX", f"workset-{args.stage}")
    from chalicelib.base.clock import utcnow
    from chalicelib.base.errors import WorksetError
    from chalicelib.identity import accounts
    from chalicelib.store import tables

    if args.command == "create-tables":
        for name in tables.create_all():
            print(name)
        return 0
    token_file = args.token_file or Path(f"workset-{args.stage}-admin-token")
    if not args.print_token and token_file.exists():
        print(f"error: {token_file} exists: give another --token-file (it is never overwritten)", file=sys.stderr)
        return 1
    chosen = args.token_from.read_text().strip() if args.token_from else None
    try:
        created, token = accounts.create_account(args.name, utcnow(), token=chosen)
    except WorksetError as error:
        print(f"error: {error.message}", file=sys.stderr)
        return 1
    print(f"account      {created.account_id}")
    if args.print_token:
        print(f"admin token  {token}   (shown once; only its hash is stored)")
    else:
        write_secret(token_file, token)
        print(f"admin token  written to {token_file} (mode 0600; shown nowhere else, only its hash is stored)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
