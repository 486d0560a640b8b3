"""Helpers shared by tests and benchmarks (importable as ``tests.support``)."""
