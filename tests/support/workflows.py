"""GitHub Actions workflow files read as YAML, the way GitHub reads them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml


def load(path: Path | str) -> dict[str, Any]:
    text = path.read_text() if isinstance(path, Path) else path
    data = yaml.safe_load(text)
    if True in data:  # YAML 1.1 reads the key `on` as a boolean
        data["on"] = data.pop(True)
    return data
