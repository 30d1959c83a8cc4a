"""Whole runs: `contam detect`, the daemon, the dev script, the documented benchmark commands."""
