"""Fixtures of the chat tests: a tiny chat model folder, the zoo decoder (2 layers, vocabulary 256), a WordLevel
tokenizer.json over words w6..w255 with ChatML's special tokens, and a ChatML chat template."""

from __future__ import annotations

import json
import pathlib

import pytest

CHATML = ("{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + "
          "'<|im_end|>' + '\\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}")
SPECIALS = {"<unk>": 0, "<|im_start|>": 1, "<|im_end|>": 2}
WORDS = {"user": 3, "assistant": 4, "system": 5, **{f"w{i}": i for i in range(6, 256)}}


def tokenizer_json() -> dict:
    return {"version": "1.0", "truncation": None, "padding": None,
            "added_tokens": [{"id": i, "content": t, "single_word": False, "lstrip": False, "rstrip": False,
                              "normalized": False, "special": True} for t, i in SPECIALS.items()],
            "normalizer": None, "pre_tokenizer": {"type": "WhitespaceSplit"}, "post_processor": None,
            "decoder": None, "model": {"type": "WordLevel", "vocab": {**SPECIALS, **WORDS}, "unk_token": "<unk>"}}


def write_chat_folder(folder: pathlib.Path, eos: int | None = 2, context: int = 256) -> pathlib.Path:
    from ort_graph import zoo

    folder.mkdir(parents=True, exist_ok=True)
    zoo.write_decoder(folder / "model.onnx", zoo.DecoderConfig(layers=2, max_positions=context))
    model = {"context_length": context, "decoder": {"filename": "model.onnx"}}
    if eos is not None:
        model["eos_token_id"] = eos
    (folder / "genai_config.json").write_text(json.dumps({"model": model}))
    (folder / "tokenizer.json").write_text(json.dumps(tokenizer_json()))
    (folder / "tokenizer_config.json").write_text(json.dumps({"chat_template": CHATML, "eos_token": "<|im_end|>"}))
    return folder


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    return write_chat_folder(tmp_path_factory.mktemp("chat"), context=256)


@pytest.fixture(scope="module")
def long_folder(tmp_path_factory):
    return write_chat_folder(tmp_path_factory.mktemp("chat-long"), context=2048)
