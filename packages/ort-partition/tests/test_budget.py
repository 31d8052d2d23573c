import pytest

from ort_partition import (
    CPU_EP,
    CUDA_EP,
    STATS_HEADER,
    BudgetError,
    Budgets,
    NodeAllocationStats,
    NodeStatsRecorder,
    StatsFileError,
    format_bytes,
    parse_budget,
    parse_bytes,
    parse_resource_partitioning_settings,
    read_node_stats,
    write_node_stats,
)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("6GiB", 6 * 2**30),
        ("6 gib", 6 * 2**30),
        ("512MB", 512 * 10**6),
        ("512MiB", 512 * 2**20),
        ("6e9", 6 * 10**9),
        ("6442450944", 6442450944),
        ("1.5KiB", 1536),
        ("1.5 kb", 1500),
        ("2G", 2 * 2**30),
        ("7b", 7),
        ("0", 0),
        (" 3 TB ", 3 * 10**12),
        (".5K", 512),
        (1234, 1234),
    ],
)
def test_parse_bytes(text, expected):
    assert parse_bytes(text) == expected


@pytest.mark.parametrize(
    ("text", "fragment"),
    [("", "empty"), ("   ", "empty"), ("-1GiB", "negative"), (-5, "negative"), ("6 GiBs", "unknown unit"),
     ("6XB", "unknown unit"), ("GiB", "cannot parse"), ("1,5GB", "cannot parse"), (True, "bool"), (1.5, "str or int")],
)
def test_parse_bytes_errors(text, fragment):
    with pytest.raises(BudgetError, match=fragment):
        parse_bytes(text)


@pytest.mark.parametrize(
    ("text", "limits"),
    [
        ("cuda:6GiB", (("cuda", 6 * 2**30),)),
        ("cuda=6442450944", (("cuda", 6442450944),)),
        ("cuda:0:512MB", (("cuda:0", 512 * 10**6),)),
        ("gpu:1=2GiB", (("gpu:1", 2 * 2**30),)),
        ("cuda:6GiB, cpu:32GiB", (("cuda", 6 * 2**30), ("cpu", 32 * 2**30))),
        ("cuda:1GiB;cpu=1e9;", (("cuda", 2**30), ("cpu", 10**9))),
        ({"cuda": "1KiB", "cpu": 10}, (("cuda", 1024), ("cpu", 10))),
    ],
)
def test_parse_budget(text, limits):
    assert parse_budget(text).limits == limits


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("", "empty"),
        ("cuda", "names no device"),
        ("6GiB", "names no device"),
        ("cuda:", "is empty"),
        ("cuda=", "is empty"),
        (":6GiB", "empty device"),
        ("cuda:-1GiB", "negative"),
        ("cuda:6 parsecs", "unknown unit"),
        ("cuda:1GiB, CUDA:2GiB", "two budgets"),
        (" ; , ", "no entries"),
    ],
)
def test_parse_budget_errors(text, fragment):
    with pytest.raises(BudgetError, match=fragment):
        parse_budget(text)


def test_budget_error_quotes_the_string():
    with pytest.raises(BudgetError) as info:
        parse_budget("cuda:6GB, cpu:lots")
    assert "'cuda:6GB, cpu:lots'" in str(info.value) and "'cpu'" in str(info.value)


def test_budgets_resolve_to_providers():
    eps = [CUDA_EP, CPU_EP]
    assert parse_budget("gpu:2GiB, cpu:1GiB").resolve(eps) == {CUDA_EP: 2 * 2**30, CPU_EP: 2**30}
    assert parse_budget("accelerator:5").resolve(eps) == {CUDA_EP: 5}
    with pytest.raises(BudgetError, match="matches no available"):
        parse_budget("npu:1GiB").resolve(eps)
    assert not Budgets()


def test_stats_csv_round_trip(tmp_path):
    stats = {"/model/layers.0/mlp/down_proj/MatMul": NodeAllocationStats(10, 20, 30, 40), "a,b": NodeAllocationStats(1, 2, 3, 4)}
    path = write_node_stats(tmp_path / "stats.csv", stats)
    assert path.read_text().splitlines()[0] == STATS_HEADER
    back = read_node_stats(path)
    assert dict(back) == stats
    assert back["a,b"].total == 10


def test_stats_lookup_accepts_onnxruntime_hashed_names(tmp_path):
    (tmp_path / "s.csv").write_text(STATS_HEADER + "\nnode_linear_3_12345678901234,1,2,3,4\nplain,5,5,5,5\n")
    stats = read_node_stats(tmp_path / "s.csv")
    assert stats.lookup("node_linear_3") == NodeAllocationStats(1, 2, 3, 4)
    assert stats.lookup("plain").total == 20
    assert stats.lookup("absent") is None


@pytest.mark.parametrize(
    ("body", "fragment"),
    [("x,1,2,3\n", "5 fields"), ("x,1,2,3,z\n", "non-integer"), (",1,2,3,4\n", "5 fields"), ("x,1,2,3,-4\n", "negative")],
)
def test_stats_csv_errors_name_file_and_line(tmp_path, body, fragment):
    p = tmp_path / "bad.csv"
    p.write_text(STATS_HEADER + "\n" + body)
    with pytest.raises(StatsFileError, match=fragment) as info:
        read_node_stats(p)
    assert "bad.csv:2" in str(info.value)


def test_missing_stats_file(tmp_path):
    with pytest.raises(StatsFileError, match="cannot read"):
        read_node_stats(tmp_path / "nope.csv")


def test_recorder_keeps_the_largest_per_field(tmp_path):
    rec = NodeStatsRecorder()
    rec.report("n", NodeAllocationStats(1, 50, 3, 0))
    rec.report("n", NodeAllocationStats(9, 2, 3, 7))
    assert rec.stats["n"] == NodeAllocationStats(9, 50, 3, 7)
    assert read_node_stats(rec.dump(tmp_path / "r.csv"))["n"] == NodeAllocationStats(9, 50, 3, 7)


def test_ort_resource_partitioning_settings(tmp_path):
    write_node_stats(tmp_path / "node_stats.csv", {"n": NodeAllocationStats(1, 2, 3, 4)})
    s = parse_resource_partitioning_settings("4096,node_stats.csv", model_dir=tmp_path)
    assert s.limit_bytes == 4096 * 1024
    assert s.stats["n"].total == 10
    assert s.budgets().resolve([CUDA_EP, CPU_EP]) == {CUDA_EP: 4096 * 1024}
    unlimited = parse_resource_partitioning_settings(",node_stats.csv", model_dir=tmp_path)
    assert unlimited.limit_bytes is None and not unlimited.budgets()


@pytest.mark.parametrize(
    ("value", "fragment"),
    [("4096", "two comma separated"), ("1,2,3", "two comma separated"), ("4096,", "stats file is missing"),
     ("4GiB,s.csv", "whole number of KiB"), ("-1,s.csv", "whole number of KiB")],
)
def test_ort_resource_partitioning_settings_errors(tmp_path, value, fragment):
    (tmp_path / "s.csv").write_text(STATS_HEADER + "\n")
    with pytest.raises(BudgetError, match=fragment):
        parse_resource_partitioning_settings(value, model_dir=tmp_path)


@pytest.mark.parametrize(("n", "text"), [(None, "-"), (0, "0 B"), (1023, "1023 B"), (1536, "1.5 KiB"), (3 * 2**30, "3.0 GiB"), (-2048, "-2.0 KiB")])
def test_format_bytes(n, text):
    assert format_bytes(n) == text


def test_a_share_of_the_device_memory_resolves_against_the_provider():
    from ort_partition import BudgetError, Share, parse_budget

    class Gpu:
        name, device_type, device, memory_bytes = "CUDAExecutionProvider", "gpu", "cuda:0", 8 << 30

    b = parse_budget("cuda:90%, cpu:8GiB")
    assert b.limits[0] == ("cuda", Share(0.9))
    assert b.resolve([Gpu(), "CPUExecutionProvider"]) == {"CUDAExecutionProvider": int(0.9 * (8 << 30)),
                                                          "CPUExecutionProvider": 8 << 30}
    for bad, text in (("cuda:0%", "outside"), ("cuda:101%", "outside"), ("cuda:x%", "not a percentage")):
        with pytest.raises(BudgetError, match=text):
            parse_budget(bad)
    with pytest.raises(BudgetError, match="reports none"):
        parse_budget("cuda:50%").resolve(["CUDAExecutionProvider"])  # a name only: no memory to share
