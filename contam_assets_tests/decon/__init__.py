"""Tests of contam_assets/decon/."""
