"""Workset as its own OAuth 2.1 authorization server, so chat products connect to `/mcp` by URL
(MCP authorization, revision 2026-07-28: modelcontextprotocol.io/specification/2026-07-28/basic/
authorization).

- Discovery: protected resource metadata (RFC 9728) names this server; its metadata (RFC 8414)
  names the endpoints. The issuer is the public URL (with a trailing slash when it has no path, so
  that it reads the same however a client normalises it), and the authorization response carries
  it as `iss` (RFC 9207).
- Clients register themselves (RFC 7591); until a person consents to one, it expires in a day.
- A person consents in the console (`console/consent.py`): to an existing agent or a new one. The
  code is single-use, lives five minutes, and is bound to the client, the redirect URI, the PKCE
  S256 challenge (the only method) and the resource, which must be this `/mcp` (RFC 8707).
- Tokens: an access token `wst_<agent>_<secret>` lives an hour; a refresh token
  `wsr_<agent>_<secret>` lives 30 days from its last use and is rotated on every use. Presenting a
  refresh token already rotated away (a replay: one of the two copies leaked), or a code already
  redeemed, revokes the grant. Only hashes are stored, in the agent's partition, so the Query that
  authenticates an agent key checks an access token too (`accounts.authenticate_agent`).
- Revocation (RFC 7009) at `/oauth/revoke`, and by a person on the agent's page.

The package: `discovery` (the metadata documents), `clients` (registration and client
authentication), `limits` (how many clients may register, per source address and in all),
`authorization` (the request a person consents to, and the code), `tokens` (the token endpoint,
revocation, and a person's view of the grants).
"""

from __future__ import annotations


class OAuthError(Exception):
    """An error the OAuth endpoints answer as `{"error", "error_description"}` (RFC 6749 5.2);
    `retry_after` (seconds) for a quota's refusal."""

    def __init__(self, error: str, description: str, *, status: int = 400, retry_after: int | None = None) -> None:
        super().__init__(description)
        self.error = error
        self.description = description
        self.status = status
        self.retry_after = retry_after

    def to_dict(self) -> dict[str, str]:
        """The JSON body."""
        return {"error": self.error, "error_description": self.description}
