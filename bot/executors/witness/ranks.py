"""The witness in every rank of a multi-process trial, and one view of what the ranks reported.

torchrun's agent is a Python process too, and it does not pass inherited
descriptors to the ranks it starts, so the local executor's channel (two pipes
named in ``INFRARSI_WITNESS``) cannot reach them. :class:`RankChannels` gives
each local rank its own key file and report file in a private directory; the
rank shim of the torchrun executor (ours, run in the rank before the job's own
interpreter) reads and deletes its key, turns it into the pipe the witness
expects, opens its report file, and only then execs the job — so every rank's
interpreter starts with the same channel a local trial's has, under its own key.

:func:`merged_witness` turns per-rank results (torchrun's, or each Slurm rank's
record) into the :class:`~infrarsi.seams.executor.Execution` fields: rank 0's
report as the trial's, every rank's report by rank, and the first problem
named with its rank.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from infrarsi.seams.executor import Execution
from infrarsi.witness import WitnessResult, authenticate, new_key

from bot.executors.witness import key_secret, payload_sha256

#: The bot's own variable for the rank shim: ``DIR,0[,final_step]`` (the counted step travels in the key file).
#: Not ``INFRARSI_WITNESS``: the agent's interpreter would take that one before any rank starts.
RANK_WITNESS_ENV = "INFRARSI_RANK_WITNESS"

#: Run by the rank shim before it execs the job: the rank's key becomes a pipe, its report file a descriptor.
SHIM_SETUP = """\
_w = os.environ.pop("INFRARSI_RANK_WITNESS", None)
if _w:
    _dir, _rest = _w.split(",", 1)
    _local = os.environ.get("LOCAL_RANK", os.environ.get("RANK", "0"))
    _key_path = os.path.join(_dir, "key." + _local)
    with open(_key_path, "rb") as _f:
        _key = _f.read()
    os.unlink(_key_path)
    _r, _k = os.pipe()
    os.write(_k, _key)
    os.close(_k)
    _out = os.open(os.path.join(_dir, "report." + _local + ".jsonl"), os.O_WRONLY | os.O_APPEND)
    os.set_inheritable(_r, True)
    os.set_inheritable(_out, True)
    os.environ["INFRARSI_WITNESS"] = str(_out) + "," + str(_r) + "," + _rest
"""


@dataclass(kw_only=True)
class RankChannels:
    """One key and one report file per local rank, in ``directory`` (mode 0700)."""

    directory: Path
    keys: dict[int, bytes]
    expected_sha256: str
    env: dict[str, str]

    @staticmethod
    def open(directory: Path, *, ranks: int, count_step: int, final_step: int | None) -> RankChannels:
        directory.mkdir(mode=0o700, parents=True, exist_ok=True)
        keys = {}
        for rank in range(ranks):
            keys[rank] = new_key()
            key_path = directory / f"key.{rank}"
            fd = os.open(key_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "wb") as f:
                f.write(key_secret(keys[rank], count_step))
            report = os.open(directory / f"report.{rank}.jsonl", os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            os.close(report)
        config = f"{directory},0" + (f",{final_step}" if final_step else "")
        return RankChannels(directory=directory, keys=keys, expected_sha256=payload_sha256(),
                            env={RANK_WITNESS_ENV: config})

    def results(self) -> dict[int, WitnessResult]:
        """Each local rank's report, authenticated under its own key."""
        out = {}
        edited = payload_sha256() != self.expected_sha256
        for rank, key in self.keys.items():
            try:
                lines = (self.directory / f"report.{rank}.jsonl").read_text(encoding="utf-8",
                                                                            errors="replace").splitlines()
            except OSError:
                lines = []
            result = authenticate(lines, key=key, expected_sha256=self.expected_sha256)
            if result.error is None and edited:
                result = WitnessResult(report=result.report, error="the witness's source was edited during the trial")
            out[rank] = result
        return out


def merged_witness(ranks: Mapping[int, Execution | WitnessResult]) -> dict[str, Any]:
    """``witness``, ``witness_ranks``, ``witness_error`` and ``witness_skipped`` for one trial of several ranks.

    ``ranks`` maps each rank to its own execution record (a Slurm agent's) or its own witness result
    (a torchrun rank's). Rank 0's report is the trial's; with more than one rank every report is kept, its
    ``rank`` set; the first rank with a problem is named in it."""
    reports: dict[int, dict[str, Any] | None] = {}
    errors: list[str] = []
    skipped: list[str] = []
    for rank in sorted(ranks):
        item = ranks[rank]
        if isinstance(item, WitnessResult):
            report = item.report.to_dict() if item.report is not None else None
            error, skip = item.error, None
        else:
            report, error, skip = item.witness, item.witness_error, item.witness_skipped
        if report is not None:
            report = {**report, "rank": rank}
        reports[rank] = report
        if error:
            errors.append(f"rank {rank}: {error}" if len(ranks) > 1 else error)
        if skip:
            skipped.append(f"rank {rank}: {skip}" if len(ranks) > 1 else skip)
    main = reports.get(0) if 0 in reports else (reports[min(reports)] if reports else None)
    return {"witness": main,
            "witness_ranks": tuple(r for r in reports.values() if r is not None) if len(reports) > 1 else (),
            "witness_error": errors[0] if errors else None,
            "witness_skipped": skipped[0] if skipped else None}
