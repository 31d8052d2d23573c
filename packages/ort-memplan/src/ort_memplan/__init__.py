"""Graph-free memory offset planning for activations and kernel workspace."""

__version__ = "0.1.0"

__all__ = ["__version__"]
