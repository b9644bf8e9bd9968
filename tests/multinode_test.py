#!/usr/bin/env python3
"""Ranks that do not share a host: two "nodes" made of network namespaces (own hostname, own
address, joined by a bridge), mpirun launching its daemons into them through an agent that
enters the namespace (tests/ns_agent.sh), ranks talking TCP. Checks that node-local rank
detection sees 2 nodes of 2 ranks, that dynamic scheduling (one-sided atomics over TCP), the
streaming gather and the parallel writer give the single-node result bit for bit, and that a
SIGTERM to every rank drains and --resume completes across the nodes. Removes the namespaces
and the bridge whatever happens. Needs root (network namespaces).

Usage: multinode_test.py --shardinfer BIN --cluster-dir DIR (the cluster tests' sets)
"""

import argparse
import os
import re
import signal
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import cluster  # noqa: E402

NODES, PER_NODE = 2, 2
NET = "10.77.0"


def ip(*args, ns=None, check=True):
    cmd = (["ip", "netns", "exec", ns] if ns else []) + ["ip", *args]
    p = subprocess.run(cmd, capture_output=True, text=True)
    if check and p.returncode != 0:
        cluster.fail(f"{' '.join(cmd)}: {p.stderr.strip()}")


def setup():
    teardown()
    ip("link", "add", "br-si", "type", "bridge")
    ip("addr", "add", f"{NET}.1/24", "dev", "br-si")
    ip("link", "set", "br-si", "up")
    for k in range(NODES):
        ns = f"si-node{k}"
        ip("netns", "add", ns)
        ip("link", "add", f"veth-si{k}", "type", "veth", "peer", "name", "eth0", "netns", ns)
        ip("link", "set", f"veth-si{k}", "master", "br-si", "up")
        ip("addr", "add", f"{NET}.{10 + k}/24", "dev", "eth0", ns=ns)
        ip("link", "set", "eth0", "up", ns=ns)
        ip("link", "set", "lo", "up", ns=ns)
    print(f"multinode: {NODES} namespaces {NET}.10-{NET}.{9 + NODES} on bridge br-si")


def teardown():
    for k in range(NODES):
        ip("netns", "del", f"si-node{k}", check=False)
        ip("link", "del", f"veth-si{k}", check=False)
    ip("link", "del", "br-si", check=False)


def env():
    e = cluster.mpi_env()
    e.update(OMPI_MCA_plm_rsh_agent=os.path.join(HERE, "ns_agent.sh"),
             OMPI_MCA_plm_rsh_no_tree_spawn="1",
             OMPI_MCA_oob_tcp_if_include=f"{NET}.0/24", OMPI_MCA_btl_tcp_if_include=f"{NET}.0/24",
             OMPI_MCA_btl="self,vader,tcp", OMPI_MCA_pml="ob1", OMPI_MCA_osc="pt2pt,rdma,sm")
    return e


def mpirun(a, out, *extra, popen=False):
    hosts = ",".join(f"{NET}.{10 + k}:{PER_NODE}" for k in range(NODES))
    cmd = ["mpirun", "-np", str(NODES * PER_NODE), "--host", hosts, a.shardinfer, "run",
           "--model", os.path.join(a.cluster_dir, "..", "e2e", "tiny.onnx"), "--input",
           os.path.join(a.cluster_dir, "set2000.h5"), "--output", out, "--batch", "4",
           "--chunk", "8", "--progress", "none", *extra]
    print("$", " ".join(cmd), flush=True)
    if popen:
        return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                env=env())
    p = subprocess.run(cmd, capture_output=True, text=True, env=env(), timeout=300)
    print(p.stdout[-1500:], p.stderr[-1500:])
    return p


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--shardinfer", required=True)
    ap.add_argument("--cluster-dir", required=True)
    a = ap.parse_args()
    if os.geteuid() != 0:
        print("multinode_test: needs root (network namespaces): skipped")
        sys.exit(77)
    work = os.path.join(a.cluster_dir, "multinode")
    os.makedirs(work, exist_ok=True)
    ref = os.path.join(work, "one_node.h5")
    p = subprocess.run(["mpirun", "-np", "2", a.shardinfer, "run", "--model",
                        os.path.join(a.cluster_dir, "..", "e2e", "tiny.onnx"), "--input",
                        os.path.join(a.cluster_dir, "set2000.h5"), "--output", ref, "--batch", "4",
                        "--chunk", "8", "--quiet", "--overwrite"], capture_output=True, text=True,
                       env=cluster.mpi_env(), timeout=300)
    if p.returncode != 0:
        cluster.fail(f"the one-node reference failed: {p.stderr[-500:]}")
    try:
        setup()
        for writer in ("gather", "parallel"):
            out = os.path.join(work, f"two_nodes_{writer}.h5")
            p = mpirun(a, out, "--verbose", "--writer", writer, "--overwrite")
            if p.returncode != 0:
                cluster.fail(f"the two-node run failed (exit {p.returncode})")
            seen = set(re.findall(r"rank (\d+) of 4 on host (si-node\d): node-local rank (\d) of "
                                  r"(\d)", p.stderr))
            hosts = {h for _, h, _, _ in seen}
            if len(seen) != 4 or hosts != {"si-node0", "si-node1"} or any(
                    int(size) != PER_NODE for _, _, _, size in seen):
                cluster.fail(f"node-local ranks wrong: {sorted(seen)}")
            for h in sorted(hosts):
                print(f"multinode: {h}: node-local ranks "
                      f"{sorted(int(l) for _, hh, l, _ in seen if hh == h)} of {PER_NODE}")
            cluster.same_files(ref, out)
            print(f"multinode: OK: 4 ranks on 2 nodes, --writer {writer} == one node")
        # SIGTERM on both nodes mid-run, then --resume across them
        out = os.path.join(work, "two_nodes_resumed.h5")
        cluster.clean(out)
        p = mpirun(a, out, "--flush-interval", "0.05", "--schedule", "static",
                   "--test-slow-rank", "0:20", "--drain-timeout", "20", "--overwrite", popen=True)
        t = time.time()
        while cluster.chunks_journaled(out) < 2000 and time.time() - t < 60:
            time.sleep(0.05)
        pids = [int(x) for x in subprocess.run(["pgrep", "-x", "-f", f"\\S*shardinfer run .*{out}.*"],
                                               capture_output=True, text=True).stdout.split()]
        pids = [x for x in pids if open(f"/proc/{x}/comm").read().strip() == "shardinfer"]
        if len(pids) != NODES * PER_NODE:
            p.kill()
            cluster.fail(f"found {len(pids)} rank processes, expected {NODES * PER_NODE}")
        for pid in pids:
            os.kill(pid, signal.SIGTERM)
        so, se = p.communicate(timeout=120)
        print(se[-800:])
        if p.returncode != 6:
            cluster.fail(f"SIGTERM on both nodes: exit {p.returncode}, expected 6")
        cluster.wait_gone(pids)
        p = mpirun(a, out, "--resume")
        if p.returncode != 0 or "[resumed]" not in p.stdout:
            cluster.fail("--resume across the two nodes failed")
        cluster.same_files(ref, out)
        print("multinode: OK: SIGTERM on both nodes drained, --resume completed the same file")
    finally:
        teardown()


if __name__ == "__main__":
    main()
