"""Tests of contam_assets/rescan/."""
