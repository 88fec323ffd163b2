"""Stage 1, init: read the repo statically and draft the contract."""
