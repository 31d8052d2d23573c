"""The paged KV pool: blocks taken as a sequence grows and given back whole, a gathered past equal to the dense
past the same writes make, and bad sizes refused by flag."""

from __future__ import annotations

import numpy as np
import pytest

from ort_serve import ServeError
from ort_serve._kv_pool import KVPool, blocks_for

SHAPES = {"past_key_values.0.key": (2, 3), "past_key_values.0.value": (2, 3)}
DTYPES = {n: np.dtype(np.float32) for n in SHAPES}


@pytest.mark.parametrize(("positions", "block", "want"), [(0, 4, 0), (1, 4, 1), (4, 4, 1), (5, 4, 2), (17, 16, 2)])
def test_blocks_for(positions, block, want):
    assert blocks_for(positions, block) == want


def test_default_blocks_hold_every_slot_at_the_context():
    pool = KVPool.allocate(SHAPES, DTYPES, slots=3, ctx=10, block=4)
    assert (pool.blocks, pool.positions, pool.slots) == (9, 36, 3)
    assert pool.nbytes == 2 * 2 * 36 * 3 * 4


def test_blocks_are_taken_as_a_sequence_grows_and_given_back_whole():
    pool = KVPool.allocate(SHAPES, DTYPES, slots=2, ctx=16, block=4, blocks=5)
    a, b = pool.take(), pool.take()
    assert pool.grow(a, 5) and pool.missing(a, 8) == 0 and pool.missing(a, 9) == 1
    assert pool.grow(b, 12) and pool.blocks_in_use() == 5
    assert not pool.grow(a, 9) and len(pool.tables[a]) == 2  # none free: nothing taken
    assert not pool.grow(b, 20) and len(pool.tables[b]) == 3  # two missing, none free: nothing taken
    pool.release(b)
    assert pool.blocks_in_use() == 2 and pool.in_use() == 1
    assert pool.grow(a, 20) and pool.blocks_in_use() == 5
    pool.release(a)
    pool.release(a)  # twice: once freed
    assert (pool.blocks_in_use(), pool.in_use(), sorted(pool.free_blocks)) == (0, 0, list(range(5)))


@pytest.mark.parametrize("block", [1, 3, 4, 16])
def test_gathered_past_equals_the_dense_past_of_the_same_writes(block):
    rng = np.random.default_rng(block)
    pool = KVPool.allocate(SHAPES, DTYPES, slots=3, ctx=20, block=block)
    dense = {n: np.zeros((3, 2, 20, 3), np.float32) for n in SHAPES}
    slots = [pool.take() for _ in range(3)]
    lengths = [0, 0, 0]
    for _ in range(12):  # interleaved growth: the sequences' blocks end up scattered over the pool
        i = int(rng.integers(3))
        n = int(rng.integers(1, 4))
        if lengths[i] + n > 20:
            continue
        assert pool.grow(slots[i], lengths[i] + n)
        for name in SHAPES:
            values = rng.standard_normal((2, n, 3)).astype(np.float32)
            pool.write(name, slots[i], lengths[i], values)
            dense[name][i, :, lengths[i]:lengths[i] + n] = values
        lengths[i] += n
        pool.lengths[slots[i]] = lengths[i]
    # one decode step's scatter: one position of each sequence at its own length
    for i in range(3):
        assert pool.grow(slots[i], lengths[i] + 1)
    rows = np.concatenate([pool.rows(s, n, n + 1) for s, n in zip(slots, lengths)])
    for name in SHAPES:
        step = rng.standard_normal((3, 2, 3)).astype(np.float32)
        pool.write_rows(name, rows, step)
        dense[name][np.arange(3), :, lengths] = step
    lengths = [n + 1 for n in lengths]
    for s, n in zip(slots, lengths):
        pool.lengths[s] = n
    longest = max(lengths)
    order = [2, 0, 1]
    got = pool.past([slots[i] for i in order], longest)
    for name in SHAPES:
        assert got[name].shape == (3, 2, longest, 3) and got[name].flags.c_contiguous
        for k, i in enumerate(order):
            np.testing.assert_array_equal(got[name][k, :, :lengths[i]], dense[name][i, :, :lengths[i]])
    assert pool.past([slots[0]], 0)[next(iter(SHAPES))].shape == (1, 2, 0, 3)


def test_rows_beyond_the_blocks_held_are_refused():
    pool = KVPool.allocate(SHAPES, DTYPES, slots=1, ctx=8, block=4)
    slot = pool.take()
    pool.grow(slot, 3)
    with pytest.raises(ServeError, match="holds 1 blocks of 4 positions, not position 4"):
        pool.rows(slot, 0, 5)


@pytest.mark.parametrize(("block", "blocks"), [(0, None), (4, 0)])
def test_bad_sizes_are_refused_by_flag(block, blocks):
    with pytest.raises(ServeError, match="--kv-block.*at least 1"):
        KVPool.allocate(SHAPES, DTYPES, slots=1, ctx=8, block=block, blocks=blocks)
