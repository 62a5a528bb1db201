"""Stage 4, export: recordings (and host traces) written as one Perfetto trace."""
