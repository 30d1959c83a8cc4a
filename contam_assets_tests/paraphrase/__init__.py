"""Tests of contam_assets/paraphrase/."""
