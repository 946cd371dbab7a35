"""Workset's Chalice app: wiring only. The routes live in blueprints under chalicelib/."""

from chalice import Chalice

from chalicelib.api import bp as admin_api
from chalicelib.mcp.routes import bp as mcp_endpoint

app = Chalice(app_name="workset")
app.register_blueprint(mcp_endpoint)
app.register_blueprint(admin_api)
