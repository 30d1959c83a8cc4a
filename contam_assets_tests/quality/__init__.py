"""Tests of contam_assets/quality/."""
