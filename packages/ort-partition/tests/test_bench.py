from ort_partition import bench


def test_matcher_throughput_reports_numbers_and_agreement():
    out = bench.matcher_throughput(num_nodes=500, num_patterns=40)
    assert out["num_nodes"] == 500 and out["num_patterns"] == 40
    assert out["agree"] is True
    assert 0 < out["matched"] <= 500
    for strategy in ("automaton", "loop"):
        stats = out["strategies"][strategy]
        assert stats["match_seconds"] >= 0 and stats["names_per_second"] > 0
