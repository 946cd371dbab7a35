"""An agent's working set and the rule that trims it: promote, demote, pin, the list the harness
sees, and the five-minute sweep that demotes what an agent left idle or holds over its cap."""
