"""A model given as a file or a folder, and what its `genai_config.json` (onnxruntime-genai's layout) says:
the model file name, EOS ids, BOS id, context length, and the tokenizer file beside it (`tokenizer.json`, else
SentencePiece's `tokenizer.model`, else a WordPiece `vocab.txt`)."""

from __future__ import annotations

import json
import pathlib
from typing import Any

import attrs

from ._errors import InvalidInputError

GENAI_CONFIG = "genai_config.json"
TOKENIZER = "tokenizer.json"
TOKENIZER_FILES = (TOKENIZER, "tokenizer.model", "vocab.txt")  # Hugging Face's, SentencePiece's, WordPiece's


@attrs.frozen
class ModelFiles:
    model: pathlib.Path
    folder: pathlib.Path
    tokenizer: pathlib.Path | None = None
    eos_ids: tuple[int, ...] = ()
    bos_id: int | None = None
    context_length: int | None = None
    config: dict[str, Any] = attrs.field(factory=dict, repr=False)


def _ids(value: Any) -> tuple[int, ...]:
    if isinstance(value, int) and not isinstance(value, bool):
        return (value,)
    if isinstance(value, list):
        return tuple(v for v in value if isinstance(v, int) and not isinstance(v, bool))
    return ()


def _read_config(folder: pathlib.Path) -> dict[str, Any]:
    path = folder / GENAI_CONFIG
    if not path.is_file():
        return {}
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise InvalidInputError(f"cannot read {str(path)!r}: {e}; fix or remove it") from e
    if not isinstance(data, dict):
        raise InvalidInputError(f"{str(path)!r} must hold a JSON object, got {type(data).__name__}")
    return data


def resolve_model(arg: str | pathlib.Path) -> ModelFiles:
    """The model file and its companions for `arg`, an .onnx file or a folder (genai_config.json's
    model.decoder.filename, else the folder's only .onnx file)."""
    path = pathlib.Path(arg)
    if path.is_dir():
        folder = path
        config = _read_config(folder)
        name = ((config.get("model") or {}).get("decoder") or {}).get("filename")
        if isinstance(name, str) and name:
            model = folder / name
            if not model.is_file():
                raise InvalidInputError(f"{str(folder / GENAI_CONFIG)!r} names model file {name!r}, which is not in "
                                        f"{str(folder)!r}")
        else:
            found = sorted(folder.glob("*.onnx"))
            if len(found) != 1:
                raise InvalidInputError(f"model folder {str(folder)!r} has {len(found)} .onnx files "
                                        f"{[p.name for p in found]!r} and no {GENAI_CONFIG} naming one; pass the file")
            model = found[0]
    elif path.is_file():
        folder, model = path.parent, path
        config = _read_config(folder)
    else:
        raise InvalidInputError(f"model {str(path)!r} does not exist (neither a file nor a folder)")
    m = config.get("model") or {}
    context = m.get("context_length") or (config.get("search") or {}).get("max_length")
    tok = next((folder / n for n in TOKENIZER_FILES if (folder / n).is_file()), folder / TOKENIZER)
    return ModelFiles(model=model, folder=folder, tokenizer=tok if tok.is_file() else None,
                      eos_ids=_ids(m.get("eos_token_id")), bos_id=(_ids(m.get("bos_token_id")) or (None,))[0],
                      context_length=context if isinstance(context, int) and context > 0 else None, config=config)
