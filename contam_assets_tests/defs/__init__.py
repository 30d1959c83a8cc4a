"""The Dagster graph: definitions, sensors, automation, the code location."""
