"""Text in, text out: Hugging Face tokenizers when installed, the built-in BPE fallback agreeing with it,
genai_config.json (EOS, context length, model file), model folders, stdin prompts, EOS stops, streaming."""

import io
import json
import sys
import warnings

import pytest

from ort_graph import zoo
from ort_session import InvalidInputError
from ort_session._cli_text import read_prompt
from ort_session._model_files import resolve_model
from ort_session._tokenizer import (
    BuiltinTokenizer,
    BytesCodec,
    StreamDecoder,
    TextFallbackWarning,
    load_tokenizer,
)
from ort_session.cli import main

CORPUS = ["the quick brown fox jumps over the lazy dog", "the lazy dogs sleep; the quick foxes don't!",
          "naïve café 123 4567 über", "hello world, hello there", "ünïcödé wörds and 日本語 text"] * 10
TEXTS = ["the quick dog's café jumped 1234 times!!", "  two  spaces", "über naïve", "hello, there world",
         "unseen xyz 日本", ""]


def _trained(kind: str):
    tokenizers = pytest.importorskip("tokenizers", reason="Hugging Face tokenizers is the optional extra ort-session[text]")
    from tokenizers import decoders, models, pre_tokenizers, processors, trainers

    if kind == "bytelevel":
        tok = tokenizers.Tokenizer(models.BPE())
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        tok.decoder = decoders.ByteLevel()
        trainer = trainers.BpeTrainer(vocab_size=320, special_tokens=["<s>", "</s>"],
                                      initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    elif kind == "metaspace":
        tok = tokenizers.Tokenizer(models.BPE(unk_token="<unk>", byte_fallback=True))
        tok.pre_tokenizer = pre_tokenizers.Metaspace()
        tok.decoder = decoders.Sequence([decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse(),
                                         decoders.Strip(" ", 1, 0)])
        trainer = trainers.BpeTrainer(vocab_size=400, special_tokens=["<unk>", "<s>", "</s>",
                                                                      *(f"<0x{b:02X}>" for b in range(256))])
    else:
        tok = tokenizers.Tokenizer(models.BPE(unk_token="<unk>"))
        tok.pre_tokenizer = pre_tokenizers.Whitespace()
        trainer = trainers.BpeTrainer(vocab_size=200, special_tokens=["<unk>", "<s>", "</s>"])
    tok.train_from_iterator(CORPUS, trainer)
    tok.post_processor = processors.TemplateProcessing(single="<s> $A", special_tokens=[("<s>", tok.token_to_id("<s>"))])
    return tok


@pytest.mark.parametrize("kind", ["bytelevel", "metaspace", "whitespace"])
def test_builtin_bpe_encodes_as_tokenizers_does(kind):
    hf = _trained(kind)
    ours = BuiltinTokenizer(json.loads(hf.to_str()))
    assert len(json.loads(hf.to_str())["model"]["merges"]) > 50  # merges really are applied
    for text in TEXTS:
        assert ours.encode(text) == hf.encode(text).ids, text


@pytest.mark.parametrize("kind", ["bytelevel", "metaspace"])
def test_builtin_bpe_decodes_as_tokenizers_does(kind):
    hf = _trained(kind)
    ours = BuiltinTokenizer(json.loads(hf.to_str()))
    for text in TEXTS:
        ids = hf.encode(text).ids
        assert ours.decode(ids) == hf.decode(ids), text


def test_load_tokenizer_prefers_tokenizers_and_warns_on_fallbacks(tmp_path, monkeypatch):
    hf = _trained("bytelevel")
    path = tmp_path / "tokenizer.json"
    path.write_text(hf.to_str())
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert load_tokenizer(path, 320).kind == "tokenizers"
    monkeypatch.setitem(sys.modules, "tokenizers", None)
    with pytest.warns(TextFallbackWarning, match="built-in fallback"):
        assert load_tokenizer(path, 320).kind == "builtin BPE"
    with pytest.warns(TextFallbackWarning, match="UTF-8 byte values"):
        assert isinstance(load_tokenizer(None, 256), BytesCodec)


def test_unknown_tokenizer_parts_are_refused_by_name():
    data = {"model": {"type": "BPE", "vocab": {"a": 0}, "merges": []}, "pre_tokenizer": {"type": "Digits"}}
    with pytest.raises(InvalidInputError, match="pre-tokenizer 'Digits'.*ort-session\\[text\\]"):
        BuiltinTokenizer(data)
    with pytest.raises(InvalidInputError, match="reads BPE, WordLevel and WordPiece models, got 'Unigram'"):
        BuiltinTokenizer({"model": {"type": "Unigram", "vocab": [["a", 0.0]]}})


def test_stream_decoder_holds_back_incomplete_utf8_and_separates_from_the_prompt():
    codec = BytesCodec(256)
    stream = StreamDecoder(codec)
    pieces = [stream.push(b) for b in "é!".encode()]
    assert pieces == ["", "é", "!"]
    words = BuiltinTokenizer({"model": {"type": "WordLevel", "vocab": {"a": 0, "b": 1}, "unk_token": "a"},
                              "pre_tokenizer": {"type": "Whitespace"}})
    stream = StreamDecoder(words, words.encode("a b"))
    assert stream.push(1) == " b"


def test_prompt_from_stdin():
    assert read_prompt("-", io.StringIO("from stdin\n")) == "from stdin"
    assert read_prompt(None, io.StringIO("piped")) == "piped"  # StringIO is not a terminal
    assert read_prompt("given", io.StringIO("ignored")) == "given"

    class Tty(io.StringIO):
        def isatty(self):
            return True

    with pytest.raises(SystemExit, match="give a prompt"):
        read_prompt(None, Tty())


def _folder(tmp_path, config: dict, tokenizer: str | None = None, name: str = "decoder.onnx"):
    zoo.write_decoder(tmp_path / name, zoo.DecoderConfig(layers=2))
    (tmp_path / "genai_config.json").write_text(json.dumps(config))
    if tokenizer is not None:
        (tmp_path / "tokenizer.json").write_text(tokenizer)
    return tmp_path


def test_model_folder_and_genai_config(tmp_path):
    folder = _folder(tmp_path, {"model": {"eos_token_id": [2, 7], "bos_token_id": 1, "context_length": 64,
                                          "decoder": {"filename": "decoder.onnx"}}}, tokenizer="{}")
    files = resolve_model(folder)
    assert files.model == folder / "decoder.onnx" and files.tokenizer == folder / "tokenizer.json"
    assert (files.eos_ids, files.bos_id, files.context_length) == ((2, 7), 1, 64)
    assert resolve_model(folder / "decoder.onnx").eos_ids == (2, 7)  # the file's folder config is read too
    (folder / "genai_config.json").write_text(json.dumps({"model": {"decoder": {"filename": "gone.onnx"}}}))
    with pytest.raises(InvalidInputError, match="names model file 'gone.onnx'"):
        resolve_model(folder)


def test_folder_with_several_models_and_no_config_is_refused(tmp_path):
    zoo.write_decoder(tmp_path / "a.onnx", zoo.DecoderConfig(layers=1))
    zoo.write_decoder(tmp_path / "b.onnx", zoo.DecoderConfig(layers=1))
    with pytest.raises(InvalidInputError, match=r"has 2 \.onnx files \['a.onnx', 'b.onnx'\]"):
        resolve_model(tmp_path)


def test_generate_on_a_folder_stops_at_eos_and_caps_at_the_context(tmp_path, capsys):
    folder = _folder(tmp_path, {"model": {"context_length": 10, "decoder": {"filename": "decoder.onnx"}}})
    assert main(["generate", str(folder), "-p", "ab", "-n", "50"]) == 0
    captured = capsys.readouterr()
    assert "8 tokens" in captured.err and "planned context 10" in captured.err  # 2 prompt bytes + 8 = the context
    assert "ortrun: warning: no tokenizer.json beside the model" in captured.err
    from ort_session import InferenceSession
    from ort_session._generate import generate

    sess = InferenceSession(str(folder / "decoder.onnx"), {"free_dimension_overrides": {"batch": 1}})
    eos = next(generate(sess, [ord("a"), ord("b")], 1))  # the first greedy token: make it the EOS id
    (folder / "genai_config.json").write_text(json.dumps({"model": {"eos_token_id": eos, "context_length": 10,
                                                                    "decoder": {"filename": "decoder.onnx"}}}))
    assert main(["generate", str(folder), "-p", "ab", "-n", "50"]) == 0
    captured = capsys.readouterr()
    assert "1 tokens" in captured.err and "stopped at EOS" in captured.err and captured.out == "ab\n"


def test_stream_decoder_flushes_what_it_held_back():
    stream = StreamDecoder(BytesCodec(256))
    assert stream.push(0xC3) == "" and stream.flush() == "\ufffd"


def test_generate_reads_the_real_exports_tokenizer_and_config(shared_models, capsys):
    pytest.importorskip("tokenizers", reason="Hugging Face tokenizers is the optional extra ort-session[text]")
    folder = shared_models / "llama_l4" / "genai_fp32_cpu"
    assert main(["generate", str(folder), "-p", "t5 t6 t7", "-n", "4"]) == 0
    captured = capsys.readouterr()
    assert captured.out.startswith("t5 t6 t7 t") and len(captured.out.split()) == 7
    assert "(tokenizers)" in captured.err and "stopping at EOS [2]" in captured.err


def test_ctx_size_plans_the_whole_context_and_caps_generation(tmp_path, capsys):
    folder = _folder(tmp_path, {"model": {"decoder": {"filename": "decoder.onnx"}}})
    assert main(["generate", str(folder), "-p", "ab", "-n", "3", "-c", "40"]) == 0
    err = capsys.readouterr().err
    assert "up to 3 new, planned context 40" in err and "3 tokens" in err and "0 runtime allocations" in err
    assert main(["generate", str(folder), "-p", "ab", "-n", "30", "-c", "6"]) == 0
    err = capsys.readouterr().err
    assert "up to 4 new, planned context 6" in err and "4 tokens" in err
