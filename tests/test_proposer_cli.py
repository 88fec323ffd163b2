"""``infrarsi init --proposer anthropic`` against a recorded exchange, as a user runs it."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from bot.proposers.llm import DEFAULT_MODEL
from tests.support.anthropic_replay import ReplayServer, load_recording, prompt_of
from tests.support.tinygpt import TINY_ARGS, copy_fixture, infrarsi


def test_init_with_the_anthropic_proposer_writes_a_contract_with_the_models_rationales(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    repo = copy_fixture(tmp_path / "tinygpt")
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-test-placeholder")
    command = f"python train.py {TINY_ARGS}"
    with ReplayServer(exchanges=load_recording("draft_tinygpt")) as server:
        result = infrarsi("init", str(repo), "--command", command, "--proposer", "anthropic",
                          "--llm-base-url", server.url)
        assert result.returncode == 0, result.stderr
        assert "drafted by the anthropic proposer: 6507 tokens, $0.0362" in result.stdout
        # The same inputs again: answered from the response cache, no request, no cost.
        again = infrarsi("init", str(repo), "--command", command, "--proposer", "anthropic", "--force",
                         "--llm-base-url", server.url)
        assert again.returncode == 0, again.stderr
        assert "0 tokens, $0.0000 (1 cached)" in again.stdout and len(server.requests) == 1
    prompt = prompt_of(server.requests[0])
    assert re.search(r'<untrusted-data id="[0-9a-f]{16}" source="README.md">', prompt)

    lines = (repo / "infrarsi.toml").read_text().splitlines()
    assert "version = 1" in lines
    fields = 0
    for i, line in enumerate(lines):
        is_field = re.match(r"^[a-z_]+ = ", line) and not lines[i - 1].startswith(("[knobs.", "flag", "kind",
                                                                                    "values", "default", "switch"))
        # [precision] allow is the bot's own policy line (the baseline's precision only), never the model's
        if (is_field and not line.startswith(("version", "allow = "))) or line.startswith("[knobs."):
            fields += 1
            assert lines[i - 1].startswith(f"# {DEFAULT_MODEL}: "), f"no rationale above {line!r}"
    assert fields == 12 + 5  # every drafted field and every knob
    assert "# claude-sonnet-4-5: --global-batch 4 rows x --seq-len 32 tokens per optimizer step" in lines

    check = infrarsi("check", str(repo))
    assert check.returncode == 0, check.stderr


def test_the_anthropic_proposer_needs_a_key(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    from bot.cli.main import main

    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    repo = copy_fixture(tmp_path / "tinygpt")
    assert main(["init", str(repo), "--command", "python train.py", "--proposer", "anthropic"]) == 2
    assert "needs ANTHROPIC_API_KEY" in capsys.readouterr().err
    assert not (repo / "infrarsi.toml").exists()


def test_a_failed_init_with_the_anthropic_proposer_says_what_it_spent(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    from bot.cli.main import main

    repo = copy_fixture(tmp_path / "tinygpt")
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-test-placeholder")
    with ReplayServer(exchanges=load_recording("draft_incomplete")) as server:
        # The incomplete answer costs 11,615 tokens (11,003 counted in before it was sent): its correction, with
        # the whole exchange in it, would not fit in the 1,385 left, so it is never sent.
        status = main(["init", str(repo), "--command", f"python train.py {TINY_ARGS}", "--proposer", "anthropic",
                       "--llm-base-url", server.url, "--llm-token-budget", "13000"])
    err = capsys.readouterr().err
    assert status == 2 and len(server.requests) == 1
    assert "missing required field(s) budget.trials" in err
    assert f"(spent 11615 tokens, ${(11003 * 3 + 612 * 15) / 1e6:.4f} in 1 request(s), 1 more blocked by the " \
           "token budget)" in err
    assert not (repo / "infrarsi.toml").exists()


def test_a_run_that_fails_partway_says_what_the_proposer_spent(
        tiny_repo: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """The run's own failure path: whatever stops it after the proposer spent tokens, the spend is printed."""
    import bot.cli.run
    import bot.stages.run.search
    from bot.cli.main import main
    from infrarsi.errors import InfraRSIError
    from infrarsi.seams.proposer import Usage

    class Spent:  # a proposer that has already spent, as the model proposer has after its priors
        name = "anthropic"

        def usage(self) -> Usage:
            return Usage(input_tokens=9000, output_tokens=1234, cost_usd=0.0456, calls=2, blocked_calls=1)

    def stopped(*args: object, **kwargs: object) -> None:
        raise InfraRSIError("the doctor's baseline failed: trial 1 ended oom")

    monkeypatch.setattr(bot.cli.run, "proposer", lambda args, root: Spent())
    monkeypatch.setattr(bot.stages.run.search, "run_search", stopped)
    status = main(["run", str(tiny_repo), "--proposer", "anthropic", "--no-bank"])
    err = capsys.readouterr().err
    assert status != 0 and "the doctor's baseline failed" in err
    assert "LLM proposer: the run stopped (spent 10234 tokens, $0.0456 in 2 request(s), 1 more blocked by the " \
           "token budget)" in err
    assert "Traceback" not in err
