#!/bin/sh
# A stand-in for ssh in tests and benchmarks: `local_ssh.sh HOST COMMAND...` runs COMMAND on this
# machine through sh -c, as ssh runs it through the remote user's shell on HOST; stdin, stdout,
# stderr and the exit code pass through as they do with ssh. HOST is ignored (tests use loopback
# addresses such as 127.0.0.2 to tell the "hosts" apart).
shift
exec sh -c "$*"
