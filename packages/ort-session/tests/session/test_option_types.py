"""Every SessionOptions field is type-checked when set: InvalidOptionError names the option, shows the
value and says what type was expected (before, '64' or 'lib.so' were taken and failed much later)."""

from __future__ import annotations

import pathlib

import numpy as np
import pytest

from ort_session import InvalidOptionError, SessionOptions

BAD = [
    ("red_zones", "64", "an int of guard bytes"),
    ("red_zones", -1, "an int of guard bytes"),
    ("red_zones", True, "an int of guard bytes"),
    ("red_zones", 2**40, "an int of guard bytes"),
    ("free_dimension_overrides", {"batch": True}, "non-negative int"),
    ("free_dimension_overrides", {"batch": 2.0}, "non-negative int"),
    ("free_dimension_overrides", {"batch": -1}, "non-negative int"),
    ("free_dimension_overrides", {"batch": "2"}, "non-negative int"),
    ("free_dimension_overrides", {3: 2}, "str dimension names"),
    ("free_dimension_overrides", [("batch", 1)], "a dict of symbolic dimension"),
    ("kernel_libraries", "libkernels.so", "wrap a single path in a list"),
    ("kernel_libraries", pathlib.Path("libkernels.so"), "wrap a single path in a list"),
    ("kernel_libraries", [1, 2], "a list of str paths"),
    ("kernel_libraries", 7, "a list of shared library paths"),
    ("max_shapes", "input_ids:[8,", "is malformed"),
    ("max_shapes", "input_ids:[" + "9" * 4400 + "]", "INPUT=\\[d0,d1.*at most 19 digits"),
    ("max_shapes", {"input_ids": "8,128"}, "a list of ints for input 'input_ids'"),
    ("max_shapes", {"input_ids": [8, 1.5]}, "non-negative int"),
    ("max_shapes", [8, 128], "a dict of input name"),
    ("budgets", 6 * 2**30, "a budget string"),
    ("budgets", "cuda:1e400GiB", "exceeds the largest size"),
    ("budgets", "cuda:lots", "cannot parse"),
    ("enable_fusions", "0", "a bool"),
    ("node_level_cutoff", 1, "a bool"),
    ("device_profile", 3090, "a str or None"),
    ("memory_profile_out", 5, "a str path or None"),
    ("config", "session.x=1", "a dict of 'session"),
    ("intra_op_num_threads", -1, "an int from 0"),
    ("intra_op_num_threads", "4", "an int from 0"),
    ("intra_op_num_threads", 2.0, "an int from 0"),
    ("intra_op_num_threads", True, "an int from 0"),
    ("intra_op_num_threads", 1025, "an int from 0"),
]


@pytest.mark.parametrize(("option", "value", "fragment"), BAD, ids=[f"{o}-{i}" for i, (o, _, _) in enumerate(BAD)])
def test_wrong_types_are_refused_at_construction(option, value, fragment):
    with pytest.raises(InvalidOptionError, match=fragment) as info:
        SessionOptions.from_mapping({option: value})
    assert repr(option) in str(info.value)
    assert len(str(info.value)) < 700
    with pytest.raises(InvalidOptionError):
        SessionOptions(**{option: value})
    opts = SessionOptions()
    with pytest.raises(InvalidOptionError):  # assignment is checked too
        setattr(opts, option, value)


def test_accepted_values_are_normalized():
    opts = SessionOptions.from_mapping({
        "free_dimension_overrides": {"batch": np.int64(2), "seq": np.uint16(8)},
        "max_shapes": {"input_ids": (np.int32(8), 128)},
        "kernel_libraries": (pathlib.Path("a.so"), "b.so"),
        "memory_profile_out": pathlib.Path("stats.csv"),
        "red_zones": np.int16(64),
        "enable_fusions": np.bool_(False),
        "budgets": {"cuda": "1GiB"},
        "intra_op_num_threads": np.int8(2),
    })
    assert opts.intra_op_num_threads == 2 and type(opts.intra_op_num_threads) is int
    assert SessionOptions().intra_op_num_threads == 0  # ONNX Runtime's default: the physical cores
    assert opts.free_dimension_overrides == {"batch": 2, "seq": 8}
    assert all(type(v) is int for v in opts.free_dimension_overrides.values())
    assert opts.max_shapes == {"input_ids": [8, 128]}
    assert opts.kernel_libraries == ["a.so", "b.so"]
    assert opts.memory_profile_out == "stats.csv" and opts.red_zones == 64 and opts.enable_fusions is False
    assert SessionOptions.from_mapping({"max_shapes": "input_ids:[8,128]"}).max_shapes == {"input_ids": [8, 128]}


def test_config_entries_are_strings():
    opts = SessionOptions()
    opts.add_session_config_entry("session.pre_allocate_execution_buffers", True)
    assert opts.get("session.pre_allocate_execution_buffers") == "1"
    for key, value, fragment in [
        ("session.pre_allocate_execution_buffers", ["1"], "expected a str value"),
        ("session.pre_allocate_execution_buffers", "maybe", "not a boolean"),
        ("session.max_shape_override", "input_ids:[8", "is malformed"),
        (b"session.x", "1", "must be a str"),
    ]:
        with pytest.raises(InvalidOptionError, match=fragment):
            opts.add_session_config_entry(key, value)
    with pytest.raises(InvalidOptionError, match="must be a mapping"):
        SessionOptions.from_mapping([("red_zones", 64)])
