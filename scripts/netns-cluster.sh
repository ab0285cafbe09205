#!/usr/bin/env bash
# A cluster of "nodes" on one machine: network namespaces with their own addresses, joined by a
# bridge that lives in a namespace of its own (the machine's own network is never touched).
# Traffic stays inside the namespaces this script creates.
#
#   netns-cluster.sh up TAG N          create nodes TAG-1..TAG-N at 10.199.<k>.1..N (k from TAG)
#   netns-cluster.sh addr TAG I        print node I's address
#   netns-cluster.sh exec TAG I CMD... run CMD inside node I
#   netns-cluster.sh cut TAG I         cut node I off the network (its link goes down)
#   netns-cluster.sh heal TAG I        bring it back
#   netns-cluster.sh down TAG          delete everything TAG created (safe to repeat)
#   netns-cluster.sh check             exit 0 if namespaces can be created here, 77 if not
#   netns-cluster.sh run TAG N CMD...  up, run CMD (NETNS_TAG, NETNS_NODES and NODE_<i>_ADDR set),
#                                      then down, even when CMD fails or is interrupted
set -euo pipefail

subnet() {  # a /24 per tag, so clusters of concurrent tests never share addresses
  local sum
  sum=$(printf '%s' "$1" | cksum | cut -d' ' -f1)
  echo "10.199.$((sum % 250 + 1))"
}
ns() { echo "ddp-$1-$2"; }
sw() { echo "ddp-$1-sw"; }

up() {
  local tag=$1 n=$2 net
  net=$(subnet "$tag")
  ip netns add "$(sw "$tag")"
  ip -n "$(sw "$tag")" link add br0 type bridge
  ip -n "$(sw "$tag")" link set br0 up
  for i in $(seq 1 "$n"); do
    local node
    node=$(ns "$tag" "$i")
    ip netns add "$node"
    ip link add "d${tag:0:6}$i" type veth peer name "s${tag:0:6}$i"
    ip link set "d${tag:0:6}$i" netns "$node" name eth0
    ip link set "s${tag:0:6}$i" netns "$(sw "$tag")"
    ip -n "$(sw "$tag")" link set "s${tag:0:6}$i" master br0 up
    ip -n "$node" addr add "$net.$i/24" dev eth0
    ip -n "$node" link set eth0 up
    ip -n "$node" link set lo up
  done
}

down() {
  local tag=$1
  for node in $(ip netns list | awk '{print $1}' | grep -E "^ddp-$tag-" || true); do
    # Processes left inside (a test that failed half-way) go with their namespace.
    for pid in $(ip netns pids "$node" 2>/dev/null || true); do kill -9 "$pid" 2>/dev/null || true; done
    ip netns del "$node" 2>/dev/null || true
  done
}

cmd=${1:-}
shift || true
case "$cmd" in
  up) up "$1" "$2" ;;
  addr) echo "$(subnet "$1").$2" ;;
  exec) tag=$1 i=$2; shift 2; exec ip netns exec "$(ns "$tag" "$i")" "$@" ;;
  cut) ip -n "$(ns "$1" "$2")" link set eth0 down ;;
  heal) ip -n "$(ns "$1" "$2")" link set eth0 up ;;
  down) down "$1" ;;
  check)
    probe="ddp-probe-$$"
    if [[ $(id -u) -eq 0 ]] && ip netns add "$probe" 2>/dev/null; then
      ip netns del "$probe"
      exit 0
    fi
    exit 77 ;;
  run)
    tag=$1 n=$2; shift 2
    down "$tag"
    trap 'down "$tag"' EXIT INT TERM
    up "$tag" "$n"
    export NETNS_TAG=$tag NETNS_NODES=$n
    for i in $(seq 1 "$n"); do export "NODE_${i}_ADDR=$(subnet "$tag").$i"; done
    "$@" ;;
  *) sed -n '2,16p' "$0"; exit 2 ;;
esac
