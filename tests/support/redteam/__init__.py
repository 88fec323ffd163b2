"""The red-team benches, paths and cheats, shared by tests/redteam and benchmarks/redteam_table.py."""
