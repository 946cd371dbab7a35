"""What text may hold where a model reads it and a person should see the same: `HIDDEN` are the
characters that hide or reorder text without showing themselves, `visible` drops them. Used on
what hostile sources write (an OpenAPI document's and an MCP server's descriptions and titles,
an MCP server's error text)."""

from __future__ import annotations

import re

# What hides or reorders text without showing itself: controls (but tab and line ends), bidi
# embeddings, overrides and isolates, and the invisible tag characters that spell ASCII. In a
# tool's description or title, an agent's model would read what a person reviewing the tool does not see.
HIDDEN = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069\U000e0000-\U000e007f]")


def visible(text: str) -> str:
    """`text` without HIDDEN characters: what a source's (an OpenAPI document's, an MCP server's)
    description, title or error text becomes before anyone is shown it."""
    return HIDDEN.sub("", text)
