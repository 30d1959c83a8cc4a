"""Tests of contam_assets/detector/."""
