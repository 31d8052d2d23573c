"""A small reader for Hugging Face `tokenizer.json` vocabularies (WordLevel, BPE/Unigram by greedy
longest match), used by `ortrun generate` when a tokenizer file sits beside the model. Without
one, text maps to byte values modulo the vocabulary size."""

from __future__ import annotations

import json
import pathlib
import re

import attrs


@attrs.define
class Tokenizer:
    vocab: dict[str, int]
    kind: str = "bytes"  # "word", "greedy" or "bytes"
    unk_id: int = 0
    vocab_size: int = 256
    bos_id: int | None = None
    _inverse: dict[int, str] = attrs.field(factory=dict, repr=False, alias="inverse")

    def __attrs_post_init__(self) -> None:
        self._inverse = {i: t for t, i in self.vocab.items()}

    @classmethod
    def bytes_fallback(cls, vocab_size: int) -> Tokenizer:
        return cls(vocab={}, kind="bytes", vocab_size=vocab_size)

    @classmethod
    def from_file(cls, path: str | pathlib.Path) -> Tokenizer:
        data = json.loads(pathlib.Path(path).read_text())
        model = data.get("model", {})
        vocab = model.get("vocab")
        if isinstance(vocab, list):  # Unigram: [[piece, score], ...]
            vocab = {piece: i for i, (piece, _score) in enumerate(vocab)}
        if not isinstance(vocab, dict) or not vocab:
            raise ValueError(f"{str(path)!r} has no model.vocab this reader understands (type {model.get('type')!r})")
        kind = "word" if model.get("type") == "WordLevel" else "greedy"
        unk = vocab.get(model.get("unk_token") or "<unk>", 0)
        bos = vocab.get("<s>", vocab.get("<|begin_of_text|>"))
        return cls(vocab=vocab, kind=kind, unk_id=unk, vocab_size=max(vocab.values()) + 1, bos_id=bos)

    def encode(self, text: str) -> list[int]:
        if self.kind == "bytes":
            return [b % self.vocab_size for b in text.encode("utf-8")] or [0]
        ids: list[int] = [] if self.bos_id is None else [self.bos_id]
        words = re.findall(r"\w+|[^\w\s]", text)
        if self.kind == "word":
            return ids + [self.vocab.get(w, self.unk_id) for w in words]
        longest = max(len(t) for t in self.vocab)
        for i, word in enumerate(words):
            piece = ("Ġ" if i else "") + word
            pos = 0
            while pos < len(piece):
                for end in range(min(len(piece), pos + longest), pos, -1):
                    if piece[pos:end] in self.vocab:
                        ids.append(self.vocab[piece[pos:end]])
                        pos = end
                        break
                else:
                    ids.append(self.unk_id)
                    pos += 1
        return ids

    def decode_one(self, token: int) -> str:
        if self.kind == "bytes":
            return bytes([token % 256]).decode("latin-1")
        text = self._inverse.get(token, f"<{token}>")
        if self.kind == "word":
            return " " + text
        return text.replace("Ġ", " ").replace("▁", " ")
