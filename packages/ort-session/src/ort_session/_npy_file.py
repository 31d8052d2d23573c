"""`ortrun run --input NAME=FILE.npy`: read only a regular file, only as a .npy array (never pickled data).

A FIFO would block the run forever and /dev/zero would read until memory runs out, so the file is opened
non-blocking and checked with fstat on the open descriptor before a byte is read (as the node memory
statistics reader does); a file without the .npy magic is refused as such, never with numpy's advice to
set `allow_pickle` (ortrun always loads with allow_pickle=False)."""

from __future__ import annotations

import os
import stat

import numpy as np

from ._errors import InvalidInputError

NPY_MAGIC = b"\x93NUMPY"
_KINDS = ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO (named pipe)"), (stat.S_ISCHR, "a character device"),
          (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"))


def _kind(mode: int) -> str:
    return next((kind for test, kind in _KINDS if test(mode)), "not a regular file")


def load_npy_input(name: str, path: str) -> np.ndarray:
    """The array in the .npy file at `path` for input `name`, or InvalidInputError saying why not."""
    where = f"--input {name}={path!r}"
    fix = "write the array with numpy.save('x.npy', array) and pass that file"
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0))
    except (OSError, ValueError) as e:  # ValueError: a NUL byte in the path
        reason = e.strerror if isinstance(e, OSError) and e.strerror else str(e)
        raise InvalidInputError(f"{where}: cannot open the file ({reason}); {fix}") from e
    mode = os.fstat(fd).st_mode
    if not stat.S_ISREG(mode):
        os.close(fd)
        raise InvalidInputError(f"{where}: the path is {_kind(mode)}, not a regular file; {fix}")
    with os.fdopen(fd, "rb") as f:  # owns and closes fd
        try:
            head = f.read(len(NPY_MAGIC))
            if head != NPY_MAGIC:
                raise InvalidInputError(f"{where}: {path!r} is not a .npy array file (it does not start with the "
                                        f"NPY magic {NPY_MAGIC!r}); {fix}")
            f.seek(0)
            array = np.load(f, allow_pickle=False)
        except InvalidInputError:
            raise
        except (ValueError, OSError, EOFError) as e:
            text = str(e)
            why = ("it holds Python objects (pickled data), which ortrun never loads" if "pickle" in text
                   else f"it is truncated or damaged ({text[:200]})")
            raise InvalidInputError(f"{where}: {path!r} is not a readable .npy array file: {why}; {fix}") from e
    if not isinstance(array, np.ndarray):
        raise InvalidInputError(f"{where}: {path!r} is not a .npy array file; {fix}")
    return array
