"""A progress bar on stderr for commands whose work runs past ~2 s (info, stats, trim,
export): rich's, drawn only on a terminal and only once the work has taken DELAY_S,
so quick runs, pipes, logs and tests see nothing. The work reports through a callback,
`progress(what, done, total)`: what it is doing, and how far (events read) where known."""

from __future__ import annotations

import time
from typing import Optional

DELAY_S = 2.0


class WorkProgress:
    def __init__(self, console, delay_s: Optional[float] = None, clock=time.monotonic):
        self.console = console
        self.enabled = console.is_terminal
        self.delay_s, self.clock = DELAY_S if delay_s is None else delay_s, clock
        self.started = clock()
        self.bar = None
        self.task = None
        self.what = None

    def __call__(self, what: str, done: Optional[int] = None, total: Optional[int] = None) -> None:
        if not self.enabled:
            return
        if self.bar is None:
            if self.clock() - self.started < self.delay_s:
                return
            from rich.progress import (
                BarColumn,
                Progress,
                SpinnerColumn,
                TaskProgressColumn,
                TextColumn,
                TimeElapsedColumn,
            )

            self.bar = Progress(
                SpinnerColumn(),
                TextColumn("{task.description}"),
                BarColumn(),
                TaskProgressColumn(),
                TimeElapsedColumn(),
                console=self.console,
                transient=True,  # gone when the work is done: the command's own lines stay
            )
            self.bar.start()
        if what != self.what:  # a new step: a task of its own (no total: a pulsing bar)
            if self.task is not None:
                self.bar.remove_task(self.task)
            self.task, self.what = self.bar.add_task(what, total=total), what
        self.bar.update(self.task, completed=done or 0, total=total)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.stop()
            self.bar = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False
