"""Live metrics of a growing recording for Prometheus (follow.py)."""
