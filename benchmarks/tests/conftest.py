"""As in tests/conftest.py: the engine's small matrix products crawl under multi-threaded OpenBLAS on two cores."""

from __future__ import annotations

import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # before numpy is imported anywhere
