"""Each documented failure of each verb, through the real CLI in a fresh interpreter.

The one error model (``infrarsi/errors.py``, README "Exit status"): a failure
exits with its documented status (2 bad input, 1 the thing checked is not
right) and prints one line ``error: …`` on stderr, never a traceback. Verbs that
fail before doing any work print nothing else on stderr; verbs that measure
(``doctor``, ``run``, ``verify``) print their progress first, and the error line
is their last line.
"""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pygit2
import pytest

from tests.support.tinygpt import TINY_ARGS, copy_fixture, infrarsi

BAD_INPUT, NOT_RIGHT = 2, 1


@dataclass(frozen=True)
class Case:
    """One row: the verb's arguments (``{repo}`` is the prepared repo), the status and what the line says."""

    setup: str  # missing | empty | malformed | fresh | stale | crashing | forge
    argv: tuple[str, ...]
    code: int
    says: str
    quiet: bool = True  # nothing on stderr but the error line


def _one_error_line(result: subprocess.CompletedProcess[str], case: Case) -> str:
    err = result.stderr
    assert "Traceback" not in err, err[-3000:]
    assert result.returncode == case.code, (result.returncode, result.stdout[-2000:], err[-2000:])
    lines = [line for line in err.splitlines() if line.strip()]
    errors = [line for line in lines if line.startswith("error: ")]
    assert len(errors) == 1 and lines[-1] == errors[0], err[-3000:]
    if case.quiet:
        assert lines == errors, err
    assert case.says in errors[0], errors[0]
    return errors[0]


@pytest.fixture(scope="module")
def fresh_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """tinygpt with a contract for the tiny config and its lock, never mutated (rows get copies)."""
    repo = copy_fixture(tmp_path_factory.mktemp("cli-errors") / "fresh")
    result = infrarsi("init", str(repo), "--command", f"python train.py {TINY_ARGS}")
    assert result.returncode == 0, result.stderr
    return repo


def _prepare(kind: str, template: Path, tmp: Path) -> Path:
    if kind == "missing":
        return tmp / "no-such-repo"
    if kind == "empty":
        (tmp / "empty").mkdir()
        return tmp / "empty"
    repo = Path(shutil.copytree(template, tmp / kind))
    if kind == "malformed":
        toml = repo / "infrarsi.toml"
        text = toml.read_text()
        assert 'default = "fp32"' in text
        toml.write_text(text.replace('default = "fp32"', 'default = "fp16"', 1))
    elif kind == "stale":
        harness = repo / "harness.py"
        harness.write_text(harness.read_text() + "\n# an edit after the lock was taken\n")
    elif kind == "crashing":  # the training command crashes; the lock is re-taken, so only the doctor can fail
        train = repo / "train.py"
        text = train.read_text()
        assert text.count("from __future__ import annotations\n") == 1
        train.write_text(text.replace("from __future__ import annotations\n", "from __future__ import annotations\n"
                                      'raise SystemExit("boom: the model diverged")\n'))
        assert infrarsi("lock", str(repo)).returncode == 0
    elif kind == "forge":  # a git repo whose origin is a bare repository on disk: the local forge, no pull requests
        pygit2.init_repository(str(tmp / "remote.git"), bare=True)
        git = pygit2.init_repository(str(repo), initial_head="main")
        git.remotes.create("origin", str(tmp / "remote.git"))
    else:
        assert kind == "fresh", kind
    return repo


VERBS_WITH_REPO = (("init", "--command", "python train.py"), ("lock",), ("check",), ("patches",), ("doctor",),
                   ("trial",), ("journal",), ("gc",), ("run",), ("verify", "--knob", "dtype=bf16"), ("report",),
                   ("apply",))
NEEDS_CONTRACT = ("lock", "check", "patches", "doctor", "trial", "run", "report", "apply")

CASES = [
    # REPO is not a directory: every verb that takes one
    *(Case("missing", (verb, "{repo}", *rest), BAD_INPUT, "no-such-repo: not a directory")
      for verb, *rest in VERBS_WITH_REPO),
    Case("missing", ("approve", "{repo}", "1", "--as", "lead"), BAD_INPUT, "no-such-repo: not a directory"),
    Case("missing", ("promote", "{repo}", "--pr", "1"), BAD_INPUT, "no-such-repo: not a directory"),
    # no contract
    *(Case("empty", (verb, "{repo}"), BAD_INPUT, "no contract found") for verb in NEEDS_CONTRACT),
    Case("empty", ("verify", "{repo}", "--knob", "dtype=bf16"), BAD_INPUT, "no contract found"),
    Case("empty", ("init", "{repo}"), BAD_INPUT, 'no contract yet: pass --command "python train.py ..."'),
    # a malformed contract
    *(Case("malformed", (verb, "{repo}"), BAD_INPUT, "knobs.dtype.default: expected one of 'fp32', 'bf16'")
      for verb in ("check", "lock", "trial", "doctor", "run", "report")),
    # no finished run, or an unknown run id
    Case("fresh", ("report", "{repo}"), BAD_INPUT, "no finished run (run.json) to report"),
    Case("fresh", ("apply", "{repo}"), BAD_INPUT, "no finished run (run.json) to report"),
    Case("fresh", ("report", "{repo}", "--run-id", "nope"), BAD_INPUT, "no run 'nope' in"),
    Case("fresh", ("apply", "{repo}", "--run-id", "nope"), BAD_INPUT, "no run 'nope' in"),
    Case("fresh", ("journal", "{repo}", "--run-id", "nope"), BAD_INPUT, "--run-id nope: no such run in the journal"),
    Case("fresh", ("run", "{repo}", "--resume"), BAD_INPUT, "--resume: no earlier run in this repo"),
    # unknown knobs, bad values, bad sizes, patches without git
    Case("fresh", ("trial", "{repo}", "--knob", "nope=1"), BAD_INPUT, "nope"),
    Case("fresh", ("trial", "{repo}", "--knob", "dtype=fp16"), BAD_INPUT,
         "knob dtype: expected one of 'fp32', 'bf16', got 'fp16'"),
    Case("fresh", ("verify", "{repo}", "--knob", "nope=1"), BAD_INPUT, "nope"),
    Case("fresh", ("trial", "{repo}", "--memory-limit", "lots"), BAD_INPUT,
         "argument --memory-limit: expected a size > 0 in bytes or like 6GiB or 512MB, got 'lots'"),
    Case("fresh", ("trial", "{repo}", "--patch", "fused_gelu"), BAD_INPUT, "--patch needs a git repository"),
    # the command line itself
    Case("fresh", ("frobnicate", "{repo}"), BAD_INPUT, "invalid choice: 'frobnicate'"),
    Case("fresh", ("check", "{repo}", "--frob"), BAD_INPUT, "unrecognized arguments: --frob"),
    Case("fresh", ("approve", "{repo}", "1"), BAD_INPUT, "the following arguments are required: --as"),
    Case("fresh", ("apply", "{repo}", "--forge", "gitea"), BAD_INPUT, "invalid choice: 'gitea'"),
    # the lock no longer matches the tree
    Case("stale", ("check", "{repo}"), NOT_RIGHT,
         "check failed: 1 problem(s) with infrarsi.lock: harness.py: locked file changed"),
    # a forge without the pull request, or without a forge at all
    Case("forge", ("promote", "{repo}", "--pr", "99"), BAD_INPUT, "pull request #99 does not exist on the local forge"),
    Case("forge", ("approve", "{repo}", "99", "--as", "lead"), BAD_INPUT,
         "pull request #99 does not exist on the local forge"),
    Case("fresh", ("promote", "{repo}", "--pr", "1"), BAD_INPUT, "is not a git repository"),
    # the baseline cannot be profiled: the doctor fails, whichever verb runs it
    Case("crashing", ("doctor", "{repo}", "--repeats", "2", "--run-id", "d"), NOT_RIGHT,
         "the doctor failed for run d: only 0 of 2 baseline runs succeeded", quiet=False),
    Case("crashing", ("run", "{repo}", "--repeats", "2", "--run-id", "r", "--no-bank"), NOT_RIGHT,
         "the doctor failed for run r: only 0 of 2 baseline runs succeeded", quiet=False),
    Case("crashing", ("verify", "{repo}", "--knob", "dtype=bf16", "--repeats", "2", "--run-id", "v"), NOT_RIGHT,
         "the doctor failed for run v: only 0 of 2 baseline runs succeeded", quiet=False),
]


def _id(case: Case) -> str:
    return f"{case.argv[0]}-{case.setup}-" + "-".join(a.lstrip("-") for a in case.argv[2:4] if a != "{repo}")


@pytest.mark.parametrize("case", CASES, ids=[_id(c) for c in CASES])
def test_a_documented_failure_is_one_line_with_its_exit_status(case: Case, fresh_template: Path,
                                                               tmp_path: Path) -> None:
    repo = _prepare(case.setup, fresh_template, tmp_path)
    argv = [str(repo) if a == "{repo}" else a for a in case.argv]
    _one_error_line(infrarsi(*argv), case)


def test_a_crashing_baseline_says_why_and_where_the_logs_are(fresh_template: Path, tmp_path: Path) -> None:
    repo = _prepare("crashing", fresh_template, tmp_path)
    line = _one_error_line(infrarsi("doctor", str(repo), "--repeats", "2", "--run-id", "d"),
                           Case("crashing", (), NOT_RIGHT, "boom: the model diverged", quiet=False))
    assert line.endswith("see the baseline's logs in .infrarsi/logs/d/")
    assert (repo / ".infrarsi" / "logs" / "d").is_dir()


def test_a_trial_on_a_stale_lock_is_journaled_invalid_without_a_traceback(fresh_template: Path,
                                                                          tmp_path: Path) -> None:
    """A trial's outcome is its result (stdout, exit 1), not an error: failure is data, and it is in the journal."""
    repo = _prepare("stale", fresh_template, tmp_path)
    result = infrarsi("trial", str(repo))
    assert result.returncode == NOT_RIGHT and "Traceback" not in result.stderr
    assert "error:" not in result.stderr
    assert result.stdout.startswith("trial manual/1: invalid — lock broken before launch: harness.py: locked file "
                                    "changed")
    listed = infrarsi("journal", str(repo), "--run-id", "manual")
    assert listed.returncode == 0 and "manual/1    invalid" in listed.stdout


def test_the_old_flag_spellings_work_with_a_note(fresh_template: Path, tmp_path: Path) -> None:
    repo = _prepare("fresh", fresh_template, tmp_path)
    result = infrarsi("report", str(repo), "--run", "nope")
    assert result.returncode == BAD_INPUT
    assert result.stderr.splitlines() == ["note: --run is deprecated; use --run-id",
                                          f"error: no run 'nope' in {repo / '.infrarsi' / 'runs'} (the latest "
                                          "finished run is none; `infrarsi journal` lists every run)"]
