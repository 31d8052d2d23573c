"""`ort_abi.testing.require_bridge`: a missing bridge skips tests only where no compiler could have built it."""

import pytest

import ort_abi.testing as t


def test_a_missing_bridge_is_unavailable_only_without_a_compiler(monkeypatch):
    monkeypatch.setattr(t, "c_available", lambda: False)
    monkeypatch.setattr(t, "c_compiler", lambda: None)
    with pytest.raises(t.BridgeUnavailable, match="no C compiler"):
        t.require_bridge()
    monkeypatch.setattr(t, "c_compiler", lambda: "/usr/bin/cc")
    with pytest.raises(AssertionError, match="not built although a C compiler is on PATH"):
        t.require_bridge()
    monkeypatch.setattr(t, "c_available", lambda: True)
    t.require_bridge()
