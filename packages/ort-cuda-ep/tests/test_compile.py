"""Every kernel compiles to cubin for sm_80 and sm_90 with NVRTC (no GPU needed); the cache works."""

from __future__ import annotations

import pytest

from ort_cuda_ep import KERNEL_SOURCES, KernelCache, KernelCompileError


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    return KernelCache(tmp_path_factory.mktemp("cubins"))


@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
@pytest.mark.parametrize("name", sorted(KERNEL_SOURCES))
def test_every_kernel_compiles_to_cubin(cache, name, arch):
    k = cache.get(name, arch)
    assert k.cubin[:4] == b"\x7fELF"
    for entry in KERNEL_SOURCES[name].entry_points:
        assert entry.encode() in k.cubin, f"{entry} missing from the {name} cubin"
    assert isinstance(k.log, str)


def test_memory_then_disk_cache(tmp_path):
    first = KernelCache(tmp_path)
    a = first.get("softmax", "sm_80")
    b = first.get("softmax", "sm_80")
    assert (a.from_cache, b.from_cache, first.compiles) == ("", "memory", 1)
    assert (tmp_path / f"{a.key}.cubin").read_bytes() == a.cubin
    assert (tmp_path / f"{a.key}.log").is_file()
    second = KernelCache(tmp_path)
    c = second.get("softmax", "sm_80")
    assert (c.from_cache, second.compiles, c.cubin) == ("disk", 0, a.cubin)


def test_key_covers_arch_options_and_headers():
    cache = KernelCache(None)
    base = cache.key("softmax", "sm_80", ("std=c++17",))
    assert cache.key("softmax", "sm_90", ("std=c++17",)) != base
    assert cache.key("softmax", "sm_80", ("std=c++17", "use_fast_math")) != base
    assert "common.cuh" in KERNEL_SOURCES["softmax"].text_with_headers()


def test_compile_error_keeps_the_log():
    with pytest.raises(KernelCompileError) as err:
        KernelCache(None).get("matmul", "sm_80", ("std=c++17", "D=extern=@"))
    assert err.value.log and "matmul.cu" in str(err.value)


@pytest.mark.parametrize("name,arch,options", [("nope", "sm_80", ()), ("softmax", "ampere", ()),
                                               ("softmax", "sm_80", ("--fancy",))])
def test_bad_requests_say_what_is_accepted(name, arch, options):
    with pytest.raises(KernelCompileError, match=repr(name) if name == "nope" else "sm_|option"):
        KernelCache(None).get(name, arch, options)


def test_corrupt_disk_entry_is_recompiled(tmp_path):
    first = KernelCache(tmp_path).get("softmax", "sm_90")
    (tmp_path / f"{first.key}.cubin").write_bytes(b"garbage")
    again = KernelCache(tmp_path)
    k = again.get("softmax", "sm_90")
    assert (k.from_cache, again.compiles, k.cubin) == ("", 1, first.cubin)
