"""The scrubbed environment a trial runs in: an allowlist, then a denylist on top.

Trial code is untrusted (an LLM may have written part of it), so it sees only
what a training job needs — never the bot's tokens, keys or cloud credentials,
even when a name on the allowlist would otherwise let one through.
"""

from __future__ import annotations

import fnmatch
import os
from collections.abc import Iterable, Mapping

# Names (or glob patterns) a training job legitimately needs.
ALLOW = (
    "PATH", "HOME", "USER", "LOGNAME", "SHELL", "LANG", "LANGUAGE", "LC_*", "TERM", "TZ", "TMPDIR",
    "VIRTUAL_ENV", "CONDA_PREFIX", "PYTHONPATH", "PYTHONHASHSEED", "LD_LIBRARY_PATH",
    "CUDA_VISIBLE_DEVICES", "CUDA_HOME", "CUDA_PATH", "NVIDIA_*", "NCCL_*", "HIP_VISIBLE_DEVICES",
    "ROCR_VISIBLE_DEVICES", "OMP_*", "MKL_*", "KMP_*", "OPENBLAS_*", "GOMP_*",
    "TORCH_*", "TORCHINDUCTOR_*", "TRITON_*", "PYTORCH_*", "MASTER_ADDR", "MASTER_PORT",
    "SLURM_*", "HF_HOME", "HF_DATASETS_OFFLINE", "HF_HUB_OFFLINE", "XDG_CACHE_HOME",
    # The machine's MPI and fabric set-up: Lightning probes mpi4py when it looks for a cluster, and an
    # Open MPI that needs its site settings (OMPI_MCA_plm=isolated in a container) aborts without them.
    "OMPI_*", "OPAL_*", "PMIX_*", "PRTE_*", "UCX_*", "FI_*", "I_MPI_*", "MPICH_*",
)

# Never passed on, whatever the allowlist says.
DENY = (
    "*_TOKEN", "*_TOKEN_*", "*TOKEN", "*_KEY", "*_KEY_*", "*SECRET*", "*PASSWORD*", "*PASSWD*",
    "*CREDENTIAL*", "AWS_*", "GITHUB_*", "GH_*", "ANTHROPIC_*", "OPENAI_*", "GOOGLE_APPLICATION_*",
    "AZURE_*", "HF_TOKEN", "WANDB_API_KEY", "SSH_AUTH_SOCK", "INFRARSI_*",
)


def _matches(name: str, patterns: Iterable[str]) -> bool:
    upper = name.upper()
    return any(fnmatch.fnmatchcase(upper, p) for p in patterns)


def is_secret(name: str) -> bool:
    return _matches(name, DENY)


def scrubbed_environment(extra: Mapping[str, str] = (), *, base: Mapping[str, str] | None = None,
                         passthrough: Iterable[str] = ()) -> dict[str, str]:
    """The environment for a trial: allowed names from ``base`` (default: ours), then ``extra``.

    ``extra`` holds the bot's own additions (knob variables, the probe channel);
    a secret-looking name in it is refused rather than silently dropped.
    """
    source = os.environ if base is None else base
    allow = ALLOW + tuple(passthrough)
    env = {k: v for k, v in source.items() if _matches(k, allow) and not is_secret(k)}
    for key, value in dict(extra).items():
        if is_secret(key) and not key.startswith("INFRARSI_PROBE"):
            raise ValueError(f"refusing to pass {key!r} to trial code: it looks like a secret")
        if key == "PYTHONPATH" and env.get(key):  # the trial's import roots lead, the machine's path follows
            value = os.pathsep.join([value, env[key]])
        env[key] = value
    # Step lines must reach the bot the moment they are printed.
    env["PYTHONUNBUFFERED"] = "1"
    return env
