"""Forges, registered in one map (Renovate's platform registry): a name → a factory for a repository.

A factory takes the local repository and the git remote's name and returns a
:class:`infrarsi.seams.forge.Forge`; ``infrarsi apply --forge NAME`` picks one.
Factories import their module lazily, so the offline default never imports an
HTTP client.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from infrarsi.seams.forge import Forge, ForgeError

__all__ = ["FORGES", "ForgeFactory", "open_forge"]

ForgeFactory = Callable[[Path, str], Forge]


def _local(repo: Path, remote: str) -> Forge:
    from bot.forges.local import LocalForge, local_remote_path

    return LocalForge(local_remote_path(repo, remote))


def _github(repo: Path, remote: str) -> Forge:
    from bot.forges.github import forge_for_repo

    return forge_for_repo(repo, remote)


FORGES: dict[str, ForgeFactory] = {"local": _local, "github": _github}


def open_forge(name: str, repo: Path, remote: str = "origin") -> Forge:
    """The forge ``name`` for ``repo``'s ``remote``; ForgeError names the known forges."""
    try:
        factory = FORGES[name]
    except KeyError:
        raise ForgeError(f"unknown forge {name!r}; known: {', '.join(sorted(FORGES))}") from None
    return factory(repo, remote)
