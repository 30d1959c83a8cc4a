"""The `contam` command line: messages, flags and variables."""
