"""TfIdfVectorizer (ops_extra_text) against onnxruntime: int and string pools, TF/IDF/TFIDF, skips, n-gram ranges."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto

from ort_cpu_ep.ops import InputInfo
from ort_cpu_ep.ops.ops_extra_text import TfIdfVectorizer

# Called directly: the op table may hold another TfIdfVectorizer from a standard-op module; `find` picks one.
TFIDF = TfIdfVectorizer()

POOL_INT = dict(ngram_counts=[0, 4], ngram_indexes=[0, 1, 2, 3, 4, 5, 6],
                pool_int64s=[2, 3, 5, 4, 5, 6, 7, 8, 6, 7])  # unigrams 2 3 5 4, bigrams (5,6) (7,8) (6,7)


@pytest.mark.parametrize("mode", ["TF", "IDF", "TFIDF"])
@pytest.mark.parametrize("weighted", [False, True])
@pytest.mark.parametrize("grams,skip", [((1, 1), 0), ((2, 2), 0), ((1, 2), 0), ((1, 2), 3), ((2, 2), 5)])
@pytest.mark.parametrize("batched", [False, True])
def test_tfidf_int_matches_onnxruntime(kit, rng, mode, weighted, grams, skip, batched):
    x = rng.integers(1, 9, (3, 12) if batched else (12,)).astype(np.int32)
    attrs = dict(POOL_INT, mode=mode, min_gram_length=grams[0], max_gram_length=grams[1], max_skip_count=skip)
    if weighted:
        attrs["weights"] = [0.5, 1.5, 2.0, 0.25, 3.0, 1.0, 0.75]
    ref = kit.ort("TfIdfVectorizer", [x], 1, domain="", opset=9, **attrs)[0]
    got = kit.ours("TfIdfVectorizer", [x], 1, domain="", opset=9, impl=TFIDF, **attrs)[0]
    assert got.shape == ref.shape and got.dtype == np.float32
    np.testing.assert_allclose(got, ref)


def test_tfidf_strings_match_onnxruntime(kit, rng):
    words = np.array(["a", "b", "c", "d", "e"], dtype=object)
    x = words[rng.integers(0, 5, (2, 10))]
    attrs = dict(mode="TF", min_gram_length=1, max_gram_length=2, max_skip_count=1, ngram_counts=[0, 3],
                 ngram_indexes=[2, 0, 1, 3, 4], pool_strings=["a", "c", "e", "b", "d", "a", "a"])
    ref = kit.ort("TfIdfVectorizer", [x], 1, domain="", opset=9, **attrs)[0]
    got = kit.ours("TfIdfVectorizer", [x], 1, domain="", opset=9, impl=TFIDF, **attrs)[0]
    np.testing.assert_allclose(got, ref)


def test_tfidf_declines(kit):
    d = kit.decline_of("TfIdfVectorizer", [InputInfo(TensorProto.FLOAT, (4,))], domain="", opset=9, impl=TFIDF, mode="TF",
                       ngram_counts=[0], ngram_indexes=[0])
    assert d is not None and "FLOAT" in d.rejected
    d = kit.decline_of("TfIdfVectorizer", [InputInfo(TensorProto.INT64, (4,))], domain="", opset=9, impl=TFIDF, mode="BM25",
                       ngram_counts=[0], ngram_indexes=[0])
    assert d is not None and "BM25" in d.rejected
