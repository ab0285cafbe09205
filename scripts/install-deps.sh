#!/usr/bin/env bash
# Installs ddprun's build and test dependencies from Debian 12's archive.
# Idempotent: packages already present are skipped, and `apt-get update` runs at most once.
set -euo pipefail

packages=(
  cmake g++ make pkg-config
  libboost1.81-dev          # Asio, Process
  libcli11-dev libspdlog-dev libfmt-dev nlohmann-json3-dev
  catch2                    # v2, header-only
  libtorch-dev              # CPU libtorch 1.13 with c10d and Gloo (workers only)
  libgloo-dev               # Gloo headers that c10d's ProcessGroupGloo.hpp includes (workers)
  python3-torch python3-torchvision   # compatibility tests, reference training script
  iproute2 procps           # network namespaces, ps/pgrep for tests
)
optional=(
  clang libclang-rt-14-dev  # libFuzzer target for the store codec
)

missing=()
for p in "${packages[@]}" "${optional[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if ((${#missing[@]} == 0)); then
  echo "install-deps: all ${#packages[@]} required packages present"
  exit 0
fi

sudo_cmd=()
if [[ $(id -u) -ne 0 ]]; then sudo_cmd=(sudo); fi

echo "install-deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
"${sudo_cmd[@]}" apt-get update -qq
"${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${packages[@]}" >/dev/null
# The fuzzer toolchain is optional: the build skips the fuzz target without it.
"${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${optional[@]}" >/dev/null ||
  echo "install-deps: optional ${optional[*]} not installed; the fuzz target will be skipped"
echo "install-deps: done"
