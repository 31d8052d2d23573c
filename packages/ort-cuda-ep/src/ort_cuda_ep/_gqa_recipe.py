"""GroupQueryAttention workspace recipe: the flash-decoding layout of ``_attention_recipe`` with the
key length the shapes give, ``P + S`` (past length + new tokens).

The key length of a run is ``T = max(total_sequence_length, P)``: a *value* read on the host, which
the Level-1 estimate and the Level-2 declaration cannot see. For a cache that is not shared with
present (the only kind claimed) onnxruntime requires ``total_sequence_length == P + S``, so the
recipe takes ``P + S`` from the past and query shapes and sizes exactly what onnxruntime's flash
GroupQueryAttention sizes for that length (``attention_recipe(B, S, P + S, H, D, SMs)``):

softmax LSE ``4*B*H*S`` | split LSEs ``4*splits*B*H*S`` | split outputs ``4*splits*B*H*S*round32(D)``,
every region 256-byte aligned, float32 whatever the input type.

Split selection follows onnxruntime's GroupQueryAttention (the seeds' rule): on the fast-decode route
(every call but a first prompt, i.e. unless S > 1 with no past) the heuristic sees the *KV* heads,
``num_splits_heuristic(B, S, P + S, Hkv, D, SMs)``, while the accumulators still hold every *query*
head (``splits*B*H*S``); a first prompt selects by query heads. B=1, S=1, P+S=4096, H=32, Hkv=8,
D=128 on 108 SMs: 11 splits (by query heads it would be 3). onnxruntime also requires a shared
past/present buffer for its fast-decode kernel; this kernel appends to present itself on every route,
so the route is decided by the shapes alone. (The seeds cap the split length at local_window_size;
sliding windows are declined here.)

At run time the kernel uses at most the recipe's split count whatever T is (``gqa_split_plan``:
fewer splits when T has fewer key blocks), so the declared slot always suffices and the run asks
for the same bytes. Over ranges of shapes (symbolic dims) the envelope treats S and P + S as
independent ranges: an upper bound of every shape's need (attention_workspace_envelope).
"""

from __future__ import annotations

from ._attention_recipe import AttentionRecipe, attention_recipe, attention_workspace_envelope
from ._checked import MAX_DIM, add, dim, span

__all__ = ["MAX_HEAD_SIZE", "gqa_fast_decode", "gqa_head_size", "gqa_recipe", "gqa_split_plan", "gqa_workspace_envelope"]

MAX_HEAD_SIZE = 256  # the kernel keeps one query row in shared memory and two output dims per thread


def gqa_head_size(hidden: object, num_heads: object, kv_num_heads: object, packed: bool) -> int | None:
    """Head size from the query's last dim: hidden / H, or hidden / (H + 2*Hkv) for packed QKV;
    None when the heads are malformed, do not divide the hidden size, or exceed 256."""
    hid, h, hkv = dim(hidden), dim(num_heads), dim(kv_num_heads)
    if hid is None or not h or not hkv or h % hkv:
        return None
    parts = h + 2 * hkv if packed else h
    if hid % parts:
        return None
    d = hid // parts
    return d if 1 <= d <= MAX_HEAD_SIZE else None


def gqa_fast_decode(seq_q: int, past: int) -> bool:
    """onnxruntime's fast-decode route: not a first prompt (S > 1 with no past) and some new tokens."""
    return seq_q >= 1 and not (seq_q > 1 and past == 0)


def gqa_recipe(batch: object, seq_q: object, past: object, num_heads: object, head_size: object,
               sm_count: object, kv_num_heads: object = None) -> AttentionRecipe | None:
    """Exact workspace for one static shape (past = the past inputs' length, 0 without them), or None
    when malformed or overflowing (P + S or B*H*S past 2**31-1, head size past 256). ``kv_num_heads``
    (default ``num_heads``) selects the split count on the fast-decode route."""
    s, p, d = dim(seq_q), dim(past), dim(head_size)
    hkv = num_heads if kv_num_heads is None else dim(kv_num_heads)
    if s is None or p is None or d is None or d > MAX_HEAD_SIZE or hkv is None:
        return None
    kv = add(p, s)
    if kv is None or kv > MAX_DIM:
        return None
    return attention_recipe(batch, s, kv, num_heads, d, sm_count, hkv if gqa_fast_decode(s, p) else num_heads)


def gqa_split_plan(recipe: AttentionRecipe, total_kv: int) -> tuple[int, int]:
    """(splits, keys per split) for a run with ``total_kv`` keys: the recipe's split count at most,
    fewer when the keys have fewer blocks; whole blocks per split, none empty, all keys covered."""
    if recipe.num_splits <= 1 or total_kv <= 0:
        return 1, max(total_kv, 1)
    blocks = -(-total_kv // recipe.block_n)
    per = -(-blocks // min(recipe.num_splits, blocks))
    return -(-blocks // per), per * recipe.block_n


def gqa_workspace_envelope(batch: object, seq_q: object, past: object, num_heads: object, head_size: object,
                           sm_count: object, kv_num_heads: object = None) -> int | None:
    """The largest workspace over every shape in the ranges (each an int or an inclusive ``(lo, hi)``):
    the larger of the two routes' envelopes over the whole ranges, for each route some shape can take."""
    bs, qs, ps = span(batch), span(seq_q), span(past)
    d = dim(head_size)
    hkv = num_heads if kv_num_heads is None else dim(kv_num_heads)
    if bs is None or qs is None or ps is None or d is None or d > MAX_HEAD_SIZE or hkv is None:
        return None
    kv = (add(ps[0], qs[0]), add(ps[1], qs[1]))
    if kv[1] is None or kv[1] > MAX_DIM:
        return None
    first_prompt = qs[1] > 1 and ps[0] == 0  # some shape has S > 1 and no past
    fast = qs[1] >= 1 and (qs[0] <= 1 or ps[1] > 0)  # some shape has S == 1, or a past
    best = 0
    for reachable, split_heads in ((first_prompt, num_heads), (fast, hkv)):
        if not reachable and (first_prompt or fast):
            continue
        got = attention_workspace_envelope(bs, qs, kv, num_heads, d, sm_count, split_heads)
        if got is None:
            return None
        best = max(best, got)
    return best
