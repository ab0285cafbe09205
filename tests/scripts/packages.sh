#!/usr/bin/env bash
# The Debian packages, built with CPack from this build directory (as scripts/package.sh does):
# their control fields, files and man pages; unpacked into a temporary root, whose ddprun runs a
# two-worker job from there, whose man page renders and whose bash completion completes.
# Usage: packages.sh BUILD_DIR. Skips (77) without dpkg-deb, cpack or help2man.
set -euo pipefail
build=$(cd "$1" && pwd)
for tool in dpkg-deb cpack help2man man; do
  command -v "$tool" >/dev/null || { echo "SKIPPED: $tool is not installed (scripts/install-deps.sh installs it)"; exit 77; }
done
work=$(mktemp -d "${TMPDIR:-/tmp}/ddprun-packages.XXXXXX")
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*"; exit 1; }

(cd "$build" && cpack -G DEB -B "$work/out" >"$work/cpack.log" 2>&1) || fail "cpack: $(tail -20 "$work/cpack.log")"
deb=$(ls "$work"/out/ddprun_*.deb 2>/dev/null | head -1)
[[ -n $deb ]] || fail "no ddprun_*.deb in $(ls "$work/out")"
echo "ok: built $(basename "$deb") ($(du -h "$deb" | cut -f1))"

# Control fields: Depends computed (glibc) and declared (libcrypto, loaded on first use).
depends=$(dpkg-deb -f "$deb" Depends)
[[ $depends == *libc6* ]] || fail "Depends has no libc6: $depends"
[[ $depends == *libssl3* ]] || fail "Depends has no libssl3: $depends"
[[ $(dpkg-deb -f "$deb" Package) == ddprun ]] || fail "Package: $(dpkg-deb -f "$deb" Package)"
[[ $(dpkg-deb -f "$deb" Version) == 0.* ]] || fail "Version: $(dpkg-deb -f "$deb" Version)"
echo "ok: Depends: $depends"
files=$(dpkg-deb -c "$deb")
for f in ./usr/bin/ddprun ./usr/bin/ddprun-store ./usr/share/man/man1/ddprun.1.gz \
         ./usr/share/man/man1/ddprun-store.1.gz ./usr/share/bash-completion/completions/ddprun; do
  grep -q " $f\$" <<<"$files" || fail "the package lacks $f"
done
echo "ok: binaries, man pages and completion in the package"
if grep -qx 'DDPRUN_HAVE_DDP_RESNET:INTERNAL=ON' "$build/CMakeCache.txt"; then
  workers=$(ls "$work"/out/ddprun-workers_*.deb 2>/dev/null | head -1)
  [[ -n $workers ]] || fail "ddp_resnet is built but no ddprun-workers package was made"
  [[ $(dpkg-deb -f "$workers" Depends) == *libtorch* ]] ||
    fail "ddprun-workers does not depend on libtorch: $(dpkg-deb -f "$workers" Depends)"
  dpkg-deb -c "$workers" | grep -q ' ./usr/bin/ddp_resnet$' || fail "ddprun-workers lacks ddp_resnet"
  echo "ok: ddprun-workers: ddp_resnet, Depends: $(dpkg-deb -f "$workers" Depends)"
fi

# Unpacked, away from the build: it runs a job, using nothing of the build tree.
root="$work/root"
dpkg-deb -x "$deb" "$root"
ddprun="$root/usr/bin/ddprun"
if ldd "$ddprun" | grep -q "$build"; then fail "the packaged ddprun loads from the build tree: $(ldd "$ddprun")"; fi
out=$(cd "$work" && env -u PYTHON_EXEC -u DDPRUN_TOKEN "$ddprun" --nproc-per-node=2 --master-port=0 \
  --no-python sh -c 'echo "rank=$RANK of $WORLD_SIZE"' 2>&1) || fail "the packaged ddprun failed: $out"
grep -q 'rank=0 of 2' <<<"$out" && grep -q 'rank=1 of 2' <<<"$out" || fail "no ranks in: $out"
"$ddprun" --version | grep -q '^ddprun 0\.' || fail "--version: $("$ddprun" --version)"
echo "ok: the unpacked ddprun runs a two-worker job ($("$ddprun" --version))"

page=$(MANPAGER=cat MANWIDTH=100 man -l "$root/usr/share/man/man1/ddprun.1.gz" 2>&1) || fail "man -l: $page"
grep -q -- '--nproc-per-node' <<<"$page" || fail "the man page lacks --nproc-per-node: $(head -20 <<<"$page")"
grep -q -- '--metrics-port' <<<"$page" || fail "the man page lacks --metrics-port"
echo "ok: man -l renders ddprun.1 ($(wc -l <<<"$page") lines)"

if [[ -r /usr/share/bash-completion/bash_completion ]]; then
  complete_line() {  # complete_line WORDS...: what bash completes for the last word
    PATH="$root/usr/bin:$PATH" bash -c '
      source /usr/share/bash-completion/bash_completion
      source "$0"
      COMP_WORDS=("$@"); COMP_CWORD=$(($# - 1)); COMP_LINE="$*"; COMP_POINT=${#COMP_LINE}
      _ddprun ddprun "${COMP_WORDS[COMP_CWORD]}" "${COMP_WORDS[COMP_CWORD-1]}"
      printf "%s\n" "${COMPREPLY[@]}"' "$root/usr/share/bash-completion/completions/ddprun" "$@"
  }
  complete_line ddprun --nproc-per | grep -q -- '--nproc-per-node' || fail "no completion of --nproc-per"
  complete_line ddprun status --wa | grep -q -- '--watch' || fail "no completion of status --wa"
  complete_line ddprun --rdzv-backend e | grep -qx etcd || fail "no completion of --rdzv-backend e"
  echo "ok: bash completion: --nproc-per, status --wa, --rdzv-backend values"
else
  echo "completion not tried: bash-completion is not installed (scripts/install-deps.sh --tests installs it)"
fi
