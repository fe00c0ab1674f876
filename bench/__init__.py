"""Benchmarks (not tests): `python bench/pipelines.py`, `python bench/bench_emulator.py`."""
