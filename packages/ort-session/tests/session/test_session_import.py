"""What `from ort_session import InferenceSession` imports beyond numpy and onnx (both imported first: onnx's own
imports, importlib.metadata and protobuf's json_format among them, are onnx's): nothing of the command line, the
model zoo, the conformance and bench helpers, nor the standard-library modules only a build, a typo hint or a
CLI needs. Each costs a fresh process's session import time (`benchmarks/_published_child.py`)."""

from __future__ import annotations

import json
import subprocess
import sys

NOT_FOR_A_SESSION = (
    "ort_session.cli", "ort_session._cli_args", "ort_session._cli_commands", "ort_session._tokenizer",
    "ort_graph.zoo", "ort_graph._zoo", "ort_cpu_ep.conformance", "ort_cpu_ep._bench", "ort_memplan.bench",
    "ort_partition.bench",
    "difflib",  # typo hints: imported where a key or provider is unknown
    "shlex", "sysconfig",  # the C library's build (`ort_cpu_ep._cbuild`), not its load
)


def test_a_session_import_loads_no_cli_zoo_or_build_modules() -> None:
    code = ("import sys, json; import numpy, onnx; before = set(sys.modules); "
            "from ort_session import InferenceSession; "
            f"print(json.dumps(sorted(m for m in {NOT_FOR_A_SESSION!r} if m in sys.modules and m not in before)))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert json.loads(out.strip().splitlines()[-1]) == []
