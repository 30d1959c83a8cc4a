"""Tests of contam_assets/web/."""
