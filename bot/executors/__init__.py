"""Trial executors: each launches one candidate in isolation and measures it from outside."""
