#!/usr/bin/env bash
# The README's test command: installs what is missing, builds, runs every test with ctest and
# prints ctest's summary; then fuzzes the store codec briefly when clang is present.
# Environment: BUILD_DIR (default build), JOBS (default: cores), FUZZ_SECONDS (default 20).
set -euo pipefail
cd "$(dirname "$0")/.."

BUILD_DIR=${BUILD_DIR:-build}
JOBS=${JOBS:-$(nproc)}
FUZZ_SECONDS=${FUZZ_SECONDS:-20}

scripts/install-deps.sh --tests

werror=OFF
if [[ -n "${CI:-}" ]]; then werror=ON; fi
cmake -S . -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DDDPRUN_WERROR=$werror >/dev/null
cmake --build "$BUILD_DIR" -j "$JOBS"

status=0
(cd "$BUILD_DIR" && ctest --output-on-failure -j "$JOBS" --timeout 600) || status=$?

if command -v clang++ >/dev/null && [[ "$FUZZ_SECONDS" != 0 ]]; then
  echo "== fuzzing the store codec for ${FUZZ_SECONDS}s"
  CXX=clang++ cmake -S . -B "$BUILD_DIR-fuzz" -DDDPRUN_FUZZ=ON -DDDPRUN_WORKERS=OFF \
    -DDDPRUN_TESTS=ON -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
  cmake --build "$BUILD_DIR-fuzz" -j "$JOBS" --target fuzz_protocol fuzz_server fuzz_torch_protocol \
    make_seeds >/dev/null
  corpus="$BUILD_DIR-fuzz/corpus"
  mkdir -p "$corpus" "$corpus-server"
  "$BUILD_DIR-fuzz/tests/make_seeds" "$corpus"
  "$BUILD_DIR-fuzz/tests/make_seeds" "$corpus-server" --sequences
  "$BUILD_DIR-fuzz/tests/fuzz_protocol" -max_total_time="$FUZZ_SECONDS" -max_len=4096 \
    "$corpus" 2>&1 | tail -n 3 || status=$?
  echo "== fuzzing the store server's handshake and state for ${FUZZ_SECONDS}s"
  "$BUILD_DIR-fuzz/tests/fuzz_server" -max_total_time="$FUZZ_SECONDS" -max_len=8192 \
    "$corpus-server" 2>&1 | tail -n 3 || status=$?
  echo "== fuzzing the workers' store's reading of torch's queries for ${FUZZ_SECONDS}s"
  mkdir -p "$corpus-torch"
  "$BUILD_DIR-fuzz/tests/fuzz_torch_protocol" -max_total_time="$FUZZ_SECONDS" -max_len=4096 \
    "$corpus-torch" 2>&1 | tail -n 3 || status=$?
else
  echo "== clang++ not found: store codec fuzzing skipped"
fi
exit $status
