"""Chat templates render as transformers' apply_chat_template does (expected texts written out by hand for the
templates of SmolLM2 / Qwen2 (ChatML) and Llama 3), with the generation prompt, the special tokens and the
template's own refusals."""

from __future__ import annotations

import json

import pytest

from ort_serve import ChatTemplate, ChatTemplateError

CHATML = ("{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
          "{{ '<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n' }}"
          "{% endif %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}"
          "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}")

LLAMA3 = ("{% set loop_messages = messages %}{% for message in loop_messages %}"
          "{% set content = '<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n'+ message['content'] | trim "
          "+ '<|eot_id|>' %}{% if loop.index0 == 0 %}{% set content = bos_token + content %}{% endif %}"
          "{{ content }}{% endfor %}{% if add_generation_prompt %}"
          "{{ '<|start_header_id|>assistant<|end_header_id|>\n\n' }}{% endif %}")

STRICT = ("{% for m in messages %}{% if m['role'] not in ['user', 'assistant'] %}"
          "{{ raise_exception('Only user and assistant roles are supported!') }}{% endif %}"
          "[{{ m['role'] }}] {{ m['content'] }}\n{% endfor %}")

MSGS = [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello!"},
        {"role": "user", "content": "2+2?"}]


def test_chatml_with_the_default_system_prompt_and_generation_prompt():
    t = ChatTemplate.from_config({"chat_template": CHATML})
    want = ("<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n"
            "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\nHello!<|im_end|>\n"
            "<|im_start|>user\n2+2?<|im_end|>\n<|im_start|>assistant\n")
    assert t.render(MSGS) == want
    assert t.render(MSGS, add_generation_prompt=False) == want.removesuffix("<|im_start|>assistant\n")
    system = [{"role": "system", "content": "Be brief."}, MSGS[0]]
    assert t.render(system).startswith("<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi")


def test_llama3_uses_the_bos_token_from_the_config_and_trims(tmp_path):
    (tmp_path / "tokenizer_config.json").write_text(json.dumps(
        {"chat_template": LLAMA3, "bos_token": {"content": "<|begin_of_text|>", "lstrip": False},
         "eos_token": "<|eot_id|>"}))
    t = ChatTemplate.from_folder(tmp_path)
    got = t.render([{"role": "user", "content": "  Hi  "}])
    assert got == ("<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>"
                   "<|start_header_id|>assistant<|end_header_id|>\n\n")
    assert t.special_tokens["eos_token"] == "<|eot_id|>"


def test_named_templates_tojson_and_strftime():
    config = {"chat_template": [{"name": "default", "template": "{{ messages[0]['content'] | tojson }}"},
                                {"name": "tool_use", "template": "{{ strftime_now('%Y') | length }}"}]}
    assert ChatTemplate.from_config(config).render([{"role": "user", "content": "é"}]) == '"é"'
    assert ChatTemplate.from_config(config, "tool_use").render([{"role": "user", "content": ""}]) == "4"
    with pytest.raises(ChatTemplateError, match="no chat template named 'rag'"):
        ChatTemplate.from_config(config, "rag")


def test_refusals_and_bad_templates_are_chat_template_errors(tmp_path):
    t = ChatTemplate.from_config({"chat_template": STRICT})
    assert t.render(MSGS[:1], add_generation_prompt=False) == "[user] Hi\n"
    with pytest.raises(ChatTemplateError, match="Only user and assistant roles"):
        t.render([{"role": "system", "content": "x"}])
    with pytest.raises(ChatTemplateError, match="does not compile"):
        ChatTemplate.from_config({"chat_template": "{% for %}"})
    with pytest.raises(ChatTemplateError, match="no chat_template"):
        ChatTemplate.from_config({})
    with pytest.raises(ChatTemplateError, match="does not exist"):
        ChatTemplate.from_folder(tmp_path)
    # the sandbox: no attribute access to Python internals
    with pytest.raises(ChatTemplateError):
        ChatTemplate.from_config({"chat_template": "{{ ''.__class__.__mro__[1].__subclasses__() }}"}).render(MSGS)


def test_a_given_template_replaces_the_folders_and_keeps_its_special_tokens(tmp_path):
    given = "{{ bos_token }}{% for m in messages %}{{ m['content'] }}{% endfor %}"
    assert ChatTemplate.from_folder(tmp_path, source=given).render(MSGS[:1]) == "Hi"  # no config: no tokens
    (tmp_path / "tokenizer_config.json").write_text(json.dumps({"bos_token": "<s>", "chat_template": "{{ 1 }}"}))
    assert ChatTemplate.from_folder(tmp_path, source=given).render(MSGS[:1]) == "<s>Hi"
