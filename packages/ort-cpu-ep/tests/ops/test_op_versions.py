"""`first_version`: the opset that introduced an op, from onnx's schemas (registration asks it at import)."""

import onnx.defs
import pytest

from ort_cpu_ep.ops._util import first_version


def _earliest() -> dict[tuple[str, str], int]:
    out: dict[tuple[str, str], int] = {}
    for sch in onnx.defs.get_all_schemas_with_history():
        key = (sch.name, sch.domain)
        out[key] = min(out.get(key, sch.since_version), sch.since_version)
    return out


def test_first_version_is_the_earliest_schema_of_every_onnx_op():
    wrong = {key: (since, first_version(*key)) for key, since in _earliest().items() if first_version(*key) != since}
    assert not wrong


@pytest.mark.parametrize(("op", "domain", "since"), [("Gelu", "", 20), ("Relu", "", 1), ("Mish", "", 18),
                                                      ("LabelEncoder", "ai.onnx.ml", 1),
                                                      ("NoSuchOp", "", 1), ("Relu", "no.such.domain", 1)])
def test_first_version_examples(op, domain, since):
    assert first_version(op, domain) == since
