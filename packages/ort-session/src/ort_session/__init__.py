"""InferenceSession, the CPU execution provider and the ortrun command."""

__version__ = "0.1.0"

__all__ = ["__version__"]
