#!/usr/bin/env bash
# stop-cluster.sh STATE_DIR [--purge]: stop what start-cluster.sh started there.
#
# Cancels the cluster's jobs, then stops each daemon by the pid in its pid file (after checking
# that pid's command name), SIGKILL after a grace period, then any slurmstepd of this cluster
# (they outlive slurmd by design) with its process tree. --purge also deletes STATE_DIR.
set -uo pipefail
[ $# -ge 1 ] || { echo "usage: $0 STATE_DIR [--purge]" >&2; exit 2; }
STATE=$(realpath -m "$1")
export SLURM_CONF=$STATE/slurm.conf

pid_of() {  # pid_of NAME PIDFILE: the pid if it is alive and runs NAME
  local pid
  [ -s "$2" ] || return 1
  pid=$(tr -dc 0-9 < "$2")
  [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null && [ "$(cat /proc/"$pid"/comm 2>/dev/null)" = "$1" ] && echo "$pid"
}
tree() { local c; echo "$1"; for c in $(ps -o pid= --ppid "$1" 2>/dev/null); do tree "$c"; done; }

if pid_of slurmctld "$STATE/slurmctld.pid" >/dev/null; then
  mapfile -t jobs < <(timeout 5 squeue -h -o %A -t PD,R,CG,S,CF 2>/dev/null)
  if [ "${#jobs[@]}" -gt 0 ]; then
    timeout 5 scancel "${jobs[@]}" 2>/dev/null
    for _ in $(seq 50); do [ -z "$(timeout 5 squeue -h -o %A -t R,CG,CF 2>/dev/null)" ] && break; sleep 0.1; done
  fi
fi

pids=()
for f in "$STATE"/slurmd-*.pid; do p=$(pid_of slurmd "$f") && pids+=("$p"); done
p=$(pid_of slurmctld "$STATE/slurmctld.pid") && pids+=("$p")
p=$(pid_of munged "$STATE/munged.pid") && pids+=("$p")
[ "${#pids[@]}" -gt 0 ] && kill -TERM "${pids[@]}" 2>/dev/null
left=()
for _ in $(seq 100); do
  left=(); for p in "${pids[@]}"; do kill -0 "$p" 2>/dev/null && left+=("$p"); done
  [ "${#left[@]}" -eq 0 ] && break
  sleep 0.1
done
[ "${#left[@]}" -gt 0 ] && kill -KILL "${left[@]}" 2>/dev/null

# slurmstepd of this cluster: it holds files under STATE (its spool socket, the log)
holds_state() {  # holds_state PID: one of its open files is under STATE, or it runs in STATE/log
  local fd
  [ "$(readlink "/proc/$1/cwd")" = "$STATE/log" ] && return 0
  for fd in /proc/"$1"/fd/*; do [[ "$(readlink "$fd" 2>/dev/null)" == "$STATE/"* ]] && return 0; done
  return 1
}
for pid in $(ps -eo pid=,comm= | awk '$2=="slurmstepd"{print $1}'); do
  if holds_state "$pid"; then
    mapfile -t victims < <(tree "$pid")
    kill -KILL "${victims[@]}" 2>/dev/null
  fi
done
rm -f "$STATE/munge.socket" "$STATE/munge.socket.lock"
[ "${2:-}" = --purge ] && rm -rf "$STATE"
exit 0
