"""Package namespaces import their names on first use (`ort_graph._lazy`): every public name still resolves
to the object its module defines, unknown names raise Python's own AttributeError, and a CPU session does not
import what only other paths need (auto-fit, IOBinding, graph capture, the CUDA EP)."""

from __future__ import annotations

import importlib
import subprocess
import sys
import types

import pytest

from ort_graph._lazy import lazy_exports

LAZY = ("ort_abi", "ort_memplan", "ort_partition", "ort_session")


@pytest.mark.parametrize("package", LAZY)
def test_every_public_name_resolves_to_its_modules_object(package):
    pkg = importlib.import_module(package)
    where = pkg._WHERE
    for name in pkg.__all__:
        value = getattr(pkg, name)
        module = where.get(name)
        if module is not None and module != f".{name}":
            assert value is getattr(importlib.import_module(module, package), name), name
    assert set(pkg.__all__) <= set(dir(pkg))


@pytest.mark.parametrize("package", LAZY)
def test_unknown_name_raises_pythons_attribute_error(package):
    pkg = importlib.import_module(package)
    with pytest.raises(AttributeError, match=rf"^module '{package}' has no attribute 'no_such_name'$"):
        pkg.no_such_name  # noqa: B018
    with pytest.raises(ImportError, match="cannot import name 'no_such_name'"):
        exec(f"from {package} import no_such_name", {})


def test_lazy_exports_resolves_once_and_maps_submodules(monkeypatch):
    pkg = types.ModuleType("lazy_probe")
    pkg.__path__ = []  # a package: its submodules resolve relative to it
    monkeypatch.setitem(sys.modules, "lazy_probe", pkg)
    monkeypatch.setitem(sys.modules, "lazy_probe._impl", types.SimpleNamespace(thing=object()))
    monkeypatch.setitem(sys.modules, "lazy_probe.tool", types.ModuleType("lazy_probe.tool"))
    getattr_, dir_ = lazy_exports("lazy_probe", {"thing": "._impl", "tool": ".tool"})
    thing = getattr_("thing")
    assert thing is sys.modules["lazy_probe._impl"].thing and pkg.__dict__["thing"] is thing  # cached in the namespace
    assert getattr_("tool") is sys.modules["lazy_probe.tool"]
    assert {"thing", "tool"} <= set(dir_())
    with pytest.raises(AttributeError, match="^module 'lazy_probe' has no attribute 'other'$"):
        getattr_("other")


def _fresh_modules(code: str) -> set[str]:
    out = subprocess.run([sys.executable, "-c", code + "\nimport sys; print(' '.join(sorted(sys.modules)))"],
                         capture_output=True, text=True, check=True, timeout=120)
    return set(out.stdout.split())


def test_a_cpu_session_imports_only_its_path():
    loaded = _fresh_modules("from ort_session import InferenceSession")
    assert "ort_session._session" in loaded
    for module in ("ort_partition._autofit", "ort_partition._search", "ort_partition.bench", "ort_memplan._validate",
                   "ort_session._iobinding", "ort_abi._capture", "ort_cuda_ep", "ort_serve", "matplotlib",
                   "tokenizers", "hypothesis"):
        assert module not in loaded, module


@pytest.mark.parametrize(("package", "not_loaded"), [("ort_partition", "ort_partition._autofit"),
                                                      ("ort_memplan", "ort_memplan._planners"),
                                                      ("ort_abi", "ort_abi._fast_steps")])
def test_importing_a_package_loads_none_of_its_modules(package, not_loaded):
    assert not_loaded not in _fresh_modules(f"import {package}")
