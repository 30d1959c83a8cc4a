"""Tests of contam_assets/estimate/."""
