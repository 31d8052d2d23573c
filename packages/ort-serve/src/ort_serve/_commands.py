"""`ortrun`'s subcommands from ort-serve, found through the `ortrun.commands` entry point (ort-session's parser
calls `register(subparsers, model_options)`; this module imports only the standard library, so `ortrun --help`
stays light). Each command module adds its own subparser."""

from __future__ import annotations

import argparse
from collections.abc import Callable

COMMAND_MODULES = ("_chat_cli", "_serve_cli")


def register(sub: argparse._SubParsersAction, model_options: Callable[[argparse.ArgumentParser], None]) -> list[str]:
    """Add every command module's subparser; returns the command names added."""
    import importlib

    names: list[str] = []
    for module in COMMAND_MODULES:
        try:
            mod = importlib.import_module(f"{__package__}.{module}")
        except ModuleNotFoundError as e:
            if e.name != f"{__package__}.{module}":
                raise
            continue  # a command this version does not ship
        names.extend(mod.add_parser(sub, model_options))
    return names
