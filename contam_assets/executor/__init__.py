"""Runs scans, mixes and tokenizing ahead: in the step's process, in local worker processes, or on Ray."""
