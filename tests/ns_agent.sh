#!/bin/sh
# mpirun's "ssh" for the multi-node test (tests/multinode_test.py): runs the command ORTE gives
# for host 10.77.0.1K inside network namespace si-nodeK, with its own hostname, as ssh would run
# it on that node: `ns_agent.sh [-x] HOST COMMAND...` (ORTE may pass ssh's -x first).
[ "$1" = "-x" ] && shift
host=$1
shift
k=${host##*.}
k=$((k - 10))
exec ip netns exec "si-node$k" unshare --uts sh -c "hostname si-node$k; $*"
