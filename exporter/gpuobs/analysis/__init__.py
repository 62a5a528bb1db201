"""Stage 3, analysis of a loaded Recording: events grouped into launches, per-kernel
statistics, and occupancy plots."""
