"""Ctrl-C during training: the step in flight finishes, a checkpoint is written, then the run stops."""

from __future__ import annotations

import signal
import sys
import threading


class HeldInterrupt:
    """Holds Ctrl-C (SIGINT) until the step in flight has finished, so the checkpoint it triggers is exact.

    A second Ctrl-C stops at once, without a checkpoint. Only in the main thread and
    over Python's default handler; elsewhere Ctrl-C stops at once (the last checkpoint stays).
    """

    def __init__(self) -> None:
        self.requested, self.previous = False, None

    def _hold(self, signum: int, frame) -> None:
        if self.requested:
            raise KeyboardInterrupt
        self.requested = True
        print(
            "\nCtrl-C: stopping after this step, with a checkpoint (press again to stop at once)",
            file=sys.stderr,
            flush=True,
        )

    def install(self) -> None:
        if (
            threading.current_thread() is threading.main_thread()
            and signal.getsignal(signal.SIGINT) is signal.default_int_handler
        ):
            self.previous = signal.signal(signal.SIGINT, self._hold)

    def restore(self) -> None:
        if self.previous is not None:
            signal.signal(signal.SIGINT, self.previous)
            self.previous = None
