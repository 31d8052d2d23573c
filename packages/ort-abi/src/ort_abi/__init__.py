"""The C kernel ABI, its cffi bridge, and the kernel registry."""

__version__ = "0.1.0"

__all__ = ["__version__"]
