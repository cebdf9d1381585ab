"""Files a person names (a spec, a data file) opened as regular files only, and read within a size limit.

`/dev/zero` would be read without end and a FIFO would block the open forever; a path is checked on the
descriptor that is read (no window between a check and the open), and the open itself never blocks.
"""

from __future__ import annotations

import fcntl
import os
import stat
from pathlib import Path
from typing import BinaryIO


class NotARegularFile(OSError):
    """The path is a device, a FIFO, a socket or a folder, or larger than the reader takes."""


def open_regular_file(path: Path) -> BinaryIO:
    """`path` opened for reading, refused unless it is a regular file (a symlink to one is followed)."""
    descriptor = os.open(path, os.O_RDONLY | os.O_NONBLOCK)  # a FIFO's open would otherwise wait for a writer
    try:
        mode = os.fstat(descriptor).st_mode
        if not stat.S_ISREG(mode):
            raise NotARegularFile(f"{path}: not a regular file ({_kind(mode)}); give a file's path")
        flags = fcntl.fcntl(descriptor, fcntl.F_GETFL)
        fcntl.fcntl(descriptor, fcntl.F_SETFL, flags & ~os.O_NONBLOCK)
        return os.fdopen(descriptor, "rb")
    except BaseException:
        os.close(descriptor)
        raise


def read_regular_file(path: Path, limit_bytes: int) -> bytes:
    """The bytes of the regular file `path`, refused naming the limit if it holds more than `limit_bytes`."""
    with open_regular_file(path) as handle:
        data = handle.read(limit_bytes + 1)  # a file that grows while it is read is still bounded
    if len(data) > limit_bytes:
        raise NotARegularFile(f"{path}: larger than {limit_bytes:,} bytes, the most this reads")
    return data


def _kind(mode: int) -> str:
    for test, name in ((stat.S_ISDIR, "a folder"), (stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a character device"),
                       (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket")):
        if test(mode):
            return name
    return "not a plain file"
