#!/usr/bin/env bash
# The staging script's side of the protocol (cluster/staging.hpp), driven line by line by this
# shell standing in for the command: the script as `ddprun --dry-run=json --hosts`
# prints it, run by sh with a HOME of its own. Checks what no real sender does on purpose: a
# header naming a file that is gone (sbcast's copy, taken by another host sharing /tmp) makes it
# ask for the bytes; a malformed header ends it with one clear line; and after staging, the
# agent reads the hello that follows the bytes (the stream stays in step).
# Usage: staging_script.sh DDPRUN_BINARY
set -euo pipefail
ddprun=$(realpath "$1")
fail() { echo "FAIL: $*" >&2; exit 1; }
trap "" PIPE  # a script that ended early makes a write fail, not this shell die
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

plan=$("$ddprun" --dry-run=json --hosts=h1 --remote-ddprun=/nonexistent/ddprun --no-python true)
field() { python3 -c "import json, sys; p = json.load(sys.stdin); print($1)" <<<"$plan"; }
command=$(field "p['nodes'][0]['command'][-1]")
sha=$(field "p['staging']['sha256']")
size=$(field "p['staging']['size']")
version=$(field "p['staging']['version']")

# start [keep]: the script in the background, reading $work/in and writing $work/out (FIFOs;
# this shell holds their other ends as $to and $from), its stderr in $work/err. With "keep", the
# home (and its cache) of the run before.
start() {
  [[ ${1:-} == keep ]] || { rm -rf "$work/home" && mkdir "$work/home"; }
  rm -f "$work/in" "$work/out" && mkfifo "$work/in" "$work/out"
  env -i HOME="$work/home" PATH=/usr/bin:/bin sh -c "$command" <"$work/in" >"$work/out" \
    2>"$work/err" &
  pid=$!
  exec {to}>"$work/in" {from}<"$work/out"
}
send() { printf "$@" >&"$to"; }
expect() {  # expect LINE: the script's next stdout line is LINE (within 30 s)
  local line
  IFS= read -r -t 30 line <&"$from" || fail "no line from the script (wanted '$1'): $(cat "$work/err")"
  [[ $line == "$1" ]] || fail "the script said '$line', wanted '$1'"
}
finish() {  # finish: closes the script's input, waits; its exit status in $status
  exec {to}>&- {from}<&-
  status=0
  wait "$pid" || status=$?
}

# 1) sbcast's file is gone: it asks for the bytes, stages them, and the agent reads what follows.
start
send 'the hello, read and dropped\n'
expect "ddprun-stage: send"
send '%s %s /tmp/ddprun-bcast-gone-%s\n' "$size" "$sha" "$$"
expect "ddprun-stage: send bytes"
send '%s %s\n' "$size" "$sha"
cat "$ddprun" >&"$to"
expect "ddprun-stage: hello"
send 'not a hello\n'
finish
[[ $status -eq 2 ]] || fail "the staged agent exited $status, wanted 2: $(cat "$work/err")"
grep -q "malformed session hello (11 bytes)" "$work/err" ||
  fail "the staged agent did not read the line after the bytes: $(cat "$work/err")"
cmp -s "$work/home/.cache/ddprun/$version-$sha/ddprun" "$ddprun" || fail "no good copy in the cache"
echo "ok: a header naming a missing file: the bytes asked for and staged; the agent read the next line"

# 2) The next run finds the copy: it says so and runs it, which reads the first line.
start keep
send 'first line\n'
expect "ddprun-stage: cached"
finish
[[ $status -eq 2 ]] || fail "the cached copy exited $status, wanted 2: $(cat "$work/err")"
grep -q "malformed session hello (10 bytes)" "$work/err" ||
  fail "the cached copy did not read the first line: $(cat "$work/err")"
echo "ok: the next run ran the cached copy, which read the hello"

# 3) Anything but a header where one is due (here a ping): one line saying so, exit 125.
start
send 'the hello\n'
expect "ddprun-stage: send"
send 'ping\n'
finish
[[ $status -eq 125 ]] || fail "exit $status after a bad header, wanted 125: $(cat "$work/err")"
grep -q "^ddprun: cannot stage ddprun $version on .*: not a size: ping$" "$work/err" ||
  fail "no clear line about the bad header: $(cat "$work/err")"
[[ -z $(find "$work/home" -name '.ddprun.*') ]] || fail "a temporary copy was left"
echo "ok: a bad header ends the script with one line and exit 125, nothing left"
