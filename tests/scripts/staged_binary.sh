#!/usr/bin/env bash
# ddprun needs only the C library: what a host gets when `--hosts` stages it. Checks what the
# binary links (ldd), then runs a two-worker job with it in a root that holds nothing but the
# binary and glibc's files (a chroot, in a mount namespace of its own with /proc and /dev).
# Skips (77) where a mount namespace or chroot cannot be made.
# Usage: staged_binary.sh DDPRUN_BINARY
set -euo pipefail
ddprun=$(realpath "$1")
fail() { echo "FAIL: $*" >&2; exit 1; }

# 1) Linked: the vDSO, the dynamic loader, libc and libm; nothing else.
libs=$(ldd "$ddprun")
extra=$(awk '$1 !~ /^(linux-vdso\.so\.1|libc\.so\.6|libm\.so\.6|\/lib64\/ld-linux-x86-64\.so\.2)$/' <<<"$libs")
[[ -z $extra ]] || fail "ddprun links more than glibc:"$'\n'"$extra"
echo "ok: ddprun links only glibc: $(awk '{print $1}' <<<"$libs" | tr '\n' ' ')"
# The newest glibc symbol version it needs: the README promises hosts with glibc 2.36.
if command -v objdump >/dev/null; then
  newest=$(objdump -T "$ddprun" | grep -o 'GLIBC_[0-9.]*' | sort -uV | tail -n 1)
  [[ $(printf '%s\n' "$newest" GLIBC_2.36 | sort -V | tail -n 1) == GLIBC_2.36 ]] ||
    fail "ddprun needs $newest, newer than the glibc 2.36 the README names"
  echo "ok: the newest glibc version it needs: $newest"
fi

# 2) Runs in a root with glibc alone.
if ! unshare -m true 2>/dev/null; then
  echo "SKIPPED: cannot make a mount namespace here (unshare -m needs root)"
  exit 77
fi
root=$(mktemp -d)
trap 'rm -rf "$root"' EXIT
mkdir -p "$root/proc" "$root/dev" "$root/tmp"
cp "$ddprun" "$root/ddprun"
# Each library at the path the loader looks for it, the loader at the path in the binary.
for lib in $(awk '/=>/ {print $3} $1 ~ /^\// {print $1}' <<<"$libs"); do
  mkdir -p "$root$(dirname "$lib")"
  cp -L "$lib" "$root$lib"
done
version=$("$ddprun" --version)
out=$root/out
# Each worker is the binary itself, printing its version: nothing but ddprun and glibc runs.
status=0
unshare -m sh -c 'mount -t proc proc "$0/proc" && mount --bind /dev "$0/dev" &&
  exec chroot "$0" /ddprun --standalone --nproc-per-node=2 --no-python /ddprun --version' \
  "$root" >"$out" 2>&1 || status=$?
[[ $status -eq 0 ]] || fail "the job in a root with glibc alone exited $status:"$'\n'"$(cat "$out")"
[[ $(grep -c "]:$version\$" "$out") -eq 2 ]] ||
  fail "two workers did not print '$version':"$'\n'"$(cat "$out")"
echo "ok: in a root with only glibc ($(cd "$root" && find . -type f ! -name out | wc -l) files), ddprun ran two workers: $version"
