"""A pyproject-based training repo's metadata, from its own build backend (pyproject-api).

Not hand-parsed: the backend named in ``[build-system]`` prepares the metadata
as pip would, so dynamic versions and dependencies come out right. The result
joins the software fingerprint, and verification checks that a patched
candidate still prepares its metadata.
"""

from __future__ import annotations

import email.parser
import tempfile
from dataclasses import dataclass
from pathlib import Path

from pyproject_api import BackendFailed, SubprocessFrontend


@dataclass(frozen=True, kw_only=True, slots=True)
class ProjectMetadata:
    ok: bool
    backend: str = ""
    build_requires: tuple[str, ...] = ()
    name: str | None = None
    version: str | None = None
    requires_dist: tuple[str, ...] = ()
    error: str = ""

    def to_dict(self) -> dict[str, object]:
        return {"ok": self.ok, "backend": self.backend, "build_requires": list(self.build_requires),
                "name": self.name, "version": self.version, "requires_dist": list(self.requires_dist),
                "error": self.error}


def project_metadata(root: Path) -> ProjectMetadata | None:
    """None when ``root`` has no pyproject.toml; else what its backend reports (or why it failed)."""
    if not (root / "pyproject.toml").is_file():
        return None
    try:
        root_dir, backend_paths, backend_module, backend_obj, requires, _ = \
            SubprocessFrontend.create_args_from_folder(root)
        frontend = SubprocessFrontend(root_dir, backend_paths, backend_module, backend_obj, requires)
        backend = backend_module + (f":{backend_obj}" if backend_obj else "")
        with tempfile.TemporaryDirectory(prefix="infrarsi-metadata-") as tmp:
            extra = frontend.get_requires_for_build_wheel().requires
            result = frontend.prepare_metadata_for_build_wheel(Path(tmp))
            if result is None:  # the backend has no such hook: it would build a wheel instead
                return ProjectMetadata(ok=False, backend=backend, error="backend cannot prepare metadata")
            text = (result.metadata / "METADATA").read_text(encoding="utf-8")
    except BackendFailed as e:
        return ProjectMetadata(ok=False, error=f"build backend failed: {str(e).strip().splitlines()[-1][:300]}")
    except Exception as e:  # noqa: BLE001 - a broken project is a finding, not a crash of the bot
        return ProjectMetadata(ok=False, error=f"{type(e).__name__}: {e}")
    meta = email.parser.Parser().parsestr(text)
    return ProjectMetadata(ok=True, backend=backend,
                           build_requires=tuple(str(r) for r in (*requires, *extra)),
                           name=meta.get("Name"), version=meta.get("Version"),
                           requires_dist=tuple(meta.get_all("Requires-Dist") or ()))
