"""Layer rules, memory budgets, placement and auto-fit for ONNX graphs."""

__version__ = "0.1.0"

__all__ = ["__version__"]
