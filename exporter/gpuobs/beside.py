"""A call run on a thread of its own beside the caller's work, its result (or its
exception) taken when asked: where both sides are mostly numpy or C that let go of the
GIL, the second core does one while the first does the other."""

from __future__ import annotations

import threading
from typing import Any, Callable


class Beside:
    def __init__(self, call: Callable[..., Any], *args):
        self._result: Any = None
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, args=(call, args), name="gpuobs-beside")
        self._thread.start()

    def _run(self, call, args) -> None:
        try:
            self._result = call(*args)
        except BaseException as exc:  # noqa: BLE001 (raised again by the caller's thread, in result)
            self._error = exc

    def join(self) -> None:
        """The call has ended (the caller is leaving on an error of its own)."""
        self._thread.join()

    def result(self):
        """The call's result once it ends, or its exception raised here."""
        self._thread.join()
        if self._error is not None:
            raise self._error
        return self._result
