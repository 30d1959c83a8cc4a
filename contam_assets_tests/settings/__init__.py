"""contam_assets/settings.py: every setting once, one precedence rule."""
