"""close() shuts the CUDA provider down: after the session freed its device memory, the provider unloads
every module it loaded and releases the primary context it retained (ort_cuda_ep.testing.RecordingDriver:
no GPU needed)."""

import warnings

import pytest

from ort_graph import zoo
from ort_session import InferenceSession

ort_cuda_ep = pytest.importorskip("ort_cuda_ep", reason="ort-cuda-ep is not installed")
from ort_cuda_ep.testing import RecordingDriver, install_driver  # noqa: E402

CFG = zoo.DecoderConfig(layers=2, hidden=32, vocab=64)
DIMS = {"batch": 1, "sequence": 4, "past_sequence": 0}


class ClosingDriver(RecordingDriver):
    """Records what shutdown releases, and what is still allocated when it does."""

    def __init__(self) -> None:
        super().__init__()
        self.unloaded: list[int] = []
        self.released: list[int] = []  # bytes still allocated at each primary-context release

    def cuModuleUnload(self, mod):
        self.unloaded.append(mod)
        return super().cuModuleUnload(mod)

    def cuDevicePrimaryCtxRelease(self, dev):
        self.released.append(sum(len(m) for m in self.memory.values()))
        return super().cuDevicePrimaryCtxRelease(dev)


def test_close_unloads_the_modules_and_releases_the_context_after_freeing_the_memory(monkeypatch):
    driver = install_driver(monkeypatch, ClosingDriver())
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        sess = InferenceSession(zoo.decoder(CFG), {
            "free_dimension_overrides": DIMS, "budgets": "cuda:64MiB", "session.pre_allocate_execution_buffers": "1",
            "session.name_based_layer_assignment": "cuda(layers.0/, layers.1/)"},
            providers=["CUDAExecutionProvider", "CPUExecutionProvider"])
    sess.run(None, zoo.decoder_inputs(CFG, 1, 4, 0))
    loaded = sorted(driver.modules)
    assert loaded and driver.unloaded == [] and driver.released == []
    sess.close()
    assert sorted(driver.unloaded) == loaded
    assert driver.released == [0]  # once, with nothing left allocated on the device
    sess.close()
    assert driver.released == [0]
