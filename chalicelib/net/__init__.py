"""Reaching the outside: the one reading of every URL Workset accepts, host allow lists, the guarded
outbound request every vendor call, token request and webhook goes through, the MCP wire both
Workset's own endpoint and its client for upstream MCP servers speak, that client, and the webhooks
that announce an agent's changes."""
