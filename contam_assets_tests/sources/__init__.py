"""Tests of contam_assets/sources/."""
