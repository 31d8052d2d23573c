"""The transfer surface's stream model: copies on their own stream, events between streams, and an
ordering guard over device regions (003's transfer surface, for streamed weights).

A device runs work in issue order per `Stream`; work on two streams is unordered unless one stream
waits on an `Event` recorded on the other. `OrderGuard` checks, for named device regions (the
streaming slots), the two rules a double-buffered copy must keep:

- a kernel never reads a region whose last copy is not ordered before it (its stream waited on the
  copy's event, or the copy ran on the kernel's stream);
- a copy never overwrites a region while a kernel that read it is not ordered before the copy.

The ordering is checked by happens-before (per-stream sequence numbers and the events each stream has
waited on), not by wall-clock time, so an order that is only right by luck on a given device is still
refused. The devices' own copies are issued through their `DeviceTransfers` (`_transfers.py`); the
simulated GPU and the emulating CUDA driver also check the order on their side, by address range.
"""

from __future__ import annotations

import itertools
from typing import Any

import attrs
import numpy as np

from ._buffers import DeviceBuffer, copy_host_to_device
from ._errors import TransferError

__all__ = ["Event", "OrderGuard", "Stream", "StreamOrderError", "copy_host_to_device_async"]


class StreamOrderError(TransferError):
    """Work on two streams touched a device region without an event ordering them."""


@attrs.frozen
class Event:
    """A point in a stream's work: everything issued on `stream` before it (sequence <= `seq`)."""

    stream: str
    seq: int
    handle: Any = attrs.field(default=None, eq=False, repr=False)  # the device's event (CUDA: a CUevent)


@attrs.define(eq=False)
class Stream:
    """An in-order queue of device work; `waited` holds, per other stream, the last sequence it waited for."""

    name: str
    handle: Any = None  # the device's stream (CUDA: a CUstream; 0 is the legacy stream the kernels run on)
    _counter: itertools.count = attrs.field(factory=lambda: itertools.count(1), alias="counter")
    waited: dict[str, int] = attrs.field(factory=dict)
    last: int = 0

    def issue(self) -> Event:
        """One piece of work issued on this stream; its event."""
        self.last = next(self._counter)
        return Event(self.name, self.last)

    def record(self) -> Event:
        """An event after everything issued so far on this stream."""
        return Event(self.name, self.last)

    def wait(self, event: Event) -> None:
        """Work issued on this stream from now on runs after `event` completes."""
        if event.stream != self.name:
            self.waited[event.stream] = max(self.waited.get(event.stream, 0), event.seq)

    def ordered_after(self, event: Event) -> bool:
        """Whether work issued now on this stream is ordered after `event`."""
        if event.stream == self.name:
            return event.seq <= self.last
        return self.waited.get(event.stream, 0) >= event.seq


@attrs.define(eq=False)
class OrderGuard:
    """Last write and reads since, per named region; each access is checked against the two rules."""

    writes: dict[str, tuple[Event, str]] = attrs.field(factory=dict)
    reads: dict[str, list[tuple[Event, str]]] = attrs.field(factory=dict)

    def read(self, region: str, stream: Stream, reader: str) -> None:
        write = self.writes.get(region)
        if write is not None and not stream.ordered_after(write[0]):
            raise StreamOrderError(
                f"{reader!r} on stream {stream.name!r} reads {region!r} while its copy ({write[1]}) on stream "
                f"{write[0].stream!r} is not known to have completed: the reading stream must wait on the copy's "
                "event first")
        self.reads.setdefault(region, []).append((stream.issue(), reader))

    def write(self, region: str, stream: Stream, writer: str) -> Event:
        for event, reader in self.reads.get(region, ()):
            if not stream.ordered_after(event):
                raise StreamOrderError(
                    f"{writer} on stream {stream.name!r} overwrites {region!r} while {reader!r} (stream "
                    f"{event.stream!r}) may still read it: the copy stream must wait on an event recorded after "
                    "the last kernel that reads the region")
        event = stream.issue()
        self.writes[region] = (event, writer)
        self.reads[region] = []
        return event


def copy_host_to_device_async(src: np.ndarray, dst: DeviceBuffer, stream: Stream, guard: OrderGuard, region: str,
                              what: str, transfers: Any = None) -> Event:
    """Issue a host-to-device copy of `src` into `dst` (inside `region`) on `stream`, checked by `guard`;
    returns the copy's place in the stream (`Event`). With `transfers` (a device's `DeviceTransfers`) the
    copy is the device's asynchronous one on `stream` (a reader waits on `transfers.record(stream)`);
    without, it is done at once."""
    event = guard.write(region, stream, what)
    if transfers is None:
        copy_host_to_device(src, dst)
    else:
        transfers.copy_async(src, dst, stream)
    return event
