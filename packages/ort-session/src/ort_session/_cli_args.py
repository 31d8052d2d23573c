"""`ortrun`'s argument parser: help text with an example on every option, values checked when the
arguments are parsed (a bad budget or an unknown device profile is the parser's error, with usage).

This module imports only the standard library: `ortrun --help` must not load onnx, numpy or a model."""

from __future__ import annotations

import argparse

# the built-in device profiles (ort_partition.PROFILES; a test keeps the two equal) and their aliases
PROFILE_NAMES = ("a100", "a100-40gb", "h100", "h200", "l4", "rtx4090")


def budget_arg(text: str) -> str:
    """A budget string, validated now (ort_partition.parse_budget) and passed on as written."""
    from ort_partition import BudgetError, parse_budget

    try:
        parse_budget(text)
    except BudgetError as e:
        raise argparse.ArgumentTypeError(f"{e}; e.g. --budget cuda:6GiB or --budget cuda:90%") from e
    return text


def profile_arg(text: str) -> str:
    from ort_partition import UnknownProfileError, get_profile

    try:
        return get_profile(text).name
    except UnknownProfileError as e:
        raise argparse.ArgumentTypeError(str(e)) from e


def key_value_arg(what: str, example: str):
    def parse(text: str) -> tuple[str, str]:
        key, sep, value = text.partition("=")
        if not sep or not key.strip():
            raise argparse.ArgumentTypeError(f"{text!r} must look like key=value, e.g. {what} {example}")
        return key.strip(), value.strip()

    parse.__name__ = what.lstrip("-")  # argparse names the option's type in its message
    return parse


def plot_arg(text: str) -> str:
    if not text.lower().endswith((".png", ".svg", ".pdf")):
        raise argparse.ArgumentTypeError(f"{text!r} must end in .png, .svg or .pdf, e.g. --plot plan.png")
    return text


INT64_MAX = 2**63 - 1  # ONNX dimensions are int64
SEED_MAX = 2**64 - 1  # numpy's generators take any non-negative int; ortrun keeps seeds to 64 bits


def dim_arg(text: str) -> list[tuple[str, int]]:
    """`--dim NAME=N`: a symbolic dimension or an input's axis (`x.2=48`); entries may be joined by ';'
    (ort_graph.parse_dims, the grammar of every dimension option)."""
    from ort_graph import DimSpecError, parse_dims

    try:
        entries = [] if any(c.isdigit() and not c.isascii() for c in text) else list(parse_dims(text).items())
    except DimSpecError:
        entries = []
    if not entries:
        raise argparse.ArgumentTypeError(f"{text!r} must look like name=INTEGER (>= 0), NAME a symbolic dimension "
                                         "or INPUT.AXIS, e.g. --dim batch=1 or --dim x.2=48")
    for name, value in entries:
        if value > INT64_MAX:
            raise argparse.ArgumentTypeError(f"{text[:80]!r}: {name}={value} does not fit an ONNX dimension (int64, at "
                                             f"most {INT64_MAX}), e.g. --dim batch=1")
    return entries


def max_shape_arg(text: str) -> dict[str, list[int]]:
    """`--max-shape INPUT=[d0,d1,...]`; entries may be joined by ';' (ort_graph.parse_shapes)."""
    from ort_graph import DimSpecError, parse_shapes

    try:
        shapes = parse_shapes(text)
    except DimSpecError as e:
        raise argparse.ArgumentTypeError(f"{e}; e.g. --max-shape x=[1,3,48,320]") from e
    if not shapes:
        raise argparse.ArgumentTypeError(f"{text!r} names no input; give INPUT=[d0,d1,...], e.g. "
                                         "--max-shape x=[1,3,48,320]")
    return shapes


def seed_arg(text: str) -> int:
    t = text.strip()
    if not (t.isdecimal() and t.isascii()) or len(t) > 20 or int(t) > SEED_MAX:
        raise argparse.ArgumentTypeError(f"{text[:40]!r} is not a seed: an integer from 0 to 2**64-1, e.g. --seed 1")
    return int(t)


def tolerance_arg(text: str) -> float:
    import math

    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or value < 0:
        raise argparse.ArgumentTypeError(f"{text[:40]!r} is not a finite number >= 0, e.g. --tolerance 1e-2")
    return value


def positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = -1
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a positive integer, e.g. 16")
    return value


def non_negative_int(text: str) -> int:
    if not (text.strip().isdecimal() and text.strip().isascii()) or len(text.strip()) > 18:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer >= 0, e.g. 4")
    return int(text)


def _everywhere(sp: argparse.ArgumentParser) -> None:
    """Options every subcommand takes."""
    sp.add_argument("--kernel-library", action="append", default=[], metavar="PATH",
                    help="a C kernel library built against abi/include/ort_kernel_abi.h, registered before "
                         "placement (repeatable), e.g. --kernel-library ./libmykernels.so")
    sp.add_argument("--option", action="append", default=[], metavar="KEY=VALUE",
                    type=key_value_arg("--option", "session.pre_allocate_execution_buffers=1"),
                    help="a session option or config entry (repeatable; ONNX Runtime's names), e.g. "
                         "--option session.pre_allocate_execution_buffers=1 --option enable_fusions=0")


def _model_options(sp: argparse.ArgumentParser) -> None:
    sp.add_argument("model", nargs="?", metavar="MODEL",
                    help="an .onnx file or a model folder (genai_config.json names the file); default: the "
                         "built-in demo decoder, e.g. ./phi-3-mini-int4/")
    sp.add_argument("--budget", type=budget_arg, metavar="DEVICE:SIZE[,...]",
                    help="device memory budgets, e.g. --budget cuda:6GiB, --budget gpu:64MiB,cpu:8GiB or "
                         "--budget cuda:90%% (a share of the device's free memory, or of the profile's)")
    rules = sp.add_mutually_exclusive_group()
    rules.add_argument("--layers", metavar="RULES",
                       help="name-based layer rules, e.g. --layers 'cuda(layers.[0-15]); cpu(layers.[16-31])'")
    rules.add_argument("--annotations", metavar="RULES",
                       help="rules matched against layer_ann node annotations, e.g. --annotations 'cuda(L0); cpu(L1)'")
    rules.add_argument("--gpu-layers", type=non_negative_int, metavar="N",
                       help="llama.cpp's -ngl: the first N decoder layers on the GPU provider, the others on the "
                            "CPU, e.g. --gpu-layers 20")
    sp.add_argument("--dim", action="extend", type=dim_arg, default=[], metavar="NAME=N",
                    help="a free dimension override by name or INPUT.AXIS (repeatable), e.g. --dim batch=1 "
                         "--dim x.2=48")
    sp.add_argument("--providers", metavar="P1,P2",
                    help="providers in priority order (default CUDAExecutionProvider,CPUExecutionProvider; "
                         "SimulatedGPUExecutionProvider stands in for a GPU), e.g. --providers "
                         "SimulatedGPUExecutionProvider,CPUExecutionProvider")
    sp.add_argument("--device-profile", type=profile_arg, metavar="{" + ",".join(PROFILE_NAMES) + "}",
                    help="plan for a GPU that is not present (no CUDA wheel needed to choose one), e.g. "
                         "--device-profile h100")
    sp.add_argument("--pre-allocate", action="store_true",
                    help="one buffer per device, allocated at initialization (runs then allocate nothing)")
    sp.add_argument("--stream-weights", nargs="?", const="on", choices=("on", "off", "auto"),
                    help="stream layers that do not fit the budget through device slots (alone: on; default: auto, "
                         "the cost model decides), e.g. --stream-weights")
    _everywhere(sp)


def _max_shape_option(sp: argparse.ArgumentParser) -> None:
    sp.add_argument("--max-shape", action="append", type=max_shape_arg, default=[], metavar="INPUT=[d0,...]",
                    help="plan for this largest shape of an input (max_shapes; repeatable; `run` generates inputs "
                         "of this shape), e.g. --max-shape x=[1,3,48,320]")


def build_parser() -> argparse.ArgumentParser:
    from . import _cli_commands as cmd

    p = argparse.ArgumentParser(
        prog="ortrun", description="Run ONNX models on machines with too little accelerator memory.",
        epilog="examples:\n  ortrun plan model.onnx --budget cuda:6GiB\n  ortrun run model.onnx --check\n"
               "  ortrun generate ./model-folder/ -p 'Hello' -n 32\n  ortrun plan --device-profile h100 --budget "
               "cuda:4GiB --plot plan.png", formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--version", action="store_true", help="print every installed ort-lowmem package's version")
    sub = p.add_subparsers(dest="command", metavar="COMMAND")

    sp = sub.add_parser("plan", help="placement per layer and device, and the memory plan (no run)")
    _model_options(sp)
    sp.add_argument("--json", action="store_true", help="machine-readable output (layout in the README)")
    sp.add_argument("--plot", metavar="FILE.png|FILE.svg", type=plot_arg,
                    help="draw the placement per layer and each device's memory over execution steps against "
                         "its budget (needs matplotlib: pip install 'ort-session[plot]'), e.g. --plot plan.png")
    sp.add_argument("-c", "--ctx-size", type=positive_int, metavar="N",
                    help="plan a KV-cache decoder for a context of N tokens (prefill and every decode step), "
                         "e.g. -c 4096")
    _max_shape_option(sp)
    sp.set_defaults(fn=cmd.cmd_plan)

    sp = sub.add_parser("run", help="run once (generated or given inputs) and summarize")
    _model_options(sp)
    sp.add_argument("--input", action="append", default=[], metavar="NAME=FILE.npy",
                    type=key_value_arg("--input", "input_ids=ids.npy"),
                    help="an input from a .npy file (repeatable), e.g. --input input_ids=ids.npy")
    sp.add_argument("--check", action="store_true", help="compare every output with onnxruntime")
    sp.add_argument("--tolerance", type=tolerance_arg, default=None, metavar="X",
                    help="largest |ours - onnxruntime| --check accepts for every output, e.g. --tolerance 1e-2 "
                         "(default: per output, 1e-3 for float arithmetic, plus one int8 step of the output's "
                         "range downstream of quantized activations; integers equal)")
    sp.add_argument("--repeat", type=positive_int, default=1, metavar="N",
                    help="run N times and report the median time, e.g. --repeat 10")
    sp.add_argument("--seed", type=seed_arg, default=0, metavar="N", help="seed of the generated inputs, e.g. --seed 1")
    _max_shape_option(sp)
    sp.set_defaults(fn=cmd.cmd_run)

    sp = sub.add_parser("generate", help="greedy / top-k decoding with a KV cache, streamed")
    _model_options(sp)
    sp.add_argument("-p", "--prompt", metavar="TEXT",
                    help="the prompt; '-' (or none, with stdin not a terminal) reads it from stdin, "
                         "e.g. -p 'Once upon a time'")
    sp.add_argument("-n", "--n-predict", "--max-new-tokens", dest="max_new_tokens", type=positive_int, default=16,
                    metavar="N", help="new tokens at most (default 16; generation stops earlier at EOS), e.g. -n 64")
    sp.add_argument("-c", "--ctx-size", type=positive_int, metavar="N",
                    help="the context length planned for, prompt included: one plan (and KV cache) for this many "
                         "tokens, and generation stops there (default: the prompt + N new tokens, capped at "
                         "genai_config.json's context_length), e.g. -c 2048")
    sp.add_argument("--tokenizer", metavar="PATH",
                    help="a tokenizer.json (default: the one beside the model or in its folder), "
                         "e.g. --tokenizer ./tokenizer.json")
    sp.add_argument("--top-k", type=positive_int, default=1, metavar="K", help="1 is greedy (default), e.g. --top-k 40")
    sp.add_argument("--temperature", type=float, default=1.0, metavar="T", help="sampling temperature, e.g. 0.7")
    sp.add_argument("--seed", type=seed_arg, default=0, metavar="N", help="sampling seed, e.g. --seed 1")
    sp.set_defaults(fn=cmd.cmd_generate)

    sp = sub.add_parser("kernels", help="every registered kernel, its EP, estimate and declaration")
    _everywhere(sp)
    sp.set_defaults(fn=cmd.cmd_kernels)
    sp = sub.add_parser("demo", help="the whole story on the built-in demo decoder")
    _everywhere(sp)
    sp.set_defaults(fn=cmd.cmd_demo)
    _plugin_commands(sub)
    return p


ENGINE_COMMANDS = {"chat": "an interactive chat with a model folder", "serve": "an OpenAI- and ollama-compatible "
                   "HTTP server with continuous batching"}


def _plugin_commands(sub: argparse._SubParsersAction) -> None:
    """Subcommands of packages above ort-session (the `ortrun.commands` entry point group: ort-serve's chat and
    serve); each registers with `register(subparsers, model_options)`. The engine's commands that no installed
    package provides answer with how to install it instead of argparse's 'invalid choice'."""
    import importlib.metadata

    added: set[str] = set()
    for entry in importlib.metadata.entry_points(group="ortrun.commands"):
        added.update(entry.load()(sub, _model_options) or ())
    for name, what in ENGINE_COMMANDS.items():
        if name not in added:
            sp = sub.add_parser(name, help=f"{what} (needs ort-serve)")
            sp.add_argument("rest", nargs=argparse.REMAINDER, help=argparse.SUPPRESS)
            sp.set_defaults(fn=_needs_engine(name))


def _needs_engine(name: str):
    def fn(args: argparse.Namespace) -> int:
        from ._errors import SessionError

        raise SessionError(f"`ortrun {name}` is ort-serve's (the generation engine): install it with "
                           "pip install ./packages/ort-serve (add [serve] for `ortrun serve`)")
    return fn
