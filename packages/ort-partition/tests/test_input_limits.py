"""Budgets, byte sizes and the statistics file are untrusted input: limits, typed errors, no hangs."""

from __future__ import annotations

import os
import threading

import numpy as np
import pytest

from ort_partition import (
    STATS_HEADER,
    BudgetError,
    StatsFileError,
    format_bytes,
    parse_budget,
    parse_bytes,
    parse_resource_partitioning_settings,
    read_node_stats,
)


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("1e400GiB", "exceeds the largest size"),
        ("1e999999999999999999999", "exceeds the largest size"),
        ("1" * 4300, "at most 30 characters"),
        ("9223372036854775808", "exceeds the largest size"),
        ("8TiB" * 1, None),
        ("nan", "cannot parse"),
        ("inf", "cannot parse"),
        ("-0.5GiB", "negative"),
        (2**63, "exceeds the largest size"),
        (10**5000, "exceeds the largest size"),
        (np.int64(-3), "negative"),
        (float("nan"), "must be a str or int"),
        (b"6GiB", "must be a str or int"),
    ],
    ids=lambda v: repr(v)[:24] if not isinstance(v, int) or v.bit_length() < 64 else f"{v.bit_length()}bits",
)
def test_byte_sizes_over_the_limits_raise_budget_error(text, fragment):
    """(ids are cut: pytest cannot print a 5000-digit int)"""
    if fragment is None:
        assert parse_bytes(text) == 8 * 2**40
        return
    with pytest.raises(BudgetError, match=fragment) as info:
        parse_bytes(text)
    assert len(str(info.value)) < 400  # a 4300-digit value is not quoted whole


def test_the_largest_size_and_numpy_integers_parse():
    assert parse_bytes("9223372036854775807") == 2**63 - 1
    assert parse_bytes(np.int64(4096)) == 4096 and type(parse_bytes(np.uint32(7))) is int
    assert parse_bytes("1e-400GiB") == 0


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("cuda:1e400GiB", "exceeds the largest size"),
        ("cuda:" + "9" * 4300, "at most 30 characters"),
        ("cuda:nan%", "outside"),
        ("cuda:inf%", "outside"),
        ("cuda:" + "1" * 400 + "%", "not a percentage"),
        ({"cuda": 2**64}, "exceeds the largest size"),
        ({1: "6GiB"}, "must be a str"),
        (42, "must be a string"),
    ],
)
def test_budget_strings_over_the_limits_raise_budget_error(text, fragment):
    with pytest.raises(BudgetError, match=fragment):
        parse_budget(text)


@pytest.mark.parametrize("n", [2**63, 2**1000, 10**5000, -(10**5000), 2**70 - 1, 5 * 2**60], ids=lambda n: f"{n.bit_length()}bits")
def test_format_bytes_never_raises(n):
    text = format_bytes(n)
    assert text.endswith("B") and len(text) < 40


def test_format_bytes_keeps_its_rounding():
    assert format_bytes(5 * 2**60) == "5.0 EiB"
    assert format_bytes(3 * 2**50 + 2**49) == "3.5 PiB"
    assert format_bytes(1536) == "1.5 KiB"


@pytest.mark.parametrize(
    ("value", "fragment"),
    [("9" * 4300 + ",s.csv", "at most 30"), ("9007199254740992,s.csv", "exceeds the largest size"),
     ("\u0663,s.csv", "whole number of KiB"), (None, "must be a str")],
)
def test_resource_partitioning_limit_bounds(tmp_path, value, fragment):
    (tmp_path / "s.csv").write_text(STATS_HEADER + "\n")
    with pytest.raises(BudgetError, match=fragment):
        parse_resource_partitioning_settings(value, model_dir=tmp_path)


def _finishes(fn, seconds: float = 5.0):
    """Run fn in a thread; the result or exception, failing the test if it blocks."""
    box: dict = {}

    def target():
        try:
            box["result"] = fn()
        except BaseException as e:  # noqa: BLE001 - handed back to the test
            box["error"] = e

    t = threading.Thread(target=target, daemon=True)
    t.start()
    t.join(seconds)
    assert not t.is_alive(), f"reading blocked for more than {seconds}s"
    if "error" in box:
        raise box["error"]
    return box["result"]


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs here")
def test_a_fifo_stats_file_is_refused_without_blocking(tmp_path):
    fifo = tmp_path / "stats.csv"
    os.mkfifo(fifo)
    with pytest.raises(StatsFileError, match=r"stats.csv.*is a FIFO \(named pipe\), not a regular file"):
        _finishes(lambda: parse_resource_partitioning_settings("1024,stats.csv", model_dir=tmp_path))


@pytest.mark.skipif(not os.path.exists("/dev/zero"), reason="no /dev/zero")
def test_dev_zero_is_refused_without_reading():
    with pytest.raises(StatsFileError, match=r"'/dev/zero' is a character device, not a regular file"):
        _finishes(lambda: read_node_stats("/dev/zero"))


def test_a_directory_is_refused(tmp_path):
    with pytest.raises(StatsFileError, match="a directory|cannot read"):
        read_node_stats(tmp_path)


def test_a_stats_file_over_64_mib_is_refused(tmp_path):
    big = tmp_path / "big.csv"
    with open(big, "wb") as f:
        f.truncate(64 * 2**20 + 1)  # sparse: no disk, no time
    with pytest.raises(StatsFileError, match=r"big.csv.*67108865 bytes, more than the 64 MiB limit"):
        read_node_stats(big)


@pytest.mark.parametrize(
    ("row", "fragment"),
    [("x,1,2,3," + "9" * 4300, "non-integer"), ("x,1,2,3,9223372036854775808", "over 2\\*\\*63-1"),
     ("x,1,2,3,\u0663", "non-integer")],
)
def test_stats_rows_with_huge_or_odd_numbers(tmp_path, row, fragment):
    p = tmp_path / "s.csv"
    p.write_text(STATS_HEADER + "\n" + row + "\n")
    with pytest.raises(StatsFileError, match=fragment):
        read_node_stats(p)


def test_non_utf8_stats_file(tmp_path):
    p = tmp_path / "s.csv"
    p.write_bytes(b"x,1,2,3,4\n\xff\xfe\n")
    with pytest.raises(StatsFileError, match="not UTF-8"):
        read_node_stats(p)
