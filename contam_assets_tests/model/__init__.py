"""Tests of contam_assets/model/."""
