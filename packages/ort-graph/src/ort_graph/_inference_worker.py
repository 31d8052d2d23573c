"""The forked process `_inference_guard.isolated` runs ONNX's shape inference in, kept for the next model.

Forking per model cost 25-70 ms (the fork, then copy-on-write of the parent's pages the child touches), and a bulk
caller (the conformance profile: 1,900 sessions) pays it every time. So the child stays: it reads a serialized
ModelProto (8-byte length, then the bytes) from one pipe, computes, and writes the reply (8-byte length, then
b"\\0" + marshal of the result, or b"\\1" + the exception's type name, NUL, message) to the other. A child that
died (a signal, the address-space limit) is reaped and replaced on the next call; one left over from before a fork
of the parent (another pid) is not used by the new process. The child ends when the parent's pipe closes.
"""

from __future__ import annotations

import faulthandler
import gc
import marshal
import os
import signal
import warnings
from collections.abc import Callable
from typing import Any

from onnx import ModelProto

__all__ = ["Worker", "WorkerDied"]

_LENGTH = 8


class WorkerDied(Exception):
    """The worker ended before replying: `how` says with which signal or exit status."""

    def __init__(self, how: str) -> None:
        super().__init__(how)
        self.how = how


def _read(fd: int, n: int) -> bytes | None:
    chunks, left = [], n
    while left:
        chunk = os.read(fd, min(left, 1 << 20))
        if not chunk:
            return None
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def _write(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


class Worker:
    """One forked child computing `infer(proto)` per request (`call`), for the process that forked it."""

    def __init__(self, infer: Callable[[ModelProto], Any], prepare: Callable[[], None]) -> None:
        self.infer, self.owner = infer, os.getpid()
        to_child, self._in = os.pipe()  # parent writes _in; the child reads to_child
        self._out, from_parent = os.pipe()  # the child writes from_parent; parent reads _out
        with warnings.catch_warnings():
            # Python 3.12+ warns on fork in a process with threads (OpenMP's, a server's): the child runs no
            # Python thread, takes no lock of theirs, and leaves with os._exit
            warnings.simplefilter("ignore", DeprecationWarning)
            self.pid = os.fork()
        if self.pid == 0:
            try:
                os.close(self._in)
                os.close(self._out)
                self._serve(to_child, from_parent, prepare)
            finally:
                os._exit(0)
        os.close(to_child)
        os.close(from_parent)

    def _serve(self, rfd: int, wfd: int, prepare: Callable[[], None]) -> None:
        gc.disable()  # a collection would touch every object: each page copied from the parent's
        faulthandler.disable()  # a crash here is the parent's to report, not a traceback dump of the parent's
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's; the child ends with its pipe
        prepare()
        while (head := _read(rfd, _LENGTH)) is not None:
            data = _read(rfd, int.from_bytes(head, "little"))
            if data is None:
                return
            try:
                proto = ModelProto()
                proto.ParseFromString(data)
                reply = b"\0" + marshal.dumps(self.infer(proto))
            except Exception as e:  # noqa: BLE001 - the parent raises it
                reply = b"\1" + f"{type(e).__name__}\0{e}".encode("utf-8", "replace")
            _write(wfd, len(reply).to_bytes(_LENGTH, "little") + reply)

    def call(self, proto: ModelProto) -> bytes:
        """The child's reply to `proto`; WorkerDied (the child reaped) when it ended instead."""
        data = proto.SerializeToString()
        try:
            _write(self._in, len(data).to_bytes(_LENGTH, "little") + data)
            head = _read(self._out, _LENGTH)
            reply = None if head is None else _read(self._out, int.from_bytes(head, "little"))
        except BrokenPipeError:
            reply = None
        if reply is None:
            raise WorkerDied(self.close())
        return reply

    def close(self) -> str:
        """End the child (closing its pipe) and reap it; how it ended."""
        for fd in (self._in, self._out):
            try:
                os.close(fd)
            except OSError:
                pass
        _, status = os.waitpid(self.pid, 0)
        if os.WIFSIGNALED(status):
            return signal.Signals(os.WTERMSIG(status)).name
        return f"exit {os.WEXITSTATUS(status)}"
