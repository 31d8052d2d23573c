"""The optional provider hooks the session calls: `run_scope()` around each run, `close()` at shutdown."""

from __future__ import annotations

import contextlib

import pytest

import ort_abi


class _Scoped:
    def __init__(self) -> None:
        self.events: list[str] = []

    @contextlib.contextmanager
    def run_scope(self):
        self.events.append("enter")
        try:
            yield 7
        finally:
            self.events.append("exit")


def test_a_provider_run_scope_is_entered_and_left_also_when_the_run_fails():
    ep = _Scoped()
    assert isinstance(ep, ort_abi.RunScopedProvider)
    with ort_abi.provider_run_scope(ep) as value:
        assert value == 7 and ep.events == ["enter"]
    with pytest.raises(RuntimeError, match="run failed"), ort_abi.provider_run_scope(ep):
        raise RuntimeError("run failed")
    assert ep.events == ["enter", "exit", "enter", "exit"]


def test_a_provider_without_a_run_scope_gets_one_that_does_nothing():
    ep = object()
    assert not isinstance(ep, ort_abi.RunScopedProvider)
    with ort_abi.provider_run_scope(ep) as value:
        assert value is None


def test_close_provider_calls_close_or_shutdown():
    calls = []

    class Closable:
        def close(self):
            calls.append("close")

    class ShutsDown:
        def shutdown(self):
            calls.append("shutdown")

    for ep in (Closable(), ShutsDown(), object()):
        ort_abi.close_provider(ep)
    assert calls == ["close", "shutdown"]
