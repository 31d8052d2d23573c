"""Builds the cffi bridge (`ort_abi._cffi_bridge`) at install time; metadata lives in pyproject.toml."""

from setuptools import setup

setup(cffi_modules=["src/ort_abi/_ffi_build.py:ffibuilder"])
