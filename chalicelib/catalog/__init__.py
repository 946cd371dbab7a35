"""The account's toolbox: publishing versions, bringing tools in from OpenAPI documents and MCP
servers (imports, upstreams), the per-account search index kept current, and what the account's own
use teaches find_tool."""
