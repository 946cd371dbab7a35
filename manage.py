"""Operator CLI for any deployment's tables (uses the usual AWS credentials and region).

    python manage.py create-account "Acme" [--stage prod] [--token TOKEN]
    python manage.py create-tables [--stage dev]

`--stage` picks the table prefix `workset-<stage>` (or set WORKSET_TABLE_PREFIX).
"""

from __future__ import annotations

import argparse
import os
import sys


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python manage.py", description=__doc__.split("\n\n")[0])
    parser.add_argument("--stage", default=os.environ.get("WORKSET_STAGE", "dev"))
    commands = parser.add_subparsers(dest="command", required=True)
    account = commands.add_parser("create-account", help="create an account and print its admin token")
    account.add_argument("name")
    account.add_argument("--token", help="use this admin token instead of generating one")
    commands.add_parser("create-tables", help="create any missing tables (local or test deployments)")
    args = parser.parse_args(argv)

    os.environ["WORKSET_STAGE"] = args.stage
    os.environ.setdefault("WORKSET_TABLE_PREFIX", f"workset-{args.stage}")
    from chalicelib import accounts
    from chalicelib.clock import utcnow
    from chalicelib.errors import WorksetError
    from chalicelib.store import tables

    if args.command == "create-tables":
        for name in tables.create_all():
            print(name)
        return 0
    try:
        created, token = accounts.create_account(args.name, utcnow(), token=args.token)
    except WorksetError as error:
        print(f"error: {error.message}", file=sys.stderr)
        return 1
    print(f"account      {created.account_id}")
    print(f"admin token  {token}   (shown once; only its hash is stored)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
