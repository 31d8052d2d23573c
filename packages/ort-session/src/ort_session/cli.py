"""`ortrun`: plan, run, generate, kernels and demo.

    ortrun plan  [MODEL] [--budget cuda:6GiB] [--layers RULES | --annotations RULES] [--dim batch=1] [--json]
    ortrun run   [MODEL] [--input name=file.npy] [--dim name=N] [--check]
    ortrun generate [MODEL] --prompt TEXT [--max-new-tokens N] [--top-k K]
    ortrun kernels
    ortrun demo

Without MODEL, commands use the built-in demo decoder (ort_graph.zoo.demo_decoder()).
`run` makes its inputs first (`--input` files, else generated: `--dim`, what the model pins, then past*=0,
*seq*/*len*=8, others 1) and plans exactly their shapes; `generate` plans prefill and every decode step.
plan, run and generate take `--stream-weights [on|off|auto]` (session.weight_streaming; alone: on).
"""

from __future__ import annotations

import argparse
import json
import pathlib
import sys
import time
from collections.abc import Sequence

import numpy as np

import ort_abi
import ort_graph
import ort_partition

from ._errors import SessionError
from ._feeds import generate_inputs, validate_feeds
from ._options import LAYER_ASSIGNMENT, NAME_BASED_ASSIGNMENT, PRE_ALLOCATE, SessionOptions
from ._session import InferenceSession

DEMO_DIMS = {"batch": 1, "sequence": 16, "past_sequence": 0}


def _dims(items: Sequence[str]) -> dict[str, int]:
    out = {}
    for item in items or ():
        name, sep, value = item.partition("=")
        if not sep or not value.strip().lstrip("-").isdigit():
            raise SystemExit(f"ortrun: --dim {item!r} must look like name=INTEGER, e.g. --dim batch=1")
        out[name.strip()] = int(value)
    return out


def _progress(msg: str) -> None:
    print(f"… {msg}", file=sys.stderr, flush=True)


def _bar(label: str):
    """A node-progress bar on stderr for runs (redrawn every 2%)."""
    last = [-1]

    def show(done: int, total: int) -> None:
        pct = done * 100 // max(total, 1)
        if pct // 2 == last[0] and done != total:
            return
        last[0] = pct // 2
        filled = pct // 5
        end = "\n" if done == total else ""
        print(f"\r{label} [{'#' * filled}{'.' * (20 - filled)}] {pct:3d}% ({done}/{total} nodes)",
              end=end, file=sys.stderr, flush=True)

    return show


def _model(arg: str | None) -> tuple[object, str]:
    if arg is None:
        return ort_graph.zoo.demo_decoder(), "built-in demo decoder (8 layers, hidden 256)"
    return arg, arg


def _options(args: argparse.Namespace, dims: dict[str, int]) -> SessionOptions:
    opts = SessionOptions(budgets=getattr(args, "budget", None), free_dimension_overrides=dims,
                          device_profile=getattr(args, "device_profile", None))
    if getattr(args, "layers", None):
        opts.add_session_config_entry(NAME_BASED_ASSIGNMENT, args.layers)
    if getattr(args, "annotations", None):
        opts.add_session_config_entry(LAYER_ASSIGNMENT, args.annotations)
    if getattr(args, "pre_allocate", False):
        opts.add_session_config_entry(PRE_ALLOCATE, "1")
    if getattr(args, "stream_weights", None):  # weight streaming: off | on | auto (the session's default)
        opts.add_session_config_entry("session.weight_streaming", args.stream_weights)
    return opts


def _providers(args: argparse.Namespace) -> list[str]:
    if getattr(args, "providers", None):
        return [p.strip() for p in args.providers.split(",") if p.strip()]
    return ["CUDAExecutionProvider", "CPUExecutionProvider"]


def _session(args: argparse.Namespace, dims: dict[str, int], loaded: ort_graph.Model | None = None
             ) -> tuple[InferenceSession, str]:
    model, label = _model(args.model)
    model = loaded if loaded is not None else model
    _progress(f"loading and planning {label}")
    t = time.perf_counter()
    sess = InferenceSession(model, _options(args, dims), providers=_providers(args))
    _progress(f"planned in {time.perf_counter() - t:.2f} s")
    return sess, label


def cmd_plan(args: argparse.Namespace) -> int:
    dims = _dims(args.dim) or (DEMO_DIMS if args.model is None else {})
    model, _feeds, planned = _run_feeds(args, dims)  # the dims `ortrun run` feeds: plan and run agree
    assumed = {k: v for k, v in planned.items() if k not in dims}
    if assumed:
        _progress(f"planning for the dims `ortrun run` feeds by default: {assumed!r}; give --dim name=N to plan others")
    sess, _ = _session(args, planned, model)
    print(json.dumps(sess.plan.to_dict(), indent=2) if args.json else sess.plan.to_table())
    return 0


def _onnxruntime():
    try:
        import onnxruntime
    except ImportError as e:
        raise SessionError("comparing with onnxruntime needs it installed: pip install 'ort-session[check]'") from e
    return onnxruntime


def _check(sess: InferenceSession, model_arg: str | None, feeds: dict, outs: list) -> float:
    ort = _onnxruntime()

    src = ort_graph.to_proto(ort_graph.zoo.demo_decoder()).SerializeToString() if model_arg is None else model_arg
    ref = ort.InferenceSession(src, providers=["CPUExecutionProvider"]).run(sess.output_names, feeds)
    worst = 0.0
    for name, a, b in zip(sess.output_names, outs, ref):
        diff = float(np.max(np.abs(a.astype(np.float64) - b.astype(np.float64)))) if a.size else 0.0
        worst = max(worst, diff)
        print(f"  check {name:<24} max |ours - onnxruntime| = {diff:.3g}")
    return worst


def _run_feeds(args: argparse.Namespace, dims: dict[str, int]) -> tuple[ort_graph.Model, dict, dict[str, int]]:
    """The feeds `ortrun run` will run with (generated, then `--input` files), resolved before the session is
    made, and every symbolic input dimension they bind: the session plans exactly these shapes."""
    model, _ = _model(args.model)
    model = model if isinstance(model, ort_graph.Model) else ort_graph.load(model)
    trial = ort_graph.copy_model(model)
    ort_graph.resolve_shapes(trial, dims)
    feeds = generate_inputs(trial.graph, dims, seed=getattr(args, "seed", 0))
    for item in getattr(args, "input", None) or ():
        name, sep, path = item.partition("=")
        if not sep or not path:
            raise SystemExit(f"ortrun: --input {item!r} must look like name=file.npy")
        feeds[name] = np.load(path)
    _, bindings = validate_feeds(trial.graph, feeds)
    return model, feeds, {**dims, **bindings}


def cmd_run(args: argparse.Namespace) -> int:
    dims = _dims(args.dim) or (DEMO_DIMS if args.model is None else {})
    model, feeds, planned = _run_feeds(args, dims)
    sess, _ = _session(args, planned, model)
    times = []
    for i in range(max(1, args.repeat)):
        t = time.perf_counter()
        outs = sess.run(None, feeds, progress=_bar(f"run {i + 1}/{max(1, args.repeat)}"))
        times.append(time.perf_counter() - t)
    stats = sess.last_run_stats
    for name, arr in zip(sess.output_names, outs):
        print(f"  output {name:<24} {str(arr.dtype):<8} {list(arr.shape)}")
    print(f"  run: median {np.median(times) * 1e3:.1f} ms over {len(times)} run(s); {stats.nodes_run} nodes; "
          f"{stats.allocations} runtime allocations; workspace from plan {stats.workspace_from_plan}, "
          f"scratch fallbacks {stats.scratch_fallbacks}")
    _device_lines(sess, lambda line: print("  " + line))
    if args.check:
        worst = _check(sess, args.model, feeds, outs)
        ok = worst <= args.tolerance
        print(f"  check {'PASSED' if ok else 'FAILED'}: worst difference {worst:.3g} (tolerance {args.tolerance:g})")
        return 0 if ok else 1
    return 0


def cmd_generate(args: argparse.Namespace) -> int:
    from ._generate import generate, generation_max_shapes
    from ._tokenizer import Tokenizer

    model, label = _model(args.model)
    model = model if isinstance(model, ort_graph.Model) else ort_graph.load(model)
    tok_path = pathlib.Path(args.model).parent / "tokenizer.json" if args.model else None
    vocab = model.graph.values["logits"].shape[-1]
    tok = Tokenizer.from_file(tok_path) if tok_path and tok_path.exists() else Tokenizer.bytes_fallback(int(vocab))
    ids = tok.encode(args.prompt)
    dims = _dims(args.dim)
    opts = _options(args, dims)
    maxes = generation_max_shapes(model, len(ids), len(ids) + args.max_new_tokens, dims)
    if maxes is not None:
        # one plan for prefill and every decode step (each step's inputs are no larger): zero allocations per token
        opts.max_shapes = maxes
        opts.add_session_config_entry("session.pre_allocate_execution_buffers", "1")
    else:
        _progress("note: cannot tell every input dimension of the decode steps ahead; each new shape is planned on "
                  "its first step, outside the initial plan — pass --dim NAME=N for the model's symbolic dims")
    _progress(f"loading and planning {label}")
    sess = InferenceSession(model, opts, providers=_providers(args))
    print(args.prompt, end="", flush=True)
    t, allocations, count = time.perf_counter(), 0, 0
    for token in generate(sess, ids, args.max_new_tokens, args.top_k, args.temperature, args.seed):
        allocations += sess.last_run_stats.allocations
        count += 1
        print(tok.decode_one(token), end="", flush=True)
    print()
    elapsed = time.perf_counter() - t
    _progress(f"{count} tokens in {elapsed:.2f} s ({elapsed / max(count, 1) * 1e3:.1f} ms/token); "
              f"{allocations} runtime allocations in total ({sess.last_run_stats.layout})")
    _device_lines(sess, _progress)
    sess.close()
    return 0


def _device_lines(sess: InferenceSession, emit) -> None:
    """Each device's peak as measured by its allocator, against the capacity it is held to."""
    for device, use in sess.device_memory().items():
        cap = use["capacity"]
        emit(f"{device} memory: peak {ort_partition.format_bytes(use['peak'])} (weights "
             f"{ort_partition.format_bytes(use['weights'])}) of capacity "
             f"{'unlimited' if cap is None else ort_partition.format_bytes(cap)}")


def cmd_kernels(args: argparse.Namespace) -> int:
    from ._kernels import kernel_table

    print(kernel_table())
    return 0


def cmd_demo(args: argparse.Namespace) -> int:
    from ._demo import demo

    return demo()


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="ortrun", description="Run ONNX models on machines with too little accelerator memory.")
    sub = p.add_subparsers(dest="command", required=True)

    def common(sp: argparse.ArgumentParser) -> None:
        sp.add_argument("model", nargs="?", help="an .onnx file (default: the built-in demo decoder)")
        sp.add_argument("--budget", help="device budgets, e.g. cuda:6GiB, gpu:64MiB,cpu:8GiB or cuda:90%% "
                                          "(a share of the device's free memory)")
        sp.add_argument("--layers", help="name-based rules, e.g. 'cuda(layers.[0-15]); cpu(layers.[16-31])'")
        sp.add_argument("--annotations", help="rules matched against layer_ann node annotations")
        sp.add_argument("--dim", action="append", help="free dimension override name=N (repeatable)")
        sp.add_argument("--providers", help="comma-separated providers in priority order "
                        "(default CUDAExecutionProvider,CPUExecutionProvider; SimulatedGPUExecutionProvider stands in for a GPU)")
        sp.add_argument("--device-profile", help="plan for a GPU that is not present: h200, h100, a100, l4, rtx4090")
        sp.add_argument("--pre-allocate", action="store_true", help="one buffer per device, allocated at init")
        sp.add_argument("--stream-weights", nargs="?", const="on", choices=("on", "off", "auto"),
                        help="stream layers that do not fit the budget through device slots (alone: on; default: "
                             "auto, the cost model decides)")

    sp = sub.add_parser("plan", help="placement per layer and device, and the memory plan")
    common(sp)
    sp.add_argument("--json", action="store_true", help="machine-readable output (layout in the README)")
    sp.set_defaults(fn=cmd_plan)
    sp = sub.add_parser("run", help="run once (generated or given inputs) and summarize")
    common(sp)
    sp.add_argument("--input", action="append", help="name=file.npy (repeatable)")
    sp.add_argument("--check", action="store_true", help="compare every output with onnxruntime")
    sp.add_argument("--tolerance", type=float, default=1e-3)
    sp.add_argument("--repeat", type=int, default=1)
    sp.add_argument("--seed", type=int, default=0)
    sp.set_defaults(fn=cmd_run)
    sp = sub.add_parser("generate", help="greedy / top-k decoding with a KV cache")
    common(sp)
    sp.add_argument("--prompt", required=True)
    sp.add_argument("--max-new-tokens", type=int, default=16)
    sp.add_argument("--top-k", type=int, default=1)
    sp.add_argument("--temperature", type=float, default=1.0)
    sp.add_argument("--seed", type=int, default=0)
    sp.set_defaults(fn=cmd_generate)
    sp = sub.add_parser("kernels", help="every registered kernel, its EP, estimate and declaration")
    sp.set_defaults(fn=cmd_kernels)
    sp = sub.add_parser("demo", help="the whole story on the built-in demo decoder")
    sp.set_defaults(fn=cmd_demo)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.fn(args)
    except (SessionError, ort_graph.GraphError, ort_partition.PartitionError, ort_abi.AbiError, ValueError,
            OSError) as e:
        print(f"ortrun: error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
