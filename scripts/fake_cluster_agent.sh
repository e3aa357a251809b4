#!/bin/bash
# fake_cluster_agent.sh — OpenMPI's remote-shell agent for the fake cluster (scripts/fake_cluster.sh): where
# mpirun would run `ssh HOST orted ...`, `--mca plm_rsh_agent <this>` makes it run `<this> HOST orted ...`, and
# this script runs the command inside HOST's network and UTS namespaces (penta-HOST, and the host name file in
# the cluster's state folder) instead of logging in. Like ssh, it joins the command's words and hands them to a
# shell (OpenMPI quotes its orted command line for that). Leading ssh-style options (-x, -T, ...) are ignored.
#   scripts/fake_cluster.sh up 2 installs a copy as /run/penta-cluster/agent (its NAME= line the cluster's).
set -euo pipefail
NAME=penta  # the cluster's name (PENTA_CLUSTER), set in the copy `up` writes
STATE=/run/$NAME-cluster
while [ $# -gt 0 ] && [ "${1#-}" != "$1" ]; do shift; done
host=${1:?usage: agent HOST CMD...}
shift
[ -e "/run/netns/$NAME-$host" ] && [ -e "$STATE/$host.uts" ] \
    || { echo "fake_cluster_agent.sh: no node '$host' in the fake cluster (scripts/fake_cluster.sh up N)" >&2; exit 255; }
exec nsenter --net="/run/netns/$NAME-$host" --uts="$STATE/$host.uts" /bin/sh -c "$*"
