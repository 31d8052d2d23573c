"""ort-serve: the generation engine above ort-session.

    from ort_serve import ChatTemplate, SamplingParams, Sampler
    template = ChatTemplate.from_folder("./model-folder")
    prompt = template.render([{"role": "user", "content": "Hello"}])
    sampler = Sampler(SamplingParams(temperature=0.7, top_p=0.9, seed=1))
    token = sampler.pick(logits)

Sampling, chat templates, the scheduler (admission, continuous batching, preemption) over a KV-cache pool planned
inside the device budget, `ortrun chat` and `ortrun serve` live here, never in an execution provider.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

# names -> the private module that defines them, imported on first use: `ortrun --help` loads this package's
# command registration (`_commands`) and must not import numpy or a model
_WHERE = {
    "AdmissionError": "._serve_errors", "ServeError": "._serve_errors",
    "ChatTemplate": "._chat_template", "ChatTemplateError": "._chat_template", "Message": "._chat_template",
    "Conversation": "._conversation", "ConversationError": "._conversation", "TurnStats": "._conversation",
    "Sampler": "._sampling", "SamplingError": "._sampling", "SamplingParams": "._sampling",
    "StopMatcher": "._sampling", "generation_defaults": "._sampling",
}

__all__ = sorted([*_WHERE, "__version__"])


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module 'ort_serve' has no attribute {name!r}")
    value = getattr(importlib.import_module(module, __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_WHERE})


if TYPE_CHECKING:
    from ._chat_template import ChatTemplate, ChatTemplateError, Message  # noqa: F401
    from ._conversation import Conversation, ConversationError, TurnStats  # noqa: F401
    from ._sampling import Sampler, SamplingError, SamplingParams, StopMatcher, generation_defaults  # noqa: F401
    from ._serve_errors import AdmissionError, ServeError  # noqa: F401
