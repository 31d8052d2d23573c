"""Text in, text out for `ortrun generate` and `ortrun chat`.

`load_tokenizer(path, vocab_size)` reads a `tokenizer.json` with Hugging Face `tokenizers` when it is installed
(`pip install 'ort-session[text]'`); otherwise the built-in reader of `tokenizer.json` below (WordLevel, and BPE
with its merges: ByteLevel, Metaspace or Whitespace pre-tokenization, byte fallback). A SentencePiece
`tokenizer.model` is read by `sentencepiece` (`ort-session[sentencepiece]`), a WordPiece `vocab.txt` by the
built-in reader (`_tokenizer_formats`); without any tokenizer file
text maps to bytes (with a warning: the model then reads byte values, not its own tokens).
`StreamDecoder` turns ids into text as they are made, holding back incomplete UTF-8."""

from __future__ import annotations

import json
import pathlib
import re
import unicodedata
import warnings
from typing import Any, Protocol

from ._errors import InvalidInputError


class TextFallbackWarning(UserWarning):
    """Text is encoded without the model's own tokenizer (bytes, or the built-in reader)."""


class TextCodec(Protocol):
    kind: str

    def encode(self, text: str, add_special_tokens: bool = True) -> list[int]: ...

    def decode(self, ids: list[int]) -> str: ...


class HuggingFaceTokenizer:
    kind = "tokenizers"

    def __init__(self, path: pathlib.Path) -> None:
        import tokenizers

        self.inner = tokenizers.Tokenizer.from_file(str(path))

    def encode(self, text: str, add_special_tokens: bool = True) -> list[int]:
        return list(self.inner.encode(text, add_special_tokens=add_special_tokens).ids)

    def decode(self, ids: list[int]) -> str:
        return self.inner.decode(ids, skip_special_tokens=True)


class BytesCodec:
    """Text as UTF-8 byte values (modulo the vocabulary size): a model trained on its own tokens reads noise."""

    kind = "bytes"

    def __init__(self, vocab_size: int) -> None:
        self.vocab_size = max(1, vocab_size)

    def encode(self, text: str, add_special_tokens: bool = True) -> list[int]:  # noqa: ARG002 - bytes have none
        return [b % self.vocab_size for b in text.encode("utf-8")] or [0]

    def decode(self, ids: list[int]) -> str:
        return bytes(i % 256 for i in ids).decode("utf-8", errors="replace")


def _bytes_to_unicode() -> dict[int, str]:
    """GPT-2's reversible byte -> printable character map (ByteLevel)."""
    keep = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    chars, n = list(keep), 0
    for b in range(256):
        if b not in keep:
            keep.append(b)
            chars.append(256 + n)
            n += 1
    return {b: chr(c) for b, c in zip(keep, chars)}


_BYTE_MAP = _bytes_to_unicode()
_BYTE_UNMAP = {c: b for b, c in _BYTE_MAP.items()}
# GPT-2's split with \p{L} / \p{N} written for `re` (letters: word characters that are not digits or '_')
_GPT2_SPLIT = re.compile(r"""'s|'t|'re|'ve|'m|'ll|'d| ?[^\W\d_]+| ?\d+| ?[^\s\w]+|_+| ?_+|\s+(?!\S)|\s+""")
_BYTE_TOKEN = re.compile(r"^<0x([0-9A-Fa-f]{2})>$")


def template_ids(post: dict[str, Any] | None, ids_of: dict[str, int]) -> tuple[list[int], list[int]]:
    """The special tokens a post-processor puts before and after a single sequence: TemplateProcessing's ($A)
    and BertProcessing's ([CLS] $A [SEP])."""
    if post and post.get("type") == "BertProcessing":
        return [int(post["cls"][1])], [int(post["sep"][1])]
    if not post or post.get("type") != "TemplateProcessing":
        return [], []
    before: list[int] = []
    after: list[int] = []
    seen_a = False
    for piece in post.get("single", []):
        if "Sequence" in piece:
            seen_a = True
        elif "SpecialToken" in piece:
            token = piece["SpecialToken"]["id"]
            ids = post.get("special_tokens", {}).get(token, {}).get("ids") or [ids_of.get(token)]
            (after if seen_a else before).extend(i for i in ids if i is not None)
    return before, after


class BuiltinTokenizer:
    """The fallback reader of a `tokenizer.json`: WordLevel and BPE (merges applied by rank, as `tokenizers`
    does). Pre-tokenizers: ByteLevel, Metaspace, Whitespace, WhitespaceSplit and Sequences of them; anything
    else is refused with the name of the part it does not know."""

    def __init__(self, data: dict[str, Any], source: str = "tokenizer.json") -> None:
        model = data.get("model") or {}
        self.model_type = model.get("type")
        vocab = model.get("vocab")
        if self.model_type not in ("BPE", "WordLevel") or not isinstance(vocab, dict) or not vocab:
            raise InvalidInputError(f"{source!r}: the built-in tokenizer reads BPE, WordLevel and WordPiece models, got "
                                    f"{self.model_type!r}; install Hugging Face tokenizers: pip install 'ort-session[text]'")
        self.kind = f"builtin {self.model_type}"
        self.vocab: dict[str, int] = vocab
        self.inverse = {i: t for t, i in vocab.items()}
        merges = model.get("merges") or []
        pairs = [tuple(m.split(" ", 1)) if isinstance(m, str) else tuple(m) for m in merges]
        self.ranks = {p: r for r, p in enumerate(pairs)}
        self.unk = model.get("unk_token")
        self.byte_fallback = bool(model.get("byte_fallback"))
        self.added = {t["content"]: t["id"] for t in data.get("added_tokens") or []}
        self.special_ids = {t["id"] for t in data.get("added_tokens") or [] if t.get("special")}
        for content, i in self.added.items():
            self.inverse.setdefault(i, content)
        self.pre = self._steps(data.get("pre_tokenizer"), source)
        self.normalizer = data.get("normalizer")
        self.prefix, self.suffix = template_ids(data.get("post_processor"), {**self.vocab, **self.added})
        self.byte_level = any(s["type"] == "ByteLevel" for s in self.pre)
        self.metaspace = next((s for s in self.pre if s["type"] == "Metaspace"), None)
        self.has_decoder = data.get("decoder") is not None

    @staticmethod
    def _steps(pre: dict[str, Any] | None, source: str) -> list[dict[str, Any]]:
        if pre is None:
            return []
        if pre.get("type") == "Sequence":
            return [s for p in pre.get("pretokenizers", []) for s in BuiltinTokenizer._steps(p, source)]
        if pre.get("type") not in ("ByteLevel", "Metaspace", "Whitespace", "WhitespaceSplit"):
            raise InvalidInputError(f"{source!r}: the built-in tokenizer does not know pre-tokenizer "
                                    f"{pre.get('type')!r}; install Hugging Face tokenizers: pip install 'ort-session[text]'")
        return [pre]

    # -- encoding ---------------------------------------------------------------------------------
    def _normalize(self, text: str) -> str:
        n = self.normalizer
        steps = n.get("normalizers", []) if n and n.get("type") == "Sequence" else [n] if n else []
        for s in steps:
            kind = s.get("type")
            if kind in ("NFC", "NFD", "NFKC", "NFKD"):
                text = unicodedata.normalize(kind, text)
            elif kind == "Lowercase":
                text = text.lower()
            elif kind == "Prepend":
                text = s["prepend"] + text if text else text
            elif kind == "Replace":
                pattern = s.get("pattern", {})
                text = text.replace(pattern.get("String", ""), s.get("content", "")) if "String" in pattern else text
        return text

    def _pre_tokenize(self, text: str) -> list[str]:
        words = [text]
        for s in self.pre:
            kind, out = s["type"], []
            for w in words:
                if kind == "ByteLevel":
                    if s.get("add_prefix_space") and not w.startswith(" "):
                        w = " " + w
                    parts = _GPT2_SPLIT.findall(w) if s.get("use_regex", True) else [w]
                    out += ["".join(_BYTE_MAP[b] for b in p.encode("utf-8")) for p in parts]
                elif kind == "Metaspace":
                    rep = s.get("replacement", "▁")
                    w = w.replace(" ", rep)
                    if s.get("prepend_scheme", "always") in ("always", "first") and not w.startswith(rep):
                        w = rep + w
                    out += [p for p in re.split(f"(?={re.escape(rep)})", w) if p] if s.get("split", True) else [w]
                elif kind == "Whitespace":
                    out += re.findall(r"\w+|[^\w\s]+", w)
                else:  # WhitespaceSplit
                    out += w.split()
            words = out
        return words

    def _bpe(self, word: str) -> list[str]:
        parts = list(word)
        while len(parts) > 1:
            ranked = [(self.ranks.get((a, b)), i) for i, (a, b) in enumerate(zip(parts, parts[1:]))]
            ranked = [(r, i) for r, i in ranked if r is not None]
            if not ranked:
                break
            rank = min(r for r, _ in ranked)
            merged, i = [], 0
            while i < len(parts):  # merge every occurrence of the best pair, left to right
                if i + 1 < len(parts) and self.ranks.get((parts[i], parts[i + 1])) == rank:
                    merged.append(parts[i] + parts[i + 1])
                    i += 2
                else:
                    merged.append(parts[i])
                    i += 1
            parts = merged
        return parts

    def _ids_of(self, piece: str) -> list[int]:
        if piece in self.vocab:
            return [self.vocab[piece]]
        if self.byte_fallback:
            byte_ids = [self.vocab.get(f"<0x{b:02X}>") for b in piece.encode("utf-8")]
            if all(i is not None for i in byte_ids):
                return byte_ids  # type: ignore[return-value]
        unk = self.vocab.get(self.unk) if self.unk else None
        return [] if unk is None else [unk]

    def _encode_plain(self, text: str) -> list[int]:
        ids: list[int] = []
        for word in self._pre_tokenize(self._normalize(text)):
            if self.model_type == "WordLevel":
                ids += self._ids_of(word)
            else:
                for piece in self._bpe(word):
                    ids += self._ids_of(piece)
        return ids

    def encode(self, text: str, add_special_tokens: bool = True) -> list[int]:
        ids: list[int] = []
        if self.added:  # added tokens are matched before anything else, longest first
            pattern = "(" + "|".join(re.escape(t) for t in sorted(self.added, key=len, reverse=True)) + ")"
            for i, chunk in enumerate(re.split(pattern, text)):
                if i % 2:
                    ids.append(self.added[chunk])
                elif chunk:
                    ids += self._encode_plain(chunk)
        else:
            ids = self._encode_plain(text)
        return self.prefix + ids + self.suffix if add_special_tokens else ids

    # -- decoding ---------------------------------------------------------------------------------
    def decode(self, ids: list[int]) -> str:
        pieces = [self.inverse.get(i, "") for i in ids if i not in self.special_ids]
        if self.model_type == "WordLevel" or not self.has_decoder:
            return " ".join(pieces)  # what `tokenizers` does without a decoder
        if self.byte_level:
            return bytes(b for p in pieces for b in (_BYTE_UNMAP.get(c, 0x3F) for c in p)).decode("utf-8", errors="replace")
        raw = bytearray()
        for p in pieces:
            m = _BYTE_TOKEN.match(p) if self.byte_fallback else None
            raw += bytes([int(m.group(1), 16)]) if m else p.encode("utf-8")
        text = raw.decode("utf-8", errors="replace")
        if self.metaspace is not None:
            rep = self.metaspace.get("replacement", "▁")
            text = text.replace(rep, " ")
            if self.metaspace.get("prepend_scheme", "always") != "never" and text.startswith(" "):
                text = text[1:]
        return text


def load_tokenizer(path: str | pathlib.Path | None, vocab_size: int) -> TextCodec:
    """The model's tokenizer: Hugging Face `tokenizers` when installed, else the built-in reader (with a
    TextFallbackWarning), and bytes without a tokenizer file (with a TextFallbackWarning)."""
    if path is None:
        warnings.warn(f"no tokenizer.json beside the model: text is encoded as UTF-8 byte values (vocabulary "
                      f"{vocab_size}), which the model was not trained on; pass --tokenizer PATH", TextFallbackWarning,
                      stacklevel=2)
        return BytesCodec(vocab_size)
    path = pathlib.Path(path)
    if path.suffix == ".model":
        from ._tokenizer_formats import SentencePieceTokenizer
        try:
            return SentencePieceTokenizer(path)
        except ImportError as e:
            raise InvalidInputError(f"{str(path)!r} is a SentencePiece model, which the built-in tokenizer cannot "
                                    "read; pip install 'ort-session[sentencepiece]'") from e
    if path.suffix == ".txt":
        from ._tokenizer_formats import WordPieceTokenizer
        return WordPieceTokenizer.from_file(path)
    try:
        return HuggingFaceTokenizer(path)
    except ImportError:
        pass
    except Exception as e:  # noqa: BLE001 - the file itself is bad: say which and why
        raise InvalidInputError(f"cannot read tokenizer {str(path)!r}: {e}") from e
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise InvalidInputError(f"cannot read tokenizer {str(path)!r}: {e}") from e
    if isinstance(data, dict) and (data.get("model") or {}).get("type") == "WordPiece":
        from ._tokenizer_formats import WordPieceTokenizer
        tok: TextCodec = WordPieceTokenizer.from_tokenizer_json(data, str(path))
    else:
        tok = BuiltinTokenizer(data, str(path))
    warnings.warn(f"Hugging Face tokenizers is not installed: {str(path)!r} is read by the built-in fallback "
                  f"({tok.kind}); for exact tokenization pip install 'ort-session[text]'", TextFallbackWarning,
                  stacklevel=2)
    return tok


class StreamDecoder:
    """Text of each new token as it is made: decodes the ids so far and returns what is new, holding back a
    trailing incomplete UTF-8 sequence (shown as U+FFFD) until the next token completes it. Each push decodes
    the whole text again (what `tokenizers` needs for merges across tokens): fine for `ortrun`'s lengths."""

    def __init__(self, codec: TextCodec, prompt_ids: list[int] | None = None) -> None:
        """`prompt_ids`: the text so far, so the first new token gets the separator the tokenizer puts
        before it (a word-level vocabulary's space, a Metaspace word start)."""
        self.codec, self.ids = codec, list(prompt_ids or [])
        self.shown = codec.decode(self.ids) if self.ids else ""

    def push(self, token: int) -> str:
        self.ids.append(token)
        text = self.codec.decode(self.ids)
        if text.endswith("\ufffd"):
            return ""
        new = text[len(self.shown):] if text.startswith(self.shown) else text
        self.shown = text
        return new

    def flush(self) -> str:
        """What is still held back at the end (an incomplete sequence, shown as U+FFFD)."""
        text = self.codec.decode(self.ids)
        new = text[len(self.shown):] if text.startswith(self.shown) else ""
        self.shown = text
        return new
