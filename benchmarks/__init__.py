"""Benchmark scripts and their data (not shipped; run with `python -m benchmarks.<name>`)."""
