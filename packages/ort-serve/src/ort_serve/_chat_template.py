"""A model's chat template: `tokenizer_config.json`'s `chat_template`, rendered as transformers'
`apply_chat_template` renders it.

transformers compiles the template in Jinja2's `ImmutableSandboxedEnvironment` with `trim_blocks=True`,
`lstrip_blocks=True` and the loop-controls extension, a `tojson` filter that keeps non-ASCII text
(`ensure_ascii=False`), and the globals `raise_exception(message)` and `strftime_now(format)`; it passes
`messages`, `add_generation_prompt`, `tools`, `documents` and every special token of the tokenizer config
(`bos_token`, `eos_token`, ...) as variables. A template given as a list of named templates takes the one named
`default` (or the one asked for). A template that calls `raise_exception` is a `ChatTemplateError` with its message.
"""

from __future__ import annotations

import datetime
import json
import pathlib
from collections.abc import Mapping, Sequence
from typing import Any

import attrs

__all__ = ["ChatTemplate", "ChatTemplateError", "Message"]

Message = Mapping[str, Any]  # {"role": "system" | "user" | "assistant" | ..., "content": str, ...}


class ChatTemplateError(ValueError):
    """The template is missing, does not compile, or refused the conversation (its raise_exception)."""


def _token_text(value: Any) -> str | None:
    """A special token as tokenizer_config.json writes it: a string, or an AddedToken dict with `content`."""
    if isinstance(value, str):
        return value
    if isinstance(value, Mapping) and isinstance(value.get("content"), str):
        return value["content"]
    return None


@attrs.frozen
class ChatTemplate:
    """A compiled chat template and the special tokens it may refer to."""

    source: str
    special_tokens: Mapping[str, str] = attrs.field(factory=dict)
    _compiled: Any = attrs.field(default=None, alias="compiled", eq=False, repr=False)

    @classmethod
    def from_config(cls, config: Mapping[str, Any], name: str | None = None) -> ChatTemplate:
        template = config.get("chat_template")
        if isinstance(template, list):  # [{"name": ..., "template": ...}, ...]
            named = {t.get("name"): t.get("template") for t in template if isinstance(t, Mapping)}
            want = name or "default"
            if want not in named:
                raise ChatTemplateError(f"no chat template named {want!r}; the config has {sorted(map(str, named))!r}")
            template = named[want]
        if not isinstance(template, str) or not template.strip():
            raise ChatTemplateError("the tokenizer config has no chat_template; give one (--chat-template FILE) or "
                                    "use a model folder whose tokenizer_config.json has it")
        tokens = {k: t for k, v in config.items() if k.endswith("_token") and (t := _token_text(v)) is not None}
        return cls(template, tokens, compiled=_compile(template))

    @classmethod
    def from_folder(cls, folder: str | pathlib.Path, name: str | None = None, source: str | None = None) -> ChatTemplate:
        """The folder's template; `source` (a template's text) replaces it, the folder's special tokens kept."""
        path = pathlib.Path(folder) / "tokenizer_config.json"
        try:
            config = json.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError as e:
            if source is not None:
                return cls.from_config({"chat_template": source})
            raise ChatTemplateError(f"{str(path)!r} does not exist: the chat template lives there") from e
        except (OSError, ValueError, UnicodeDecodeError) as e:
            raise ChatTemplateError(f"{str(path)!r} is not readable JSON: {e}") from e
        if not isinstance(config, Mapping):
            raise ChatTemplateError(f"{str(path)!r} holds {type(config).__name__}, not a JSON object")
        if source is not None:
            config = {**config, "chat_template": source}
        jinja = pathlib.Path(folder) / "chat_template.jinja"  # newer transformers save the template beside it
        if "chat_template" not in config and jinja.is_file():
            config = {**config, "chat_template": jinja.read_text(encoding="utf-8")}
        return cls.from_config(config, name)

    def render(self, messages: Sequence[Message], add_generation_prompt: bool = True, **extra: Any) -> str:
        """The conversation as the prompt text the model was trained on (with the assistant's opening when
        `add_generation_prompt`)."""
        for i, m in enumerate(messages):
            if not isinstance(m, Mapping) or not isinstance(m.get("role"), str):
                raise ChatTemplateError(f"message {i} is {m!r}: expected a dict with a 'role' and 'content'")
        compiled = self._compiled if self._compiled is not None else _compile(self.source)
        variables = {**self.special_tokens, "tools": None, "documents": None, **extra,
                     "messages": [dict(m) for m in messages], "add_generation_prompt": add_generation_prompt}
        try:
            return compiled.render(**variables)
        except ChatTemplateError:
            raise
        except Exception as e:  # jinja2's TemplateError, or a Python error inside the template's expressions
            raise ChatTemplateError(f"the chat template failed: {type(e).__name__}: {e}") from e


def _raise(message: str) -> None:
    raise ChatTemplateError(f"the chat template refused the conversation: {message}")


def _compile(source: str) -> Any:
    import jinja2
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=["jinja2.ext.loopcontrols"])
    env.filters["tojson"] = lambda x, indent=None, separators=None, sort_keys=False: json.dumps(
        x, ensure_ascii=False, indent=indent, separators=separators, sort_keys=sort_keys)
    env.globals["raise_exception"] = _raise
    env.globals["strftime_now"] = lambda fmt: datetime.datetime.now().strftime(fmt)
    try:
        return env.from_string(source)
    except jinja2.TemplateError as e:
        raise ChatTemplateError(f"the chat template does not compile: {e}") from e
