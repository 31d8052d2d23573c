"""No package imports a distribution it does not declare.

Each package's src/ is parsed with ast; every absolute import (top level, inside functions, under
TYPE_CHECKING) must be the standard library, the package itself, or a distribution listed in its
pyproject `dependencies` (or an `optional-dependencies` extra, for imports guarded as optional).
The per-package nox sessions prove the same thing by installing only the declared closure; this
test names the offending file and line without building environments.
"""

from __future__ import annotations

import ast
import functools
import importlib.metadata
import pathlib
import re
import sys
import tomllib

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
PACKAGES = sorted(p.name for p in (ROOT / "packages").iterdir() if (p / "pyproject.toml").is_file())


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _requirement_name(req: str) -> str:
    return _norm(re.split(r"[\s<>=!~;\[(]", req.strip(), maxsplit=1)[0])


def _declared(pkg: str) -> tuple[str, set[str], set[str]]:
    meta = tomllib.loads((ROOT / "packages" / pkg / "pyproject.toml").read_text())["project"]
    deps = {_requirement_name(r) for r in meta.get("dependencies", [])}
    extras = {_requirement_name(r) for reqs in meta.get("optional-dependencies", {}).values() for r in reqs}
    return _norm(meta["name"]), deps, extras


@functools.cache
def _owners() -> dict[str, set[str]]:
    """Importable module name (top level, and the second level of namespace packages such as
    `cuda.core`) -> the distributions that provide it."""
    top = {k: {_norm(d) for d in v} for k, v in importlib.metadata.packages_distributions().items()}
    out: dict[str, set[str]] = dict(top)
    shared = {name for name, dists in top.items() if len(dists) > 1}
    for dist in importlib.metadata.distributions():
        for f in dist.files or ():
            parts = f.parts
            if len(parts) >= 3 and parts[0] in shared:
                out.setdefault(f"{parts[0]}.{parts[1]}", set()).add(_norm(dist.metadata["Name"]))
    return out


def _metapackage_requirements(dists: set[str]) -> set[str]:
    """Requirements of declared metapackages (distributions that install no modules, such as
    cuda-python, which exists to pull in cuda-bindings, cuda-core and cuda-pathfinder)."""
    out = set()
    for name in dists:
        try:
            dist = importlib.metadata.distribution(name)
        except importlib.metadata.PackageNotFoundError:
            continue
        files = [f for f in dist.files or () if not f.parts[0].endswith((".dist-info", ".egg-info"))]
        if not files:
            out |= {_requirement_name(r) for r in dist.requires or () if "extra ==" not in r}
    return out


def _project_dists() -> dict[str, str]:
    """Import name -> distribution of the project's own packages (src/<import_name>/)."""
    out = {}
    for pkg in PACKAGES:
        for d in (ROOT / "packages" / pkg / "src").iterdir():
            if d.is_dir() and (d / "__init__.py").is_file():
                out[d.name] = _declared(pkg)[0]
    return out


def _imports(path: pathlib.Path) -> list[tuple[int, str]]:
    tree = ast.parse(path.read_text(), filename=str(path))
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.append((node.lineno, node.module))
    return found


def _providers(module: str) -> set[str] | None:
    """The distributions that could provide `module`, or None for the standard library."""
    top = module.split(".")[0]
    if top in sys.stdlib_module_names:
        return None
    own = _project_dists()
    if top in own:
        return {own[top]}
    owners = _owners()
    two = ".".join(module.split(".")[:2])
    return owners.get(two) or owners.get(top) or {_norm(top)}


KNOWN: dict[str, str] = {}  # package -> the exact undeclared imports (owners: declare them, or drop the import)


@pytest.mark.parametrize("pkg", [pytest.param(p, marks=pytest.mark.xfail(strict=True, reason=KNOWN[p])) if p in KNOWN
                                 else p for p in PACKAGES])
def test_package_imports_only_declared_distributions(pkg):
    name, deps, extras = _declared(pkg)
    allowed = deps | extras | {name} | _metapackage_requirements(deps | extras)
    bad = []
    for path in sorted((ROOT / "packages" / pkg / "src").rglob("*.py")):
        for line, module in _imports(path):
            providers = _providers(module)
            if providers is None or providers & allowed:
                continue
            bad.append(f"{path.relative_to(ROOT)}:{line} imports {module!r} "
                       f"(from {sorted(providers)!r}), not in {sorted(allowed)!r}")
    assert not bad, f"{pkg} imports distributions its pyproject does not declare (add them to [project] " \
                    "dependencies, or to an extra for optional imports):\n" + "\n".join(bad)


def test_every_package_is_scanned():
    assert set(PACKAGES) >= {"ort-graph", "ort-partition", "ort-memplan", "ort-abi", "ort-cpu-ep", "ort-cuda-ep",
                             "ort-session"}
    for pkg in PACKAGES:
        assert any((ROOT / "packages" / pkg / "src").rglob("*.py")), f"{pkg} has no sources under src/"
