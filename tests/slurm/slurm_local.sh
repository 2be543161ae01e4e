#!/usr/bin/env bash
# A single-node Slurm cluster on localhost for tests: munge, slurmctld and
# slurmd from Debian's packages, with a private configuration and state in
# one folder, so nothing of the machine's own Slurm setup is used or changed.
#
#   tests/slurm/slurm_local.sh start DIR   installs what is missing (root +
#                                          apt-get), writes DIR/slurm.conf,
#                                          starts the daemons, waits (at most
#                                          60 s) for the node to be idle;
#                                          prints "export SLURM_CONF=..."
#   tests/slurm/slurm_local.sh stop DIR    stops the daemons it started (by
#                                          the pids in DIR)
#
# Exit 77 from start means "Slurm cannot run here" (packages not installable,
# a daemon that does not start, a node that is not idle within a minute),
# with the reason on stderr; tests turn it into a skip.
#
# The configuration: one node named after this host with all its CPUs,
# partition "npuc" (default), SlurmUser root, munge authentication,
# proctrack/linuxproc and task/none (no cgroups needed, so it runs in
# containers), no accounting.  Ports 6917/6918 (not Slurm's default
# 6817/6818) so a real slurmctld on the machine does not clash.
set -euo pipefail

cmd=${1:-} dir=${2:-}
[ -n "$cmd" ] && [ -n "$dir" ] || { echo "usage: $0 start|stop DIR" >&2; exit 2; }

skip() {
    echo "slurm_local: $*" >&2
    exit 77
}

stop() {
    local f pid
    for f in "$dir"/slurmd.pid "$dir"/slurmctld.pid "$dir"/munged.pid; do
        [ -s "$f" ] || continue
        pid=$(cat "$f")
        kill "$pid" 2>/dev/null || true
        for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
        kill -KILL "$pid" 2>/dev/null || true
        rm -f "$f"
    done
}

if [ "$cmd" = stop ]; then
    stop
    exit 0
fi
[ "$cmd" = start ] || { echo "usage: $0 start|stop DIR" >&2; exit 2; }

# --- packages
missing=()
for p in slurmctld slurmd slurm-client munge; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
    [ "$(id -u)" -eq 0 ] && command -v apt-get >/dev/null || skip "missing ${missing[*]} and cannot install them"
    echo "slurm_local: installing ${missing[*]}" >&2
    { apt-get update -qq &&
        DEBIAN_FRONTEND=noninteractive timeout 600 apt-get install -y -qq --no-install-recommends "${missing[@]}"; } \
        >"${TMPDIR:-/tmp}/slurm_local-apt.log" 2>&1 || skip "apt-get install ${missing[*]} failed"
fi
[ "$(id -u)" -eq 0 ] || skip "the local cluster runs its daemons as root; run as root"

mkdir -p "$dir"/state "$dir"/spool "$dir"/munge
dir=$(realpath "$dir")
host=$(hostname -s)
cpus=$(nproc)
mem=$(awk '/MemTotal/ {print int($2 / 1024 / 2)}' /proc/meminfo)

# --- munge: its own key, socket and pid under DIR (not the system's daemon)
key="$dir/munge/munge.key"
if [ ! -s "$key" ]; then
    dd if=/dev/urandom of="$key" bs=1024 count=1 status=none
    chmod 0400 "$key"
fi
sock="$dir/munge/munge.socket"
chmod 0700 "$dir/munge"
/usr/sbin/munged --force --key-file="$key" --socket="$sock" --pid-file="$dir/munged.pid" \
    --log-file="$dir/munged.log" --seed-file="$dir/munge/seed" >/dev/null 2>&1 || skip "munged did not start: $(tail -2 "$dir/munged.log" 2>/dev/null)"

cat >"$dir/slurm.conf" <<CONF
ClusterName=npuctest
SlurmctldHost=$host
SlurmUser=root
SlurmdUser=root
SlurmctldPort=6917
SlurmdPort=6918
AuthType=auth/munge
AuthInfo=socket=$sock
CredType=cred/munge
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool
SlurmctldPidFile=$dir/slurmctld.pid
SlurmdPidFile=$dir/slurmd.pid
SlurmctldLogFile=$dir/slurmctld.log
SlurmdLogFile=$dir/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
MpiDefault=none
SwitchType=switch/none
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
ReturnToService=2
SlurmctldTimeout=30
SlurmdTimeout=30
MinJobAge=300
NodeName=$host CPUs=$cpus RealMemory=$mem State=UNKNOWN
PartitionName=npuc Nodes=$host Default=YES MaxTime=INFINITE State=UP
CONF
export SLURM_CONF="$dir/slurm.conf"

/usr/sbin/slurmctld -f "$SLURM_CONF" -i >/dev/null 2>&1 || { stop; skip "slurmctld did not start: $(tail -3 "$dir/slurmctld.log" 2>/dev/null)"; }
/usr/sbin/slurmd -f "$SLURM_CONF" >/dev/null 2>&1 || { stop; skip "slurmd did not start: $(tail -3 "$dir/slurmd.log" 2>/dev/null)"; }

for i in $(seq 60); do
    state=$(sinfo -h -N -o '%t' 2>/dev/null | head -1 || true)
    case "$state" in
    idle*) echo "slurm_local: node $host idle after ${i}s ($cpus CPUs)" >&2
           echo "export SLURM_CONF=$SLURM_CONF"
           exit 0 ;;
    esac
    sleep 1
done
state=$(sinfo -h -N -o '%t %E' 2>&1 | head -1 || true)
stop
skip "Slurm did not come up within a minute (node state: ${state:-none}); see $dir/*.log"
