"""Tests of contam_assets/executor/."""
