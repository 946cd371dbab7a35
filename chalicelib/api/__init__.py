"""The admin API under /v1: JSON in and out, one admin bearer token per account.

Importing the route modules registers their views on the one blueprint.
"""

from chalicelib.api import account, agents, connections, imports, policies, runs, sweep, tools  # noqa: F401
from chalicelib.api.common import bp

__all__ = ["bp"]
