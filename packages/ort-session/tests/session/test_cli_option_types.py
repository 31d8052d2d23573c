"""`ortrun --option KEY=VALUE` reads each value by its option's type, as `--dim` does."""

from __future__ import annotations

import pytest

from ort_session import GraphOptimizationLevel, InvalidOptionError
from ort_session._option_text import option_from_text
from ort_session.cli import main


@pytest.mark.parametrize("key, text, want", [
    ("intra_op_num_threads", "2", 2),
    ("intra_op_num_threads", " 4 ", 4),
    ("enable_fusions", "0", False),
    ("enable_fusions", "on", True),
    ("measure_host_allocations", "TRUE", True),
    ("graph_optimization_level", "ORT_DISABLE_ALL", GraphOptimizationLevel.ORT_DISABLE_ALL),
    ("graph_optimization_level", "99", 99),  # a number: the option's own check says which are valid
    ("free_dimension_overrides", '{"batch": 1}', {"batch": 1}),
    ("kernel_libraries", '["a.so"]', ["a.so"]),
    ("budgets", "cuda:6GiB", "cuda:6GiB"),
    ("session.pre_allocate_execution_buffers", "1", "1"),  # config entries stay text, as in ONNX Runtime
    ("no_such_option", "x", "x"),  # unknown keys meet SessionOptions' own error
])
def test_values_are_read_by_the_options_type(key, text, want):
    got = option_from_text(key, text)
    assert got == want and type(got) is type(want)


@pytest.mark.parametrize("key, text, message", [
    ("intra_op_num_threads", "two", "expected an int in decimal digits"),
    ("enable_fusions", "maybe", "expected a bool, one of 1/0"),
    ("graph_optimization_level", "FAST", "expected one of ORT_DISABLE_ALL"),
    ("free_dimension_overrides", "batch", "given as JSON"),
])
def test_unreadable_values_say_what_the_option_accepts(key, text, message):
    with pytest.raises(InvalidOptionError, match=message):
        option_from_text(key, text)


def test_ortrun_takes_typed_options_from_the_command_line(capsys):
    assert main(["run", "--option", "intra_op_num_threads=2", "--option", "enable_fusions=0"]) == 0
    assert main(["run", "--option", "intra_op_num_threads=-3"]) == 2
    err = capsys.readouterr().err
    assert "intra_op_num_threads" in err and "expected an int from 0" in err and "(str)" not in err
