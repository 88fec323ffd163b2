#!/usr/bin/env bash
# start-cluster.sh STATE_DIR: a throwaway Slurm cluster on loopback for the test suite.
#
# munged + slurmctld + one slurmd per node (SLURM_TEST_NODES, default 2: nodes n1, n2, all on
# 127.0.0.1, each with its own port, spool, pid and log file), everything under STATE_DIR, which
# should be short (unix socket paths are limited to 108 bytes). Prints one line, SLURM_CONF=<path>,
# once every node is idle. Stop it with stop-cluster.sh STATE_DIR (by pid, never by name).
#
# Choices that matter for tests (see ../../docs/distributed.md, "Slurm"):
#   batch_sched_delay=0  a job starts ~0.5 s after sbatch instead of ~3 s;
#   DefMemPerCPU         without it, a job without --mem takes the whole node (one job at a time);
#   MinJobAge=86400      finished jobs stay visible to scontrol (default 300 s);
#   KillWait=2           SIGTERM -> SIGKILL grace on scancel and time limit (default 30 s);
#   cgroup               proctrack/task cgroup when /sys/fs/cgroup is writable: OUT_OF_MEMORY is real
#                        and scancel leaves nothing; otherwise linuxproc + OverMemoryKill.
# Settings: SLURM_TEST_NODES (1..4), SLURM_TEST_CPUS (per node, default 8), SLURM_TEST_MEM_MB
# (per node, default 8000), SLURM_TEST_CGROUP=auto|yes|no.
set -euo pipefail
[ $# -eq 1 ] || { echo "usage: $0 STATE_DIR" >&2; exit 2; }
STATE=$(realpath -m "$1")
NODES=${SLURM_TEST_NODES:-2}
CPUS=${SLURM_TEST_CPUS:-8}
MEM_MB=${SLURM_TEST_MEM_MB:-8000}
CGROUP=${SLURM_TEST_CGROUP:-auto}
CONF=$STATE/slurm.conf
T0=$(date +%s.%N)

die() { echo "start-cluster: $*" >&2; exit 1; }
for tool in munged slurmctld slurmd sbatch scontrol sinfo; do
  command -v "$tool" >/dev/null || die "$tool not found: apt-get install --no-install-recommends slurm-wlm munge"
done
[ "$(id -u)" = 0 ] || die "needs root (slurmd launches jobs as their owner)"
[ ${#STATE} -le 60 ] || die "STATE_DIR $STATE is too long for unix sockets (keep it under 60 characters)"
mkdir -p "$STATE"/ctld "$STATE"/log
chmod 755 "$STATE"  # munged wants its socket's directory traversable

free_port() {  # a port nobody listens on, in 20000-32000
  local p
  while :; do
    p=$(( 20000 + RANDOM % 12000 ))
    (exec 3<>/dev/tcp/127.0.0.1/$p) 2>/dev/null || { echo $p; return; }
  done
}
CTLD_PORT=$(free_port)
NAMES=""
NODE_LINES=""
for i in $(seq 1 "$NODES"); do
  port=$(free_port)
  NAMES="$NAMES n$i"
  mkdir -p "$STATE/spool/n$i"
  echo "$port" > "$STATE/n$i.port"
  NODE_LINES="$NODE_LINES
NodeName=n$i NodeAddr=127.0.0.1 Port=$port CPUs=$CPUS Sockets=1 CoresPerSocket=$CPUS ThreadsPerCore=1 RealMemory=$MEM_MB State=UNKNOWN"
done
NODELIST=n[1-$NODES]

# munge: our own key, socket and daemon
[ -s "$STATE/munge.key" ] || dd if=/dev/urandom of="$STATE/munge.key" bs=1024 count=1 status=none
chmod 600 "$STATE/munge.key"
munged --force --socket="$STATE/munge.socket" --key-file="$STATE/munge.key" --pid-file="$STATE/munged.pid" \
  --log-file="$STATE/log/munged.log" --seed-file="$STATE/munged.seed" </dev/null \
  || die "munged failed: $(tail -3 "$STATE/log/munged.log")"

cgroup_ok() {
  [ "$(stat -fc %T /sys/fs/cgroup 2>/dev/null)" = tmpfs ] || return 1   # cgroup v1 only (v2 untested)
  local probe=/sys/fs/cgroup/memory/infrarsi-probe-$$
  mkdir "$probe" 2>/dev/null && rmdir "$probe"
}
mode=nocgroup
if [ "$CGROUP" = yes ] || { [ "$CGROUP" = auto ] && cgroup_ok; }; then mode=cgroup; fi

render() {  # render MODE: slurm.conf (+ cgroup.conf) for MODE
  local plugins
  if [ "$1" = cgroup ]; then
    plugins="ProctrackType=proctrack/cgroup
TaskPlugin=task/cgroup"
    swap=no
    [ -e /sys/fs/cgroup/memory/memory.memsw.limit_in_bytes ] && swap=yes
    printf 'CgroupPlugin=autodetect\nConstrainRAMSpace=yes\nConstrainSwapSpace=%s\n' "$swap" > "$STATE/cgroup.conf"
  else
    plugins="ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherParams=OverMemoryKill"
    rm -f "$STATE/cgroup.conf"
  fi
  # %n: each slurmd on this host has its own spool, pid and log file
  cat > "$CONF" <<CONF
ClusterName=infrarsi$CTLD_PORT
SlurmctldHost=localhost(127.0.0.1)
SlurmctldPort=$CTLD_PORT
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$STATE/munge.socket
StateSaveLocation=$STATE/ctld
SlurmdSpoolDir=$STATE/spool/%n
SlurmctldPidFile=$STATE/slurmctld.pid
SlurmdPidFile=$STATE/slurmd-%n.pid
SlurmctldLogFile=$STATE/log/slurmctld.log
SlurmdLogFile=$STATE/log/slurmd-%n.log
SlurmctldDebug=info
SlurmdDebug=info
MailProg=/bin/true
MpiDefault=none
ReturnToService=2
SlurmdParameters=config_overrides
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
SchedulerType=sched/backfill
SchedulerParameters=batch_sched_delay=0
MinJobAge=86400
KillWait=2
FirstJobId=$(( (CTLD_PORT - 20000) * 5000 + 1 ))
JobAcctGatherType=jobacct_gather/linux
JobAcctGatherFrequency=task=1
AccountingStorageType=accounting_storage/none
$plugins
$NODE_LINES
PartitionName=debug Nodes=$NODELIST Default=YES MaxTime=INFINITE State=UP DefMemPerCPU=$(( MEM_MB / CPUS ))
CONF
}

alive() { [ -s "$2" ] && kill -0 "$(cat "$2")" 2>/dev/null && [ "$(cat /proc/"$(cat "$2")"/comm 2>/dev/null)" = "$1" ]; }
stop_daemons() {
  local f pid
  for f in "$STATE"/slurmd-*.pid "$STATE/slurmctld.pid"; do
    [ -s "$f" ] || continue
    pid=$(cat "$f"); kill "$pid" 2>/dev/null || true
  done
  sleep 1
  for f in "$STATE"/slurmd-*.pid "$STATE/slurmctld.pid"; do
    [ -s "$f" ] && kill -9 "$(cat "$f")" 2>/dev/null || true
    rm -f "$f"
  done
}
start_daemons() {  # 0 when every node is idle and a probe step ran
  export SLURM_CONF=$CONF
  slurmctld -f "$CONF" </dev/null >>"$STATE/log/slurmctld.stdout" 2>&1 || return 1
  local n
  for n in $NAMES; do
    slurmd -f "$CONF" -N "$n" </dev/null >>"$STATE/log/slurmd-$n.stdout" 2>&1 || return 1
  done
  local deadline=$(( $(date +%s) + 30 ))
  until [ "$(sinfo -h -o '%T' -n "$NODELIST" 2>/dev/null | sort -u)" = idle ]; do
    [ "$(date +%s)" -lt "$deadline" ] || return 1
    sleep 0.1
  done
  timeout 30 srun -Q -J probe -N1 -n1 --mem=32M -t 1 true >"$STATE/log/probe.out" 2>&1
}

render "$mode"
if ! start_daemons; then
  [ "$mode" = cgroup ] && [ "$CGROUP" = auto ] || die "the cluster did not come up; logs in $STATE/log"
  echo "start-cluster: cgroup mode failed ($(tail -1 "$STATE/log/probe.out" 2>/dev/null)); trying without" >&2
  stop_daemons
  mode=nocgroup
  render "$mode"
  start_daemons || die "the cluster did not come up; logs in $STATE/log"
fi
echo "$mode" > "$STATE/mode"
awk -v n="$NODES" -v m="$mode" -v a="$T0" -v b="$(date +%s.%N)" 'BEGIN{printf "start-cluster: %s node(s), mode %s, up in %.1f s\n", n, m, b-a}' >&2
echo "SLURM_CONF=$CONF"
