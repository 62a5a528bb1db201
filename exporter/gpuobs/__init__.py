"""gpuobs: see what every thread block of every CUDA kernel did, from closed binaries too.

Read a recording in Python:

    import gpuobs
    rec = gpuobs.load("gpuobs.gpuobs")
    rec.events          # numpy structured array (zero-copy view of the file)
"""

__version__ = "0.1.0"

from .errors import RecordingError
from .recording_file.reader import load

__all__ = ["load", "RecordingError", "__version__", "attach", "flush", "pause", "resume", "window"]


def attach(**options):
    """Load the gpuobs tool into this process before CUDA starts (see gpuobs.record.runtime)."""
    from .record.runtime import attach as _attach

    return _attach(**options)


def flush():
    """Flush the tool's device buffers into the recording now."""
    from .record.runtime import flush as _flush

    return _flush()


def pause():
    """End a recording window: kernels, graph replays included, record nothing until resume()."""
    from .record.runtime import pause as _pause

    return _pause()


def resume():
    """Start a recording window: every context's record gate opens again."""
    from .record.runtime import resume as _resume

    return _resume()


def window():
    """`with gpuobs.window(): ...` records only that region (start paused)."""
    from .record.runtime import window as _window

    return _window()
