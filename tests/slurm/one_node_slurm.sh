#!/usr/bin/env bash
# A one-node Slurm on loopback, from Debian's packages, to test profiles/slurm for real.
#
#   tests/slurm/one_node_slurm.sh up   [STATE_DIR]   install if needed, start munged, slurmctld, slurmd
#   tests/slurm/one_node_slurm.sh env  [STATE_DIR]   print the exports a client needs (SLURM_CONF)
#   tests/slurm/one_node_slurm.sh down [STATE_DIR]   stop only the daemons `up` started, remove STATE_DIR
#
# Everything lives in STATE_DIR (default /tmp/resrepro-slurm): config, munge key and socket,
# spool, logs, pid files. One exception: /etc/slurm/slurm.conf becomes a symlink to the config,
# because the slurm executor's job step (snakemake-executor-plugin-slurm-jobstep 0.6) drops
# SLURM_CONF from the environment of the `srun` it starts inside each job, so srun only finds
# Slurm's default path. `up` refuses when that file exists and is not its own link (a machine's
# Slurm is left alone); `down` removes the link. No cgroups (proctrack/linuxproc, task/none) and no accounting: Snakemake's slurm
# executor must use `--slurm-status-command squeue` here (MinJobAge keeps finished jobs visible).
# Debian packages it installs stay installed; `down` only stops processes and removes STATE_DIR.
set -euo pipefail

ACTION=${1:?usage: $0 up|env|down [STATE_DIR]}
STATE=${2:-${TMPDIR:-/tmp}/resrepro-slurm}
# The node advertises GPUS stand-in GPUs (empty files as their devices): --gpus requests
# schedule as on a GPU cluster, and the jobs themselves run on the CPU. CPUS likewise may exceed
# the real cores (SlurmdParameters=config_overrides), so --cpus-per-gpu requests fit.
GPUS=${SLURM_FAKE_GPUS:-4}
CPUS=${SLURM_CPUS:-16}
CTLD_PORT=${SLURMCTLD_PORT:-6817}
SLURMD_PORT=${SLURMD_PORT:-6818}
NODE=$(hostname -s)
PACKAGES=(slurmctld slurmd slurm-client munge)
DEFAULT_CONF=/etc/slurm/slurm.conf

die() { echo "one_node_slurm: $*" >&2; exit 1; }

alive() { [[ -s $1 ]] && kill -0 "$(cat "$1")" 2>/dev/null; }

install_packages() {
    local missing=()
    for p in "${PACKAGES[@]}"; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
    ((${#missing[@]} == 0)) && return
    [[ $(id -u) == 0 ]] || die "missing packages ${missing[*]}; install them as root (apt-get install ${missing[*]})"
    echo "one_node_slurm: installing ${missing[*]}" >&2
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${missing[@]}" >&2 \
        || { apt-get update -q >&2 && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${missing[@]}" >&2; }
}

check_loopback() {
    # The daemons bind to the address the hostname resolves to (NoInAddrAny); keep it on loopback.
    local addr
    addr=$(getent hosts "$NODE" | awk '{print $1; exit}')
    [[ $addr == 127.* || $addr == ::1 ]] \
        || die "hostname $NODE resolves to '${addr:-nothing}', not a loopback address; add '127.0.1.1 $NODE' to /etc/hosts"
    echo "$addr"
}

write_config() {
    local addr=$1 mem_mb
    mem_mb=$(awk '/MemTotal/ {print int($2 / 1024 * 0.9)}' /proc/meminfo)
    cat > "$STATE/slurm.conf" <<CONF
# Written by tests/slurm/one_node_slurm.sh: one node on loopback, no cgroups, no accounting database;
# memory and time limits enforced.
ClusterName=resrepro
SlurmctldHost=$NODE($addr)
SlurmUser=$(id -un)
SlurmctldPort=$CTLD_PORT
SlurmdPort=$SLURMD_PORT
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$STATE/munge/munge.socket
CommunicationParameters=NoInAddrAny,NoCtldInAddrAny
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
AccountingStorageType=accounting_storage/none
# Memory enforced as a cluster with cgroups would: each step polled every second, killed above its --mem
JobAcctGatherType=jobacct_gather/linux
JobAcctGatherFrequency=task=1
JobAcctGatherParams=OverMemoryKill
JobCompType=jobcomp/none
GresTypes=gpu
SlurmdParameters=config_overrides
MinJobAge=600
ReturnToService=2
StateSaveLocation=$STATE/ctld
SlurmdSpoolDir=$STATE/slurmd
SlurmctldPidFile=$STATE/slurmctld.pid
SlurmdPidFile=$STATE/slurmd.pid
SlurmctldLogFile=$STATE/log/slurmctld.log
SlurmdLogFile=$STATE/log/slurmd.log
NodeName=$NODE NodeAddr=$addr CPUs=$CPUS RealMemory=$mem_mb Gres=gpu:$GPUS State=UNKNOWN
PartitionName=debug Nodes=$NODE Default=YES MaxTime=INFINITE State=UP
CONF
    # Slurm drops GPUs without device files, so empty files stand in for them.
    mkdir -p "$STATE/fake_gpus"
    for ((i = 0; i < GPUS; i++)); do : > "$STATE/fake_gpus/nvidia$i"; done
    cat > "$STATE/gres.conf" <<CONF
# Stand-in GPUs (empty files): --gpus requests schedule as on a GPU cluster, jobs run on the CPU.
NodeName=$NODE Name=gpu File=$STATE/fake_gpus/nvidia[0-$((GPUS - 1))]
CONF
}

up() {
    install_packages
    local addr
    addr=$(check_loopback)
    if alive "$STATE/slurmctld.pid" && alive "$STATE/slurmd.pid"; then
        echo "one_node_slurm: already up in $STATE" >&2
        return
    fi
    if [[ -e $DEFAULT_CONF || -L $DEFAULT_CONF ]] && [[ $(readlink "$DEFAULT_CONF") != "$STATE/slurm.conf" ]]; then
        die "$DEFAULT_CONF exists: this machine has a Slurm of its own; not touching it"
    fi
    mkdir -p "$STATE"/{munge,ctld,slurmd,log} "$(dirname "$DEFAULT_CONF")"
    chmod 0700 "$STATE/munge"
    write_config "$addr"
    ln -sfn "$STATE/slurm.conf" "$DEFAULT_CONF"
    export SLURM_CONF=$STATE/slurm.conf
    [[ -s $STATE/munge/munge.key ]] || mungekey --create --keyfile "$STATE/munge/munge.key"
    chmod 0600 "$STATE/munge/munge.key"
    munged --force --key-file "$STATE/munge/munge.key" --socket "$STATE/munge/munge.socket" \
        --pid-file "$STATE/munge/munged.pid" --log-file "$STATE/log/munged.log" \
        --seed-file "$STATE/munge/munged.seed"
    slurmctld -f "$SLURM_CONF"
    slurmd -f "$SLURM_CONF"
    # Wait until the node takes jobs.
    for _ in $(seq 60); do
        if sinfo -h -N -o '%T' 2>/dev/null | grep -qx 'idle'; then
            echo "one_node_slurm: up ($NODE: $CPUS CPUs, $GPUS stand-in GPUs) in $STATE" >&2
            return
        fi
        sleep 1
    done
    tail -n 5 "$STATE"/log/*.log >&2 || true
    sinfo -N -l >&2 || true
    die "the node never became idle (logs above, in $STATE/log/)"
}

stop_pid_file() {
    local pid_file=$1 pid
    alive "$pid_file" || return 0
    pid=$(cat "$pid_file")
    kill "$pid"
    for _ in $(seq 30); do kill -0 "$pid" 2>/dev/null || return 0; sleep 0.5; done
    kill -9 "$pid" 2>/dev/null || true
}

down() {
    [[ -d $STATE ]] || { echo "one_node_slurm: nothing in $STATE" >&2; return; }
    # Only the pids this script's `up` recorded: a machine's own Slurm keeps running.
    stop_pid_file "$STATE/slurmd.pid"
    stop_pid_file "$STATE/slurmctld.pid"
    stop_pid_file "$STATE/munge/munged.pid"
    if [[ -L $DEFAULT_CONF && $(readlink "$DEFAULT_CONF") == "$STATE/slurm.conf" ]]; then
        rm -f "$DEFAULT_CONF"
    fi
    rm -rf "$STATE"
    echo "one_node_slurm: down" >&2
}

case $ACTION in
    up) up; echo "export SLURM_CONF=$STATE/slurm.conf" ;;
    env) echo "export SLURM_CONF=$STATE/slurm.conf" ;;
    down) down ;;
    *) die "unknown action $ACTION (up|env|down)" ;;
esac
