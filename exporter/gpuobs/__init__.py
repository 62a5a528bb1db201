"""gpuobs: see what every thread block of every CUDA kernel did, from closed binaries too.

    import gpuobs
    rec = gpuobs.load("gpuobs.gpuobs")
    rec.events          # numpy structured array (zero-copy view of the file)
"""
__version__ = "0.1.0"

from .errors import RecordingError  # noqa: E402
from .reader import load  # noqa: E402

__all__ = ["load", "RecordingError", "__version__", "attach", "flush"]


def attach(**options):
    """Load the gpuobs tool into this process before CUDA starts (see gpuobs.runtime)."""
    from .runtime import attach as _attach

    return _attach(**options)


def flush():
    """Flush the tool's device buffers into the recording now."""
    from .runtime import flush as _flush

    return _flush()
