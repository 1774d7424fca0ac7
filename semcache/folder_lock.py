"""One process at a time on an embedded data folder.

Two servers writing one SQLite file and each keeping its own FAISS index would diverge without a
word, so ``semcache serve`` on the embedded store holds an exclusive ``flock`` on a file in the
folder for as long as it runs. The kernel drops the lock when the process ends, however it ends
(``kill -9`` included), so a lock left by a dead process never blocks a restart. The file also
records who holds it, for the message that refuses a second server.
"""

from __future__ import annotations

import fcntl
import os
import socket
import time
from pathlib import Path

LOCK_FILE = "semcache.lock"
# The holder writes its pid right after it takes the lock: a reader that comes in between waits this long.
_HOLDER_WRITE_WAIT_S = 1.0


class DataFolderInUse(Exception):
    """Another process holds the data folder."""

    def __init__(self, folder: Path, holder: str) -> None:
        super().__init__(
            f"the data folder {folder} is in use by another semcache ({holder}): stop it, or give this one "
            "another --data-dir (replicas that share one cache use --store redis)"
        )
        self.folder = folder
        self.holder = holder


class DataFolderLock:
    """The held lock on ``folder``; ``release`` (or the end of the process) lets it go."""

    def __init__(self, folder: Path, fd: int) -> None:
        self.folder = folder
        self._fd: int | None = fd

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)  # closing the file drops its flock
            self._fd = None

    def __enter__(self) -> DataFolderLock:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.release()


def lock_data_folder(folder: Path) -> DataFolderLock:
    """Take the folder (creating it) for this process, or raise ``DataFolderInUse`` naming the
    process that has it. ``OSError`` when the folder cannot be created or written."""
    folder = folder.absolute()
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / LOCK_FILE
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)  # not inherited by child processes
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        raise DataFolderInUse(folder, _holder(path)) from None
    except BaseException:
        os.close(fd)
        raise
    os.ftruncate(fd, 0)
    os.write(fd, f"pid {os.getpid()} on {socket.gethostname()}\n".encode())
    return DataFolderLock(folder, fd)


def _holder(path: Path) -> str:
    """Who holds the lock, as its holder wrote it: its pid and its host (a container's name)."""
    deadline = time.monotonic() + _HOLDER_WRITE_WAIT_S
    while True:
        try:
            holder = path.read_text(encoding="utf-8", errors="replace").strip()
        except OSError:
            holder = ""
        if holder or time.monotonic() >= deadline:
            return holder or "pid unknown"
        time.sleep(0.05)
