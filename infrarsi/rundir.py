"""The on-disk layout of InfraRSI's state in a training repo: every path under ``.infrarsi/``.

One module owns it so that no stage builds a path by hand::

    <repo>/.infrarsi/
        .gitignore              "*": the directory ignores itself; the user's .gitignore is untouched
        journal.sqlite          every trial of every run (infrarsi.journal)
        worktrees/<run>-<n>/    trial worktrees (bot.workspace)
        logs/<run>/<n>/         a trial's stdout/stderr and step events
        llm-cache/              the anthropic proposer's response cache
        runs/<run>/
            doctor.json  doctor.md                  the baseline profile (``infrarsi doctor``)
            search.json  proposed-patches.json      resume state of ``infrarsi run`` (the model's patches)
            verify-<digest>.json                    one verdict per verified candidate
            split-<digest>.json                     the witnessed baseline at another split of the global batch
            run.json                                written last by ``infrarsi run``: the run finished
            report.md  report.json  winner.diff     ``infrarsi report``

Pure pathlib: no git. Properties only name paths; :meth:`RunDir.create` and the
``write_*`` helpers create directories. Which run is "the latest" has one rule,
:func:`latest_run`.
"""

from __future__ import annotations

import json
import os
import re
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = ["PROPOSED_PATCHES", "STATE_DIR", "STDERR_LOG", "STDOUT_LOG", "RunDir", "ensure_state_dir", "journal_path", "latest_run",
           "logs_dir", "llm_cache_dir", "read_json", "run_logs", "runs_dir", "slurm_dir", "state_dir", "worktrees_dir", "write_json",
           "write_text"]

STATE_DIR = ".infrarsi"
#: What every executor names a trial's full output in its log directory (the Actions artifact carries the same).
STDOUT_LOG = "stdout.log"
STDERR_LOG = "stderr.log"
PROPOSED_PATCHES = "proposed-patches.json"  # in a run's directory
_GITIGNORE_TEXT = (
    "# Created by InfraRSI. Everything in this directory (trial worktrees,\n"
    "# caches) is scratch space, so it ignores itself; your .gitignore is untouched.\n"
    "*\n"
)
_RUN_ID = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._-]*")


def state_dir(root: Path) -> Path:
    """``<root>/.infrarsi`` (not created; :func:`ensure_state_dir` creates it)."""
    return Path(root) / STATE_DIR


def ensure_state_dir(root: Path) -> Path:
    """Create ``<root>/.infrarsi/`` with a ``.gitignore`` holding ``*`` and return it.

    The ignore file ignores the directory *and itself*, so the user's repository
    stays clean without editing the user's own .gitignore. Safe to call from many
    threads and processes at once (the ignore file is replaced atomically).
    """
    directory = state_dir(root)
    directory.mkdir(parents=True, exist_ok=True)
    gitignore = directory / ".gitignore"
    try:
        existing: str | None = gitignore.read_text()
    except FileNotFoundError:
        existing = None
    if existing is not None and "*" in (line.strip() for line in existing.splitlines()):
        return directory
    text = _GITIGNORE_TEXT if existing is None else existing.rstrip("\n") + "\n*\n"
    tmp = directory / f".gitignore.{os.getpid()}.{threading.get_ident()}.tmp"
    tmp.write_text(text)
    os.replace(tmp, gitignore)
    return directory


def journal_path(root: Path) -> Path:
    """The run journal (SQLite); the state dir is created so the journal can be opened."""
    return ensure_state_dir(root) / "journal.sqlite"


def runs_dir(root: Path) -> Path:
    return state_dir(root) / "runs"


def worktrees_dir(root: Path) -> Path:
    """Where trial worktrees are checked out; ``root`` is the main working tree."""
    return state_dir(root) / "worktrees"


def logs_dir(root: Path, run_id: str, trial_no: int) -> Path:
    """A trial's log directory (the executor creates it; the ignored state dir above it is created here)."""
    ensure_state_dir(root)
    return run_logs(root, run_id) / str(trial_no)


def run_logs(root: Path, run_id: str) -> Path:
    """Where a run's trials keep their logs, one directory per trial (nothing is created)."""
    return state_dir(root) / "logs" / _checked(run_id)


def check_run_logs(root: Path) -> Path:
    """Where ``infrarsi check --run`` keeps its dry run's logs: beside the runs' logs, under a name no run id
    can take (a run id never contains '+')."""
    return state_dir(root) / "logs" / "+check-run"


def llm_cache_dir(root: Path) -> Path:
    return state_dir(root) / "llm-cache"


def slurm_dir(root: Path) -> Path:
    """The Slurm executor's default shared working directory (``[launch.slurm] workdir`` overrides it): under
    the repository, which the nodes must see as they see the trial worktrees."""
    return state_dir(root) / "slurm"


def _checked(run_id: str) -> str:
    """A run id is one path component; anything else would write outside ``runs/``."""
    if not isinstance(run_id, str) or not _RUN_ID.fullmatch(run_id) or ".." in run_id:
        raise ValueError(f"run id {run_id!r}: use letters, digits, '.', '_' and '-' (not starting with '.' or '-')")
    return run_id


@dataclass(frozen=True, slots=True)
class RunDir:
    """``<root>/.infrarsi/runs/<run_id>/`` and the name of every artefact in it."""

    root: Path
    run_id: str

    def __post_init__(self) -> None:
        _checked(self.run_id)

    @property
    def path(self) -> Path:
        return runs_dir(self.root) / self.run_id

    @property
    def doctor_json(self) -> Path:
        return self.path / "doctor.json"

    @property
    def doctor_md(self) -> Path:
        return self.path / "doctor.md"

    @property
    def search_json(self) -> Path:
        """Where ``infrarsi run --resume`` finds the trial number verification started at."""
        return self.path / "search.json"

    @property
    def run_json(self) -> Path:
        """Written last by ``infrarsi run``: its presence marks the run finished."""
        return self.path / "run.json"

    @property
    def report_md(self) -> Path:
        return self.path / "report.md"

    @property
    def report_json(self) -> Path:
        return self.path / "report.json"

    @property
    def winner_diff(self) -> Path:
        return self.path / "winner.diff"

    @property
    def proposed_patches_json(self) -> Path:
        """The model's proposed patches and what each was judged (``--proposer anthropic``; kept for --resume)."""
        return self.path / PROPOSED_PATCHES

    def record_files(self) -> tuple[Path, ...]:
        """What ``apply`` keeps on the run's record branch, so promote works from a fresh checkout."""
        return (self.run_json, self.doctor_json, self.report_md, self.report_json, self.winner_diff)

    @property
    def charts(self) -> Path:
        """``infrarsi report --png``'s PNG files."""
        return self.path / "charts"

    def verify_json(self, digest: str) -> Path:
        """The verdict of the candidate with this digest (``Candidate.digest()``)."""
        return self.path / f"verify-{digest}.json"

    def split_reference_json(self, digest: str) -> Path:
        """The witnessed baseline at another split of the global batch (the digest of that baseline candidate):
        what candidates with that split are held to (bot/stages/run/references.py)."""
        return self.path / f"split-{digest}.json"

    @property
    def started(self) -> bool:
        return self.doctor_json.is_file() or self.run_json.is_file()

    @property
    def finished(self) -> bool:
        return self.run_json.is_file()

    def create(self) -> Path:
        """Create the run's directory (and the ignored state dir above it); return it."""
        ensure_state_dir(self.root)
        self.path.mkdir(parents=True, exist_ok=True)
        return self.path


def write_text(path: Path, text: str) -> Path:
    """Write ``text`` (UTF-8) to ``path``, creating its directory."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


def write_json(path: Path, data: Any) -> Path:
    """One artefact's JSON as every artefact is written: indented, sorted keys, a final newline."""
    return write_text(path, json.dumps(data, indent=2, sort_keys=True, default=str) + "\n")


def read_json(path: Path) -> Any | None:
    """The JSON at ``path``, or None when there is no such file."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    return json.loads(text)


def latest_run(root: Path, *, finished: bool = False) -> str | None:
    """The one rule for "the latest run" of a repo: the run whose newest marker file was written last.

    A run's markers are ``doctor.json`` (started) and ``run.json`` (finished);
    with ``finished=True`` only runs with ``run.json`` count and only it is the
    marker. Ties (coarse file-system clocks) go to the greater run id, so the
    answer is the same on every call. None when there is no such run.
    """
    base = runs_dir(root)
    if not base.is_dir():
        return None
    best: tuple[int, str] | None = None
    for child in base.iterdir():
        if not child.is_dir() or not _RUN_ID.fullmatch(child.name):
            continue
        run = RunDir(root, child.name)
        markers = [run.run_json] if finished else [run.doctor_json, run.run_json]
        times = [m.stat().st_mtime_ns for m in markers if m.is_file()]
        if not times:
            continue
        key = (max(times), child.name)
        if best is None or key > best:
            best = key
    return best[1] if best else None
