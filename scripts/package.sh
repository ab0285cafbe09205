#!/usr/bin/env bash
# Builds ddprun's Debian packages into dist/: `ddprun` (the launcher, the store, their man pages
# and bash completion) and, when libtorch is found, `ddprun-workers` (ddp_resnet). Install one on
# a Debian 12 machine with `apt install ./dist/ddprun_<version>_amd64.deb`.
# Environment: BUILD_DIR (default build, the README's; its options are kept), JOBS (default:
# cores), DIST (default dist).
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${BUILD_DIR:-build}
DIST=${DIST:-dist}

scripts/install-deps.sh
cmake -S . -B "$BUILD_DIR" >/dev/null
targets=(ddprun ddprun-store man_pages)
if grep -qx 'DDPRUN_HAVE_DDP_RESNET:INTERNAL=ON' "$BUILD_DIR/CMakeCache.txt"; then
  targets+=(ddp_resnet)
fi
echo "== building ${targets[*]}"
cmake --build "$BUILD_DIR" -j "${JOBS:-$(nproc)}" --target "${targets[@]}" >/dev/null
mkdir -p "$DIST"
dist=$(cd "$DIST" && pwd)
rm -rf "$dist/.cpack"
(cd "$BUILD_DIR" && cpack -G DEB -B "$dist/.cpack" >/dev/null)
mv "$dist"/.cpack/*.deb "$dist"/
rm -rf "$dist/.cpack"
for deb in "$dist"/*.deb; do
  echo "== $deb"
  dpkg-deb -f "$deb" Package Version Depends
done
