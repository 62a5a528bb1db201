"""Host-side traces of a separate, uninstrumented run of the same program, read
so that they sit beside gpuobs's device tracks in one Perfetto trace."""
