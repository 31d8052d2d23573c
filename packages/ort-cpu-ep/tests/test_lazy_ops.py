"""Op modules load when an op of theirs is first looked up (`ort_cpu_ep.ops.load_op`, `_op_index.MODULES`):
the lazily filled table must equal the eager one (`load_all_ops`), op for op and in registration order, and
the provider's registry must find the same kernels either way. Each check runs in a fresh interpreter."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

_TABLE_OF = textwrap.dedent("""
    import json, sys
    from ort_cpu_ep.ops import _registry
    from ort_cpu_ep.ops._op_index import MODULES
    def row(impls):
        return [[type(i).__module__, type(i).__qualname__, i.since, i.until] for i in impls]
    if sys.argv[1] == "eager":
        _registry.load_all_ops()
        table = {f"{d}::{o}": row(impls) for (d, o), impls in _registry._TABLE.items()}
    else:  # each op looked up alone, in reverse order of the index (modules then load in an order eager never uses)
        table = {f"{d}::{o}": row(_registry.op_impls(o, d)) for d, o in reversed(list(MODULES))}
    unloaded = [m for m in _registry.op_modules() if f"ort_cpu_ep.ops.{m}" not in sys.modules]
    print(json.dumps({"table": table, "loaded_all": _registry._LOADED_ALL, "unloaded": unloaded}))
""")


def _child(code: str, *args: str) -> dict:
    out = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_op_index_is_current_and_the_lazy_table_equals_the_eager_one():
    code = ("import json, pathlib; from ort_cpu_ep.ops import _op_index; "
            "print(json.dumps(_op_index.generate() == pathlib.Path(_op_index.__file__).read_text()))")
    assert _child(code) is True, ("ort_cpu_ep/ops/_op_index.py is not what the op modules register: regenerate it "
                                  "with `python -m ort_cpu_ep.ops._op_index`")
    eager, lazy = _child(_TABLE_OF, "eager"), _child(_TABLE_OF, "lazy")
    stale = sorted(set(eager["table"]) ^ set(lazy["table"]))
    assert not stale, (f"ort_cpu_ep/ops/_op_index.py is stale for {stale[:10]}: regenerate it with "
                       "`python -m ort_cpu_ep.ops._op_index`")
    for op, impls in eager["table"].items():
        assert lazy["table"][op] == impls, f"{op}: lazily {lazy['table'][op]}, eagerly {impls}"
    assert not lazy["loaded_all"], "an op of the index fell back to loading every module"


def test_import_loads_no_op_module_and_one_op_loads_only_its_own():
    code = textwrap.dedent("""
        import json, sys
        import ort_cpu_ep
        from ort_cpu_ep.ops import _registry, find
        before = [m for m in _registry.op_modules() if f"ort_cpu_ep.ops.{m}" in sys.modules]
        impl = find("Relu", "", 21)
        after = [m for m in _registry.op_modules() if f"ort_cpu_ep.ops.{m}" in sys.modules]
        print(json.dumps({"before": before, "after": after, "impl": type(impl).__module__}))
    """)
    got = _child(code)
    assert got["before"] == []
    assert got["impl"] == "ort_cpu_ep.ops.ops_unary"
    assert "ops_unary" in got["after"] and len(got["after"]) < 5, got["after"]


def test_provider_registry_finds_lazily_what_it_finds_eagerly():
    code = textwrap.dedent("""
        import json, sys
        import ort_abi
        from ort_cpu_ep import builtin_registry, register_numpy_kernels
        from ort_cpu_ep.ops._op_index import MODULES
        EP = "CPUExecutionProvider"
        def describe(e):
            return None if e is None else [e.kernel_def.describe(), type(e.create_func_state).__qualname__,
                                           e.has_estimate]
        lazy = builtin_registry(EP)
        found = {f"{d}::{o}": [describe(lazy.find(o, d, v, EP)) for v in (1, 7, 13, 21, 25)] for d, o in MODULES}
        eager = register_numpy_kernels(ort_abi.KernelRegistry(), EP)
        want = {f"{d}::{o}": [describe(eager.find(o, d, v, EP)) for v in (1, 7, 13, 21, 25)] for d, o in MODULES}
        rows = sorted(e.kernel_def.describe() for e in lazy)
        print(json.dumps({"lazy": found, "eager": want, "same_rows": rows == sorted(e.kernel_def.describe() for e in eager),
                          "n": [len(lazy), len(eager)]}))
    """)
    got = _child(code)
    assert got["lazy"] == got["eager"]
    assert got["same_rows"] and got["n"][0] == got["n"][1] > 200, got["n"]


def test_an_op_the_index_does_not_know_loads_every_module():
    code = textwrap.dedent("""
        import json
        from ort_cpu_ep.ops import _registry, find
        print(json.dumps({"found": find("NoSuchOp", "", 21) is not None, "loaded_all": _registry._LOADED_ALL}))
    """)
    assert _child(code) == {"found": False, "loaded_all": True}


def test_an_op_found_once_is_not_looked_up_again():
    # find() runs per node per run in the numpy interpreter (an If's branch): the op's modules are imported, and
    # the index consulted, the first time only
    code = textwrap.dedent("""
        import json
        from ort_cpu_ep.ops import _registry, find
        calls = []
        real = _registry._import_op_module
        _registry._import_op_module = lambda name: (calls.append(name), real(name))[1]
        first = find("Mul", "", 14) is not None
        n_first = len(calls)
        again = [find("Mul", "", 14) is not None for _ in range(3)]
        print(json.dumps({"found": [first, *again], "first": n_first, "again": len(calls) - n_first}))
    """)
    got = _child(code)
    assert got["found"] == [True] * 4 and got["first"] >= 1 and got["again"] == 0, got
