"""Tokenizer files beside tokenizer.json: WordPiece vocab.txt (against tokenizers' BertWordPieceTokenizer) and
SentencePiece tokenizer.model (special tokens matched in the text, BOS from tokenizer_config.json), found in
model folders, and the fallback naming what it cannot read."""

import io
import json
import sys

import pytest

from ort_session import InvalidInputError
from ort_session._model_files import resolve_model
from ort_session._tokenizer import TextFallbackWarning, load_tokenizer
from ort_session._tokenizer_formats import WordPieceTokenizer

CORPUS = ["the quick brown fox jumps over the lazy dog", "Hello, World! don't stop: naïve café",
          "unaffable unwanted running runner 12345", "日本語 text and more text"] * 20
TEXTS = ["Hello, world!", "the unaffable runner's café", "naïve 日本 fox", "xyzzy unknownword", "  spaced   out  ",
         "don't . stop ?", ""]


def _vocab(tmp_path):
    tokenizers = pytest.importorskip("tokenizers", reason="the reference is Hugging Face tokenizers")
    hf = tokenizers.BertWordPieceTokenizer()
    hf.train_from_iterator(CORPUS, vocab_size=120, min_frequency=1)
    hf.save_model(str(tmp_path))
    path = tmp_path / "vocab.txt"
    return tokenizers.BertWordPieceTokenizer(str(path)), path  # from the file: [CLS] $A [SEP], as BERT folders


def test_wordpiece_encodes_and_decodes_as_tokenizers_does(tmp_path):
    hf, path = _vocab(tmp_path)
    ours = WordPieceTokenizer.from_file(path)
    assert any(t.startswith("##") for t in ours.vocab)  # continuations really are used
    for text in TEXTS:
        ids = hf.encode(text).ids
        assert ours.encode(text) == ids, text
        assert ours.encode(text, add_special_tokens=False) == ids[1:-1], text
        assert ours.decode(ids) == hf.decode(ids), text


@pytest.mark.parametrize("lowercase", [True, False])
def test_wordpiece_tokenizer_json_without_tokenizers_reads_as_tokenizers_does(tmp_path, monkeypatch, lowercase):
    import tokenizers

    _, path = _vocab(tmp_path)
    hf = tokenizers.BertWordPieceTokenizer(str(path), lowercase=lowercase)
    (tmp_path / "tokenizer.json").write_text(hf._tokenizer.to_str())
    monkeypatch.setitem(sys.modules, "tokenizers", None)
    with pytest.warns(TextFallbackWarning, match=r"built-in fallback \(builtin WordPiece\)"):
        ours = load_tokenizer(tmp_path / "tokenizer.json", 120)
    for text in TEXTS + ["Hello HELLO"]:
        ids = hf.encode(text).ids
        assert ours.encode(text) == ids and ours.decode(ids) == hf.decode(ids), text


def test_wordpiece_tokenizer_json_with_unknown_parts_is_refused_by_name():
    data = {"model": {"type": "WordPiece", "vocab": {"[UNK]": 0}}, "pre_tokenizer": {"type": "Digits"}}
    with pytest.raises(InvalidInputError, match=r"pre-tokenizer BertPreTokenizer, not 'Digits'.*ort-session\[text\]"):
        WordPieceTokenizer.from_tokenizer_json(data)


def test_wordpiece_folder_is_found_and_keeps_case_when_told(tmp_path):
    _, path = _vocab(tmp_path)
    assert load_tokenizer(path, 120).kind == "builtin WordPiece"
    (tmp_path / "model.onnx").write_bytes(b"")
    assert resolve_model(tmp_path).tokenizer == path
    (tmp_path / "tokenizer_config.json").write_text(json.dumps({"do_lower_case": False}))
    assert WordPieceTokenizer.from_file(path).encode("Hello", add_special_tokens=False) != \
        WordPieceTokenizer.from_file(path).encode("hello", add_special_tokens=False)


def test_wordpiece_without_unknown_token_is_refused(tmp_path):
    path = tmp_path / "vocab.txt"
    path.write_text("a\nb\n")
    with pytest.raises(InvalidInputError, match=r"no unknown token '\[UNK\]'"):
        WordPieceTokenizer.from_file(path)


def _sentencepiece_model(tmp_path):
    spm = pytest.importorskip("sentencepiece", reason="the optional extra ort-session[sentencepiece]")
    buf = io.BytesIO()
    spm.SentencePieceTrainer.train(sentence_iterator=iter(CORPUS), model_writer=buf, vocab_size=60,
                                   model_type="bpe", character_coverage=1.0, minloglevel=2)
    path = tmp_path / "tokenizer.model"
    path.write_bytes(buf.getvalue())
    return spm.SentencePieceProcessor(model_file=str(path)), path


def test_sentencepiece_model_with_specials_and_bos(tmp_path):
    sp, path = _sentencepiece_model(tmp_path)
    (tmp_path / "tokenizer_config.json").write_text(json.dumps(
        {"add_bos_token": True, "added_tokens_decoder": {"3": {"content": "<|end|>", "special": True}}}))
    codec = load_tokenizer(path, 60)
    assert codec.kind == "sentencepiece"
    text = "the lazy dog"
    assert codec.encode(text) == [sp.bos_id(), *sp.encode(text)]
    assert codec.encode(f"<s>{text}<|end|>", add_special_tokens=False) == [sp.bos_id(), *sp.encode(text), 3]
    assert codec.decode(codec.encode(f"{text}<|end|>")) == text
    (tmp_path / "model.onnx").write_bytes(b"")
    assert resolve_model(tmp_path).tokenizer == path


def test_sentencepiece_without_the_package_says_how_to_get_it(tmp_path, monkeypatch):
    _, path = _sentencepiece_model(tmp_path)
    monkeypatch.setitem(sys.modules, "sentencepiece", None)
    with pytest.raises(InvalidInputError, match=r"SentencePiece model.*ort-session\[sentencepiece\]"):
        load_tokenizer(path, 60)
