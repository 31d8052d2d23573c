"""A whole session on the CUDA EP against ort_cuda_ep.testing.RecordingDriver (host-backed memory,
recorded copies and launches; kernels do not execute), so machines without a GPU check the device
side of the session: weights uploaded once into device memory, one pre-allocated device arena, every
kernel launched on pointers inside them, host <-> device copies only at the boundary copy nodes, no
device allocation during runs, the budget as the allocator's capacity, and close() freeing it all."""

import warnings

import pytest

from ort_graph import zoo
from ort_session import InferenceSession

ort_cuda_ep = pytest.importorskip("ort_cuda_ep", reason="ort-cuda-ep is not installed")
from ort_cuda_ep.testing import RecordingDriver, install_driver  # noqa: E402

CUDA = "CUDAExecutionProvider"
CFG = zoo.DecoderConfig(layers=4, hidden=64, vocab=256)
DIMS = {"batch": 1, "sequence": 16, "past_sequence": 0}
BUDGET = 64 << 20


@pytest.fixture
def driver(monkeypatch):
    return install_driver(monkeypatch, RecordingDriver())


def _session(pre_allocate: bool = True) -> InferenceSession:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return InferenceSession(zoo.decoder(CFG), {
            "free_dimension_overrides": DIMS, "budgets": f"cuda:{BUDGET}",
            "session.name_based_layer_assignment": "cuda(layers.0/, layers.1/)",
            "session.pre_allocate_execution_buffers": "1" if pre_allocate else "0"}, providers=[CUDA, "CPUExecutionProvider"])


def _inside(pointer: int, buffers) -> bool:
    return any(b.ptr <= pointer < b.ptr + max(b.nbytes, 1) for b in buffers)


def test_a_pre_allocated_run_launches_on_the_arena_and_the_weights_only(driver):
    sess = _session()
    on_cuda = [n for n in sess.model.graph.nodes if n.ep == CUDA]
    assert sum(n.op_type not in ("MemcpyFromHost", "MemcpyToHost") for n in on_cuda) >= 10
    alloc = sess.memory.allocators["cuda:0"]
    weights = sess.memory.device_weights.tensors["cuda:0"]
    arena = sess.memory.buffers.buffers["cuda:0"]
    assert alloc.capacity == BUDGET
    assert len(driver.memory) == len(weights) + 1  # each weight once, one arena
    assert alloc.bytes_in_use == sess.memory.weights["cuda:0"] + sess.memory.gplan.plan.peak["cuda:0"] <= BUDGET
    uploads = sum(1 for c in driver.calls if c[0] == "HtoD")
    assert uploads == sum(1 for t in weights.values() if t.nbytes)

    driver.calls.clear()
    driver.pointers.clear()
    count = alloc.alloc_count
    outs = sess.run(None, zoo.decoder_inputs(CFG, 1, 16, 0))
    assert outs[0].shape == (1, 16, CFG.vocab)
    assert alloc.alloc_count == count and sess.last_run_stats.allocations == 0
    launches = [c for c in driver.calls if c[0] == "launch"]
    assert len(launches) >= len(on_cuda) // 2
    device_buffers = [arena, *(t.buffer for t in weights.values())]
    assert driver.pointers and all(_inside(p, device_buffers) for p in driver.pointers)
    values = sess.model.graph.values
    to_device = [n for n in sess.order if n.op_type == "MemcpyFromHost" and n.ep == CUDA and values[n.inputs[0]].nbytes]
    to_host = [n for n in sess.order if n.op_type == "MemcpyToHost" and values[n.inputs[0]].nbytes]
    # copies at the boundaries only: none inside kernels, no device-to-device staging of outputs
    assert sum(1 for c in driver.calls if c[0] == "HtoD") == len(to_device)
    assert sum(1 for c in driver.calls if c[0] == "DtoH") == len(to_host)

    sess.close()
    assert driver.memory == {} and alloc.bytes_in_use == 0


def test_per_run_arena_is_freed_when_the_run_ends(driver):
    sess = _session(pre_allocate=False)
    weights = sess.memory.weights["cuda:0"]
    alloc = sess.memory.allocators["cuda:0"]
    assert alloc.bytes_in_use == weights
    sess.run(None, zoo.decoder_inputs(CFG, 1, 16, 0))
    assert alloc.bytes_in_use == weights and alloc.peak_bytes <= BUDGET
    assert len(driver.memory) == len(sess.memory.device_weights.tensors["cuda:0"])
    sess.close()
    assert driver.memory == {}



@pytest.mark.parametrize("room", ["none", "weights only"])
def test_a_device_with_less_free_memory_than_the_budget_fails_initialization_cleanly(driver, room):
    from ort_session import DeviceMemoryError

    sizing = _session()  # what the plan allocates on this device
    weights = sum(t.buffer.nbytes for t in sizing.memory.device_weights.tensors["cuda:0"].values())
    sizing.close()
    driver.capacity = 0 if room == "none" else weights + 64
    with pytest.raises(DeviceMemoryError) as info:
        _session()
    message = str(info.value)
    assert "out of memory" in message and f"budget {64.0:.1f} MiB" in message and "lower the budget" in message
    assert ("the weights" if room == "none" else "the pre-allocated buffers") in message
    assert driver.memory == {}  # nothing stays allocated


def _assert_copies_are_needed(sess: InferenceSession) -> None:
    """Every boundary copy feeds a position that reads on the copy's side (never a host input of a
    device node, nor a value a device node made in host memory)."""
    graph = sess.model.graph
    types = {n.index: sess.providers[0].memory_types(n) for n in graph.nodes if n.ep == CUDA}
    for copy in (n for n in graph.nodes if n.op_type.startswith("Memcpy")):
        out, src = copy.outputs[0], graph.values[copy.inputs[0]].producer
        assert src is None or src.ep != CUDA or src.outputs.index(copy.inputs[0]) not in types[src.index][1], copy.name
        to_device = copy.op_type == "MemcpyFromHost"
        needed = out in graph.outputs or any(
            (n.ep == CUDA) == to_device and any(i == out and (n.ep != CUDA or k not in types[n.index][0])
                                                for k, i in enumerate(n.inputs))
            for n in graph.values[out].consumers)
        assert needed, f"{copy.name} copies {copy.inputs[0]!r} for readers that read it on the other side"


def test_host_inputs_and_outputs_are_never_copied_on_the_recording_driver(driver):
    sess = _session()
    assert any(sess.providers[0].memory_types(n)[0] for n in sess.model.graph.nodes if n.ep == CUDA)
    _assert_copies_are_needed(sess)


@pytest.mark.parametrize("export", ["torchscript_dynamic.onnx", "dynamo_kv_dynamic.onnx"])
def test_shape_arithmetic_feeds_device_nodes_without_copies_when_planning_with_a_profile(shared_models, export):
    """Real exports compute Reshape/Slice/Expand shapes on the CPU at run time: planned for a GPU this
    machine lacks, those values stay on the host, and Shape of a device tensor is made on the host."""
    path = shared_models / "llama_l4" / "torch" / export
    if not path.exists():
        pytest.skip(f"{path} is not present")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        sess = InferenceSession(str(path), {"budgets": "cuda:4GiB", "device_profile": "a100"}, providers=[CUDA])
    _assert_copies_are_needed(sess)
    shape_fed = [n for n in sess.model.graph.nodes if n.ep == CUDA and sess.providers[0].memory_types(n)[0]]
    assert len(shape_fed) >= 8


def test_a_share_budget_is_a_share_of_the_devices_free_memory(monkeypatch):
    recording = install_driver(monkeypatch, RecordingDriver())
    recording.capacity = 64 << 20  # the device: 64 MiB, all free
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        sess = InferenceSession(zoo.decoder(CFG), {"free_dimension_overrides": DIMS, "budgets": "cuda:25%"},
                                providers=[CUDA, "CPUExecutionProvider"])
    assert sess.memory.allocators["cuda:0"].capacity == 16 << 20
    assert sess.placement.result.budgets[CUDA] == 16 << 20
    sess.close()


def test_a_share_budget_when_planning_for_a_profile_is_a_share_of_its_total():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        sess = InferenceSession(zoo.decoder(CFG), {"free_dimension_overrides": DIMS, "budgets": "cuda:10%",
                                                   "device_profile": "l4"}, providers=[CUDA])
    assert sess.placement.result.budgets[CUDA] == int(ort_cuda_ep.get_profile("l4").memory_bytes * 0.1)
