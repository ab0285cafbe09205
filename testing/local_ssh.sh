#!/bin/sh
# A stand-in for ssh in tests and benchmarks: `local_ssh.sh HOST COMMAND...` runs COMMAND on this
# machine through sh -c, as ssh runs it through the remote user's shell on HOST: with a fresh
# environment (HOME, USER and a default PATH, as sshd gives a session), stdin, stdout, stderr and
# the exit code passing through. HOST is otherwise ignored (tests use loopback addresses such as
# 127.0.0.2 to tell the "hosts" apart); a host ending in ".invalid" fails as an unresolvable
# name does with ssh (exit 255), and one ending in ".hang" never logs in (it reads the session
# and answers nothing until its input ends). With LOCAL_SSH_HOMES=DIR, each host's HOME is DIR/HOST, as on
# separate machines (a ddprun staged on one is not in the cache of another); the variable
# reaches the remote command too, so that a relay's own connections (tree fan-out) do the same.
host=$1
shift
case $host in
  *.invalid)
    echo "ssh: Could not resolve hostname $host: Name or service not known" >&2
    exit 255 ;;
  *.hang)
    exec cat >/dev/null ;;
esac
if [ -n "${LOCAL_SSH_HOMES:-}" ]; then
  HOME=$LOCAL_SSH_HOMES/$host
  mkdir -p "$HOME"
fi
exec env -i ${LOCAL_SSH_HOMES:+LOCAL_SSH_HOMES="$LOCAL_SSH_HOMES"} HOME="${HOME:-/}" USER="${USER:-root}" PATH=/usr/local/bin:/usr/bin:/bin sh -c "$*"
