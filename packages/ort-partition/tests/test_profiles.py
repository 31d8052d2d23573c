from __future__ import annotations

import pytest

from ort_partition import PROFILES, DeviceProfile, PartitionError, UnknownProfileError, get_profile


@pytest.mark.parametrize("name,sms,cc,arch", [("h200", 132, (9, 0), "sm_90"), ("h100", 132, (9, 0), "sm_90"),
                                              ("a100", 108, (8, 0), "sm_80"), ("l4", 58, (8, 9), "sm_89"),
                                              ("rtx4090", 128, (8, 9), "sm_89")])
def test_builtin_profiles(name, sms, cc, arch):
    p = get_profile(name.upper())
    assert (p.sm_count, p.compute_capability, p.arch) == (sms, cc, arch)
    assert p.memory_bytes > 20 * 2**30 and p.memory_bandwidth > 2 * 10**11


def test_memory_and_bandwidth_order():
    assert PROFILES["h200"].memory_bytes > PROFILES["h100"].memory_bytes > PROFILES["l4"].memory_bytes
    assert PROFILES["h200"].memory_bandwidth > PROFILES["h100"].memory_bandwidth > PROFILES["a100"].memory_bandwidth


def test_aliases_and_unknown():
    assert get_profile("rtx-4090") is PROFILES["rtx4090"]
    with pytest.raises(UnknownProfileError, match="'v100'.*h100"):
        get_profile("v100")


def test_custom_profile_is_validated():
    with pytest.raises(ValueError, match="sm_count"):
        DeviceProfile("x", "x", 0, 1, (8, 0), 1)


def test_unknown_profile_is_a_partition_error_and_a_key_error():
    with pytest.raises(PartitionError) as info:
        get_profile("gtx480")
    assert isinstance(info.value, KeyError) and not str(info.value).startswith('"')
