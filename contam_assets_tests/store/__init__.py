"""Tests of contam_assets/store/."""
