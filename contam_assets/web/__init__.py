"""The HTTP side: the review server and the evaluation API, and what both share."""
