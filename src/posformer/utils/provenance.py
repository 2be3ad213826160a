"""What made a result: the command line of this process and the source commit of the posformer that ran it."""

from __future__ import annotations

import shlex
import subprocess
import sys
from pathlib import Path

_command: list[str] = []  # the arguments of the `posformer` command running in this process, once `main` has them


def invoked(argv: list[str]) -> None:
    """Record that this process runs `posformer ARGV` (called by the program's `main`, which may run in-process)."""
    _command[:] = ["posformer", *argv]


def command_line() -> str:
    """The command this process runs: the `posformer ...` that `main` was given, else this process's command line
    (`posformer ...` for the program however it was started)."""
    if _command:
        return shlex.join(_command)
    name = Path(sys.argv[0]).name if sys.argv and sys.argv[0] else "python"
    if name in ("posformer", "__main__.py"):
        name = "posformer"
    return shlex.join([name, *sys.argv[1:]])


def source_commit() -> str:
    """The git commit of the posformer source that is running ('abc1234', '+changes' when its src/ differs from
    that commit), or 'unknown' outside a git checkout."""
    source = Path(__file__).resolve().parents[1]

    def git(*args: str) -> str:
        done = subprocess.run(["git", "-C", str(source), *args], capture_output=True, text=True, timeout=30)
        if done.returncode != 0:
            raise OSError(done.stderr.strip())
        return done.stdout.strip()

    try:
        commit = git("rev-parse", "--short", "HEAD")
        changed = git("status", "--porcelain", "--", ".")
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return commit + ("+changes" if changed else "")


def provenance() -> dict[str, str]:
    """{"command": ..., "commit": ...}: what a results file records of how it was made."""
    return {"command": command_line(), "commit": source_commit()}
