#!/usr/bin/env python3
"""A real Slurm on this machine: starts munged, slurmctld and slurmd (Debian's packages) as a
one-node CPU cluster in a temporary directory, submits the project's own sbatch template
(slurm/shardinfer.sbatch) and checks the consolidated result against an mpirun run of the same
work; then the time-limit path: SIGUSR1 to the batch script (what --signal=B:USR1@120 sends)
makes the ranks drain, the script requeues the job, and the second start resumes into the same
file; and a job array over a 4-file set (slurm/submit_array.sh) whose merge step gives the result
of one run over the list. Shuts everything down whatever happens. Needs root (munged and slurmd run as root here).

Usage: slurm_test.py --shardinfer BIN --dir WORK --cluster-dir DIR (the cluster tests' sets)
"""

import argparse
import os
import shutil
import signal
import socket
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
import cluster  # noqa: E402  (same_files, mpi_env)

SKIP = 77


def fail(msg):
    sys.exit(f"FAIL: {msg}")


class Slurm:
    def __init__(self, work):
        self.dir = work
        self.procs = []
        self.env = dict(cluster.mpi_env(), SLURM_CONF=os.path.join(work, "slurm.conf"))

    def start(self):
        d = self.dir
        for sub in ("state", "spool", "log"):
            os.makedirs(os.path.join(d, sub), exist_ok=True)
        key = os.path.join(d, "munge.key")
        with open(key, "wb") as f:
            f.write(os.urandom(1024))
        os.chmod(key, 0o400)
        sock = os.path.join(d, "munge.sock")
        self.run(["munged", "--force", "--socket", sock, "--key-file", key, "--pid-file",
                  os.path.join(d, "munged.pid"), "--log-file", os.path.join(d, "log", "munged.log"),
                  "--seed-file", os.path.join(d, "munge.seed")])
        host = socket.gethostname().split(".")[0]
        port = 20000 + os.getpid() % 20000  # apart from any other cluster on the machine
        conf = f"""ClusterName=sitest
SlurmctldHost={host}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket={sock}
StateSaveLocation={d}/state
SlurmdSpoolDir={d}/spool
SlurmctldPidFile={d}/slurmctld.pid
SlurmdPidFile={d}/slurmd.pid
SlurmctldLogFile={d}/log/slurmctld.log
SlurmdLogFile={d}/log/slurmd.log
SlurmctldPort={port}
SlurmdPort={port + 1}
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
ReturnToService=2
MpiDefault=pmix
NodeName={host} CPUs={os.cpu_count()} State=UNKNOWN
PartitionName=test Nodes={host} Default=YES MaxTime=INFINITE State=UP OverSubscribe=YES
"""
        with open(self.env["SLURM_CONF"], "w") as f:
            f.write(conf)
        self.run(["slurmctld", "-f", self.env["SLURM_CONF"]])
        self.run(["slurmd", "-f", self.env["SLURM_CONF"]])
        t = time.time()
        while time.time() - t < 60:
            p = subprocess.run(["sinfo", "-h", "-o", "%t"], capture_output=True, text=True,
                               env=self.env)
            if p.stdout.strip() == "idle":
                print(f"slurm: a one-node cluster on {host} is up ({time.time() - t:.1f} s)")
                return
            time.sleep(0.5)
        self.dump_logs()
        fail("the Slurm node did not become idle within 60 s")

    def run(self, cmd, **kw):
        p = subprocess.run(cmd, capture_output=True, text=True, env=self.env, timeout=60, **kw)
        if p.returncode != 0:
            self.dump_logs()
            fail(f"{' '.join(cmd)}: exit {p.returncode}: {p.stderr.strip()}")
        return p

    def dump_logs(self):
        for name in ("slurmctld.log", "slurmd.log", "munged.log"):
            path = os.path.join(self.dir, "log", name)
            if os.path.exists(path):
                print(f"--- {name} (end)")
                print("".join(open(path, errors="replace").readlines()[-15:]))

    def job_state(self, job):
        p = subprocess.run(["scontrol", "show", "job", str(job)], capture_output=True, text=True,
                           env=self.env)
        fields = dict(kv.split("=", 1) for kv in p.stdout.split() if "=" in kv)
        return fields.get("JobState", "?"), int(fields.get("Restarts", "0") or 0)

    def stop(self):
        subprocess.run(["scancel", "--user=root"], env=self.env, capture_output=True)
        for name in ("slurmd.pid", "slurmctld.pid", "munged.pid"):
            try:
                pid = int(open(os.path.join(self.dir, name)).read())
                os.kill(pid, signal.SIGTERM)
                for _ in range(50):
                    os.kill(pid, 0)
                    time.sleep(0.1)
                os.kill(pid, signal.SIGKILL)
            except (OSError, ValueError):
                pass


def sbatch(s, extra, run_args, wait):
    cmd = ["sbatch", "--parsable", "--nodes=1", "--ntasks-per-node=2", "--cpus-per-task=1",
           "--gpus-per-task=0", "--time=10", *extra, os.path.join(ROOT, "slurm", "shardinfer.sbatch"),
           *run_args]
    if wait:
        cmd.insert(1, "--wait")
    print("$", " ".join(cmd), flush=True)
    p = subprocess.run(cmd, capture_output=True, text=True, env=s.env, timeout=600)
    print(p.stdout, p.stderr)
    return p.returncode, p.stdout.strip().split(";")[0]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--shardinfer", required=True)
    ap.add_argument("--dir", required=True)
    ap.add_argument("--cluster-dir", required=True)
    a = ap.parse_args()
    if os.geteuid() != 0:
        print("slurm_test: needs root (munged and slurmd run as root here): skipped")
        sys.exit(SKIP)
    for tool in ("munged", "slurmctld", "slurmd", "sbatch"):
        if not shutil.which(tool):
            fail(f"{tool} is not installed (scripts/setup.sh installs munge, slurmctld, slurmd)")
    if os.path.isdir(a.dir):
        shutil.rmtree(a.dir)
    os.makedirs(a.dir)
    model = os.path.join(a.cluster_dir, "..", "e2e", "tiny.onnx")
    sset = os.path.join(a.cluster_dir, "set2000.h5")
    ref = os.path.join(a.dir, "mpirun.h5")
    common = ["--model", model, "--input", sset, "--batch", "4", "--chunk", "8"]
    p = subprocess.run(["mpirun", "-np", "2", a.shardinfer, "run", *common, "--output", ref,
                        "--quiet"], capture_output=True, text=True, env=cluster.mpi_env(),
                       timeout=300)
    if p.returncode != 0:
        fail(f"the mpirun reference run failed: {p.stderr[-500:]}")
    s = Slurm(os.path.join(a.dir, "slurm"))
    try:
        s.start()
        env_bin = {"SI_BIN": a.shardinfer}
        s.env.update(env_bin)
        # 1. the template, as a user submits it
        out = os.path.join(a.dir, "sbatch.h5")
        log = os.path.join(a.dir, "sbatch-%j.log")
        rc, job = sbatch(s, [f"--output={log}"], [*common, "--output", out], wait=True)
        text = open(log.replace("%j", job)).read()
        print(text[-1500:])
        if rc != 0:
            s.dump_logs()
            fail(f"sbatch --wait: exit {rc}")
        if "2 task(s) x 1 CPUs" not in text or "on 2 ranks" not in text:
            fail("the job did not run 2 ranks with 1 CPU each")
        cluster.same_files(ref, out)
        print("slurm: OK: sbatch slurm/shardinfer.sbatch == mpirun, bit for bit")

        # 2. the time-limit path: USR1 to the batch script, drain, requeue, resume
        out = os.path.join(a.dir, "requeue.h5")
        log = os.path.join(a.dir, "requeue-%j.log")
        rc, job = sbatch(s, [f"--output={log}"],
                         [*common, "--output", out, "--flush-interval", "0.05", "--schedule",
                          "static", "--test-slow-rank", "0:20"], wait=False)
        if rc != 0:
            fail("sbatch failed")
        t = time.time()
        while cluster.chunks_journaled(out) < 2000 and time.time() - t < 120:
            time.sleep(0.1)
        if cluster.chunks_journaled(out) < 2000:
            s.dump_logs()
            fail("the job never started writing")
        s.run(["scancel", "--signal=USR1", "--batch", job])
        print(f"slurm: sent USR1 to the batch script of job {job} (as --signal=B:USR1 does)")
        t = time.time()
        state, restarts, hurried = "?", 0, False
        while time.time() - t < 300:
            state, restarts = s.job_state(job)
            if state in ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL"):
                break
            if state == "PENDING" and restarts >= 1 and not hurried:
                # Slurm holds a requeued job for about two minutes before it may start again; a
                # test need not wait that long, but the node must be done with the first start
                time.sleep(10)
                s.run(["scontrol", "update", f"JobId={job}", "StartTime=now"])
                hurried = True
            time.sleep(0.5)
        text = open(log.replace("%j", job)).read()
        print(text[-2500:])
        if state != "COMPLETED" or restarts < 1:
            s.dump_logs()
            fail(f"job {job} ended {state} after {restarts} restarts; expected COMPLETED after a "
                 "requeue")
        for want in ("asking the ranks to stop", "requeueing to resume", "resuming", "[resumed]"):
            if want not in text:
                fail(f"the job's log does not say '{want}'")
        cluster.same_files(ref, out)
        print(f"slurm: OK: USR1 -> drained -> requeued ({restarts} restart) -> resumed into the "
              "same file")

        # 3. a job array of 4 tasks over a 4-file list, then the merge step
        class Dirs:
            dir = a.cluster_dir
        paths, lst = cluster.split_set(Dirs, [400, 600, 500, 500])
        whole = os.path.join(a.dir, "whole.h5")
        common_l = ["--model", model, "--input", lst, "--batch", "4"]
        p = subprocess.run(["mpirun", "-np", "2", a.shardinfer, "run", *common_l, "--output", whole,
                            "--quiet"], capture_output=True, text=True, env=cluster.mpi_env(),
                           timeout=300)
        if p.returncode != 0:
            fail(f"the mpirun run over the list failed: {p.stderr[-500:]}")
        out = os.path.join(a.dir, "array.h5")
        cmd = [os.path.join(ROOT, "slurm", "submit_array.sh"), "4", "--nodes=1",
               "--ntasks-per-node=2", "--cpus-per-task=1", "--gpus-per-task=0",
               f"--output={a.dir}/array-%A_%a.log", "--", *common_l, "--output", out]
        print("$", " ".join(cmd), flush=True)
        p = s.run(cmd)
        print(p.stdout.strip())
        merge_job = p.stdout.split()[-1]
        t = time.time()
        while time.time() - t < 300:
            state, _ = s.job_state(merge_job)
            if state in ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL"):
                break
            time.sleep(0.5)
        if state != "COMPLETED" or not os.path.exists(out):
            s.dump_logs()
            fail(f"the merge job ended {state}")
        wd, _ = cluster.read_all(whole)
        md, ma = cluster.read_all(out)
        cluster.same_datasets(wd, md, "the job array's merged result vs one run over the list")
        if int(ma["merged_parts"]) != 4 or os.path.exists(out + ".parts"):
            fail("not 4 parts merged, or the parts were left behind")
        print("slurm: OK: a job array of 4 tasks + the merge step == one run over the list")

        # 4. the scaling sweep script, 1 and 2 tasks, strong scaling
        out = os.path.join(a.dir, "sweep", "sweep.h5")
        os.makedirs(os.path.dirname(out))
        cmd = [os.path.join(ROOT, "slurm", "sweep.sh"), "--tasks", "1 2", "--per-node", "2",
               "--cpus-per-task=1", "--gpus-per-task=0", "--", *common, "--output", out]
        print("$", " ".join(cmd), flush=True)
        p = subprocess.run(cmd, capture_output=True, text=True, env=s.env, timeout=600)
        print(p.stdout[-1500:], p.stderr[-1500:])
        rows = [l.split(",") for l in p.stdout.splitlines() if l[:2] in ("1,", "2,")]
        if p.returncode != 0 or len(rows) != 2 or any(not r[3] for r in rows):
            fail("the sweep did not give a rate for 1 and 2 tasks")
        cluster.same_files(ref, os.path.join(a.dir, "sweep", "sweep_n2.h5"))
        print(f"slurm: OK: the sweep script ran 1 and 2 tasks: {rows}")
    finally:
        s.stop()


if __name__ == "__main__":
    main()
