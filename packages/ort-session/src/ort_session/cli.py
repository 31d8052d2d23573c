"""`ortrun`: plan, run, generate, kernels and demo.

    ortrun plan  [MODEL] [--budget cuda:6GiB] [--layers RULES | --annotations RULES | --gpu-layers N]
                 [--dim batch=1] [--max-shape x=[1,3,48,320]] [--json] [--plot plan.png] [-c CTX]
    ortrun run   [MODEL] [--input name=file.npy] [--dim NAME=N] [--max-shape INPUT=[d0,...]] [--check]
    ortrun generate [MODEL] [-p TEXT | -p - | < prompt.txt] [-n N] [-c CTX] [--top-k K]
    ortrun kernels
    ortrun demo
    ortrun --version

Every subcommand takes --kernel-library PATH and --option KEY=VALUE (both repeatable). MODEL is an .onnx file
or a model folder (genai_config.json); without it, commands use the built-in demo decoder. `run` makes its
inputs first (`--input` files, else generated: `--max-shape`, `--dim` (NAME or INPUT.AXIS), what the model
pins, then past*=0, *seq*/*len*=8, others 1) and plans exactly their shapes; `generate` plans prefill and every decode step.

This module and the parser import only the standard library; each command imports what it needs.
plan, run and generate take `--stream-weights [on|off|auto]` (session.weight_streaming; alone: on).
"""

from __future__ import annotations

import sys
from collections.abc import Sequence


def _handled_errors() -> tuple[type[BaseException], ...]:
    import ort_abi
    import ort_graph
    import ort_partition

    from ._errors import SessionError

    return (SessionError, ort_graph.GraphError, ort_partition.PartitionError, ort_abi.AbiError, ValueError, OSError)


def main(argv: Sequence[str] | None = None) -> int:
    from ._cli_args import build_parser

    parser = build_parser()
    args = parser.parse_args(argv)
    if args.version:
        from ._cli_report import version_text

        print(version_text())
        return 0
    if args.command is None:
        parser.print_help(sys.stderr)
        return 2
    from . import _progress
    from ._cli_report import warnings_as_lines

    with warnings_as_lines(), _progress.reporting(_progress.Progress()):
        try:
            return args.fn(args)
        except _handled_errors() as e:
            print(f"ortrun: error: {e}", file=sys.stderr)
            return 2


if __name__ == "__main__":
    sys.exit(main())
