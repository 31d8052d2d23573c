"""Project tasks. `nox -s tests` runs everything; `nox -s demo` shows the main job.

Per-package sessions (`nox -s "package(name='ort-graph')"`) install ONLY that package and the
project packages it declares into a fresh environment, proving per-package pip installs work.
"""

from __future__ import annotations

import pathlib
import tomllib

import nox

nox.options.default_venv_backend = "uv|virtualenv"
nox.options.reuse_existing_virtualenvs = True
nox.options.sessions = ["tests"]

ROOT = pathlib.Path(__file__).parent
PACKAGES = ["ort-graph", "ort-partition", "ort-memplan", "ort-abi", "ort-cpu-ep", "ort-cuda-ep", "ort-session",
            "ort-serve"]
TEST_TOOLS = ["pytest>=8", "onnxruntime>=1.20", "hypothesis>=6", "tokenizers>=0.15", "matplotlib>=3.7",
              "openai>=1.0", "httpx>=0.27", "pexpect>=4.8"]  # openai: ortrun serve tested with the real client; pexpect: chat in a pty
# sentencepiece: tokenizer.model files; onnxruntime-genai: the reference of chat's greedy tokens on the shared exports
TEST_TOOLS += ["sentencepiece>=0.2", "onnxruntime-genai>=0.5"]


def _local_closure(name: str) -> list[str]:
    """The package and every project package it declares, dependencies first."""
    seen: list[str] = []

    def visit(pkg: str) -> None:
        meta = tomllib.loads((ROOT / "packages" / pkg / "pyproject.toml").read_text())
        for dep in meta["project"]["dependencies"]:
            dep_name = dep.split(">")[0].split("=")[0].split("<")[0].strip()
            if dep_name in PACKAGES and dep_name not in seen:
                visit(dep_name)
        if pkg not in seen:
            seen.append(pkg)

    visit(name)
    return seen


LOCAL_EXTRAS = {"ort-cuda-ep": "[cuda]", "ort-serve": "[serve]"}  # tests compile every CUDA kernel with NVRTC (no GPU needed)


def _spec(name: str) -> str:
    return f"./packages/{name}{LOCAL_EXTRAS.get(name, '')}"


def _install_local(session: nox.Session, names: list[str]) -> None:
    """Install project packages from their folders, always rebuilt from the current sources (uv caches
    local builds by pyproject.toml alone, which would test stale code)."""
    fresh = [f"--reinstall-package={n}" for n in names] if session.venv_backend == "uv" else ["--force-reinstall", "--no-deps"]
    if session.venv_backend != "uv":
        session.install(*[_spec(n) for n in names])
    session.install(*fresh, *[_spec(n) for n in names])


def _install_all(session: nox.Session) -> None:
    session.install(*TEST_TOOLS)
    _install_local(session, PACKAGES)


def install_order() -> list[str]:
    """Every project package, each after the project packages it declares."""
    order: list[str] = []
    for name in PACKAGES:
        order += [p for p in _local_closure(name) if p not in order]
    return order


@nox.session(venv_backend="none")
def install(session: nox.Session) -> None:
    """Install every package from this checkout into the Python that runs nox (`python -m nox -s install`),
    dependencies first: the same as `pip install ./packages/ort-graph ./packages/ort-partition ...`.
    `nox -s install -- -e` installs them editable."""
    editable = "-e" in session.posargs
    args = [a for p in install_order() for a in (["-e", _spec(p)] if editable else [_spec(p)])]
    session.run("python", "-m", "pip", "install", *args, *[a for a in session.posargs if a != "-e"], external=True)


@nox.session
def tests(session: nox.Session) -> None:
    """Every package's tests and the integration tests, in one environment."""
    _install_all(session)
    paths = [f"packages/{p}/tests" for p in PACKAGES] + ["tests/integration"]
    session.run("pytest", *paths, *session.posargs)


@nox.session
@nox.parametrize("name", PACKAGES)
def package(session: nox.Session, name: str) -> None:
    """One package alone, with only its declared dependencies."""
    session.install(*TEST_TOOLS)
    _install_local(session, _local_closure(name))
    session.run("pytest", f"packages/{name}/tests", *session.posargs)


@nox.session
def integration(session: nox.Session) -> None:
    """Cross-package tests: the ABI parity matrix and whole-pipeline runs."""
    _install_all(session)
    session.run("pytest", "tests/integration", *session.posargs)


@nox.session
def conformance(session: nox.Session) -> None:
    """ONNX backend node test cases (and the `light` models) through ort_session.backend, with onnxruntime and
    onnx.reference measured in the same run on the same cases at each case's rtol/atol: one row per runtime."""
    _install_all(session)
    session.run("python", "-m", "ort_session.conformance", *(session.posargs or ["--light"]))


@nox.session
def conformance_profile(session: nox.Session) -> None:
    """Regenerate each provider's committed claims/declines profile (tests/integration/conformance_profiles);
    `-- --check` only compares."""
    _install_all(session)
    session.run("python", "-m", "ort_session.conformance_profile", *session.posargs)


@nox.session
def bench(session: nox.Session) -> None:
    """Benchmarks against peers measured in the same run; prints a table and writes bench-results/."""
    _install_all(session)
    session.run("python", "benchmarks/run.py", *session.posargs)


@nox.session
def lint(session: nox.Session) -> None:
    session.install("ruff")
    session.run("ruff", "check", ".")


@nox.session
def demo(session: nox.Session) -> None:
    """The main job on the built-in demo decoder."""
    _install_local(session, PACKAGES)
    session.install("./packages/ort-session[check]")
    session.run("ortrun", "demo", *session.posargs)
