"""Intra-op threads: the count kernels read, BLAS limited to it inside a scope and restored after, and how
the physical cores are counted."""

from __future__ import annotations

import threading

import numpy as np
import pytest
import threadpoolctl

import ort_cpu_ep
from ort_cpu_ep import _threads
from ort_graph import Graph


def blas_threads() -> int:
    libs = threadpoolctl.threadpool_info()
    blas = [lib for lib in libs if lib["user_api"] == "blas"]
    if not blas:
        pytest.skip(f"threadpoolctl finds no BLAS library in this numpy ({libs!r})")
    return blas[0]["num_threads"]


@pytest.fixture
def blas_at_3():
    """BLAS at 3 threads (a count no scope below asks for), so that restoring is observable."""
    blas_threads()
    with threadpoolctl.threadpool_limits(3, user_api="blas"):
        yield 3


@pytest.mark.parametrize("value", [-1, ort_cpu_ep.MAX_THREADS + 1, 1.0, "2", True, None])
def test_a_thread_count_that_is_not_an_int_in_range_is_refused_naming_the_option(value):
    with pytest.raises(ort_cpu_ep.ThreadCountError, match=r"intra_op_num_threads=.*expected an int from 0 to 1024"):
        ort_cpu_ep.intra_op_thread_scope(value).__enter__()
    with pytest.raises(ValueError, match="intra_op_num_threads"):
        ort_cpu_ep.CpuExecutionProvider(Graph(), {"": 17}, intra_op_num_threads=value)
    assert issubclass(ort_cpu_ep.ThreadCountError, ort_cpu_ep.CpuEpError)
    assert issubclass(ort_cpu_ep.CpuOpError, ort_cpu_ep.CpuEpError)


@pytest.mark.parametrize("requested", [1, 2, 5])
def test_inside_a_scope_kernels_and_blas_see_the_requested_threads_and_both_are_restored(blas_at_3, requested):
    outside = ort_cpu_ep.intra_op_threads()
    with ort_cpu_ep.intra_op_thread_scope(np.int64(requested)) as n:
        assert n == requested and ort_cpu_ep.intra_op_threads() == requested and blas_threads() == requested
    assert blas_threads() == blas_at_3 and ort_cpu_ep.intra_op_threads() == outside


def test_zero_means_the_physical_cores(blas_at_3):
    with ort_cpu_ep.intra_op_thread_scope(0) as n:
        assert n == ort_cpu_ep.physical_cores() and blas_threads() == n
    assert blas_threads() == blas_at_3
    assert ort_cpu_ep.intra_op_threads() == ort_cpu_ep.physical_cores()  # the default outside any scope


def test_a_failing_body_restores_the_limits(blas_at_3):
    with pytest.raises(RuntimeError, match="kernel failed"), ort_cpu_ep.intra_op_thread_scope(1):
        raise RuntimeError("kernel failed")
    assert blas_threads() == blas_at_3 and ort_cpu_ep.intra_op_threads() == ort_cpu_ep.physical_cores()


def test_nested_scopes_restore_the_outer_one(blas_at_3):
    with ort_cpu_ep.intra_op_thread_scope(1):
        with ort_cpu_ep.intra_op_thread_scope(2):
            assert blas_threads() == 2 and ort_cpu_ep.intra_op_threads() == 2
        assert blas_threads() == 1 and ort_cpu_ep.intra_op_threads() == 1
    assert blas_threads() == blas_at_3


class _FakeBlas:
    """Stands in for a BLAS library's controller: records the thread counts set (it starts at 3)."""

    def __init__(self) -> None:
        self.calls: list[object] = []
        self.threads = 3

    def get_num_threads(self) -> int:
        return self.threads

    def set_num_threads(self, n: int) -> None:
        self.calls.append(n)
        self.threads = n


def test_overlapping_scopes_in_two_threads_restore_the_original_limits_when_the_last_one_ends(monkeypatch):
    """Thread A opens 1, thread B opens 2, A closes first: BLAS stays at B's 2, and the original limits come
    back when B closes (a save/restore per scope would leave A's saved 2 or 1 behind). Each thread reads its
    own intra_op_threads(). (The limits are checked on a stand-in: OpenBLAS ignores a limit set from a
    thread other than the main one once the main thread has set one.)"""
    fake = _FakeBlas()
    monkeypatch.setattr(_threads, "_BLAS", _threads._BlasLimits())
    monkeypatch.setattr(_threads._BLAS, "_controller", [fake])
    a_open, b_open, a_closed = threading.Event(), threading.Event(), threading.Event()
    seen: dict[str, object] = {}

    def a():
        with ort_cpu_ep.intra_op_thread_scope(1):
            a_open.set()
            b_open.wait(10)
            seen["a"] = ort_cpu_ep.intra_op_threads()
        a_closed.set()

    def b():
        a_open.wait(10)
        with ort_cpu_ep.intra_op_thread_scope(2):
            b_open.set()
            a_closed.wait(10)
            seen["b"] = (ort_cpu_ep.intra_op_threads(), list(fake.calls))

    threads = [threading.Thread(target=a), threading.Thread(target=b)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(20)
    assert seen == {"a": 1, "b": (2, [1, 2])}  # A's exit leaves B's 2 (already set: not set again)
    assert fake.calls == [1, 2, 3]  # the original 3 back when B closes


def test_a_library_already_at_the_count_is_not_called_and_a_limit_changed_between_scopes_is_restored(monkeypatch):
    fake = _FakeBlas()
    monkeypatch.setattr(_threads, "_BLAS", _threads._BlasLimits())
    monkeypatch.setattr(_threads._BLAS, "_controller", [fake])
    for _ in range(3):
        with ort_cpu_ep.intra_op_thread_scope(3):
            assert fake.threads == 3
    assert fake.calls == []  # at 3 already: no call per scope
    fake.threads = 5  # the application changed it between two runs
    with ort_cpu_ep.intra_op_thread_scope(2), ort_cpu_ep.intra_op_thread_scope(2):
        assert fake.threads == 2
    assert fake.calls == [2, 5] and fake.threads == 5


def test_the_provider_run_scope_uses_its_option(blas_at_3):
    ep = ort_cpu_ep.CpuExecutionProvider(Graph(), {"": 17}, intra_op_num_threads=1)
    assert ep.threads == 1
    with ep.run_scope():
        assert blas_threads() == 1 and ort_cpu_ep.intra_op_threads() == 1
    assert blas_threads() == blas_at_3
    default = ort_cpu_ep.SimulatedGpuExecutionProvider(Graph(), {"": 17})
    assert default.intra_op_num_threads == 0 and default.threads == ort_cpu_ep.physical_cores()


def _fake_topology(root, siblings: dict[int, str], file: str = "core_cpus_list") -> None:
    for cpu, group in siblings.items():
        d = root / f"cpu{cpu}" / "topology"
        d.mkdir(parents=True)
        (d / file).write_text(group + "\n")


@pytest.mark.parametrize(("allowed", "file", "want"), [
    ([0, 1, 2, 3, 4, 5, 6, 7], "core_cpus_list", 4),  # 4 cores x 2 hardware threads
    ([0, 1, 2, 3, 4, 5, 6, 7], "thread_siblings_list", 4),  # older kernels
    ([0, 4], "core_cpus_list", 1),  # both hardware threads of core 0
    ([0, 1, 5], "core_cpus_list", 2),  # cores 0 and 1 (5 is core 1's sibling)
])
def test_physical_cores_count_the_cores_of_the_allowed_cpus(tmp_path, monkeypatch, allowed, file, want):
    _fake_topology(tmp_path, {c: f"{c % 4},{c % 4 + 4}" for c in range(8)}, file)
    monkeypatch.setattr(_threads, "_SYSFS_CPU", tmp_path)
    monkeypatch.setattr(_threads, "_allowed_cpus", lambda: allowed)
    assert ort_cpu_ep.physical_cores() == want


def test_without_a_readable_topology_every_allowed_cpu_counts(tmp_path, monkeypatch):
    monkeypatch.setattr(_threads, "_SYSFS_CPU", tmp_path / "absent")
    monkeypatch.setattr(_threads, "_allowed_cpus", lambda: [0, 1, 2])
    assert ort_cpu_ep.physical_cores() == 3


def _pool_holds() -> int:
    import ctypes

    from ort_cpu_ep import c_kernels

    return ctypes.CDLL(str(c_kernels.library_path())).ort_cpu_ep_pool_holds()


def test_a_scope_of_more_than_one_thread_holds_the_c_pool_awake_until_its_thread_closes_its_scopes(library):
    """Each run opens a scope; while one of more than one thread is open the C pool's workers do not go to sleep
    between two parallel kernels (mnb_pool_hold). One hold per thread however deep its scopes, released when its
    scopes close or drop to one thread; a second thread's scope holds too."""
    base = _pool_holds()
    with ort_cpu_ep.intra_op_thread_scope(2):
        assert _pool_holds() == base + 1
        with ort_cpu_ep.intra_op_thread_scope(3):
            assert _pool_holds() == base + 1
            with ort_cpu_ep.intra_op_thread_scope(1):
                assert _pool_holds() == base
            assert _pool_holds() == base + 1
        seen: list[int] = []

        def other() -> None:
            with ort_cpu_ep.intra_op_thread_scope(2):
                seen.append(_pool_holds())
            seen.append(_pool_holds())

        t = threading.Thread(target=other)
        t.start()
        t.join()
        assert seen == [base + 2, base + 1]
        with _threads.native_thread_scope(2):  # the all-C replay's scope
            assert _pool_holds() == base + 1
        assert _pool_holds() == base + 1
    assert _pool_holds() == base
    with ort_cpu_ep.intra_op_thread_scope(1):
        assert _pool_holds() == base
