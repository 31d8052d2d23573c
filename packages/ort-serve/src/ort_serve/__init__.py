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

from ._chat_template import ChatTemplate, ChatTemplateError, Message
from ._sampling import Sampler, SamplingError, SamplingParams, StopMatcher, generation_defaults

__version__ = "0.1.0"

__all__ = ["ChatTemplate", "ChatTemplateError", "Message", "Sampler", "SamplingError", "SamplingParams", "StopMatcher",
           "__version__", "generation_defaults"]
