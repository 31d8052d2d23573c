"""Node memory statistics files at paths the OS refuses or that are not regular files."""

import os
import stat

import pytest

from ort_partition import NodeAllocationStats, StatsFileError, read_node_stats, write_node_stats

STATS = {"n": NodeAllocationStats(1, 2, 3, 4)}


def test_a_nul_byte_in_the_path_is_a_stats_file_error():
    with pytest.raises(StatsFileError, match=r"cannot read node memory statistics file 'a\\x00b': embedded null byte"):
        read_node_stats("a\0b")


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="no /dev/full on this platform")
def test_writing_onto_a_device_writes_in_place_and_raises_its_os_error():
    with pytest.raises(OSError, match="No space left on device"):
        write_node_stats("/dev/full", STATS)
    assert stat.S_ISCHR(os.stat("/dev/full").st_mode)


def test_writing_into_a_fifo_without_a_reader_fails_at_once(tmp_path):
    fifo = tmp_path / "f"
    os.mkfifo(fifo)
    with pytest.raises(OSError):
        write_node_stats(fifo, STATS)
    assert stat.S_ISFIFO(os.stat(fifo).st_mode)


def test_a_regular_file_is_still_replaced_whole(tmp_path):
    path = tmp_path / "s.csv"
    path.write_text("old")
    write_node_stats(path, STATS)
    assert read_node_stats(path) == STATS and os.listdir(tmp_path) == ["s.csv"]
