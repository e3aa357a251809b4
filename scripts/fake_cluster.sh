#!/bin/bash
# fake_cluster.sh — several "nodes" on this one machine, each a Linux network + UTS namespace with its own
# host name (node0, node1, ...) and address, joined by a switch: so that mpirun really launches across nodes,
# OpenMPI really talks TCP between them (shared memory inside each), placement reads real host names, and the
# inter-node link can be slowed down or cut. Playbook: "5D parallelism" (tp inside a node, pp/dp across).
#
#   scripts/fake_cluster.sh up N [--slots S] [--link-rate R]   N nodes of S slots (default 4); R: tc rate of each
#                                                               node's link, both directions (e.g. 1gbit, 100mbit)
#   scripts/fake_cluster.sh down                                every namespace, link and file gone (idempotent)
#   scripts/fake_cluster.sh exec NODE CMD...                    run CMD inside node NODE (node0, node1, ...)
#   scripts/fake_cluster.sh link NODE up|down                   plug / unplug NODE's cable at the switch
#   scripts/fake_cluster.sh rate R|none                         change (or remove) the links' rate limit
#   scripts/fake_cluster.sh status
#
# The network, all inside namespaces this script creates (the host's own namespace is never touched: every
# `ip` and `tc` runs with -n <namespace>, and each veth pair is created inside a node and moved to the switch):
#
#   penta-node0 [eth0 10.77.0.1/24] ──veth── [n0] ┐
#   penta-node1 [eth0 10.77.0.2/24] ──veth── [n1] ┼─ br0 in penta-sw (a bridge with no address, no uplink)
#   ...                                           ┘
#
# Each node has only its loopback and its 10.77.0.0/24 address and no default route, so nothing it sends can
# leave the fake cluster (a packet to any other address fails with "network unreachable"). A node's host name
# lives in its UTS namespace (a bind-mounted file in the state folder). PENTA_CLUSTER (default "penta") names the
# cluster: namespaces penta-node0 ..., penta-sw, state folder /run/penta-cluster, which also holds:
#   hostfile   "node0 slots=S" per node, for mpirun --hostfile
#   agent      what OpenMPI's --mca plm_rsh_agent runs instead of ssh: "agent [ssh options] HOST CMD..." runs
#              CMD inside HOST's namespaces (scripts/fake_cluster_agent.sh)
#   env        shell lines for mpirun's options (PENTA_CLUSTER_MPI_OPTS): the agent, and OpenMPI's TCP
#              transports kept on eth0 (btl_tcp_if_include, oob_tcp_if_include)
# mpirun itself must run inside node0 (its daemons on the other nodes call back to it over the switch):
#   scripts/fake_cluster.sh exec node0 mpirun $PENTA_CLUSTER_MPI_OPTS --hostfile /run/penta-cluster/hostfile ...
# `make run-cluster` does all of this (chapter 09 on 2 nodes x 4 ranks). Needs root and namespace support;
# refuses clearly without. Test: tests/09_5d/cluster_test.sh.
set -euo pipefail

NAME=${PENTA_CLUSTER:-penta}        # two clusters of different names can be up at once (the test uses its own)
[[ "$NAME" =~ ^[a-z][a-z0-9]{0,15}$ ]] || { echo "fake_cluster.sh: PENTA_CLUSTER '$NAME' must be 1-16 of a-z, 0-9" >&2; exit 2; }
STATE=/run/$NAME-cluster
SW=$NAME-sw
SUBNET=10.77.0
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)

die() { echo "fake_cluster.sh: $*" >&2; exit 2; }
ns_of() { echo "$NAME-$1"; }  # node0 -> penta-node0

nodes_up() {  # the nodes that exist now, in order
    local n
    for n in $(ip netns list 2>/dev/null | awk '{print $1}' | grep "^$NAME-node[0-9]*\$" | sort -V); do echo "${n#"$NAME"-}"; done
}

# the rate limit: a token bucket on both ends of each node's cable (node -> switch and switch -> node);
# burst: 1 ms at the rate, at least 64 KiB (tbf needs a bucket larger than one segment)
set_rate() {
    local rate=$1 n i
    for n in $(nodes_up); do
        i=${n#node}
        tc -n "$(ns_of "$n")" qdisc del dev eth0 root 2>/dev/null || true
        tc -n $SW qdisc del dev "n$i" root 2>/dev/null || true
        [ "$rate" = none ] && continue
        tc -n "$(ns_of "$n")" qdisc add dev eth0 root tbf rate "$rate" burst "$BURST" latency 100ms
        tc -n $SW qdisc add dev "n$i" root tbf rate "$rate" burst "$BURST" latency 100ms
    done
}

burst_for() {  # bytes in 1 ms at rate $1 (tc's units: kbit, mbit, gbit, bit), at least 65536
    local r=$1 num unit bits
    num=${r%%[a-zA-Z]*}; unit=${r#"$num"}
    [[ "$num" =~ ^[0-9]+$ ]] || die "--link-rate $r: a number and a tc unit (e.g. 1gbit, 100mbit, 500kbit)"
    case "$unit" in
        bit) bits=$num ;; kbit) bits=$((num * 1000)) ;; mbit) bits=$((num * 1000000)) ;;
        gbit) bits=$((num * 1000000000)) ;; *) die "--link-rate $r: unit '$unit' must be one of bit, kbit, mbit, gbit" ;;
    esac
    local b=$((bits / 8 / 1000))
    echo $((b < 65536 ? 65536 : b))
}

down() {
    local n ns pids f
    for ns in $(ip netns list 2>/dev/null | awk '{print $1}' | grep -E "^$NAME-(node[0-9]+|sw)\$" || true); do
        # the processes this cluster runs (mpirun, orted, ranks): asked to stop, then killed
        pids=$(ip netns pids "$ns" 2>/dev/null || true)
        if [ -n "$pids" ]; then
            kill -TERM $pids 2>/dev/null || true
            for _ in 1 2 3 4 5 6 7 8 9 10; do
                pids=$(ip netns pids "$ns" 2>/dev/null || true)
                [ -z "$pids" ] && break
                sleep 0.2
            done
            [ -n "$pids" ] && kill -KILL $pids 2>/dev/null || true
        fi
        ip netns del "$ns" 2>/dev/null || true  # a node's deletion takes its veth pair with it
    done
    if [ -d "$STATE" ]; then
        for f in "$STATE"/*.uts; do
            [ -e "$f" ] || continue
            umount "$f" 2>/dev/null || true
            rm -f "$f"
        done
        rm -f "$STATE/hostfile" "$STATE/agent" "$STATE/env"
        rmdir "$STATE" 2>/dev/null || true
    fi
}

check_left() {  # prints what is left of the cluster, nothing when clean
    ip netns list 2>/dev/null | awk '{print $1}' | grep -E "^$NAME-(node[0-9]+|sw)\$" | sed 's/^/namespace /' || true
    [ -e "$STATE" ] && echo "folder $STATE" || true
}

up() {
    local N=$1 slots=$2 rate=$3 i ns
    [[ "$N" =~ ^[0-9]+$ ]] && [ "$N" -ge 1 ] && [ "$N" -le 200 ] || die "up $N: the number of nodes must be in 1..200"
    [[ "$slots" =~ ^[0-9]+$ ]] && [ "$slots" -ge 1 ] || die "--slots $slots must be an integer >= 1"
    [ "$rate" = none ] || BURST=$(burst_for "$rate")
    [ "$(id -u)" = 0 ] || die "needs root (network namespaces, veth pairs, bind mounts): run as root or skip"
    for t in ip tc unshare nsenter; do command -v $t >/dev/null || die "needs '$t' (iproute2, util-linux)"; done
    down  # idempotent: whatever an earlier `up` left is replaced
    trap 'echo "fake_cluster.sh: up failed; taking down what it built" >&2; down' ERR
    trap 'echo "fake_cluster.sh: up interrupted; taking down what it built" >&2; down; exit 130' INT TERM HUP
    ip netns add $SW 2>/dev/null || { down; die "cannot create a network namespace (ip netns add): namespaces are not permitted here (a container without CAP_SYS_ADMIN?)"; }
    mkdir -p "$STATE"
    ip -n $SW link set lo up
    ip -n $SW link add br0 type bridge
    ip -n $SW link set br0 up
    for i in $(seq 0 $((N - 1))); do
        ns=$(ns_of "node$i")
        ip netns add "$ns"
        ip -n "$ns" link set lo up
        # IPv4 only; and TCP gives up on a segment nobody acknowledges after 5 retries (about 12 s) instead of
        # the kernel's 15 (about 15 min): when a node's cable is cut, mpirun's order to kill its ranks cannot be
        # delivered, and mpirun would wait that long before it declares the node lost and exits
        nsenter --net="/run/netns/$ns" sysctl -qw net.ipv6.conf.all.disable_ipv6=1 net.ipv6.conf.default.disable_ipv6=1 \
            net.ipv4.tcp_retries2=5
        ip -n "$ns" link add eth0 type veth peer name "n$i" netns $SW  # born in the node, its peer moved to the switch
        ip -n $SW link set "n$i" master br0
        ip -n $SW link set "n$i" up
        ip -n "$ns" addr add "$SUBNET.$((i + 1))/24" dev eth0
        ip -n "$ns" link set eth0 up
        touch "$STATE/node$i.uts"
        unshare --uts="$STATE/node$i.uts" hostname "node$i" \
            || { down; die "cannot create a UTS namespace (unshare --uts): namespaces are not permitted here"; }
        echo "node$i slots=$slots" >>"$STATE/hostfile"
    done
    [ "$rate" = none ] || set_rate "$rate"
    sed "s|^NAME=.*|NAME=$NAME|" "$HERE/fake_cluster_agent.sh" >"$STATE/agent"  # this cluster's name baked in
    chmod +x "$STATE/agent"
    # OpenMPI's options: launch through the agent; its TCP transport and its daemons' out-of-band channel on the
    # nodes' eth0 only (lo would "reach" a rank of another node at 127.0.0.1, its own loopback); a short TCP
    # keepalive on the daemons' channel, so that mpirun notices a daemon whose cable is cut in about 16 s (10 s
    # idle, then 3 unanswered probes 2 s apart), not 15 minutes: a job whose watchdog fired (--comm-timeout)
    # and called MPI_Abort then ends too (a shorter one would kill the job before the watchdog names the ranks)
    cat >"$STATE/env" <<EOF
PENTA_CLUSTER_MPI_OPTS="--hostfile $STATE/hostfile --mca plm_rsh_agent $STATE/agent --mca btl_tcp_if_include eth0 --mca oob_tcp_if_include eth0 --mca oob_tcp_keepalive_time 10 --mca oob_tcp_keepalive_intvl 2 --mca oob_tcp_keepalive_probes 3"
EOF
    trap - ERR INT TERM HUP
    # every node reaches node0 (one ping, where ping is installed): the cluster works before mpirun needs it
    command -v ping >/dev/null && for i in $(seq 1 $((N - 1))); do
        nsenter --net="/run/netns/$(ns_of "node$i")" ping -c 1 -W 2 "$SUBNET.1" >/dev/null \
            || { down; die "node$i cannot reach node0 ($SUBNET.1) over the switch"; }
    done
    echo "fake cluster up: $N node(s) x $slots slots, link rate ${rate}; hostfile $STATE/hostfile; mpirun options in $STATE/env"
}

exec_in() {
    local node=$1; shift
    [ -e "/run/netns/$(ns_of "$node")" ] && [ -e "$STATE/$node.uts" ] \
        || die "exec $node: no such node (scripts/fake_cluster.sh up N first; nodes now: $(nodes_up | tr '\n' ' '))"
    exec nsenter --net="/run/netns/$(ns_of "$node")" --uts="$STATE/$node.uts" "$@"
}

cmd=${1:-}
shift || true
case "$cmd" in
    up)
        N=${1:-}; [ -n "$N" ] || die "usage: up N [--slots S] [--link-rate R]"; shift
        slots=4 rate=none
        while [ $# -gt 0 ]; do
            case "$1" in
                --slots) slots=${2:?--slots needs a value}; shift 2 ;;
                --link-rate) rate=${2:?--link-rate needs a value (e.g. 1gbit)}; shift 2 ;;
                *) die "up: unknown option '$1' (--slots S, --link-rate R)" ;;
            esac
        done
        up "$N" "$slots" "$rate" ;;
    down) down; left=$(check_left); [ -z "$left" ] || die "down left: $left" ;;
    exec) [ $# -ge 2 ] || die "usage: exec NODE CMD..."; exec_in "$@" ;;
    link)
        [ $# = 2 ] && [[ "$2" =~ ^(up|down)$ ]] || die "usage: link NODE up|down"
        [ -e "/run/netns/$(ns_of "$1")" ] || die "link $1: no such node"
        ip -n $SW link set "n${1#node}" "$2"
        # plugged back: every node forgets the addresses it failed to resolve while the cable was out (a FAILED
        # neighbour entry answers a new connection with "no route to host" for a while)
        if [ "$2" = up ]; then for n in $(nodes_up); do ip -n "$(ns_of "$n")" neigh flush dev eth0; done; fi ;;
    rate)
        [ $# = 1 ] || die "usage: rate R|none"
        [ "$1" = none ] || BURST=$(burst_for "$1")
        set_rate "$1" ;;
    status)
        for n in $(nodes_up); do
            printf '%s: %s %s\n' "$n" "$(ip -n "$(ns_of "$n")" -br addr show dev eth0 | awk '{print $2, $3}')" \
                "$(tc -n "$(ns_of "$n")" qdisc show dev eth0 | grep -o 'rate [^ ]*' || echo 'no rate limit')"
        done
        check_left | grep -q . || echo "no fake cluster" ;;
    *) die "usage: up N [--slots S] [--link-rate R] | down | exec NODE CMD... | link NODE up|down | rate R|none | status" ;;
esac
