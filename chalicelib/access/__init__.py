"""A vendor's credentials: connections (typed once, stored encrypted, never shown again), the kinds
of credential, OAuth tokens from vendors' token endpoints and their refresh, and what a call carries
from its connection."""
