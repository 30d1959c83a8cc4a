"""Tests of contam_assets/report/."""
