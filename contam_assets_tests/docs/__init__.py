"""README.md and docs/ as a reader meets them, and the layout's rules."""
