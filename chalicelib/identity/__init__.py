"""Who is calling: accounts, admin tokens, agents and their keys, and console sessions."""
