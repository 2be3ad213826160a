"""Ctrl-C and SIGTERM during training: the step in flight finishes, a checkpoint is written, then the run stops.

SIGTERM is what Slurm and Kubernetes send before they kill a preempted job. Both signals are held until the
step in flight (its evaluation and checkpoint included) has finished; the trainer then saves a checkpoint at
that step and stops, every torchrun rank at the same step. Ctrl-C then ends the command with status 130, SIGTERM
with 143 (`TERMINATED`: 128 + 15, the status a shell reports for a process SIGTERM ended); `--resume` continues
exactly from that checkpoint. A second signal while the run is stopping (saving, say) stops it at once: the
checkpoint being written is dropped (checkpoints are written into a temporary folder renamed into place), the
previous ones stay intact. A signal during the last step lets the run finish as usual (its final checkpoint).
"""

from __future__ import annotations

import signal
import sys
import threading

from posformer.train.distributed import launched_as_main

TERMINATED = 128 + signal.SIGTERM  # 143
NAMES = {signal.SIGINT: "Ctrl-C", signal.SIGTERM: "SIGTERM"}
_DEFAULT = {signal.SIGINT: signal.default_int_handler, signal.SIGTERM: signal.SIG_DFL}


class Terminated(SystemExit):
    """The run stopped on SIGTERM; ends the program with status 143 (`TERMINATED`). `str()` says where it stopped."""

    def __init__(self, message: str) -> None:
        super().__init__(TERMINATED)
        self.message = message

    def __str__(self) -> str:
        return self.message


def stopping_exception(signum: int, message: str) -> BaseException:
    """The exception that ends the run on `signum` (SIGINT: KeyboardInterrupt, SIGTERM: `Terminated`)."""
    return KeyboardInterrupt(message) if signum == signal.SIGINT else Terminated(message)


def _say(line: str) -> None:
    """One line on stderr, from rank 0 only under torchrun (every rank gets the signal)."""
    if launched_as_main():
        print(f"\n{line}", file=sys.stderr, flush=True)


class HeldInterrupt:
    """Holds Ctrl-C (SIGINT) and SIGTERM until the step in flight has finished, so the checkpoint it triggers is
    exact: `signal` is the first one received (None before), for the trainer to act on between steps.

    A second signal of either kind stops at once, without a checkpoint. Only in the main thread and over
    Python's default handlers; a signal someone else handles (or ignores) is left to them.
    """

    def __init__(self) -> None:
        self.signal: int | None = None
        self.previous: dict[int, object] = {}

    @property
    def requested(self) -> bool:
        return self.signal is not None

    def _hold(self, signum: int, frame) -> None:
        name = NAMES[signum]
        if self.signal is not None:
            _say(f"{name} again: stopping at once (the last checkpoint stays)")
            raise stopping_exception(signum, f"{name} again: stopped at once, without a checkpoint")
        self.signal = signum
        _say(f"{name}: stopping after this step, with a checkpoint (a second Ctrl-C or SIGTERM stops at once)")

    def install(self) -> None:
        if threading.current_thread() is not threading.main_thread():
            return
        for signum, default in _DEFAULT.items():
            if signal.getsignal(signum) is default:
                self.previous[signum] = signal.signal(signum, self._hold)

    def restore(self) -> None:
        for signum, previous in self.previous.items():
            signal.signal(signum, previous)
        self.previous = {}
