"""The models every section draws from: zoo decoders, the onnx package's `light` CNNs, the real
exports in the shared models folder. Each finder says why it found nothing."""

from __future__ import annotations

import os
import pathlib
from collections.abc import Mapping

import attrs
import onnx

from ort_graph import Model, zoo

ROOT = pathlib.Path(__file__).resolve().parent.parent
SHARED_ENV = "ORT_SHARED_MODELS"


def static_decoder(cfg: zoo.DecoderConfig, sequence: int, past: int = 0) -> zoo.DecoderConfig:
    """`cfg` with batch 1 and the given sequence / past lengths fixed (static shapes)."""
    return attrs.evolve(cfg, batch=1, sequence=sequence, past_sequence=past)


def zoo_decoders(quick: bool) -> dict[str, zoo.DecoderConfig]:
    """Decoders of several sizes, static shapes (prefill, and one decode step with a KV cache)."""
    small = zoo.DecoderConfig()
    mid = zoo.DecoderConfig(layers=4, hidden=128, heads=4, kv_heads=2, vocab=512, norm="layernorm", bias=True)
    demo = zoo.DEMO_CONFIG
    out = {"zoo-l2-h64 s64": static_decoder(small, 64),
           "zoo-l4-h128-ln s128": static_decoder(mid, 128)}
    if not quick:
        out["demo-l8-h256 s128"] = static_decoder(demo, 128)
        out["demo-l8-h256 s512"] = static_decoder(demo, 512)
        out["demo-l8-h256 decode p512"] = static_decoder(demo, 1, past=512)
    return out


def light_models(quick: bool) -> tuple[dict[str, pathlib.Path], str | None]:
    """The onnx package's `light` CNNs (weights are ConstantOfShape nodes, so the files are small),
    or ({}, reason) when this onnx build ships none."""
    light = pathlib.Path(onnx.__file__).parent / "backend" / "test" / "data" / "light"
    found = {p.stem: p for p in sorted(light.glob("light_*.onnx"))} if light.is_dir() else {}
    if not found:
        return {}, f"no light_*.onnx under {str(light)!r} (this onnx {onnx.__version__} wheel ships no light models)"
    if quick:
        found = {k: v for k, v in found.items() if k in ("light_squeezenet", "light_shufflenet")}
    return found, None


def shared_dir() -> pathlib.Path:
    env = os.environ.get(SHARED_ENV)
    return pathlib.Path(env) if env else ROOT.parent / "shared" / "models"


def shared_models(quick: bool) -> tuple[dict[str, pathlib.Path], str | None]:
    """Real exports (onnxruntime-genai builder, torch.onnx.export) when the shared folder is present."""
    root = shared_dir()
    if not root.is_dir():
        return {}, f"no shared models folder at {str(root)!r} (set ${SHARED_ENV} to its path)"
    found = {}
    for p in sorted(root.rglob("*.onnx")):
        rel = p.parent.relative_to(root) if p.name == "model.onnx" else p.relative_to(root).with_suffix("")
        found[rel.as_posix()] = p
    if not found:
        return {}, f"no *.onnx under {str(root)!r}"
    if quick:
        found = {k: v for k, v in found.items() if k.endswith("genai_fp32_cpu")}
    return found, None


def symbolic_dims(model: Model) -> set[str]:
    """Names of the symbolic dimensions of the model's graph inputs."""
    out: set[str] = set()
    g = model.graph
    for name in g.inputs:
        v = g.values.get(name)
        for d in (v.shape or ()) if v is not None else ():
            if isinstance(d, str):
                out.add(d)
    return out


def dims_for(model: Model, dims: Mapping[str, int]) -> dict[str, int]:
    """The subset of `dims` this model's inputs actually use."""
    wanted = symbolic_dims(model)
    return {k: v for k, v in dims.items() if k in wanted}
