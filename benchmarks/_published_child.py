"""The published models' fresh-process measurement (`bench_published.py --child RUNTIME MODEL`), kept apart so
that nothing of either runtime is imported before its clock starts: the child imports numpy (both runtimes
need it, and the feeds are made with it) and the standard library, then times the runtime's import plus its
InferenceSession construction (`init_s`, split into `import_s` and `construct_s`), runs once and reports the
process's peak RSS. ort_session's import includes onnx (and onnx's ml_dtypes); onnxruntime's does not."""

from __future__ import annotations

import resource
import time
import warnings
from typing import Any

import numpy as np

# model file -> (input name, the shape its package feeds, element type, value range)
MODELS: dict[str, tuple[str, list[int], str, tuple[int, int]]] = {
    "magika_standard_v3_3.onnx": ("bytes", [1, 2048], "int32", (0, 257)),
    "ppocr_mobile_v2_cls.onnx": ("x", [1, 3, 48, 192], "float32", (-1, 1)),
    "ppocrv4_rec.onnx": ("x", [1, 3, 48, 320], "float32", (-1, 1)),
    "ppocrv4_det.onnx": ("x", [1, 3, 320, 320], "float32", (-1, 1)),
}


def feeds_for(file: str, seed: int = 0) -> dict[str, np.ndarray]:
    name, shape, dtype, (lo, hi) = MODELS[file]
    rng = np.random.default_rng(seed)
    if dtype.startswith("int"):
        return {name: rng.integers(lo, hi, shape).astype(dtype)}
    return {name: rng.uniform(lo, hi, shape).astype(dtype)}


def options(file: str, **extra: Any) -> dict[str, Any]:
    name, shape, _, _ = MODELS[file]
    return {"max_shapes": {name: list(shape)}, **extra}


def ours(path: str, file: str, providers: list[str] | None = None, dynamic: bool = False, **extra: Any):
    """Our session, planned for the shape its package feeds (max_shapes), or with `dynamic` as users load it: the
    file's symbolic dims left symbolic (a run then plans at the shapes it meets)."""
    from ort_session import InferenceSession

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        opts = extra if dynamic else options(file, **extra)
        return InferenceSession(path, opts, providers=providers or ["CPUExecutionProvider"])


def ort(path: str, threads: int | None):
    import onnxruntime

    so = onnxruntime.SessionOptions()
    so.log_severity_level = 3
    if threads is not None:
        so.intra_op_num_threads, so.inter_op_num_threads = threads, 1
    return onnxruntime.InferenceSession(path, so, providers=["CPUExecutionProvider"])


def peak_rss() -> int:
    """This process's own peak RSS (bytes): VmHWM, which exec resets. getrusage's ru_maxrss is not: Linux carries
    the parent's peak through fork and exec, so both runtimes read the benchmark parent's 7.29 GiB."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def child(runtime: str, path: str) -> dict[str, Any]:
    """In a fresh process: import the runtime, initialize, run once; seconds and peak RSS (bytes)."""
    file = path.rsplit("/", 1)[-1]
    feeds = feeds_for(file)
    t0, c0 = time.perf_counter(), time.process_time()
    if runtime == "ours":
        from ort_session import InferenceSession  # noqa: F401  (the session machinery: onnx, kernels)
    else:
        import onnxruntime  # noqa: F401
    t1 = time.perf_counter()
    sess = ours(path, file) if runtime == "ours" else ort(path, None)
    t2, c2 = time.perf_counter(), time.process_time()
    sess.run(None, feeds)
    return {"init_s": t2 - t0, "import_s": t1 - t0, "construct_s": t2 - t1,
            "init_cpu_s": c2 - c0, "peak_rss": peak_rss()}


if __name__ == "__main__":
    import json
    import sys

    print(json.dumps(child(sys.argv[1], sys.argv[2])))
