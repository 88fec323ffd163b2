"""README's "same stages by hand" block, run as written on a new repository, ends in a merged pull request; the
3-trial run in it leaves only the branches it documents, and ``gc --dry-run`` after it finds nothing to remove.

The repository is a small job of a user's own (:mod:`tests.support.paced_job`) whose micro-batch knob is a sure
win on any machine, so the block reaches ``apply`` and ``promote``. The one change to the block: a 3-trial budget
instead of 30; between ``init`` and the commit the test does the review the block's comment asks for
(:func:`review`).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pygit2
import pytest
import tomlkit

from tests.support.paced_job import write_paced_repo
from tests.support.repos import commit_all

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[1]
LOGIN = "lead"


def readme_block() -> list[str]:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    block = text.split("The same stages by hand", 1)[1].split("```bash\n", 1)[1].split("```", 1)[0]
    return block.splitlines()


def scripts(repo: Path) -> tuple[str, str]:
    """The block with the repository's path and the tiny budget, cut where its comment asks for a review: (up to
    ``init``, the rest)."""
    lines = [re.sub(r"--budget-trials 30\b", "--budget-trials 3",
                    line.replace("path/to/repo", str(repo)).replace("YOUR_LOGIN", LOGIN)) for line in readme_block()]
    cut = next(i for i, line in enumerate(lines) if line.startswith("#   review"))
    return ("set -euo pipefail\n" + "\n".join(lines[:cut]) + "\n",
            f"set -euo pipefail\ncd {repo}\n" + "\n".join(lines[cut + 1:]) + "\n")


def review(repo: Path) -> None:
    """What the comment asks for after ``init``, as its user would do it: an approver; and, for a test that must
    be short, verification of the top candidate only, with few pairs, and the training loop out of the editable
    scope (a torch.compile patch there would cost a minute of compilation a trial)."""
    doc = tomlkit.parse((repo / "infrarsi.toml").read_text(encoding="utf-8"))
    doc["approvers"]["users"] = [LOGIN]
    doc["scope"]["editable"] = [s for s in doc["scope"]["editable"] if s.startswith("model.py")]
    doc["verify"] = {"top_k": 1, "max_pairs": 4}
    (repo / "infrarsi.toml").write_text(tomlkit.dumps(doc), encoding="utf-8")


def test_the_block_reads_as_the_test_runs_it() -> None:
    lines = readme_block()
    assert lines[0] == "cd path/to/repo" and any("--budget-trials 30" in line for line in lines)
    assert sum(line.startswith("#   review") for line in lines) == 1
    assert [line.split()[1] for line in lines if line.startswith("infrarsi ")] == [
        "init", "check", "doctor", "run", "report", "apply", "approve", "promote"]


def test_the_block_works_as_written_on_a_new_repository(tmp_path: Path) -> None:
    repo = write_paced_repo(tmp_path / "repo")
    pygit2.init_repository(str(repo), initial_head="main")
    commit_all(repo, "training code")
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
           "GIT_AUTHOR_NAME": "Lead", "GIT_AUTHOR_EMAIL": "lead@example.com", "GIT_COMMITTER_NAME": "Lead",
           "GIT_COMMITTER_EMAIL": "lead@example.com"}
    before, after = scripts(repo)
    first = subprocess.run(["bash", "-c", before], cwd=tmp_path, env=env, capture_output=True, text=True,
                           timeout=600)
    assert first.returncode == 0, first.stdout[-3000:] + first.stderr[-3000:]
    assert "next:\n  1. review the lines marked `# guessed:`" in first.stdout
    review(repo)
    subprocess.run(["infrarsi", "lock", "."], cwd=repo, env=env, check=True, capture_output=True, timeout=300)
    result = subprocess.run(["bash", "-c", after], cwd=tmp_path, env=env, capture_output=True, text=True,
                            timeout=1500)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-4000:]
    assert "Traceback" not in result.stderr
    out = result.stdout
    assert "verified speedup" in out and "#1: merged as " in out, out[-3000:]
    # the run said what it left, and left only that: the winner's branch of r1, besides apply's own two
    said = re.search(r"trial branches of run r1: removed (\d+), left 1: (infrarsi/r1/\d+) \(the verified winner's\)",
                     out)
    assert said, out[-3000:]
    branches = sorted(b for b in pygit2.Repository(str(repo)).listall_branches() if b.startswith("infrarsi/"))
    assert branches == sorted([said.group(2), "infrarsi/promote/r1", "infrarsi/record/r1"]), branches
    gc = subprocess.run(["infrarsi", "gc", ".", "--dry-run"], cwd=repo, env=env, capture_output=True, text=True,
                        timeout=300)
    assert gc.returncode == 0 and gc.stdout.startswith(
        "would remove 0 worktree(s), 0 orphan director(y/ies), 0 branch(es)"), gc.stdout
