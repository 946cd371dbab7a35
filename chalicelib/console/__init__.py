"""The web console under /console: server-rendered pages (Jinja2, autoescaped) over the same
domain functions the admin API calls, behind a signed session cookie and CSRF-checked forms.

Importing the page modules registers their views on the one blueprint.
"""

from chalicelib.console import (  # noqa: F401
    account,
    agents,
    approvals,
    auth,
    connections,
    consent,
    home,
    imports,
    tools,
    upstreams,
)
from chalicelib.console.common import bp

__all__ = ["bp"]
