#!/usr/bin/env bash
# The GPU check: InfraRSI's CUDA path on one GPU (H100/H200 class), under 8 minutes, offline.
#
#   benchmarks/gpu_check.sh [--cpu-only] [WORKDIR] [-- --job-args "..."]
#
# Needs a Python ($PYTHON, default python3) with a CUDA build of torch already installed. When
# benchmarks/wheels/ holds wheels (this project's and its other dependencies': see the README's
# benchmark section for the `pip download` line), they are installed from there with --no-index,
# so nothing is downloaded. --cpu-only stops before the first CUDA step (CI runs that part).
set -euo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"
ROOT="$(cd "$HERE/.." && pwd)"
PY="${PYTHON:-python3}"
CPU_ONLY=()
if [ "${1:-}" = "--cpu-only" ]; then CPU_ONLY=(--cpu-only); shift; fi
WORKDIR="${1:-$(mktemp -d -t infrarsi-gpu-check-XXXXXX)}"
[ $# -gt 0 ] && shift
[ "${1:-}" = "--" ] && shift

"$PY" -c 'import importlib.util as u, sys; sys.exit(0 if u.find_spec("torch") else 1)' \
  || { echo "gpu_check: $PY cannot import torch; install a CUDA build first" >&2; exit 2; }
if ! (cd "$ROOT" && "$PY" -c 'import bot, infrarsi, pygit2, libcst, scipy') 2>/dev/null; then
  if compgen -G "$HERE/wheels/*.whl" >/dev/null; then
    echo "gpu_check: installing InfraRSI and its dependencies from $HERE/wheels (offline)" >&2
    "$PY" -m pip install --quiet --no-index --find-links "$HERE/wheels" --no-build-isolation "$ROOT"
  else
    echo "gpu_check: InfraRSI is not importable by $PY and $HERE/wheels has no wheels to install it from" >&2
    exit 2
  fi
fi
cd "$ROOT"
exec "$PY" -m benchmarks.gpu_check "${CPU_ONLY[@]}" "$WORKDIR" "$@"
