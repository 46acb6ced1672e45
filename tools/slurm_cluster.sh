#!/usr/bin/env bash
# A real Slurm on emulated nodes, to run giantrun under it on one machine:
# three network namespaces on a bridge, each running a slurmd that is one
# node (gtnode1..3, 2 CPUs each), a slurmctld and munged on the host. Needs
# root and Debian's slurmctld, slurmd, munge and slurm-client (installed
# here when missing).
#
#   bash tools/slurm_cluster.sh up      start it (a cluster already up is stopped first)
#   bash tools/slurm_cluster.sh down    stop it and remove everything it made; idempotent
#   bash tools/slurm_cluster.sh env     the line to eval for sbatch, squeue, ... to use it
#
# The cluster's files live in GIANT_SLURM_DIR (default /tmp/giant-slurm):
# its slurm.conf (clients find it through SLURM_CONF), the munge key and
# socket, the daemons' state, pid and log files. The node names resolve to
# the namespaces' addresses through /etc/hosts lines this script adds and
# removes (marked "giant-slurm"), since giantrun and srun resolve them.
# Jobs run as root, in the namespace of their node, with the host's
# filesystem: the submit directory is shared, as on a real cluster.
set -euo pipefail
DIR="${GIANT_SLURM_DIR:-/tmp/giant-slurm}"
NODES=3
NET=10.217.0    # the bridge's /24: .1 the host, .11.. the nodes
BRIDGE=gsbr0
CTLD_PORT=16817 # off Slurm's default ports, so a site's own Slurm is not met
SLURMD_PORT=16818
MARK="# giant-slurm"
WAIT_S=30

node_name() { echo "gtnode$1"; }
node_ns() { echo "gslurm$1"; }
node_ip() { echo "$NET.$((10 + $1))"; }

die() {
  echo "slurm_cluster: $*" >&2
  exit 1
}

# Kills the process whose pid is in file $1, if it runs, and waits for it.
kill_pidfile() {
  [ -f "$1" ] || return 0
  local pid
  pid=$(cat "$1" 2>/dev/null || true)
  if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then
    kill "$pid" 2>/dev/null || true
    for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -9 "$pid" 2>/dev/null || true
  fi
  rm -f "$1"
}

down() {
  # Jobs first (their processes live in the namespaces), then the daemons.
  for i in $(seq 1 $NODES); do
    local ns
    ns=$(node_ns "$i")
    if ip netns list 2>/dev/null | grep -qw "$ns"; then
      ip netns pids "$ns" 2>/dev/null | xargs -r kill -9 2>/dev/null || true
      ip netns del "$ns" 2>/dev/null || true
    fi
    ip link del "gsv$i" 2>/dev/null || true
    [ -d "$DIR" ] && kill_pidfile "$DIR/slurmd-$(node_name "$i").pid"
  done
  if [ -d "$DIR" ]; then
    kill_pidfile "$DIR/slurmctld.pid"
    kill_pidfile "$DIR/munged.pid"
  fi
  ip link del "$BRIDGE" 2>/dev/null || true
  if grep -q "$MARK" /etc/hosts 2>/dev/null; then
    # /etc/hosts may be a bind mount: rewrite it in place, never replace it.
    local kept
    kept=$(grep -v "$MARK" /etc/hosts || true)
    printf '%s\n' "$kept" >/etc/hosts
  fi
  rm -rf "$DIR"
}

install_packages() {
  local root
  root="$(cd "$(dirname "$0")/.." && pwd)"
  GIANT_ROOT="$root"
  . "$root/tools/deps.sh"
  giant_install_deps "$GIANT_SLURM_PACKAGES"
  for b in slurmctld slurmd munged sbatch scontrol; do
    command -v "$b" >/dev/null || die "$b is missing after installing $GIANT_SLURM_PACKAGES"
  done
}

write_conf() {
  local host
  host=$(hostname -s)
  cat >"$DIR/slurm.conf" <<EOF
# Made by tools/slurm_cluster.sh: $NODES emulated nodes, everything as root.
ClusterName=giant
SlurmctldHost=$host($NET.1)
SlurmctldPort=$CTLD_PORT
SlurmdPort=$SLURMD_PORT
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$DIR/munge.socket
StateSaveLocation=$DIR/ctld
SlurmctldPidFile=$DIR/slurmctld.pid
SlurmctldLogFile=$DIR/slurmctld.log
SlurmdSpoolDir=$DIR/spool-%n
SlurmdPidFile=$DIR/slurmd-%n.pid
SlurmdLogFile=$DIR/slurmd-%n.log
# No cgroups: processes are tracked by their parents, and tasks are not bound.
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
MpiDefault=none
# A whole node per job: one giantrun per node owns it.
SelectType=select/linear
SchedulerType=sched/backfill
# The nodes claim 2 CPUs whatever the host has.
SlurmdParameters=config_overrides
ReturnToService=2
SlurmdTimeout=30
InactiveLimit=0
KillWait=5
MinJobAge=60
EOF
  for i in $(seq 1 $NODES); do
    echo "NodeName=$(node_name "$i") NodeAddr=$(node_ip "$i") NodeHostname=$(node_name "$i") CPUs=2 State=UNKNOWN" \
      >>"$DIR/slurm.conf"
  done
  echo "PartitionName=giant Nodes=ALL Default=YES MaxTime=INFINITE State=UP" >>"$DIR/slurm.conf"
}

make_net() {
  ip link add "$BRIDGE" type bridge
  ip addr add "$NET.1/24" dev "$BRIDGE"
  ip link set "$BRIDGE" up
  for i in $(seq 1 $NODES); do
    local ns
    ns=$(node_ns "$i")
    ip netns add "$ns"
    ip link add "gsv$i" type veth peer name "gsp$i"
    ip link set "gsp$i" netns "$ns"
    ip link set "gsv$i" master "$BRIDGE" up
    ip netns exec "$ns" ip link set "gsp$i" name eth0
    ip netns exec "$ns" ip addr add "$(node_ip "$i")/24" dev eth0
    ip netns exec "$ns" ip link set eth0 up
    ip netns exec "$ns" ip link set lo up
    echo "$(node_ip "$i") $(node_name "$i") $MARK" >>/etc/hosts
  done
}

# Waits (bounded) until every node is idle in sinfo.
wait_idle() {
  local idle=""
  for _ in $(seq $((WAIT_S * 5))); do
    idle=$(sinfo -h -N -o '%N %t' 2>/dev/null | awk '$2 == "idle"' | wc -l)
    [ "$idle" -eq $NODES ] && return 0
    sleep 0.2
  done
  sinfo -N 2>&1 || true
  die "the nodes were not idle within $WAIT_S s (logs in $DIR)"
}

up() {
  [ "$(id -u)" -eq 0 ] || die "needs root (network namespaces, daemons as root)"
  command -v ip >/dev/null || die "needs the ip command (iproute2)"
  install_packages
  down
  mkdir -p "$DIR/ctld"
  chmod 0700 "$DIR"
  write_conf
  export SLURM_CONF="$DIR/slurm.conf"
  # munged's key: 1 KiB of randomness, its owner's alone.
  (umask 077 && head -c 1024 /dev/urandom >"$DIR/munge.key")
  munged --force --key-file="$DIR/munge.key" --socket="$DIR/munge.socket" --pid-file="$DIR/munged.pid" \
    --log-file="$DIR/munged.log" --seed-file="$DIR/munge.seed" ||
    die "munged did not start (see $DIR/munged.log)"
  make_net
  slurmctld -f "$SLURM_CONF" || die "slurmctld did not start (see $DIR/slurmctld.log)"
  for i in $(seq 1 $NODES); do
    # nsenter enters the network namespace alone: `ip netns exec` would mount
    # a /sys of its own, without the cgroup hierarchy slurmd reads at start.
    mkdir -p "$DIR/spool-$(node_name "$i")"
    nsenter --net="/run/netns/$(node_ns "$i")" slurmd -f "$SLURM_CONF" -N "$(node_name "$i")" ||
      die "slurmd $(node_name "$i") did not start (see $DIR/slurmd-$(node_name "$i").log)"
  done
  wait_idle
  echo "slurm_cluster: $NODES nodes up; use it with: export SLURM_CONF=$SLURM_CONF"
}

case "${1:-}" in
  up) up ;;
  down) down ;;
  env) echo "export SLURM_CONF=$DIR/slurm.conf" ;;
  *) die "usage: $0 up|down|env" ;;
esac
