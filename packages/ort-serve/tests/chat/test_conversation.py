"""The conversation engine: answers with the cache kept between turns equal answers from a fresh prefill of the
whole conversation (chunked or not); a re-render that does not extend the cache is cut back and said so; greedy
tokens equal an onnxruntime greedy loop on the shared genai exports."""

import numpy as np
import pytest

from ort_serve import Sampler, SamplingParams
from ort_serve._chat_cli import build_conversation


def _conversation(folder, *flags):
    from ort_session._cli_args import build_parser

    return build_conversation(build_parser().parse_args(["chat", str(folder), "--temperature", "0", "--ignore-eos",
                                                         *flags]))


def _answer(conv, text):
    pieces = []
    return "".join(pieces) if (stats := conv.reply(text, pieces.append)) else stats


@pytest.mark.parametrize("batch", ["512", "3"])
def test_cached_turns_answer_as_a_fresh_prefill_of_the_whole_conversation(folder, batch):
    conv = _conversation(folder, "-n", "6", "-b", batch)
    _answer(conv, "w7 w8 w9")
    cached = conv.reply("w10 w11", (second := []).append)
    assert cached.cached > 0 and cached.prefill < len(conv.cached) and not cached.reprefilled
    fresh = _conversation(folder, "-n", "6")
    fresh.messages = conv.messages[:2]
    stats = fresh.reply("w10 w11", (again := []).append)
    assert stats.cached == 0 and "".join(second) == "".join(again) and len("".join(again).split()) == 6


def test_a_render_that_does_not_extend_the_cache_is_cut_back_and_said(folder):
    conv = _conversation(folder, "-n", "6")
    words = []
    conv.reply("w7", words.append)
    answer = "".join(words).split()
    stop = f"{answer[2]} {answer[3]}"  # cuts the answer after two words, once the third was fed to make the fourth
    conv = _conversation(folder, "-n", "6", "--stop", stop)
    shown = []
    assert conv.reply("w7", shown.append).reason == "stop" and len("".join(shown).split()) == 2
    assert len(conv.cached) == 6 + 3  # the third answer token is in the cache, though not in the answer
    cut = conv.reply("w8", (after := []).append)
    assert cut.reprefilled and cut.cached == 6 + 2 and "re-prefilled from token 8" in cut.line()
    fresh = _conversation(folder, "-n", "6", "--stop", stop)
    fresh.messages = conv.messages[:2]
    fresh.reply("w8", (again := []).append)
    assert after == again


def _onnxruntime_greedy(path, ids, n, genai_feeds, kv_dtype=None):
    import onnxruntime as ort

    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    names = [o.name for o in sess.get_outputs()]
    out, past, feed = [], None, np.array([ids], np.int64)
    total = len(ids)
    for _ in range(n):
        results = dict(zip(names, sess.run(None, genai_feeds(feed, total, past, kv_dtype))))
        token = int(np.argmax(results["logits"][0, -1]))
        out.append(token)
        past, feed, total = results, np.array([[token]], np.int64), total + 1
    return out


@pytest.mark.parametrize("export", ["genai_fp32_cpu", "genai_int4_cpu"])
def test_greedy_tokens_equal_onnxruntime_on_the_genai_exports(shared_models, genai_feeds, export):
    from ort_session import InferenceSession
    from ort_session._generate import DecodeState, generate

    path = shared_models / "llama_l4" / export / "model.onnx"
    ids = [1, 15, 16, 17, 18, 19]
    want = _onnxruntime_greedy(path, ids, 12, genai_feeds)
    sess = InferenceSession(str(path))
    sampler = Sampler(SamplingParams(temperature=0.0, repetition_penalty=1.0))
    assert list(generate(sess, ids, 12, pick=sampler.pick)) == want
    state = DecodeState(sess, 64)  # the conversation's path: a chunked prefill, then one token a step
    logits = [state.step(ids[:4]), state.step(ids[4:])][-1]
    got = []
    for _ in range(12):
        got.append(int(np.argmax(logits)))
        logits = state.step([got[-1]])
    assert got == want


def _genai_greedy(folder, ids, n):
    import onnxruntime_genai as og  # the reference generator, a test dependency (nox TEST_TOOLS)

    model = og.Model(str(folder))
    params = og.GeneratorParams(model)
    params.set_search_options(max_length=len(ids) + n, do_sample=False)
    generator = og.Generator(model, params)
    generator.append_tokens(ids)
    out = []
    while not generator.is_done():
        generator.generate_next_token()
        out.append(int(generator.get_next_tokens()[0]))
    return out


@pytest.mark.parametrize("export", ["genai_fp32_cpu", "genai_int4_cpu"])
def test_chat_greedy_tokens_equal_onnxruntime_genai(shared_models, export):
    from ort_session import InferenceSession
    from ort_session._generate import DecodeState

    folder = shared_models / "llama_l4" / export
    ids = [1, 15, 16, 17, 18, 19]
    want = _genai_greedy(folder, ids, 12)
    state = DecodeState(InferenceSession(str(folder / "model.onnx")), 64)
    sampler = Sampler(SamplingParams(temperature=0.0, eos_ids=(2,)), ids)
    logits, got = state.step(ids), []
    while len(got) < len(want):
        got.append(sampler.pick(logits))
        logits = state.step([got[-1]])
    assert got == want


def test_the_context_ends_an_answer_and_the_next_turn_drops_it(folder):
    from ort_serve import ConversationError

    conv = _conversation(folder, "-n", "100", "-c", "32")
    stats = conv.reply("w7", (words := []).append)
    assert (stats.reason, stats.generated) == ("context", 32 - 6) and len("".join(words).split()) == 26
    # 39 tokens with the first turn: it goes; <|im_start|> user stays cached, w8 <|im_end|> <|im_start|> assistant
    # are prefilled
    notices = []
    again = conv.reply("w8", words.append, notices.append)
    assert (again.dropped, again.cached, again.prefill, again.reprefilled) == (1, 2, 4, True)
    assert notices == ["(context full: dropped the oldest turn)"]
    assert [m["content"] for m in conv.messages[::2]] == ["w8"]
    before = list(conv.messages)
    with pytest.raises(ConversationError, match=r"this message alone makes the turn 38 tokens \(the earlier turn "
                                                r"dropped\), more than the context of 32 .*shorten the message"):
        conv.reply(" ".join(["w9"] * 33), words.append)
    assert conv.messages == before
    conv.clear()
    assert conv.reply("w8", words.append).cached == 0


def test_a_full_context_drops_the_oldest_turns_keeps_the_system_prompt_and_answers_as_a_fresh_prefill(folder):
    flags = ("-n", "8", "-c", "64", "--system", "w5")
    conv = _conversation(folder, *flags)
    for text in ("w7", "w8", "w9", "w10"):  # the system prompt 4 tokens; each turn 4 + 11 (an answer of 8 words)
        assert conv.reply(text, [].append).dropped == 0
    long = " ".join(f"w{20 + i}" for i in range(10))  # 13 tokens + the assistant's opening 2
    # 4 + 4 x 15 + 15 = 79 tokens; without the oldest turn 64 (no room to answer), without two 49
    notices, answer = [], []
    stats = conv.reply(long, answer.append, notices.append)
    assert notices == ["(context full: dropped the 2 oldest turns)"] and stats.dropped == 2
    assert [m["content"] for m in conv.messages[::2]] == ["w9", "w10", long]
    # the system prompt and <|im_start|> user stay cached; the kept history is prefilled once
    assert (stats.cached, stats.prefill, stats.reprefilled) == (4 + 2, 49 - 6, True)
    fresh = _conversation(folder, *flags)
    fresh.messages = conv.messages[:-2]
    whole = fresh.reply(long, (again := []).append)
    assert (whole.dropped, whole.cached, whole.prefill) == (0, 0, 49) and answer == again


def test_folder_defaults_apply_under_the_flags(folder, tmp_path):
    import json
    import shutil

    from ort_serve._chat_cli import sampling_params
    from ort_session._cli_args import build_parser

    shutil.copytree(folder, tmp_path / "m")
    (tmp_path / "m" / "generation_config.json").write_text(json.dumps(
        {"do_sample": True, "temperature": 0.6, "top_p": 0.9, "eos_token_id": [2, 7]}))

    def params(*flags):
        args = build_parser().parse_args(["chat", str(tmp_path / "m"), *flags])
        return sampling_params(args, tmp_path / "m", {"search": {"top_k": 20}}, (2,))

    p = params()
    assert (p.temperature, p.top_p, p.top_k, p.eos_ids, p.max_new_tokens) == (0.6, 0.9, 20, (2, 7), 256)
    p = params("--temperature", "0", "--top-k", "5", "--stop", "x", "--stop", "y", "-n", "9", "--seed", "3",
               "--repeat-penalty", "1.1", "--presence-penalty", "0.5", "--frequency-penalty", "0.25", "--min-p", "0.1")
    assert (p.greedy, p.top_k, p.stop, p.max_new_tokens, p.seed, p.repetition_penalty, p.presence_penalty,
            p.frequency_penalty, p.min_p, p.top_p) == (True, 5, ("x", "y"), 9, 3, 1.1, 0.5, 0.25, 0.1, 0.9)
    assert params("--ignore-eos").eos_ids == ()


def test_request_stop_ends_the_answer_at_a_step_boundary_and_the_cache_stays_whole(folder):
    conv = _conversation(folder, "-n", "50")
    pieces = []

    def emit(piece):
        pieces.append(piece)
        if len(pieces) == 3:
            conv.request_stop()

    stats = conv.reply("w7", emit)
    assert (stats.reason, stats.generated, len(pieces)) == ("interrupted", 3, 3) and "Ctrl-C" in stats.line()
    assert conv.messages[-1] == {"role": "assistant", "content": "".join(pieces)}
    assert len(conv.cached) == 6 + 2  # the stop is seen before the third token is fed
    after = conv.reply("w8", [].append)
    assert (after.cached, after.prefill) == (6 + 2, 1 + 7) and not after.reprefilled and after.reason == "length"


def test_a_cache_kept_on_the_device_between_turns_answers_as_the_host_one(folder):
    gpu = ("--providers", "SimulatedGPUExecutionProvider,CPUExecutionProvider")
    host, device = _conversation(folder, "-n", "6"), _conversation(folder, "-n", "6", *gpu)
    assert host.state.device is None and device.state.device == "simgpu"
    for text in ("w7 w8", "w9"):
        a, b = [], []
        ha, hb = host.reply(text, a.append), device.reply(text, b.append)
        assert a == b and (ha.prefill, ha.cached) == (hb.prefill, hb.cached) and hb.allocations == 0
    # a device cache cannot be cut back in place: a render that does not extend it is prefilled from the start
    device.cached[-1] = -1  # the cache's last token no longer what the conversation renders
    whole = device.prompt_ids("w10")
    again = device.reply("w10", [].append)
    assert again.reprefilled and (again.cached, again.prefill) == (0, len(whole)) and len(device.cached) > len(whole)
