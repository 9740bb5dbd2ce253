"""Stand-in for harbor.environments (see the harbor package's doc)."""
