#!/usr/bin/env bash
# Builds ddprun's Debian packages into dist/: `ddprun` (the launcher, the store, their man pages
# and bash completion) and, when libtorch is found, `ddprun-workers` (ddp_resnet). Install one on
# a Debian 12 machine with `apt install ./dist/ddprun_<version>_amd64.deb`.
# Environment: BUILD_DIR (default build-package), JOBS (default: cores), DIST (default dist).
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${BUILD_DIR:-build-package}
DIST=${DIST:-dist}

scripts/install-deps.sh
cmake -S . -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DDDPRUN_TESTS=OFF \
  -DDDPRUN_BENCH=OFF >/dev/null
cmake --build "$BUILD_DIR" -j "${JOBS:-$(nproc)}"
mkdir -p "$DIST"
dist=$(cd "$DIST" && pwd)
(cd "$BUILD_DIR" && cpack -G DEB -B "$dist/.cpack" >/dev/null)
mv "$dist"/.cpack/*.deb "$dist"/
rm -rf "$dist/.cpack"
for deb in "$dist"/*.deb; do
  echo "== $deb"
  dpkg-deb -f "$deb" Package Version Depends
done
