"""The contract as immutable records: what the job is, how it is timed, what may change.

Loading and validation live in :mod:`infrarsi.contract.load`; these records are
what every other stage reads. A contract that exists as a value has passed every
check, so the rest of the engine never re-validates it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from infrarsi.contract.knob_codec import KnobCodec
from infrarsi.contract.knob_domain import KnobDomain, KnobKind, KnobValue  # noqa: F401 (KnobKind, KnobValue: the
# engine reads a knob's value type with the contract's records, from here)
from infrarsi.contract.precision import PrecisionPolicy

FlagForm = Literal["separate", "equals"]
# "optimizer": the bot's own step clock, one event per optimizer step from the site payload (docs/contract.md)
EventSourceKind = Literal["probe", "stdout", "optimizer"]

CONTRACT_VERSION = 1

# The interpreter placeholder: a command starting with it runs under the same
# Python as the bot, so the probe module is importable in the trial.
PYTHON_PLACEHOLDER = "python"


@dataclass(frozen=True, kw_only=True, slots=True)
class Workload:
    """The job itself: what every candidate must run and process."""

    command: tuple[str, ...]
    args: tuple[str, ...] = ()
    tokens_per_step: int
    workdir: str = "."  # where the job starts, relative to the repo (``cd projects/chargpt && python chargpt.py``)
    env: tuple[tuple[str, str], ...] = ()  # fixed environment the command sets (``OMP_NUM_THREADS=1 python ...``)
    family: str = "dense"
    model_flops_per_step: float | None = None
    experts: int | None = None  # MoE: experts per layer (for the experience bank)
    top_k: int | None = None  # MoE: experts each token is routed to


@dataclass(frozen=True, kw_only=True, slots=True)
class Timing:
    """Which steps count and where their events come from."""

    source: EventSourceKind = "probe"
    warmup_steps: int = 2
    measured_steps: int = 6
    stdout_regex: str | None = None
    stream: Literal["stdout", "stderr"] = "stdout"  # where stdout_regex finds step lines (logging writes to stderr)
    steps_per_line: int = 1  # optimizer steps per step line (a job that logs every k steps)
    # The fewest measured steps a run may time: the doctor measures fewer than ``measured_steps`` when the job's
    # steps are steady (infrarsi.doctor.measured_window), never fewer than this (None: max(5, measured / 2)).
    min_measured_steps: int | None = None

    @property
    def total_steps(self) -> int:
        return self.warmup_steps + self.measured_steps

    @property
    def window_floor(self) -> int:
        floor = self.min_measured_steps if self.min_measured_steps is not None else max(5, self.measured_steps // 2)
        return min(self.measured_steps, floor)


@dataclass(frozen=True, kw_only=True, slots=True)
class LossSpec:
    """How a candidate's loss curve is compared with the baseline's.

    ``rtol`` is the per-step relative tolerance used until the doctor calibrates
    a band from the baseline's own run-to-run spread.
    """

    rtol: float = 0.02
    final_rtol: float = 0.01


@dataclass(frozen=True, kw_only=True, slots=True)
class Scope:
    """What code patches may touch (``editable``) and what must not change at all (``locked``)."""

    editable: tuple[str, ...] = ()
    locked: tuple[str, ...] = ()
    allow_imports: bool = False


@dataclass(frozen=True, kw_only=True, slots=True)
class Knob(KnobDomain):
    """One launch setting the search may change: its domain (:class:`KnobDomain`) and how it reaches the job.

    Exactly one of ``flag`` (``--name VALUE``, or ``--name=VALUE`` with
    ``form = "equals"``), ``override`` (a Hydra override ``name=VALUE``) and
    ``env`` (an environment variable) says how. A bool knob with ``switch`` is a
    bare ``--flag`` when true and absent (or ``off_flag``, ``--no-flag``) when
    false; any other bool is spelled ``bool_text`` (true, false).
    """

    flag: str | None = None
    env: str | None = None
    override: str | None = None
    form: FlagForm = "separate"
    switch: bool = False
    off_flag: str | None = None
    note: str = ""
    decides: tuple[str, ...] = ()  # what it chooses (infrarsi.decisions); empty: by its name

    @property
    def codec(self) -> KnobCodec:
        """How this knob's values are written and read: command line, TOML, JSON, Python, feature name."""
        return KnobCodec(self)


@dataclass(frozen=True, kw_only=True, slots=True)
class Constraint:
    """A rule between knob values that a candidate must satisfy.

    ``divides``: the knob's value must divide ``value`` (micro-batch divides the
    global batch). ``forbid``: the assignment in ``when`` must not occur.
    ``product``: the values of ``knobs`` multiply to ``value`` (micro-batch x
    gradient accumulation = the fixed global batch: a coupled pair).
    """

    kind: Literal["divides", "forbid", "product"]
    knob: str | None = None
    value: int | None = None
    when: tuple[tuple[str, KnobValue], ...] = ()
    reason: str = ""
    knobs: tuple[str, ...] = ()  # product: the coupled knobs

    def allows(self, assignment: dict[str, KnobValue]) -> bool:
        if self.kind == "product":
            values = [assignment.get(k) for k in self.knobs]
            if any(v is None for v in values):
                return True
            return math.prod(int(v) for v in values if v is not None) == self.value
        if self.kind == "divides":
            assert self.knob is not None and self.value is not None
            v = assignment.get(self.knob)
            return v is None or (isinstance(v, int) and v != 0 and self.value % v == 0)
        return not all(assignment.get(k) == v for k, v in self.when)

    def describe(self) -> str:
        if self.kind == "product":
            return f"{' x '.join(self.knobs)} must equal {self.value}"
        if self.kind == "divides":
            return f"{self.knob} must divide {self.value}"
        return "forbidden: " + ", ".join(f"{k}={v!r}" for k, v in self.when)


@dataclass(frozen=True, kw_only=True, slots=True)
class Budget:
    """How much the search may spend, and the limits every trial runs under."""

    trials: int = 30
    seconds: float | None = None
    trial_timeout_s: float = 600.0
    memory_limit_bytes: int | None = None


#: The verdict rows a contract may waive when they cannot be checked (infrarsi/verdict.py makes them;
#: ``outcome`` and ``clock`` are always checked). A broken row is never waived.
WAIVABLE = ("tokens_per_step", "lock", "optimizer_steps", "work", "precision", "trainable", "optimizer",
            "first_step", "weights", "work_total", "loss_band", "final_loss", "project_metadata", "split_reference",
            "past_window", "dropout", "moe")


@dataclass(frozen=True, kw_only=True, slots=True)
class VerifySpec:
    """What a promotion needs and how much verification may cost."""

    min_effect: float = 0.01  # the CI's lower bound on the speedup must clear 1 + min_effect
    alpha: float = 0.05
    power: float = 0.8
    target_effect: float = 0.05  # the effect verification is sized to detect
    max_pairs: int = 12  # interleaved A/B pairs at most
    max_speedup: float = 10.0  # above it a result is quarantined for review
    top_k: int = 3  # candidates the run stage re-verifies
    # Seconds one verification may wait, in all, for a machine that disturbed more runs than it may re-run to
    # become quiet again; then it ends ``inconclusive`` (resumable), never with a verdict the load decided.
    quiet_wait_s: float = 300.0
    # Verdict rows whose "not checked" may not stop a promotion (infrarsi.verdict.WAIVABLE; the PR body lists
    # them). A broken row is never waived.
    waive: tuple[str, ...] = ()


ExecutorName = Literal["local", "torchrun", "actions", "slurm"]


@dataclass(frozen=True, kw_only=True, slots=True)
class ActionsLaunch:
    """Where ``executor = "actions"`` sends trials: a ``workflow_dispatch`` workflow on self-hosted runners.

    Read whatever ``launch.executor`` says, so that ``--executor actions`` on the
    command line finds its settings in the contract too.
    """

    workflow: str = "infrarsi-trial.yml"  # the trial workflow's file name under .github/workflows/
    runners: int = 1  # dispatches in flight at once: how many GPU runners one run may occupy
    devices: int = 1  # devices one runner holds: a trial costs run duration x devices
    poll_interval_s: float = 15.0  # seconds between polls of a dispatched run
    remote: str = "origin"  # the git remote that names the GitHub repository


@dataclass(frozen=True, kw_only=True, slots=True)
class SlurmLaunch:
    """``[launch.slurm]``: what one trial asks the scheduler for (one batch job per trial).

    The ranks are ``srun`` tasks: ``tasks_per_node`` on each of ``nodes``. A trial
    costs its allocated GPUs (``gpus_per_node × nodes``; the ranks when it asks
    for none) times its elapsed run time; time spent pending is not charged.
    """

    partition: str | None = None
    account: str | None = None
    qos: str | None = None
    nodes: int = 1
    tasks_per_node: int = 1
    gpus_per_node: int = 0
    gres: str | None = None  # passed as --gres as written (e.g. "gpu:a100:8"); not counted in the cost
    cpus_per_task: int | None = None
    time_limit_min: int | None = None  # None: the trial timeout plus a minute, rounded up to whole minutes
    memory_bytes: int | None = None  # --mem, per node; an OUT_OF_MEMORY job is censored here
    sbatch_args: tuple[str, ...] = ()
    workdir: str | None = None  # shared by the bot and the nodes; None: <repo>/.infrarsi/slurm
    requeue: bool = False  # PREEMPTED: wait for the requeued job (true) or record `interrupted`
    retry_node_fail: bool = False  # NODE_FAIL/BOOT_FAIL: rerun once without that node
    poll_s: float = 1.0  # how often the bot asks slurmctld about each job it waits for

    @property
    def world_size(self) -> int:
        return self.nodes * self.tasks_per_node

    @property
    def devices(self) -> int:
        """Devices a trial holds: its GPUs, or its ranks on a CPU-only partition."""
        return self.gpus_per_node * self.nodes if self.gpus_per_node else self.world_size


@dataclass(frozen=True, kw_only=True, slots=True)
class Launch:
    """How a trial is started: one local process, ranks under torchrun (possibly on several nodes),
    or one process on a self-hosted GitHub Actions runner.

    ``rdzv_endpoint`` is required with ``nnodes > 1`` (every node must meet at the
    same host:port); on one node the executor picks a free loopback port.
    """

    executor: ExecutorName = "local"
    nproc_per_node: int = 1
    nnodes: int = 1
    node_rank: int = 0
    rdzv_endpoint: str | None = None
    rdzv_backend: str = "c10d"
    rdzv_id: str | None = None
    slurm: SlurmLaunch = field(default_factory=SlurmLaunch)  # ``[launch.slurm]``: what a Slurm trial asks for
    actions: ActionsLaunch = field(default_factory=ActionsLaunch)

    @property
    def world_size(self) -> int:
        if self.executor == "slurm":
            return self.slurm.world_size
        return self.nproc_per_node * self.nnodes if self.executor == "torchrun" else 1

    @property
    def ranks_per_node(self) -> int:
        """Ranks on each node (a node's share of :attr:`world_size`)."""
        if self.executor == "slurm":
            return self.slurm.tasks_per_node
        return self.nproc_per_node if self.executor == "torchrun" else 1


@dataclass(frozen=True, kw_only=True, slots=True)
class DataSpec:
    """Files the job reads that git does not track (datasets, tokenizers, checkpoints).

    Every trial's worktree reaches them through symbolic links (never a copy);
    their identity is in the lock, so a changed dataset is caught like a changed
    locked file.
    """

    paths: tuple[str, ...] = ()


@dataclass(frozen=True, kw_only=True, slots=True)
class Approvers:
    """Who may approve a promotion."""

    users: tuple[str, ...] = ()
    teams: tuple[str, ...] = ()


MERGE_SETTINGS = ("auto", "merge", "squash", "rebase")  # [apply] merge_method


@dataclass(frozen=True, kw_only=True, slots=True)
class ApplySpec:
    """How ``promote`` lands an approved promotion.

    ``merge_method``: ``auto`` takes the first of merge, squash, rebase that the forge allows (a merge commit
    keeps the approved commit itself in the base's history); a named method is the only one promote uses, so a
    repository that refuses it stops promote before any re-verification when the forge says so up front.
    """

    merge_method: str = "auto"


@dataclass(frozen=True, kw_only=True, slots=True)
class Contract:
    """The locked task: a candidate wins only by doing this same job faster."""

    version: int = CONTRACT_VERSION
    source: Path
    root: Path
    workload: Workload
    timing: Timing = field(default_factory=Timing)
    loss: LossSpec = field(default_factory=LossSpec)
    scope: Scope = field(default_factory=Scope)
    knobs: tuple[Knob, ...] = ()
    constraints: tuple[Constraint, ...] = ()
    budget: Budget = field(default_factory=Budget)
    verify: VerifySpec = field(default_factory=VerifySpec)
    approvers: Approvers = field(default_factory=Approvers)
    apply: ApplySpec = field(default_factory=ApplySpec)
    launch: Launch = field(default_factory=Launch)
    data: DataSpec = field(default_factory=DataSpec)
    precision: PrecisionPolicy = field(default_factory=PrecisionPolicy)  # [precision] allow (precision.py)

    def knob(self, name: str) -> Knob:
        for k in self.knobs:
            if k.name == name:
                return k
        raise KeyError(name)

    def defaults(self) -> dict[str, KnobValue]:
        """The baseline: every knob at its default."""
        return {k.name: k.default for k in self.knobs}
