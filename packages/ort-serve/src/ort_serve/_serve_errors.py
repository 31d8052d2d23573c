"""ort-serve's errors for the engine and `ortrun serve`: each names the limit or option and how to fix it."""

from __future__ import annotations

from ort_session import SessionError


class ServeError(SessionError):
    """The model or the serving options cannot be served (at initialization: nothing is started)."""


class AdmissionError(ServeError):
    """A request the scheduler does not admit: `status` is the HTTP answer (429: the queue is full, try again
    later; 503: not servable with this server's limits, e.g. a prompt longer than the context), `limit` the
    limit's name (`max_queue`, `ctx_size`), `value` the limit."""

    def __init__(self, message: str, status: int, limit: str, value: int) -> None:
        super().__init__(message)
        self.status, self.limit, self.value = status, limit, value
