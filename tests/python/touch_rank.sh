#!/bin/sh
# The --no-python worker of the ported torchrun launcher cases: an empty file named after its
# rank in the directory given, so the test counts the ranks that ran.
echo "creating $1/$RANK"
touch "$1/$RANK"
