"""Auto-fit when the budgeted provider declines nodes: declined layers are not 'on the device', and
every decline is kept in the placement (found while choosing layers, not only while placing)."""

from ort_graph import resolve_shapes, zoo
from ort_partition import OpSetProvider, auto_fit


def _model():
    m = zoo.decoder(zoo.DecoderConfig(layers=3))
    resolve_shapes(m, dims={"batch": 1, "sequence": 8, "past_sequence": 0})
    return m


def test_provider_declining_everything_gets_zero_layers_and_reports_declines():
    ep = OpSetProvider("CUDAExecutionProvider", ops=["NoSuchOp"])
    fit = auto_fit(_model().graph, [ep, "CPUExecutionProvider"], "cuda:1GiB")
    assert fit.layers_on_device == 0
    assert fit.placement.nodes_on("CUDAExecutionProvider") == []
    declined = {d.node for d in fit.placement.declines}
    assert "/model/layers.0/self_attn/q_proj/MatMul" in declined
    assert all("NoSuchOp" in d.reason for d in fit.placement.declines)


def test_duck_typed_declines_keep_their_fields():
    class ForeignDecline:  # shaped like ort_abi.Declined
        supported = False
        rejected, accepts, remedy, opset, ep = "dtype FLOAT", "FLOAT16", "cast it", 17, "CUDAExecutionProvider"

    class Provider:
        name = "CUDAExecutionProvider"

        def claim(self, node):
            return ForeignDecline()

    fit = auto_fit(_model().graph, [Provider(), "CPUExecutionProvider"], "cuda:1GiB")
    d = fit.placement.declines[0]
    assert "rejected dtype FLOAT" in d.reason and "accepts FLOAT16" in d.reason and "remedy: cast it" in d.reason


def _layers_of(placement, ep):
    import re

    return sorted({int(re.search(r"layers\.(\d+)", n.name).group(1)) for n in placement.nodes_on(ep)
                   if re.search(r"layers\.(\d+)", n.name)})


def test_exact_fit_callback_grows_and_shrinks_to_what_really_fits():
    m = _model()
    ep = OpSetProvider("CUDAExecutionProvider")
    base = auto_fit(m.graph, [ep, "CPUExecutionProvider"], "cuda:600KiB")
    for limit in range(0, 4):  # the exact check allows `limit` layers, whatever the estimate said
        def fits(placement, limit=limit):
            return len(_layers_of(placement, "CUDAExecutionProvider")) <= limit

        fit = auto_fit(m.graph, [ep, "CPUExecutionProvider"], "cuda:600KiB", fits=fits)
        assert fit.layers_on_device == limit == len(_layers_of(fit.placement, "CUDAExecutionProvider"))
        assert fit.layer_ids == tuple(range(limit))
    assert base.layers_on_device < 3  # the estimate alone stops earlier than the exact check allows


def test_a_providers_own_device_name_is_a_designator():
    from ort_partition import match_device

    class Sim:
        name, device_type, device = "SimulatedGPUExecutionProvider", "gpu", "simgpu"

    assert match_device("simgpu", [Sim(), "CPUExecutionProvider"]) == "SimulatedGPUExecutionProvider"
    assert match_device("SIMGPU", [Sim()]) == "SimulatedGPUExecutionProvider"
    assert match_device("cpu", [Sim(), "CPUExecutionProvider"]) == "CPUExecutionProvider"


def test_exact_fit_finds_every_answer_above_and_below_the_estimate_in_few_checks():
    m = zoo.decoder(zoo.DecoderConfig(layers=12, hidden=16, heads=2, kv_heads=1, vocab=32, intermediate=16))
    resolve_shapes(m, dims={"batch": 1, "sequence": 4, "past_sequence": 0})
    ep = OpSetProvider("CUDAExecutionProvider")
    estimate = auto_fit(m.graph, [ep, "CPUExecutionProvider"], "cuda:40KiB").layers_on_device
    assert 0 < estimate < 12
    for limit in range(0, 13):
        calls = []

        def fits(placement, limit=limit, calls=calls):
            calls.append(1)
            return len(_layers_of(placement, "CUDAExecutionProvider")) <= limit

        fit = auto_fit(m.graph, [ep, "CPUExecutionProvider"], "cuda:40KiB", fits=fits)
        assert fit.layers_on_device == limit, (limit, estimate)
        bound = 2 * abs(limit - estimate).bit_length() + 3  # galloping, not a scan
        if limit == 0:  # no layer fits: node granularity searches the first layer (two starts, then for the heaviest
            # segment at most one check per node that reads a weight): none of its nodes fits here, so nothing is placed
            # (the embedding or the head would be more than a larger budget places with whole layers)
            assert not fit.placement.nodes_on("CUDAExecutionProvider")
            readers = sum(1 for n in m.graph.nodes if any(i in m.graph.initializers for i in n.inputs))
            bound += 2 * (2 * len(m.graph.nodes).bit_length() + 3) + 4 + readers
        assert len(calls) <= bound


def test_exact_fit_starts_where_the_weights_alone_stop():
    """The per-node cost sum frees no activation, so on a narrow model it stops far below what the memory plan
    fits; the search starts at the count whose weights alone fit: one check when that is the answer, and one
    more than the search from the estimate when it is not."""
    m = zoo.decoder(zoo.DecoderConfig(layers=12, hidden=16, heads=2, kv_heads=1, vocab=32, intermediate=16))
    resolve_shapes(m, dims={"batch": 1, "sequence": 64, "past_sequence": 0})
    ep = OpSetProvider("CUDAExecutionProvider")
    weights = sum(t.nbytes for t in m.graph.initializers.values())
    estimate = auto_fit(m.graph, [ep, "CPUExecutionProvider"], {"cuda": weights}).layers_on_device
    assert estimate < 6  # activations without reuse dominate the estimate
    for limit in (12, 9, 3):
        calls = []

        def fits(placement, limit=limit, calls=calls):
            calls.append(len(_layers_of(placement, "CUDAExecutionProvider")))
            return calls[-1] <= limit

        fit = auto_fit(m.graph, [ep, "CPUExecutionProvider"], {"cuda": weights}, fits=fits)
        assert fit.layers_on_device == limit
        assert calls[0] == 12  # every layer's weights fit: that count is checked first
        assert len(calls) <= (1 if limit == 12 else 1 + 2 * abs(limit - estimate).bit_length() + 3)


def test_exact_fit_aims_with_the_bytes_a_failed_check_reports():
    """A check answering FitCheck(fits, used) lets the search aim: the bytes beyond the weights (activations,
    workspace) barely change with the layer count, so the check after the weights-only count lands on the
    answer."""
    from ort_partition import FitCheck

    m = zoo.decoder(zoo.DecoderConfig(layers=12, hidden=16, heads=2, kv_heads=1, vocab=32, intermediate=16))
    resolve_shapes(m, dims={"batch": 1, "sequence": 64, "past_sequence": 0})
    ep = OpSetProvider("CUDAExecutionProvider")
    inits = m.graph.initializers
    per_layer = sum(t.nbytes for n, t in inits.items() if "layers.0." in n)
    assert per_layer > 0
    extra = 3 * per_layer + 100  # what the plan adds to the weights: a little over 3 layers' worth
    for layers in (8, 4):
        budget = layers * per_layer + extra + per_layer // 2
        calls = []

        def fits(placement, calls=calls, budget=budget):
            names = {i for n in placement.nodes_on("CUDAExecutionProvider") for i in n.inputs if i in inits}
            used = sum(inits[i].nbytes for i in names) + extra
            calls.append(len(_layers_of(placement, "CUDAExecutionProvider")))
            return FitCheck(used <= budget, {"CUDAExecutionProvider": used})

        fit = auto_fit(m.graph, [ep, "CPUExecutionProvider"], {"cuda": budget}, fits=fits)
        assert fit.layers_on_device == layers
        assert calls == [layers + 3, layers, layers + 1]  # weights alone, aimed, and the one above it
