#!/usr/bin/env bash
# A real Slurm cluster on one machine, for tests: Debian's slurmctld, slurmd and munge, one
# network namespace per host (scripts/netns-cluster.sh), each host with its own hostname (UTS
# namespace) and its own /etc/hosts (a bind mount in a mount namespace) so that node names
# resolve. Everything lives under DIR; nothing outside the namespaces and DIR is touched.
#
#   slurm-cluster.sh up TAG N DIR     host 1 is "ctl" (slurmctld, and where jobs are submitted
#                                     from), hosts 2..N+1 are compute nodes n1..nN; returns once
#                                     every node is idle. DIR/env holds SLURM_CONF for clients.
#   slurm-cluster.sh exec TAG DIR CMD run CMD on the login host (ctl) as a Slurm client
#   slurm-cluster.sh node TAG DIR I CMD   run CMD on compute node I (its hostname, its hosts)
#   slurm-cluster.sh down TAG DIR     cancel every job, stop the daemons, remove the namespaces
#   slurm-cluster.sh check            exit 0 when Slurm, munge and namespaces are here, 77 if not
#
# The configuration is the smallest that runs jobs in namespaces: proctrack/linuxproc and
# task/none (no cgroups: inside `ip netns exec` the machine's cgroup mounts are gone, so
# cgroup.conf points slurmd at an unused directory), no accounting, select/linear, root as
# SlurmUser, munge with its own key and socket under DIR.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
netns=$here/netns-cluster.sh

hosts_file() {  # TAG N DIR: the cluster's /etc/hosts
  local tag=$1 n=$2 dir=$3
  {
    echo "127.0.0.1 localhost"
    echo "$("$netns" addr "$tag" 1) ctl"
    for i in $(seq 1 "$n"); do echo "$("$netns" addr "$tag" $((i + 1))) n$i"; done
  } >"$dir/hosts"
}

# in_host TAG DIR I NAME CMD...: CMD in host I's namespace, with hostname NAME and the cluster's
# /etc/hosts (the mount and UTS namespaces are the command's own).
in_host() {
  local tag=$1 dir=$2 i=$3 name=$4
  shift 4
  "$netns" exec "$tag" "$i" unshare --mount --uts -- /bin/sh -c \
    'mount --bind "$1" /etc/hosts && hostname "$2" && shift 2 && exec "$@"' \
    sh "$dir/hosts" "$name" "$@"
}

write_conf() {  # TAG N DIR
  local tag=$1 n=$2 dir=$3 cpus
  cpus=$(nproc)
  cat >"$dir/slurm.conf" <<EOF
ClusterName=ddprun$tag
SlurmctldHost=ctl($("$netns" addr "$tag" 1))
AuthType=auth/munge
AuthInfo=socket=$dir/munge/munge.socket.2
CredType=cred/munge
SlurmUser=root
SlurmdUser=root
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool-%n
SlurmctldPidFile=$dir/slurmctld.pid
SlurmdPidFile=$dir/slurmd-%n.pid
SlurmctldLogFile=$dir/slurmctld.log
SlurmdLogFile=$dir/slurmd-%n.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SlurmdParameters=config_overrides
SelectType=select/linear
SchedulerType=sched/builtin
MpiDefault=none
ReturnToService=2
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
JobAcctGatherType=jobacct_gather/none
SlurmctldTimeout=30
SlurmdTimeout=30
InactiveLimit=0
KillWait=5
MinJobAge=5
EOF
  for i in $(seq 1 "$n"); do
    echo "NodeName=n$i NodeAddr=$("$netns" addr "$tag" $((i + 1))) CPUs=$cpus State=UNKNOWN" \
      >>"$dir/slurm.conf"
  done
  echo "PartitionName=main Nodes=ALL Default=YES MaxTime=INFINITE State=UP" >>"$dir/slurm.conf"
  mkdir -p "$dir/cgroup"
  printf '%s\n' 'CgroupPlugin=cgroup/v1' "CgroupMountpoint=$dir/cgroup" >"$dir/cgroup.conf"
  echo "export SLURM_CONF=$dir/slurm.conf" >"$dir/env"
}

wait_for() {  # SECONDS WHAT CMD...: run CMD until it succeeds or SECONDS pass
  local limit=$1 what=$2 deadline
  shift 2
  deadline=$((SECONDS + limit))
  until "$@" >/dev/null 2>&1; do
    if ((SECONDS >= deadline)); then
      echo "slurm-cluster: $what not ready after ${limit} s" >&2
      return 1
    fi
    sleep 0.1  # the interval between readiness checks
  done
}

all_idle() {  # TAG DIR N: every node idle, seen from the login host
  local out
  out=$(client "$1" "$2" sinfo -h -N -o '%N %T')
  [[ $(grep -c ' idle$' <<<"$out") -eq $3 ]]
}

client() {  # TAG DIR CMD...: a Slurm client command on the login host
  local tag=$1 dir=$2
  shift 2
  in_host "$tag" "$dir" 1 ctl env SLURM_CONF="$dir/slurm.conf" "$@"
}

up() {
  local tag=$1 n=$2 dir=$3
  mkdir -p "$dir/munge" "$dir/state"
  # Every directory above munge's socket must be searchable by all (munge's own check).
  chmod 755 "$dir" "$dir/munge"
  "$netns" down "$tag"
  "$netns" up "$tag" $((n + 1))
  hosts_file "$tag" "$n" "$dir"
  write_conf "$tag" "$n" "$dir"
  head -c 1024 /dev/urandom >"$dir/munge/munge.key"
  chmod 600 "$dir/munge/munge.key"
  # munged in the machine's own namespaces: its socket is a file, reachable from every host.
  munged --force --socket="$dir/munge/munge.socket.2" --key-file="$dir/munge/munge.key" \
    --pid-file="$dir/munge/munged.pid" --log-file="$dir/munge/munged.log" \
    --seed-file="$dir/munge/munged.seed"
  setsid bash -c "$(declare -f in_host); netns=$netns; in_host $tag $dir 1 ctl \
    /usr/sbin/slurmctld -D -i -f $dir/slurm.conf" </dev/null >"$dir/slurmctld.out" 2>&1 &
  wait_for 30 "slurmctld" client "$tag" "$dir" scontrol ping
  for i in $(seq 1 "$n"); do
    setsid bash -c "$(declare -f in_host); netns=$netns; in_host $tag $dir $((i + 1)) n$i \
      /usr/sbin/slurmd -D -N n$i -f $dir/slurm.conf" </dev/null >"$dir/slurmd-n$i.out" 2>&1 &
  done
  if ! wait_for 60 "$n idle node(s)" all_idle "$tag" "$dir" "$n"; then
    client "$tag" "$dir" sinfo -N >&2 || true
    tail -n 20 "$dir/slurmctld.log" "$dir"/slurmd-*.log >&2 || true
    return 1
  fi
}

down() {
  local tag=$1 dir=$2
  if [[ -f $dir/slurm.conf ]]; then
    client "$tag" "$dir" scancel --full --quiet -u root 2>/dev/null || true
  fi
  "$netns" down "$tag"
  if [[ -f $dir/munge/munged.pid ]]; then
    kill "$(cat "$dir/munge/munged.pid")" 2>/dev/null || true
  fi
}

cmd=${1:-}
shift || true
case "$cmd" in
  up) up "$1" "$2" "$3" ;;
  down) down "$1" "$2" ;;
  exec) tag=$1 dir=$2; shift 2; client "$tag" "$dir" "$@" ;;
  node) tag=$1 dir=$2 i=$3; shift 3; in_host "$tag" "$dir" $((i + 1)) "n$i" "$@" ;;
  check)
    for b in /usr/sbin/slurmctld /usr/sbin/slurmd /usr/sbin/munged /usr/bin/srun /usr/bin/sbatch; do
      [[ -x $b ]] || exit 77
    done
    exec "$netns" check ;;
  *) sed -n '2,17p' "$0"; exit 2 ;;
esac
