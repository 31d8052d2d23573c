"""`ortrun`'s subcommands. Heavy modules (numpy, onnx, the session) are imported inside the commands, so
building the parser (and `ortrun --help`) stays instant."""

from __future__ import annotations

import argparse
import sys
import time
import warnings
from typing import Any

DEMO_DIMS = {"batch": 1, "sequence": 16, "past_sequence": 0}
DEMO_LABEL = "built-in demo decoder (8 layers, hidden 256)"


def _say(msg: str) -> None:
    from . import _progress

    progress = _progress.current()
    if progress is not None:
        progress.line(msg)
    else:
        print(f"… {msg}", file=sys.stderr, flush=True)


def _load(args: argparse.Namespace) -> tuple[Any, str, Any]:
    """(model, label, ModelFiles or None) for MODEL: a file, a folder, or the built-in demo decoder."""
    import ort_graph

    from . import _progress
    from ._model_files import resolve_model

    if args.model is None:
        return ort_graph.zoo.demo_decoder(), DEMO_LABEL, None
    files = resolve_model(args.model)
    with _progress.phase(f"loading {files.model}"):
        model = ort_graph.load(str(files.model))
    return model, str(files.model), files


def gpu_layer_rules(model: Any, n: int) -> str:
    """--gpu-layers N as name rules: the first N decoder layers on the GPU provider, the rest on the CPU."""
    import re
    from collections import Counter

    import ort_partition

    words: Counter[str] = Counter()
    layers: set[int] = set()
    for node in model.graph.nodes:
        target = ort_partition.name_match_target(node)
        m = re.search(r"(?:^|[/.])(layers|layer|h|blocks|block)\.(\d+)(?=[/.]|$)", target or "")
        if m:
            words[m.group(1)] += 1
            layers.add(int(m.group(2)))
    if not layers:
        raise SystemExit("ortrun: error: --gpu-layers: no node name carries a decoder layer number (layers.N, "
                         "h.N, blocks.N); use --layers RULES or --budget instead")
    word, count = words.most_common(1)[0][0], max(layers) + 1
    rules = [f"gpu({word}.[0-{min(n, count) - 1}])"] if n else []
    if n < count:
        rules.append(f"cpu({word}.[{n}-{count - 1}])")
    return "; ".join(rules)


def _option_values(args: argparse.Namespace) -> dict[str, Any]:
    """`--option KEY=VALUE` pairs, each value read by its option's type (`_option_text`)."""
    from ._option_text import option_from_text

    return {key: option_from_text(key, text) for key, text in (getattr(args, "option", None) or ())}


def _options(args: argparse.Namespace, dims: dict[str, int], model: Any = None) -> Any:
    from ._options import LAYER_ASSIGNMENT, NAME_BASED_ASSIGNMENT, PRE_ALLOCATE, SessionOptions

    base: dict[str, Any] = {"budgets": getattr(args, "budget", None), "free_dimension_overrides": dims,
                            "device_profile": getattr(args, "device_profile", None)}
    if getattr(args, "kernel_library", None):
        base["kernel_libraries"] = list(args.kernel_library)
    opts = SessionOptions.from_mapping({**base, **_option_values(args)})
    if getattr(args, "layers", None):
        opts.add_session_config_entry(NAME_BASED_ASSIGNMENT, args.layers)
    if getattr(args, "annotations", None):
        opts.add_session_config_entry(LAYER_ASSIGNMENT, args.annotations)
    if getattr(args, "gpu_layers", None) is not None and model is not None:
        rules = gpu_layer_rules(model, args.gpu_layers)
        _say(f"--gpu-layers {args.gpu_layers}: rules {rules!r}")
        opts.add_session_config_entry(NAME_BASED_ASSIGNMENT, rules)
    if getattr(args, "pre_allocate", False):
        opts.add_session_config_entry(PRE_ALLOCATE, "1")
    if getattr(args, "stream_weights", None):  # weight streaming: off | on | auto (the session's default)
        opts.add_session_config_entry("session.weight_streaming", args.stream_weights)
    return opts


def _asks_for_a_gpu(args: argparse.Namespace) -> bool:
    """Whether the command line names a GPU: a cuda/gpu budget, a device profile, --gpu-layers, rules that
    place something on cuda."""
    text = " ".join(str(getattr(args, k, None) or "") for k in ("budget", "layers", "annotations")).lower()
    return ("cuda" in text or "gpu" in text or getattr(args, "device_profile", None) is not None
            or getattr(args, "gpu_layers", None) is not None)


def _providers(args: argparse.Namespace) -> list[str]:
    """--providers as given; else CUDA then the CPU where a CUDA device is present or the command asks for a GPU
    (its decline then says why it took nothing), and the CPU alone otherwise: no decline about a GPU nobody
    asked for on a machine without one."""
    if getattr(args, "providers", None):
        return [p.strip() for p in args.providers.split(",") if p.strip()]
    from ._ort_api import cuda_device_count

    if cuda_device_count() or _asks_for_a_gpu(args):
        return ["CUDAExecutionProvider", "CPUExecutionProvider"]
    return ["CPUExecutionProvider"]


def _session(args: argparse.Namespace, model: Any, label: str, opts: Any) -> Any:
    from ._cli_report import load_summary
    from ._session import InferenceSession

    t = time.perf_counter()
    sess = InferenceSession(model, opts, providers=_providers(args))
    _say(f"{label}: planned in {time.perf_counter() - t:.2f} s")
    for line in load_summary(sess):
        _say(line)
    return sess


def _run_feeds(args: argparse.Namespace, model: Any, dims: dict[str, int],
               materialize: bool = True) -> tuple[dict, dict[str, int]]:
    """The feeds `ortrun run` runs with (generated, then `--input` files) and every symbolic input dimension
    they bind: the session plans exactly these shapes (and `ortrun plan` plans the same ones). Inputs given a
    `--max-shape` are generated at that shape and planned by it (their dims are not pinned)."""
    import ort_graph

    from . import _progress
    from ._feeds import generate_inputs, generated_shapes, validate_feeds
    from ._input_defaults import feed_dims, fitted_dims
    from ._npy_file import load_npy_input

    with _progress.phase("resolving the input shapes"), warnings.catch_warnings():
        warnings.simplefilter("ignore", ort_graph.ShapeResolutionWarning)  # this trial is not the plan: no warning
        by_symbol, bounds = ort_graph.sizes_by_symbol(model.graph, dims, _max_shapes(args))
        trial = ort_graph.copy_model(model)
        ort_graph.resolve_shapes(trial, dims)
        files = {name: load_npy_input(name, path) for name, path in getattr(args, "input", None) or ()}
        from_files = feed_dims(trial.graph, files)
        given = {**by_symbol, **bounds, **from_files}
        generated_shapes(trial.graph, given, materialize)  # a size too large is named as such
        chosen, why = fitted_dims(model, trial.graph, given)  # checked against shape inference
        if why:
            _say(why)
        feeds = {**generate_inputs(trial.graph, chosen, seed=getattr(args, "seed", 0), materialize=materialize),
                 **files}
        _, bindings = validate_feeds(trial.graph, feeds)
    planned = {k: v for k, v in {**dims, **bindings}.items() if k not in bounds}
    assumed = {k: v for k, v in planned.items() if k not in dims and k not in by_symbol and k not in from_files}
    if assumed:
        _say(f"planning for the dims `ortrun run` feeds by default: {assumed!r}; give --dim NAME=N (a name or "
             "INPUT.AXIS) or --max-shape INPUT=[d0,d1,...] to plan others")
    args.assumed_dims = assumed  # a kernel that fails on them is told apart from one that fails on real sizes
    return feeds, planned


def _max_shapes(args: argparse.Namespace) -> dict[str, list[int]] | None:
    """The `--max-shape` entries as one `max_shapes` mapping (an input given two different shapes is refused)."""
    from ._errors import InvalidOptionError

    merged: dict[str, list[int]] = {}
    for entry in getattr(args, "max_shape", None) or ():
        for name, shape in entry.items():
            if merged.get(name, shape) != shape:
                raise InvalidOptionError(f"--max-shape gives input {name!r} two shapes, {merged[name]} and {shape}; "
                                         "give it one")
            merged[name] = shape
    return merged or None


def _dims(args: argparse.Namespace) -> dict[str, int]:
    return dict(args.dim) or (dict(DEMO_DIMS) if args.model is None else {})


def cmd_plan(args: argparse.Namespace) -> int:
    import json

    from ._generate import generation_max_shapes

    if args.plot:  # before any planning: a missing extra is reported at once
        from ._cli_plot import _matplotlib

        _matplotlib()
    model, label, _files = _load(args)
    dims = _dims(args)
    opts_dims = dims
    max_shapes = None
    if args.ctx_size:
        from ._context_limits import check_ctx_size

        check_ctx_size(model.graph, args.ctx_size)
        max_shapes = generation_max_shapes(model, args.ctx_size, args.ctx_size, dims)
        if max_shapes is None:
            raise SystemExit("ortrun: error: -c/--ctx-size: the model is not a KV-cache decoder whose every input "
                             "dimension can be told; pass --dim NAME=N instead")
    else:
        _feeds, planned = _run_feeds(args, model, dims, materialize=False)  # the dims `ortrun run` feeds: plan and run agree
        opts_dims = planned
    opts = _options(args, opts_dims, model)
    if max_shapes is not None or _max_shapes(args):
        opts.max_shapes = {**(max_shapes or {}), **(_max_shapes(args) or {})}  # --max-shape wins over -c's
    sess = _session(args, model, label, opts)
    print(json.dumps(sess.plan.to_dict(), indent=2) if args.json else sess.plan.to_table())
    if args.plot:
        from ._cli_plot import plot_plan

        plot_plan(sess, args.plot)
        _say(f"wrote {args.plot}")
    return 0


def _onnxruntime() -> Any:
    from ._errors import SessionError

    try:
        import onnxruntime
    except ImportError as e:
        raise SessionError("comparing with onnxruntime needs it installed: pip install 'ort-session[check]'") from e
    return onnxruntime


def _check(sess: Any, model: Any, feeds: dict, outs: list, tolerance: float | None) -> bool:
    """Every output against onnxruntime's at its tolerance (`_check`: quantization-aware unless --tolerance)."""
    import ort_graph

    from ._check import judge_outputs
    from ._errors import SessionError

    ort = _onnxruntime()
    src = ort_graph.to_proto(model).SerializeToString() if model.path is None else str(model.path)
    try:
        ref = ort.InferenceSession(src, providers=["CPUExecutionProvider"]).run(sess.output_names, feeds)
    except Exception as e:  # onnxruntime's own error types (Fail, NotImplemented, ...) share no useful base
        reason = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise SessionError(
            f"--check: onnxruntime {ort.__version__}'s CPU provider cannot run this model, so there is nothing to "
            f"compare with ({reason[:300]}); the run above finished. Check it another way (e.g. an fp32 export "
            "of the same model) or leave out --check") from e
    return judge_outputs(sess.output_names, outs, ref, model.graph, tolerance, print)


def _run_generated(sess: Any, feeds: dict, bar: Any, assumed: dict[str, int] | None) -> list:
    """`sess.run`, where a kernel failing on inputs made with assumed dims says so and how to give real ones (a
    CNN fed a 1 x 1 image fails in its first pooling layer: the dims, not the model, are wrong)."""
    from ._errors import KernelRunError

    try:
        return sess.run(None, feeds, progress=bar)
    except KernelRunError as e:
        if not assumed:
            raise
        raise KernelRunError(f"{e}. The inputs were generated with assumed dims {assumed!r}, which the model may "
                             "not accept: give its real sizes with --max-shape INPUT=[d0,d1,...] or --dim NAME=N, "
                             "or feed real inputs with --input NAME=FILE.npy") from e


def cmd_run(args: argparse.Namespace) -> int:
    import numpy as np

    import ort_graph

    from . import _progress

    model, label, _files = _load(args)
    reference = ort_graph.copy_model(model) if args.check else None  # the session rewrites its model
    feeds, planned = _run_feeds(args, model, _dims(args))
    opts = _options(args, planned, model)
    if _max_shapes(args):
        opts.max_shapes = _max_shapes(args)
    sess = _session(args, model, label, opts)
    times = []
    progress = _progress.current()
    for i in range(args.repeat):
        bar = (lambda done, total, i=i: progress.step(f"run {i + 1}/{args.repeat}", done, total, "nodes")) if progress else None
        t = time.perf_counter()
        outs = _run_generated(sess, feeds, bar, getattr(args, "assumed_dims", None))
        times.append(time.perf_counter() - t)
    stats = sess.last_run_stats
    for name, arr in zip(sess.output_names, outs):
        print(f"  output {name:<24} {str(arr.dtype):<8} {list(arr.shape)}")
    print(f"  run: median {np.median(times) * 1e3:.1f} ms over {len(times)} run(s); {stats.nodes_run} nodes; "
          f"{stats.allocations} runtime allocations; workspace from plan {stats.workspace_from_plan}, "
          f"scratch fallbacks {stats.scratch_fallbacks}")
    device_lines(sess, lambda line: print("  " + line))
    if args.check:
        ok = _check(sess, reference, feeds, outs, args.tolerance)
        print(f"  check {'PASSED' if ok else 'FAILED'}: every output within its tolerance" if ok else
              "  check FAILED: an output is outside its tolerance (the lines above say which)")
        return 0 if ok else 1
    return 0


def device_lines(sess: Any, emit: Any) -> None:
    """Each device's peak as measured by its allocator, against the capacity it is held to."""
    from ort_partition import format_bytes

    for device, use in sess.device_memory().items():
        cap = use["capacity"]
        emit(f"{device} memory: peak {format_bytes(use['peak'])} (weights {format_bytes(use['weights'])}) of "
             f"capacity {'unlimited' if cap is None else format_bytes(cap)}")


def cmd_generate(args: argparse.Namespace) -> int:
    from ._cli_text import generate_text

    return generate_text(args)


def cmd_kernels(args: argparse.Namespace) -> int:
    from ._kernels import kernel_table

    if args.option:
        _say(f"note: `kernels` lists registered kernels; --option {dict(args.option)!r} changes nothing here")
    print(kernel_table(args.kernel_library))
    return 0


def cmd_demo(args: argparse.Namespace) -> int:
    from ._demo import demo

    return demo(kernel_libraries=args.kernel_library, options=_option_values(args))
