"""Shim so that `pip install -e .` works with older tooling; metadata lives in pyproject.toml."""

from setuptools import setup

setup()
