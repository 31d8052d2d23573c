"""Host memory of a session made from a model file with ~200 MB of inline weights (raw_data in the .onnx file),
with `session.map_inline_weights` on (the default: mapped from the file) and off (read, as onnx.load does).

`python benchmarks/inline_weights_rss.py [--mb 200] [--repeats 2]`: each measurement is a fresh child process
(modes interleaved); it prints, per mode, the resident set before creating the session, the peak while creating
it (VmHWM), the resident set after creating it and after one run, and how much of that is file-backed
(mapped pages the kernel can drop and read again) versus anonymous (`/proc/self/status` RssFile / RssAnon).
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import subprocess
import sys
import tempfile

WIDTH = 2048


def build(path: pathlib.Path, megabytes: int) -> int:
    import numpy as np
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    layers = max(2, round(megabytes * 2**20 / (WIDTH * WIDTH * 1.5 * 4)) // 2 * 2)
    inits, nodes, x = [], [], "x"
    for i in range(layers):
        shape = (WIDTH, WIDTH * 3 // 2) if i % 2 == 0 else (WIDTH * 3 // 2, WIDTH)
        inits.append(numpy_helper.from_array(rng.standard_normal(shape, dtype=np.float32) * 0.02, f"W{i}"))
        nodes += [helper.make_node("MatMul", [x, f"W{i}"], [f"h{i}"], name=f"/layers.{i}/MatMul"),
                  helper.make_node("Relu", [f"h{i}"], [f"r{i}"], name=f"/layers.{i}/Relu")]
        x = f"r{i}"
    g = helper.make_graph(nodes, "mlp", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, WIDTH])],
                          [helper.make_tensor_value_info(x, TensorProto.FLOAT, [1, WIDTH])], inits)
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8), path)
    return sum(t.nbytes for t in (numpy_helper.to_array(p) for p in inits))


def _status() -> dict[str, int]:
    out = {}
    for line in pathlib.Path("/proc/self/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "VmHWM", "RssAnon", "RssFile"):
            out[key] = int(value.split()[0]) * 1024
    return out


def child(path: str, mapping: str) -> None:
    import numpy as np

    import ort_session

    before = _status()
    sess = ort_session.InferenceSession(path, {ort_session.MAP_INLINE_WEIGHTS: mapping})
    created = _status()
    peak_create = created["VmHWM"]  # per address space (ru_maxrss would carry the parent's peak over exec)
    out = sess.run(None, {"x": np.ones((1, WIDTH), np.float32)})[0]
    ran = _status()
    print(json.dumps({"before": before, "peak_create": peak_create, "created": created, "ran": ran,
                      "checksum": float(out.sum())}))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--mb", type=int, default=200)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--child", nargs=2)
    args = ap.parse_args()
    if args.child:
        child(*args.child)
        return
    mib = 2**20
    with tempfile.TemporaryDirectory() as d:
        path = pathlib.Path(d) / "mlp.onnx"
        weights = build(path, args.mb)
        print(f"model: {path.stat().st_size / mib:.0f} MiB file, {weights / mib:.0f} MiB of inline weights")
        rows: dict[str, list[dict]] = {"1": [], "0": []}
        for _ in range(args.repeats):
            for mapping in ("1", "0"):
                proc = subprocess.run([sys.executable, __file__, "--child", str(path), mapping], check=True,
                                      capture_output=True, text=True, env=os.environ)
                rows[mapping].append(json.loads(proc.stdout.strip().splitlines()[-1]))
    print(f"{'map_inline_weights':>18} | {'RSS before':>10} | {'peak creating':>13} | {'after create':>22} | "
          f"{'after 1 run':>22} | checksum")
    for mapping, runs in rows.items():
        for r in runs:
            def both(s):
                return f"{s['VmRSS'] / mib:6.0f} ({s['RssAnon'] / mib:4.0f} anon)"
            print(f"{mapping:>18} | {r['before']['VmRSS'] / mib:8.0f} M | {(r['peak_create']) / mib:11.0f} M | "
                  f"{both(r['created']):>22} | {both(r['ran']):>22} | {r['checksum']:.6g}")


if __name__ == "__main__":
    main()
