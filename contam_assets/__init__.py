"""contam-assets: measure and remove benchmark contamination."""

__version__ = "0.1.0"
