"""CUDA execution provider with NVRTC-compiled kernels and exact workspace recipes."""

__version__ = "0.1.0"

__all__ = ["__version__"]
