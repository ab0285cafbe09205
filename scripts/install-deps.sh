#!/usr/bin/env bash
# Installs ddprun's dependencies from Debian 12's archive.
#
#   scripts/install-deps.sh          what building and running ddprun needs (the demo's)
#   scripts/install-deps.sh --tests  that, and the tests' components: OpenSSH, etcd, Slurm,
#                                    Prometheus, tmux and libfaketime (the tests start their own
#                                    instances in network namespaces or on loopback), and the
#                                    optional fuzzing and benchmark tools
#
# Idempotent: packages already present are skipped, and `apt-get update` runs at most once.
# A server package this run installs is left neither enabled at boot nor running; a service
# that was there before stays as it was. A run with every required package present calls no
# apt-get, even when an optional package is missing because it could not be installed on an
# earlier run (see optional_failed below).
set -euo pipefail

tests=0
case "${1:-}" in
  "") ;;
  --tests) tests=1 ;;
  *) echo "install-deps: unknown option $1 (usage: install-deps.sh [--tests])" >&2; exit 2 ;;
esac

packages=(
  cmake g++ make pkg-config
  libboost1.81-dev          # Asio, Process, Beast
  libcli11-dev libspdlog-dev libfmt-dev nlohmann-json3-dev
  catch2                    # v2, header-only
  libssl-dev                # libcrypto: HMAC-SHA256 for the store's authentication
  libtorch-dev              # CPU libtorch 1.13 with c10d and Gloo (workers only)
  libgloo-dev               # Gloo headers that c10d's ProcessGroupGloo.hpp includes (workers)
  python3-torch python3-torchvision   # compatibility tests, reference training script
  gdb python3.11-dbg        # stacks of hung workers (--hang-timeout, ddprun status --stacks): native frames, and py-bt for Python
  libhwloc-dev libudev-dev hwloc-nox   # --numa-binding/--cpu-bind: the topology (hwloc, static, calls libudev); lstopo for tests
  iproute2 procps           # network namespaces, ps/pgrep for tests
  help2man dpkg-dev         # man pages from --help; Debian packages (scripts/package.sh: dpkg-shlibdeps)
)
test_packages=(
  openssh-server openssh-client   # the one-command launch over ssh, and its tests (sshd per namespace)
  etcd-server etcd-client   # --rdzv-backend=etcd's tests: a real 3-member etcd on loopback
  slurmctld slurmd slurm-client munge   # the Slurm tests: a real Slurm in network namespaces
  prometheus tmux           # ddprun status's tests: a real Prometheus scraping agents, --watch in a terminal
  bash-completion           # the package's completion, tried in a test
  libfaketime               # --node-check's clock test: one agent whose wall clock runs ahead
)
# The services of the test packages that are servers: package:unit.
test_services=(openssh-server:ssh etcd-server:etcd munge:munge slurmctld:slurmctld slurmd:slurmd
  prometheus:prometheus)
optional=(
  clang libclang-rt-14-dev  # libFuzzer target for the store codec
  openmpi-bin               # scripts/bench.sh's mpirun comparison for --hosts (benchmark only)
  gnuplot-nox               # scripts/bench.sh's charts of the scaling figures (benchmark only)
)
if ((tests)); then
  packages+=("${test_packages[@]}")
else
  optional=()
fi

installed() { [[ $(dpkg-query -W -f='${Status}' "$1" 2>/dev/null) == "install ok installed" ]]; }

# An optional package that could not be installed is remembered here, so that later runs do not
# call apt-get for it again and again: with every required package present, optional ones that
# failed before are skipped. Delete the file to try them again (a run that installs required
# packages tries them again anyway, since it calls apt-get in any case).
state_dir=${DDPRUN_STATE_DIR:-/var/lib/ddprun}
optional_failed="$state_dir/optional-packages-unavailable"
tried_before=" "
if [[ -r $optional_failed ]]; then tried_before+="$(tr '\n' ' ' <"$optional_failed") "; fi

missing=()
for p in "${packages[@]}"; do
  installed "$p" || missing+=("$p")
done
missing_optional=()
skipped_optional=()
for p in "${optional[@]}"; do
  installed "$p" && continue
  if [[ $tried_before == *" $p "* ]]; then skipped_optional+=("$p"); else missing_optional+=("$p"); fi
done

if ((${#missing[@]} == 0 && ${#missing_optional[@]} == 0)); then
  echo "install-deps: all ${#packages[@]} required packages present"
  if ((${#skipped_optional[@]} > 0)); then
    echo "install-deps: optional ${skipped_optional[*]} could not be installed before; not retried" \
      "(delete $optional_failed to retry)"
  fi
  exit 0
fi

sudo_cmd=()
if [[ $(id -u) -ne 0 ]]; then sudo_cmd=(sudo); fi

# A service this run brought: not started at boot, and stopped (Debian's packages enable and
# start their services on installation).
quiet_service() {
  local unit=$1
  echo "install-deps: $unit (installed for the tests, which start their own) is disabled and stopped"
  if ! "${sudo_cmd[@]}" systemctl disable --now "$unit.service" >/dev/null 2>&1; then
    # No systemd running (a container): what `disable` would remove, and the SysV service.
    "${sudo_cmd[@]}" rm -f "/etc/systemd/system/multi-user.target.wants/$unit.service"
    "${sudo_cmd[@]}" service "$unit" stop >/dev/null 2>&1 || true
  fi
}

to_install=("${missing[@]}" "${missing_optional[@]}")
echo "install-deps: installing ${to_install[*]}"
export DEBIAN_FRONTEND=noninteractive
"${sudo_cmd[@]}" apt-get update -qq
if ((${#missing[@]} > 0)); then
  "${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${packages[@]}" >/dev/null
  for entry in "${test_services[@]}"; do
    if [[ " ${missing[*]} " == *" ${entry%%:*} "* ]]; then quiet_service "${entry#*:}"; fi
  done
fi
if ((${#optional[@]} == 0)); then
  echo "install-deps: done"
  exit 0
fi
# The fuzzer toolchain is optional: the build skips the fuzz target without it.
if ! "${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${optional[@]}" >/dev/null; then
  echo "install-deps: optional ${optional[*]} not installed; the fuzz target will be skipped"
  unavailable=()
  for p in "${optional[@]}"; do installed "$p" || unavailable+=("$p"); done
  if "${sudo_cmd[@]}" mkdir -p "$state_dir" &&
     printf '%s\n' "${unavailable[@]}" | "${sudo_cmd[@]}" tee "$optional_failed" >/dev/null; then
    echo "install-deps: remembered in $optional_failed; later runs will not retry them"
  fi
else
  "${sudo_cmd[@]}" rm -f "$optional_failed"
fi
echo "install-deps: done"
