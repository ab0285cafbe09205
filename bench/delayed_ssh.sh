#!/bin/sh
# bench/delayed_ssh.sh DELAY HOST COMMAND...: testing/local_ssh.sh after DELAY seconds of
# waiting. A stand-in for an ssh login whose cost lies elsewhere (network round trips, the remote
# sshd and shell on their own machine), for bench/hosts_launch.sh --sim-delay: the waiting costs
# this machine no CPU, so a launch's depth (flat waves of --fanout logins, or tree levels) shows
# in its wall time.
delay=$1
shift
sleep "$delay"
exec "$(dirname "$0")/../testing/local_ssh.sh" "$@"
