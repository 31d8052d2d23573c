from __future__ import annotations

import ort_cuda_ep
import ort_partition


def test_profiles_are_ort_partitions_reexported():
    """The profiles moved to ort-partition (planning needs no CUDA wheel); ort_cuda_ep's names are the same objects."""
    assert ort_cuda_ep.PROFILES is ort_partition.PROFILES
    assert ort_cuda_ep.DeviceProfile is ort_partition.DeviceProfile
    assert ort_cuda_ep.get_profile is ort_partition.get_profile
    assert ort_cuda_ep.UnknownProfileError is ort_partition.UnknownProfileError
