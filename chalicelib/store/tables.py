"""Creating the tables (local stack, tests, the account CLI) from the models' own definitions."""

from __future__ import annotations

from chalicelib.store.models import TABLES


def create_all() -> list[str]:
    """Create every table that does not exist yet; answer the names of all of them."""
    names = []
    for model in TABLES:
        if not model.exists():
            model.create_table(wait=True, billing_mode="PAY_PER_REQUEST")
        names.append(model.Meta.table_name)
    return names
