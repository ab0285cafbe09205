#!/usr/bin/env bash
# bench/staging.sh: what staging ddprun costs a `ddprun --hosts` job on N hosts (a real sshd per
# host in network namespaces, scripts/netns-cluster.sh; node 1 runs the command; one /bin/true
# worker per host). Per round, in this order:
#   no-stage  every host has this ddprun at --remote-ddprun, --no-stage: the plain remote command
#   present   every host has this ddprun at --remote-ddprun (the machine's filesystem is shared)
#   staged    no host has it, every host's cache is empty: the command sends it to each
#   cached    no host has it at --remote-ddprun, every host's cache holds it (the round before)
#   scp loop  `scp -O` of the binary to each host in turn (the test sshd serves no SFTP), then the
#             job with --remote-ddprun there
# The time is the command's, start to exit; "staged" also gives the longest single copy the
# command reported. Medians of --runs rounds (min and max) after one warm-up round; a Markdown
# table on stdout, progress on stderr.
#
#   bench/staging.sh [--hosts 32] [--runs 3] [--ddprun PATH] [--tree-threshold N]
#
# Needs root, iproute2 and OpenSSH's sshd (exit 77 without them). Timings need a quiet machine:
#   flock /tmp/ddprun-build.lock bench/staging.sh
set -euo pipefail
export LC_ALL=C
here=$(cd "$(dirname "$0")/.." && pwd)
self="$here/bench/staging.sh"
cluster="$here/scripts/netns-cluster.sh"
since() { awk -v a="$1" -v b="$EPOCHREALTIME" 'BEGIN{printf "%.3f", b - a}'; }

# --- in node 1: the rounds ----------------------------------------------------------------------
if [[ ${1:-} == --in-node ]]; then
  hosts=""
  for i in $(seq 2 $((nhosts + 1))); do v=NODE_${i}_ADDR; hosts+="${!v}:1,"; done
  hosts=${hosts%,}
  ssh_cfg="$sshdir/ssh_config"
  job() {  # job ARGS...: one job, its time on stdout; a failure ends the bench
    local t0=$EPOCHREALTIME rc=0
    timeout 300 "$ddprun" --hosts="$hosts" --ssh-command="ssh -F $ssh_cfg" --master-port=29580 \
      --tree-threshold="$tree_threshold" "$@" --no-python true >"$work/out" 2>"$work/err" || rc=$?
    local t
    t=$(since "$t0")
    if ((rc != 0)); then
      echo "staging.sh: a job failed (exit code $rc): ddprun $*" >&2
      tail -n 20 "$work/err" >&2
      exit 1
    fi
    echo "$t"
  }
  for round in $(seq 0 "$runs"); do
    echo "== round $round of $runs (0: warm-up)" >&2
    plain=$(job --no-stage)
    present=$(job)
    rm -rf "$sshdir"/cache-*
    staged=$(job --remote-ddprun=/nonexistent/ddprun)
    copy=$(sed -n 's/.*that lacked it ([^)]*), \([0-9.]*\)s at most.*/\1/p' "$work/err")
    grep -q "staged ddprun .* on $nhosts host(s)" "$work/err" ||
      { echo "staging.sh: not every host was staged" >&2; exit 1; }
    cached=$(job --remote-ddprun=/nonexistent/ddprun)
    grep -q "from the cache on $nhosts host(s)" "$work/err" ||
      { echo "staging.sh: not every host ran its cached copy" >&2; exit 1; }
    t0=$EPOCHREALTIME
    for i in $(seq 2 $((nhosts + 1))); do
      v=NODE_${i}_ADDR
      scp -O -q -F "$ssh_cfg" "$ddprun" "${!v}:$work/scp-ddprun"
    done
    scp_only=$(since "$t0")
    with_job=$(job --remote-ddprun="$work/scp-ddprun" --no-stage)
    scp_total=$(awk -v a="$scp_only" -v b="$with_job" 'BEGIN{printf "%.3f", a + b}')
    ((round > 0)) || continue
    printf '%s\t%s\n' plain "$plain" present "$present" staged "$staged" staged_copy "$copy" cached "$cached" \
      scp_loop "$scp_total" scp_only "$scp_only" >>"$work/samples.tsv"
  done
  exit
fi

if [[ ${1:-} == --in-cluster ]]; then
  "$cluster" sshd "$NETNS_TAG" "$sshdir" $(seq 2 "$NETNS_NODES")
  "$cluster" exec "$NETNS_TAG" 1 "$self" --in-node
  exit
fi

# --- the command line ---------------------------------------------------------------------------
nhosts=32 runs=3 tree_threshold=64
ddprun=${BUILD_DIR:-$here/build}/launcher/ddprun
while [[ $# -gt 0 ]]; do
  case $1 in
    --hosts) nhosts=$2; shift ;;
    --runs) runs=$2; shift ;;
    --ddprun) ddprun=$2; shift ;;
    --tree-threshold) tree_threshold=$2; shift ;;
    -h|--help) sed -n '2,18p' "$0"; exit 0 ;;
    *) echo "staging.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
  shift
done
ddprun=$(realpath "$ddprun")
[[ -x $ddprun ]] || { echo "staging.sh: $ddprun is missing; build the ddprun target" >&2; exit 2; }
if ! { "$cluster" check && "$cluster" check-sshd; }; then
  echo "staging.sh: needs root, network namespaces and openssh-server" >&2
  exit 77
fi
work=$(mktemp -d "${TMPDIR:-/tmp}/ddprun-staging-bench.XXXXXX")
chmod 755 "$work"
trap 'rm -rf "$work"' EXIT
: >"$work/samples.tsv"
export work ddprun nhosts runs tree_threshold sshdir="$work/ssh"
"$cluster" run "sg$$" $((nhosts + 1)) "$self" --in-cluster

size=$(stat -c %s "$ddprun")
echo "### Staging ddprun on $nhosts hosts over ssh ($(nproc) cores, $(date -u '+%Y-%m-%d %H:%M UTC'), git $(git -C "$here" rev-parse --short HEAD 2>/dev/null || echo unknown))"
echo
echo "The binary: $((size / 1024)) KiB. Median of $runs rounds (min-max), seconds, the command's start to its exit."
echo
echo "| series | median | min | max |"
echo "|---|---:|---:|---:|"
for s in plain present staged staged_copy cached scp_loop scp_only; do
  awk -F'\t' -v s="$s" '$1 == s {print $2}' "$work/samples.tsv" | sort -n |
    awk -v s="$s" '{v[NR] = $1} END {
      if (NR == 0) exit
      m = NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2
      label["plain"] = "ddprun present on every host, --no-stage (no staging script)"
      label["present"] = "ddprun present on every host"
      label["staged"] = "no host has it: staged (sent to each)"
      label["staged_copy"] = "  of which the longest copy (as reported)"
      label["cached"] = "no host has it at --remote-ddprun, each has it cached"
      label["scp_loop"] = "scp to each host in turn, then the job"
      label["scp_only"] = "  of which the scp loop"
      printf "| %s | %.2f | %.2f | %.2f |\n", label[s], m, v[1], v[NR]
    }'
done
