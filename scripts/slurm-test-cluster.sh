#!/usr/bin/env bash
# A real single-node Slurm (Debian slurm-wlm + munge) for testing profiles/slurm.
#
#   scripts/slurm-test-cluster.sh start    # idempotent; returns once the node is idle
#   scripts/slurm-test-cluster.sh status   # exit 0 when up, 3 when down
#   scripts/slurm-test-cluster.sh stop     # cancels jobs, stops daemons, removes state
#
# Partitions: `cpu` (default) and `gpu`; the node advertises one fake GPU (gres.conf points it
# at /dev/null), so a job asking for a GPU lands in `gpu` and sees CUDA_VISIBLE_DEVICES=0.
# There is no slurmdbd: Slurm's own completion record (jobcomp/filetxt) is what tests read to
# learn the partition, state and exit code of every finished job.
#
# Needs root. Everything the cluster writes lives under $TERMFORGE_SLURM_STATE
# (default /var/lib/termforge-slurm-test); only slurm.conf and gres.conf go to /etc/slurm,
# because the `srun` inside each job ignores SLURM_CONF and reads /etc/slurm/slurm.conf.
set -euo pipefail

STATE_DIR="${TERMFORGE_SLURM_STATE:-/var/lib/termforge-slurm-test}"
CONF_DIR=/etc/slurm
SLURM_CONF="$CONF_DIR/slurm.conf"
GRES_CONF="$CONF_DIR/gres.conf"
MUNGE_KEY=/etc/munge/munge.key
MUNGE_PIDFILE=/run/munge/munged.pid
# The first line of every file this script writes, so it can tell its own files from a site's.
MARKER="# written by termforge scripts/slurm-test-cluster.sh"
READY_TIMEOUT_S="${TERMFORGE_SLURM_READY_TIMEOUT:-60}"

NODE="$(hostname -s)"
JOBCOMP="$STATE_DIR/jobcomp.txt"
CTLD_PIDFILE="$STATE_DIR/slurmctld.pid"
SLURMD_PIDFILE="$STATE_DIR/slurmd.pid"

die() {
    echo "slurm-test-cluster: error: $*" >&2
    exit 1
}
say() { echo "slurm-test-cluster: $*"; }

show_logs() {
    for log in "$STATE_DIR/slurmctld.log" "$STATE_DIR/slurmd.log"; do
        if [[ -f "$log" ]]; then
            echo "---- last lines of $log ----" >&2
            tail -n 20 "$log" >&2
        fi
    done
}

pid_alive() {
    local pidfile="$1"
    [[ -f "$pidfile" ]] && kill -0 "$(cat "$pidfile")" 2>/dev/null
}

require_root() {
    [[ "$(id -u)" -eq 0 ]] || die "must run as root (it writes /etc/slurm and starts munged, slurmctld and slurmd)"
}

ensure_packages() {
    local missing=()
    command -v slurmctld >/dev/null || missing+=(slurm-wlm)
    command -v munged >/dev/null || missing+=(munge)
    [[ ${#missing[@]} -eq 0 ]] && return 0
    command -v apt-get >/dev/null || die "missing ${missing[*]} and no apt-get to install them; install slurm-wlm and munge"
    say "installing ${missing[*]} with apt-get"
    DEBIAN_FRONTEND=noninteractive apt-get install -y slurm-wlm munge >/dev/null \
        || die "apt-get install -y slurm-wlm munge failed; install them by hand"
}

munge_works() { munge -n 2>/dev/null | unmunge >/dev/null 2>&1; }

ensure_munge() {
    if [[ ! -f "$MUNGE_KEY" ]]; then
        say "creating $MUNGE_KEY"
        install -d -o munge -g munge -m 700 /etc/munge
        # 1 KiB of randomness, the size mungekey itself writes by default.
        head -c 1024 /dev/urandom >"$MUNGE_KEY"
        chown munge:munge "$MUNGE_KEY"
        chmod 400 "$MUNGE_KEY"
    fi
    if munge_works; then
        return 0
    fi
    install -d -o munge -g munge -m 755 /run/munge
    # A munged once started as root leaves a root-owned log that the munge user cannot open.
    [[ -f /var/log/munge/munged.log ]] && chown munge:munge /var/log/munge/munged.log
    # --force: munged refuses to start when it finds a stale socket or loose permissions on
    # a container's directories, neither of which matters for a throwaway test cluster.
    # As the munge user, which owns the key, /var/log/munge and /var/lib/munge.
    runuser -u munge -- munged --force \
        || die "munged did not start (key $MUNGE_KEY, see /var/log/munge/munged.log)"
    # Remember that this script started munged, so `stop` stops only what it started.
    echo "$MUNGE_PIDFILE" >"$STATE_DIR/munged.started-here"
    for _ in $(seq 50); do
        munge_works && return 0
        sleep 0.1
    done
    die "munged is running but 'munge -n | unmunge' fails; check $MUNGE_KEY ownership (munge) and mode (400)"
}

node_hardware() {
    # slurmd -C reports what slurmd will find at registration; configuring anything larger
    # (memory especially) makes slurmctld drain the node as "Low RealMemory".
    local line
    line="$(slurmd -C | head -n 1)" || die "'slurmd -C' failed; cannot read this machine's CPUs and memory"
    [[ "$line" == NodeName=* ]] || die "unexpected 'slurmd -C' output: $line"
    # Keep the hardware fields and drop the NodeName (set by us) and UpTime line.
    echo "${line#NodeName=* }"
}

write_config() {
    local hw cpus
    hw="$(node_hardware)"
    cpus="$(sed -n 's/.*CPUs=\([0-9]*\).*/\1/p' <<<"$hw")"
    if [[ -f "$SLURM_CONF" ]] && ! head -n 1 "$SLURM_CONF" | grep -qF "$MARKER"; then
        if [[ -f "$STATE_DIR/slurm.conf.backup" ]]; then
            die "$SLURM_CONF is not ours but a backup already exists in $STATE_DIR; resolve by hand"
        fi
        say "backing up the existing $SLURM_CONF to $STATE_DIR/slurm.conf.backup"
        cp -p "$SLURM_CONF" "$STATE_DIR/slurm.conf.backup"
    fi
    if [[ -f "$GRES_CONF" ]] && ! head -n 1 "$GRES_CONF" | grep -qF "$MARKER" \
        && [[ ! -f "$STATE_DIR/gres.conf.backup" ]]; then
        cp -p "$GRES_CONF" "$STATE_DIR/gres.conf.backup"
    fi

    local tmp="$SLURM_CONF.tmp.$$"
    cat >"$tmp" <<EOF
$MARKER
# A single-node test cluster; not for production use.
ClusterName=termforge-test
# The explicit address keeps the daemons off name resolution, which containers often lack.
SlurmctldHost=$NODE(127.0.0.1)
AuthType=auth/munge
# Root runs the daemons; there is no slurm user to create and no spool ownership to fix.
SlurmUser=root
SlurmdUser=root
StateSaveLocation=$STATE_DIR/ctld
SlurmdSpoolDir=$STATE_DIR/slurmd
SlurmctldPidFile=$CTLD_PIDFILE
SlurmdPidFile=$SLURMD_PIDFILE
SlurmctldLogFile=$STATE_DIR/slurmctld.log
SlurmdLogFile=$STATE_DIR/slurmd.log
# No cgroups: linuxproc tracks job processes through /proc, and task/none binds nothing,
# which works inside unprivileged containers.
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
MpiDefault=none
# Allocate logical CPUs and memory, so a CPU job and a GPU job can share the node.
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU_Memory
DefMemPerCPU=512
SchedulerType=sched/backfill
# No slurmdbd: sacct has nothing to report, so Snakemake must poll squeue, and squeue only
# shows a finished job for MinJobAge seconds after it ends.
AccountingStorageType=accounting_storage/none
MinJobAge=300
# Slurm's own record of every finished job (partition, state, exit code), one line per job.
JobCompType=jobcomp/filetxt
JobCompLoc=$JOBCOMP
GresTypes=gpu
# A node that was down when the daemons stopped comes back without an admin.
ReturnToService=2
SlurmdTimeout=60
NodeName=$NODE NodeAddr=127.0.0.1 $hw Gres=gpu:fake:1 State=UNKNOWN
PartitionName=cpu Nodes=$NODE Default=YES MaxTime=INFINITE State=UP
PartitionName=gpu Nodes=$NODE MaxTime=INFINITE State=UP
EOF
    mv "$tmp" "$SLURM_CONF"
    tmp="$GRES_CONF.tmp.$$"
    cat >"$tmp" <<EOF
$MARKER
# One fake GPU: Slurm allocates it and sets CUDA_VISIBLE_DEVICES=0; no device is touched.
Name=gpu Type=fake Count=1 File=/dev/null
EOF
    mv "$tmp" "$GRES_CONF"
    say "node $NODE: $cpus CPUs, $(sed -n 's/.*RealMemory=\([0-9]*\).*/\1/p' <<<"$hw") MB"
}

node_state() { sinfo -h -n "$NODE" -o %t 2>/dev/null | head -n 1; }

wait_until_idle() {
    local deadline=$((SECONDS + READY_TIMEOUT_S)) state=""
    while ((SECONDS < deadline)); do
        state="$(node_state || true)"
        case "$state" in
        idle | mix | alloc) return 0 ;;
        down* | drain* | drng*)
            # Left over from an earlier run that stopped uncleanly; the node is ours to resume.
            scontrol update NodeName="$NODE" State=RESUME >/dev/null 2>&1 || true
            ;;
        esac
        sleep 0.5
    done
    show_logs
    scontrol show node "$NODE" >&2 2>/dev/null || true
    die "node $NODE did not become idle within ${READY_TIMEOUT_S}s (last state: '${state:-none}')"
}

ours_running() { pid_alive "$CTLD_PIDFILE" && pid_alive "$SLURMD_PIDFILE"; }

cmd_start() {
    require_root
    ensure_packages
    install -d -m 755 "$STATE_DIR" "$STATE_DIR/ctld" "$STATE_DIR/slurmd"
    if ours_running && head -n 1 "$SLURM_CONF" 2>/dev/null | grep -qF "$MARKER"; then
        wait_until_idle
        say "already running (node $NODE $(node_state))"
        return 0
    fi
    for daemon in slurmctld slurmd; do
        if pgrep -x "$daemon" >/dev/null; then
            die "a $daemon not started by this script is running (pid $(pgrep -x "$daemon" | tr '\n' ' ')); stop it first"
        fi
    done
    ensure_munge
    write_config
    touch "$JOBCOMP"
    # -c: start from a clean slate, without jobs or node states saved by an earlier run.
    slurmctld -c || { show_logs; die "slurmctld failed to start"; }
    slurmd -c || { show_logs; die "slurmd failed to start"; }
    wait_until_idle
    say "up: node $NODE $(node_state); partitions: $(sinfo -h -o %P | tr '\n' ' ')"
    say "job completion records: $JOBCOMP"
}

stop_pids() {
    # Signals every daemon first and then waits, as each takes about 2 s to shut down.
    local pidfile pid pids=()
    for pidfile in "$@"; do
        pid_alive "$pidfile" && pids+=("$(cat "$pidfile")")
    done
    [[ ${#pids[@]} -eq 0 ]] && return 0
    kill "${pids[@]}" 2>/dev/null || true
    for _ in $(seq 100); do
        local alive=()
        for pid in "${pids[@]}"; do
            kill -0 "$pid" 2>/dev/null && alive+=("$pid")
        done
        [[ ${#alive[@]} -eq 0 ]] && return 0
        sleep 0.1
    done
    say "pids ${alive[*]} ignored SIGTERM for 10s; killing them"
    kill -9 "${alive[@]}" 2>/dev/null || true
}

cmd_stop() {
    require_root
    if pid_alive "$CTLD_PIDFILE"; then
        # Jobs first: with proctrack/linuxproc their processes would outlive slurmd.
        local jobs
        jobs="$(squeue -h -o %i 2>/dev/null | tr '\n' ' ')"
        if [[ -n "${jobs// /}" ]]; then
            say "cancelling jobs $jobs"
            # shellcheck disable=SC2086
            scancel $jobs 2>/dev/null || true
            for _ in $(seq 50); do
                [[ -z "$(squeue -h -t RUNNING,COMPLETING -o %i 2>/dev/null)" ]] && break
                sleep 0.2
            done
        fi
    fi
    local pidfiles=("$SLURMD_PIDFILE" "$CTLD_PIDFILE")
    [[ -f "$STATE_DIR/munged.started-here" ]] && pidfiles+=("$MUNGE_PIDFILE")
    stop_pids "${pidfiles[@]}"
    for conf in slurm.conf gres.conf; do
        if [[ -f "$STATE_DIR/$conf.backup" ]]; then
            cp -p "$STATE_DIR/$conf.backup" "$CONF_DIR/$conf"
            say "restored the original $CONF_DIR/$conf"
        elif [[ -f "$CONF_DIR/$conf" ]] && head -n 1 "$CONF_DIR/$conf" | grep -qF "$MARKER"; then
            rm -f "$CONF_DIR/$conf"
        fi
    done
    rm -rf "$STATE_DIR"
    say "stopped"
}

cmd_status() {
    if ours_running; then
        say "up: node $NODE $(node_state); slurmctld pid $(cat "$CTLD_PIDFILE"), slurmd pid $(cat "$SLURMD_PIDFILE")"
        say "job completion records: $JOBCOMP"
        sinfo
        return 0
    fi
    say "down"
    return 3
}

case "${1:-}" in
start) cmd_start ;;
stop) cmd_stop ;;
status) cmd_status ;;
*)
    echo "usage: $0 start|stop|status" >&2
    exit 2
    ;;
esac
