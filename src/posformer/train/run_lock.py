"""One writer per run directory: an exclusive lock that dies with its process.

Every command that writes a run directory (`train`, `qa train`, `qa eval`, `extrapolate`, `extend`) claims it
through `check_output_dir` before it looks at what the directory holds, so the check ("already holds
checkpoints") and the claim are one atomic step. The lock is `fcntl.flock` on `OUTPUT_DIR/.posformer.lock`, a
file kept open while it is held: the kernel drops it when the process ends, however it ends (a SIGKILL never
leaves a directory locked). The file records the holder's pid, host and command line, for the refusal:

    runs/x is being written by another posformer process (pid 4242, command posformer train ...); wait for it
    or choose another --output-dir

The lock file lives only while it is held: released, its holder deletes it before it lets go, so a run that
stopped leaves no lock file behind (a directory claimed until the process ends is released at exit). A process
that opened the file just before it was deleted finds, once it holds the lock, that the path no longer names
its file, and starts again on the new one.

Under torchrun only rank 0 takes the lock; the other ranks of its job share the directory. A process holds a
directory once: claiming it again (the Trainer inside a command that claimed it) does nothing. A file system
without locks (some network mounts) is used unlocked, with a warning.

    with RunDirLock("runs/x"):  # released at the end of the block, if this block took it
        ...
    claim_run_dir("runs/x")     # held until the process ends
"""

from __future__ import annotations

import atexit
import errno
import json
import os
import socket
import sys
from pathlib import Path

from posformer.train.distributed import launched_as_main
from posformer.utils.provenance import command_line
from posformer.utils.safe_write import make_dirs, open_for_update, probe_writable

try:
    import fcntl
except ImportError:  # not POSIX: no lock
    fcntl = None

LOCK_FILE = ".posformer.lock"
_held: dict[str, int] = {}  # the real path of each directory this process holds -> its lock file's descriptor


class RunDirBusy(RuntimeError):
    """Another process holds the run directory; the message names it (pid, command) and what to do."""


def _holder(fd: int) -> str:
    """The holder recorded in the lock file: 'pid N, command ...' (on another host: 'pid N on HOST, ...')."""
    try:
        record = json.loads(os.pread(fd, 65536, 0).decode("utf-8"))
        where = "" if record["host"] == socket.gethostname() else f" on {record['host']}"
        return f"pid {record['pid']}{where}, command {record['command']}"
    except (OSError, ValueError, KeyError, TypeError):  # written this instant, or by something else
        return "pid unknown"


def _open(directory: Path) -> int:
    try:
        make_dirs(directory)
        return open_for_update(directory / LOCK_FILE)  # never through a symlink, never a FIFO
    except OSError as err:
        raise ValueError(f"output dir {directory} is not writable: {err.strerror or err}") from err


def _still_named(fd: int, directory: Path) -> bool:
    """Whether the lock file's path still names the file open at `fd` (not deleted or replaced by a release)."""
    try:
        named = os.lstat(directory / LOCK_FILE)
    except FileNotFoundError:
        return False
    mine = os.fstat(fd)
    return (named.st_dev, named.st_ino) == (mine.st_dev, mine.st_ino)


def _lock(fd: int, directory: Path) -> bool:
    """Take the lock on `fd`: True when taken, False on a file system without locks; RunDirBusy when held."""
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as err:
        if err.errno not in (errno.EWOULDBLOCK, errno.EAGAIN):
            print(f"warning: cannot lock {directory / LOCK_FILE} ({err.strerror}): used unlocked", file=sys.stderr)
            return False
        raise RunDirBusy(
            f"{directory} is being written by another posformer process ({_holder(fd)}); wait for it or "
            "choose another --output-dir"
        ) from None
    record = {"pid": os.getpid(), "host": socket.gethostname(), "command": command_line()}
    os.ftruncate(fd, 0)
    os.pwrite(fd, (json.dumps(record) + "\n").encode("utf-8"), 0)
    return True


class RunDirLock:
    """The exclusive lock of one run directory, as a context: taken on entry (`RunDirBusy` when another process
    holds it), released on exit when this context took it. Nothing on ranks other than 0, nor when this
    process already holds the directory."""

    def __init__(self, directory: str | os.PathLike) -> None:
        self.directory = Path(directory)
        self.key: str | None = None

    def acquire(self) -> RunDirLock:
        """Take the lock unless this process holds it already (or is a torchrun rank other than 0)."""
        if fcntl is None or not launched_as_main():
            return self
        key = os.path.realpath(self.directory)
        if key in _held:
            return self
        while True:
            fd = _open(self.directory)
            try:
                taken = _lock(fd, self.directory)
            except RunDirBusy:
                os.close(fd)
                raise
            if not taken:
                os.close(fd)
                return self
            if _still_named(fd, self.directory):
                _held[key], self.key = fd, key
                return self
            os.close(fd)  # its holder released and deleted it after we opened it: take the new file

    def release(self) -> None:
        """Give the directory up, if this context took it; its lock file is deleted first."""
        if self.key is not None:
            _release(self.key)
            self.key = None

    def __enter__(self) -> RunDirLock:
        return self.acquire()

    def __exit__(self, *exc) -> None:
        self.release()


def _release(key: str) -> None:
    """Delete the lock file of held directory `key`, then drop the lock (closing its last descriptor)."""
    fd = _held.pop(key)
    try:
        os.unlink(Path(key) / LOCK_FILE)
    except OSError:  # the directory was removed or made read-only: the lock still ends with the descriptor
        pass
    finally:
        os.close(fd)


@atexit.register
def _release_all() -> None:
    """At exit, release the directories still held (those claimed until the process ends)."""
    for key in list(_held):
        _release(key)


def claim_run_dir(directory: str | os.PathLike) -> None:
    """Hold `directory` until this process ends (or until the `RunDirLock` that took it first exits)."""
    RunDirLock(directory).acquire()


def holds_run_dir(directory: str | os.PathLike) -> bool:
    """True when this process holds the lock of `directory`."""
    return os.path.realpath(directory) in _held


def check_output_dir(output_dir: Path) -> None:
    """Claim the output directory for this process (`run_lock`: refused by name while another process writes it)
    after checking it can be created and written; before any work, so both failures cost nothing."""
    check_writable(output_dir)
    claim_run_dir(output_dir)


def check_writable(output_dir: Path) -> None:
    """Create `output_dir` if needed and prove a file can be written in it (the probe is removed); ValueError if not."""
    try:  # the probe is a new temporary file, removed also when its write fails (a full disk)
        probe_writable(make_dirs(output_dir))
    except OSError as err:
        raise ValueError(f"output dir {output_dir} is not writable: {err.strerror or err}") from err
