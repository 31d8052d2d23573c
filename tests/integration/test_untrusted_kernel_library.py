"""A session naming a truncated kernel library fails at initialization with a KernelLibraryError
(it used to die with SIGBUS inside dlopen: run in a child process, so a regression fails this test
instead of killing the test run)."""

import os
import subprocess
import sys

import pytest

SCRIPT = """
import sys, ort_abi
from ort_graph import zoo
from ort_session import InferenceSession
try:
    InferenceSession(zoo.decoder_proto(zoo.DecoderConfig(layers=1)), {"kernel_libraries": [sys.argv[1]]})
except ort_abi.KernelLibraryError as e:
    print("REFUSED", e)
else:
    print("LOADED")
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="ELF checks run on Linux only")
def test_session_with_a_truncated_kernel_library_fails_at_initialization(parity_lib, tmp_path):
    cut = tmp_path / "libhalf.so"
    cut.write_bytes(parity_lib.read_bytes()[: parity_lib.stat().st_size // 2])
    proc = subprocess.run([sys.executable, "-c", SCRIPT, str(cut)], capture_output=True, text=True, timeout=300,
                          env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    assert proc.returncode == 0, f"child died with {proc.returncode}: {proc.stderr[-2000:]}"
    assert proc.stdout.startswith("REFUSED") and "libhalf.so" in proc.stdout and "truncated" in proc.stdout, proc.stdout
