#!/usr/bin/env bash
# scripts/install-deps.sh against stand-ins for apt-get, dpkg-query, systemctl, service and sudo
# that record what they are asked: on a machine where nothing is installed, the demo's mode
# asks for the build's packages and no server; --tests asks for the test components too, and
# disables and stops every server it installed.
set -euo pipefail
here=$(cd "$(dirname "$0")/../.." && pwd)
work=$(mktemp -d "${TMPDIR:-/tmp}/install-deps-test.XXXXXX")
trap 'rm -rf "$work"' EXIT
mkdir "$work/bin"
for tool in apt-get systemctl service sudo; do
  cat >"$work/bin/$tool" <<STUB
#!/bin/sh
echo "$tool \$*" >>"$work/calls"
[ "$tool" = sudo ] && exec "\$@"
exit 0
STUB
done
# Nothing is installed.
printf '#!/bin/sh\nexit 1\n' >"$work/bin/dpkg-query"
chmod +x "$work"/bin/*

fail() { echo "FAIL: $*"; echo "--- calls:"; cat "$work/calls" 2>/dev/null; exit 1; }
run() {  # run ARGS...: install-deps with the stand-ins first on PATH
  : >"$work/calls"
  PATH="$work/bin:$PATH" DDPRUN_STATE_DIR="$work/state" "$here/scripts/install-deps.sh" "$@" \
    >"$work/out" 2>&1 || fail "install-deps $* exited $?: $(cat "$work/out")"
}
servers=(openssh-server etcd-server slurmctld slurmd munge prometheus)

run
install=$(grep '^apt-get install' "$work/calls" || true)
[[ -n $install ]] || fail "the demo's mode installed nothing on an empty machine"
for p in cmake g++ libboost1.81-dev libtorch-dev catch2; do
  [[ " $install " == *" $p "* ]] || fail "the demo's mode does not install $p"
done
for p in "${servers[@]}" openssh-client etcd-client slurm-client tmux clang openmpi-bin; do
  [[ " $install " != *" $p "* ]] || fail "the demo's mode installs $p"
done
! grep -q '^systemctl\|^service' "$work/calls" || fail "the demo's mode touched a service"
echo "ok: the demo's mode installs $(wc -w <<<"${install#apt-get install -y -qq --no-install-recommends }") packages, no server"

run --tests
install=$(grep '^apt-get install' "$work/calls" | head -1)
for p in cmake "${servers[@]}" tmux; do
  [[ " $install " == *" $p "* ]] || fail "--tests does not install $p"
done
for unit in ssh etcd munge slurmctld slurmd prometheus; do
  grep -qx "systemctl disable --now $unit.service" "$work/calls" ||
    fail "--tests installed the $unit service and did not disable and stop it"
done
grep -q '^apt-get install .*clang' "$work/calls" || fail "--tests does not try the optional tools"
echo "ok: --tests installs the test components and disables and stops the 6 services it installed"

# Bad usage is one line and exit 2.
code=0
PATH="$work/bin:$PATH" "$here/scripts/install-deps.sh" --bogus >"$work/out" 2>&1 || code=$?
[[ $code -eq 2 ]] || fail "an unknown option exited $code, expected 2"
echo "ok: an unknown option: $(cat "$work/out")"
