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
#   netns-cluster.sh slow TAG I RATE   rate-limit node I's link both ways (tc tbf; RATE as tc
#                                      reads it: 100mbit)
#   netns-cluster.sh unslow TAG I      lift the limit
#   netns-cluster.sh down TAG          delete everything TAG created (safe to repeat)
#   netns-cluster.sh sshd TAG DIR I... start a real OpenSSH server on port 22 of each node I (keys,
#                                      configs, logs, pid files DIR/sshd-I.pid and a client config
#                                      DIR/ssh_config under DIR); returns once each accepts logins
#   netns-cluster.sh check             exit 0 if namespaces can be created here, 77 if not
#   netns-cluster.sh check-sshd        exit 0 if OpenSSH (sshd, ssh, ssh-keygen) is here, 77 if not
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
    # Both ends are made inside their namespaces, never in the machine's own: names there are
    # free, so concurrent clusters cannot clash over them.
    ip -n "$node" link add eth0 type veth peer name "s$i" netns "$(sw "$tag")"
    ip -n "$(sw "$tag")" link set "s$i" master br0 up
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

# sshd TAG DIR I...: one sshd per node, in the foreground-daemon form (-D) but detached (setsid),
# so that it lives in the node's namespace until `down` kills it with everything else there.
# Test keys only, made once per DIR: root may log in with DIR/id, nothing else is accepted.
sshd_up() {
  local tag=$1 dir=$2 net i
  shift 2
  net=$(subnet "$tag")
  mkdir -p "$dir" /run/sshd  # /run/sshd: sshd's privilege-separation directory
  chmod 700 "$dir"
  if [[ ! -f $dir/host_key ]]; then
    ssh-keygen -q -t ed25519 -N '' -C ddprun-test-host -f "$dir/host_key"
    ssh-keygen -q -t ed25519 -N '' -C ddprun-test-client -f "$dir/id"
    cp "$dir/id.pub" "$dir/authorized_keys"
  fi
  # ssh refuses a config file that others can write to.
  printf '%s\n' 'Host *' "  IdentityFile $dir/id" '  IdentitiesOnly yes' '  User root' \
    '  UserKnownHostsFile /dev/null' '  StrictHostKeyChecking no' '  BatchMode yes' \
    '  LogLevel ERROR' '  ConnectTimeout 5' >"$dir/ssh_config"
  chmod 600 "$dir/ssh_config"
  for i in "$@"; do
    local conf=$dir/sshd-$i.conf
    # No AcceptEnv line: sshd then accepts no environment from clients (its default), so workers
    # see only what the launcher passes on the command line. StrictModes no: the keys live under
    # /tmp. MaxStartups and MaxSessions: a launcher may open many connections at once. SetEnv:
    # each node's ddprun cache (a staged ddprun) in DIR, its own, as on separate machines.
    printf '%s\n' "ListenAddress $net.$i:22" "HostKey $dir/host_key" \
      "AuthorizedKeysFile $dir/authorized_keys" 'StrictModes no' 'PasswordAuthentication no' \
      'KbdInteractiveAuthentication no' 'UsePAM no' 'PermitRootLogin prohibit-password' \
      "PidFile $dir/sshd-$i.pid" 'MaxStartups 200:30:400' 'MaxSessions 100' 'PrintMotd no' \
      'PrintLastLog no' "SetEnv XDG_CACHE_HOME=$dir/cache-$i" >"$conf"
    rm -f "$dir/sshd-$i.pid"
    if ! /usr/sbin/sshd -t -f "$conf"; then
      echo "netns-cluster: the sshd config for node $i ($conf) is invalid" >&2
      return 1
    fi
    setsid ip netns exec "$(ns "$tag" "$i")" /usr/sbin/sshd -D -f "$conf" -E "$dir/sshd-$i.log" \
      </dev/null >/dev/null 2>&1 &
  done
  # Ready means a login works, not only the port: a key or account problem shows up here, with
  # sshd's log. The nodes are waited for in parallel (a login takes 0.2-0.5 s on a busy machine).
  local pids=() pid failed=0
  for i in "$@"; do sshd_wait "$tag" "$dir" "$i" & pids+=($!); done
  for pid in "${pids[@]}"; do wait "$pid" || failed=1; done
  return "$failed"
}

sshd_wait() {  # sshd_wait TAG DIR I: one login attempt after another until one works or 10 s pass
  local tag=$1 dir=$2 i=$3 addr err deadline=$((SECONDS + 10))
  addr=$(subnet "$tag").$i
  until err=$(ip netns exec "$(ns "$tag" "$i")" ssh -F "$dir/ssh_config" -o ConnectTimeout=2 \
      "$addr" true </dev/null 2>&1); do
    if ((SECONDS >= deadline)); then
      echo "netns-cluster: sshd on node $i ($addr:22, namespace $(ns "$tag" "$i")) accepts no" \
        "login after 10 s; the last attempt: ${err:-(no message)}; the end of its log" \
        "$dir/sshd-$i.log:" >&2
      tail -n 15 "$dir/sshd-$i.log" >&2 || true
      return 1
    fi
    sleep 0.05  # the interval between login attempts
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
  slow)
    # Both ends of the node's veth: its own eth0 limits what it sends, the bridge's end what it
    # receives. A bucket of 64 kB and 50 ms of queue: bursts cannot hide the rate.
    tc -n "$(ns "$1" "$2")" qdisc replace dev eth0 root tbf rate "$3" burst 64kb latency 50ms
    tc -n "$(sw "$1")" qdisc replace dev "s$2" root tbf rate "$3" burst 64kb latency 50ms ;;
  unslow)
    tc -n "$(ns "$1" "$2")" qdisc del dev eth0 root 2>/dev/null || true
    tc -n "$(sw "$1")" qdisc del dev "s$2" root 2>/dev/null || true ;;
  down) down "$1" ;;
  sshd) sshd_up "$@" ;;
  check)
    probe="ddp-probe-$$"
    if [[ $(id -u) -eq 0 ]] && ip netns add "$probe" 2>/dev/null; then
      ip netns del "$probe"
      exit 0
    fi
    exit 77 ;;
  check-sshd)
    if [[ -x /usr/sbin/sshd ]] && command -v ssh-keygen >/dev/null && command -v ssh >/dev/null; then
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
  *) sed -n '2,21p' "$0"; exit 2 ;;
esac
