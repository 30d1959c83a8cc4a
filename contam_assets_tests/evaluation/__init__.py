"""Tests of contam_assets/evaluation/."""
