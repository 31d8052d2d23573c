"""Workspace packed with the activations or in an arena of its own: per device the smaller plan is kept."""

import pytest

import ort_memplan as mp
from ort_memplan._layout import plan_with_workspace

# found by a random search: greedy-by-size packs these 14 activations and 5 one-step workspace slots into
# 19968 bytes together, but into 13568 + 6144 = 19712 bytes as two arenas side by side
ACTS = [(0, 704, 8, 8), (1, 2176, 3, 6), (2, 1472, 5, 6), (3, 192, 2, 3), (4, 1728, 4, 9), (5, 1152, 4, 6),
        (6, 2176, 5, 10), (7, 640, 8, 8), (8, 1344, 5, 7), (9, 1152, 9, 10), (10, 1600, 7, 9), (11, 576, 1, 1),
        (12, 2368, 0, 7), (13, 2368, 4, 7)]
SLOTS = [(-1, 1408, 11, 11), (-2, 1536, 5, 5), (-3, 1280, 6, 6), (-4, 2496, 7, 7), (-5, 2240, 5, 5)]


def _requests(rows, device="gpu"):
    return [mp.AllocationRequest(i, n, a, b, device) for i, n, a, b in rows]


def test_a_separate_workspace_arena_is_chosen_where_it_is_smaller():
    acts, slots = _requests(ACTS), _requests(SLOTS)
    packed = mp.plan(acts + slots, "greedy_by_size")
    separate = mp.plan(acts, "greedy_by_size").peak["gpu"] + mp.plan(slots, "greedy_by_size").peak["gpu"]
    assert separate < packed.peak["gpu"]
    chosen, layout = plan_with_workspace(acts, slots, "greedy_by_size")
    assert layout == {"gpu": "separate"} and chosen.peak == {"gpu": separate}
    mp.validate(chosen, acts + slots)  # no two live blocks share a byte, every block below the peak
    assert min(chosen.offsets[r.id] for r in slots) >= max(chosen.offsets[r.id] + r.reserved() for r in acts)
    assert chosen.lower_bound == packed.lower_bound  # the bound of all requests: no layout beats it


@pytest.mark.parametrize("algorithm", ["greedy_by_size", "auto"])
def test_packing_is_kept_where_it_is_smaller_and_devices_choose_apart(algorithm):
    # on "cpu" the slot fits into activation memory dead at its step; on "gpu" the rows above
    cpu = _requests([(100, 4096, 0, 1), (101, 4096, 1, 2), (102, 4096, 3, 4)], "cpu")
    cpu_slot = [mp.AllocationRequest(-10, 4096, 2, 2, "cpu")]
    acts, slots = _requests(ACTS) + cpu, _requests(SLOTS) + cpu_slot
    chosen, layout = plan_with_workspace(acts, slots, algorithm)
    packed = mp.plan(acts + slots, algorithm)
    assert layout["cpu"] == "packed" and chosen.peak["cpu"] == packed.peak["cpu"] == 8192
    if algorithm == "greedy_by_size":
        assert layout["gpu"] == "separate" and chosen.peak["gpu"] < packed.peak["gpu"]
    for device in ("cpu", "gpu"):
        assert chosen.peak[device] <= packed.peak[device]
    mp.validate(chosen, acts + slots)

