"""Tests whose subject is a benchmark script (run with the suite: pyproject's testpaths)."""
