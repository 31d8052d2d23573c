"""Tokenizer files other than `tokenizer.json` that model folders carry: SentencePiece `tokenizer.model`
(through the `sentencepiece` package) and BERT-style WordPiece `vocab.txt` (read here: BERT's basic
tokenization, then greedy longest-match-first with `##` continuations, as Hugging Face `tokenizers`'
BertWordPieceTokenizer does). Special tokens of the folder's `tokenizer_config.json` (`added_tokens_decoder`)
are matched in the text before the model sees it, as transformers does."""

from __future__ import annotations

import json
import pathlib
import re
import unicodedata
from typing import Any

from ._errors import InvalidInputError


def _folder_config(path: pathlib.Path) -> dict[str, Any]:
    cfg = path.parent / "tokenizer_config.json"
    try:
        data = json.loads(cfg.read_text(encoding="utf-8")) if cfg.is_file() else {}
    except (OSError, ValueError, UnicodeDecodeError):
        return {}
    return data if isinstance(data, dict) else {}


def _split_specials(text: str, specials: dict[str, int]) -> list[tuple[str, int | None]]:
    """(chunk, None) for plain text, (token, id) for a special token found in it (longest first)."""
    if not specials:
        return [(text, None)]
    pattern = "(" + "|".join(re.escape(t) for t in sorted(specials, key=len, reverse=True)) + ")"
    return [(c, specials[c] if i % 2 else None) for i, c in enumerate(re.split(pattern, text)) if c]


class SentencePieceTokenizer:
    """A SentencePiece `tokenizer.model` (Llama, Mistral, Gemma, T5 exports). BOS is added when the folder's
    tokenizer_config.json says `add_bos_token` (transformers' LlamaTokenizer default: true)."""

    kind = "sentencepiece"

    def __init__(self, path: pathlib.Path) -> None:
        import sentencepiece

        self.sp = sentencepiece.SentencePieceProcessor()
        try:
            self.sp.Load(str(path))
        except (OSError, RuntimeError) as e:
            raise InvalidInputError(f"cannot read SentencePiece model {str(path)!r}: {e}") from e
        config = _folder_config(path)
        n = self.sp.GetPieceSize()
        self.specials = {self.sp.IdToPiece(i): i for i in range(n) if self.sp.IsControl(i) and self.sp.IdToPiece(i)}
        for key, entry in (config.get("added_tokens_decoder") or {}).items():
            if isinstance(entry, dict) and isinstance(entry.get("content"), str) and str(key).isdigit():
                self.specials[entry["content"]] = int(key)
        self.special_ids = set(self.specials.values())
        self.add_bos = bool(config.get("add_bos_token", True)) and self.sp.bos_id() >= 0
        self.add_eos = bool(config.get("add_eos_token", False)) and self.sp.eos_id() >= 0

    def encode(self, text: str, add_special_tokens: bool = True) -> list[int]:
        ids = [self.sp.bos_id()] if add_special_tokens and self.add_bos else []
        for chunk, special in _split_specials(text, self.specials):
            ids += [special] if special is not None else list(self.sp.EncodeAsIds(chunk))
        return ids + ([self.sp.eos_id()] if add_special_tokens and self.add_eos else [])

    def decode(self, ids: list[int]) -> str:
        n = self.sp.GetPieceSize()
        return self.sp.DecodeIds([i for i in ids if i not in self.special_ids and 0 <= i < n])


def _is_punctuation(ch: str) -> bool:
    cp = ord(ch)
    if 33 <= cp <= 47 or 58 <= cp <= 64 or 91 <= cp <= 96 or 123 <= cp <= 126:
        return True
    return unicodedata.category(ch).startswith("P")


def _is_cjk(cp: int) -> bool:
    return any(a <= cp <= b for a, b in ((0x4E00, 0x9FFF), (0x3400, 0x4DBF), (0x20000, 0x2A6DF), (0x2A700, 0x2B73F),
                                         (0x2B740, 0x2B81F), (0x2B820, 0x2CEAF), (0xF900, 0xFAFF), (0x2F800, 0x2FA1F)))


_CLEANUP = ((" .", "."), (" ?", "?"), (" !", "!"), (" ,", ","), (" ' ", "'"), (" n't", "n't"), (" 'm", "'m"),
            (" do not", " don't"), (" 's", "'s"), (" 've", "'ve"), (" 're", "'re"))


class WordPieceTokenizer:
    """A BERT `vocab.txt` (one token a line, its line number the id): text cleaned, CJK characters and
    punctuation split off, lower-cased with accents stripped (unless the folder's tokenizer_config.json says
    `do_lower_case: false`; a tokenizer.json's BertNormalizer says it there), each word matched greedily longest-first with `##` continuations, a word that
    cannot be matched (or longer than 100 characters) becoming `[UNK]`; `[CLS] ... [SEP]` around the text."""

    kind = "builtin WordPiece"

    def __init__(self, vocab: dict[str, int], *, lowercase: bool = True, strip_accents: bool | None = None,
                 unk: str = "[UNK]", prefix: str = "##", max_chars: int = 100, specials: dict[str, int] | None = None,
                 around: tuple[list[int], list[int]] | None = None, source: str = "vocab.txt") -> None:
        if unk not in vocab:
            raise InvalidInputError(f"WordPiece vocabulary {source!r} has no unknown token {unk!r}; add it (BERT's is "
                                    "[UNK]) or set unk_token in tokenizer_config.json")
        self.vocab, self.inverse = vocab, {i: t for t, i in vocab.items()}
        self.lowercase = lowercase
        self.strip_accents = lowercase if strip_accents is None else strip_accents
        self.unk, self.prefix, self.max_chars = unk, prefix, max_chars
        self.specials = specials if specials is not None else {
            t: i for t, i in vocab.items() if re.fullmatch(r"\[[A-Z]+\]", t)}
        cls, sep = vocab.get("[CLS]"), vocab.get("[SEP]")
        self.around = around if around is not None else ([cls], [sep]) if cls is not None and sep is not None else ([], [])

    @classmethod
    def from_file(cls, path: pathlib.Path) -> WordPieceTokenizer:
        """A `vocab.txt`, with the folder's tokenizer_config.json (`do_lower_case`, `unk_token`)."""
        try:
            lines = path.read_text(encoding="utf-8").splitlines()
        except (OSError, UnicodeDecodeError) as e:
            raise InvalidInputError(f"cannot read WordPiece vocabulary {str(path)!r}: {e}") from e
        vocab = {t: i for i, t in reversed(list(enumerate(t.rstrip("\r") for t in lines))) if t}
        if not vocab:
            raise InvalidInputError(f"WordPiece vocabulary {str(path)!r} is empty: expected one token a line")
        config = _folder_config(path)
        unk = config.get("unk_token") if isinstance(config.get("unk_token"), str) else "[UNK]"
        return cls(vocab, lowercase=bool(config.get("do_lower_case", True)), unk=unk, source=str(path))

    @classmethod
    def from_tokenizer_json(cls, data: dict[str, Any], source: str = "tokenizer.json") -> WordPieceTokenizer:
        """A `tokenizer.json` whose model is WordPiece, under BertNormalizer and BertPreTokenizer (BERT's);
        other normalizers or pre-tokenizers are refused by name."""
        from ._tokenizer import template_ids

        model, norm, pre = data.get("model") or {}, data.get("normalizer") or {}, data.get("pre_tokenizer") or {}
        for part, value, known in (("normalizer", norm, "BertNormalizer"), ("pre-tokenizer", pre, "BertPreTokenizer")):
            if value and value.get("type") != known:
                raise InvalidInputError(f"{source!r}: the built-in WordPiece reader knows {part} {known}, not "
                                        f"{value.get('type')!r}; install Hugging Face tokenizers: pip install "
                                        "'ort-session[text]'")
        vocab = model.get("vocab")
        if not isinstance(vocab, dict) or not vocab:
            raise InvalidInputError(f"{source!r}: its WordPiece model has no vocab")
        specials = {t["content"]: t["id"] for t in data.get("added_tokens") or [] if t.get("special")}
        return cls(vocab, lowercase=bool(norm.get("lowercase", False)), strip_accents=norm.get("strip_accents"),
                   unk=model.get("unk_token", "[UNK]"), prefix=model.get("continuing_subword_prefix", "##"),
                   max_chars=int(model.get("max_input_chars_per_word", 100)), specials=specials,
                   around=template_ids(data.get("post_processor"), {**vocab, **specials}), source=source)

    def _words(self, text: str) -> list[str]:
        out = []
        for ch in text:
            cp = ord(ch)
            if cp == 0 or cp == 0xFFFD or (unicodedata.category(ch).startswith("C") and ch not in "\t\n\r"):
                continue
            out.append(" " if ch.isspace() else f" {ch} " if _is_cjk(cp) else ch)
        text = "".join(out)
        if self.strip_accents:
            text = "".join(c for c in unicodedata.normalize("NFD", text) if unicodedata.category(c) != "Mn")
        if self.lowercase:
            text = text.lower()
        words: list[str] = []
        for word in text.split():
            current = ""
            for ch in word:
                if _is_punctuation(ch):
                    words += [current, ch] if current else [ch]
                    current = ""
                else:
                    current += ch
            if current:
                words.append(current)
        return words

    def _pieces(self, word: str) -> list[int]:
        if len(word) > self.max_chars:
            return [self.vocab[self.unk]]
        ids, start = [], 0
        while start < len(word):
            end = len(word)
            while end > start:
                piece = word[start:end] if start == 0 else self.prefix + word[start:end]
                if piece in self.vocab:
                    ids.append(self.vocab[piece])
                    break
                end -= 1
            else:
                return [self.vocab[self.unk]]
            start = end
        return ids

    def encode(self, text: str, add_special_tokens: bool = True) -> list[int]:
        ids: list[int] = []
        for chunk, special in _split_specials(text, self.specials):
            ids += [special] if special is not None else [i for w in self._words(chunk) for i in self._pieces(w)]
        return [*self.around[0], *ids, *self.around[1]] if add_special_tokens else ids

    def decode(self, ids: list[int]) -> str:
        special = set(self.specials.values())
        pieces = [self.inverse[i] for i in ids if i in self.inverse and i not in special]
        text = []
        for n, p in enumerate(pieces):
            p = p[len(self.prefix):] if n and p.startswith(self.prefix) else p if n == 0 else " " + p
            for dirty, clean in _CLEANUP:
                p = p.replace(dirty, clean)
            text.append(p)
        return "".join(text)
