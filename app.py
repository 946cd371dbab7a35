"""Workset's Chalice app: wiring only. Routes live in blueprints under chalicelib/; the sweep is
the scheduled function."""

from chalice import Chalice, Rate

from chalicelib import sweep
from chalicelib.api import bp as admin_api
from chalicelib.clock import utcnow
from chalicelib.mcp.routes import bp as mcp_endpoint

app = Chalice(app_name="workset")
app.register_blueprint(mcp_endpoint)
app.register_blueprint(admin_api)


@app.schedule(Rate(5, unit=Rate.MINUTES), name="sweep")
def scheduled_sweep(event: object) -> None:
    """The rule, every five minutes."""
    sweep.run(utcnow())
