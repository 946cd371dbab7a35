"""What one tool is: the definition an admin, an agent or a sync publishes and the checks it passes,
the guard (read-only and destructive hints) Workset holds each version to, and the readable names of
imported tools."""
