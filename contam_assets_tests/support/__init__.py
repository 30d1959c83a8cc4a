"""Helpers the tests share (fixtures stay in conftest.py at the suite's root)."""
