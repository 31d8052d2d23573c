"""ONNX Runtime's `capi` path, for code that imports its exception types from there."""
