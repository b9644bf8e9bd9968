#!/usr/bin/env python3
"""The scaling figures of docs/performance.md, from the output directory of bench/scaling.sh:

  bench/plot_perf.py RESULTS_DIR [--out docs/img] [--metric images_per_s] [--rank 0]

writes (each only when its input is there):
  scaling_throughput.png  images/s against GPUs: shardinfer strong and weak, the PyTorch peer,
                          and the ideal linear lines (scaling.csv)
  scaling_efficiency.png  images/s at G over G times images/s at 1 GPU, per kind (scaling.csv)
  stages.png              each rank's busy share per stage, for every GPU count (stages.csv)
  timeline_gG.png         one rank's stages batch by batch, one lane per stage (timeline_gG.csv,
                          or timeline_gG.csv.rankR, one file per rank)
  gather.png              NCCL vs host-MPI gather bandwidth (gather.csv)

--metric picks shardinfer's rate: images_per_s (the whole mpirun command, as the peer is timed:
the default), si_images_per_s (shardinfer's own elapsed time, from start-up), or
steady_images_per_s (after each rank's first chunk). The peer always has its whole-command rate.
Needs matplotlib only (Agg backend: no display).
"""
import argparse
import csv
import glob
import os
import re
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402 (after the backend is chosen)

KINDS = {"strong": ("shardinfer, strong scaling", "tab:blue", "o"),
         "weak": ("shardinfer, weak scaling", "tab:green", "s"),
         "peer": ("PyTorch peer (strong)", "tab:red", "^")}
STAGE_ORDER = ["read", "decode", "upload_compute", "compute", "in_flight", "post", "write", "starved"]
STAGE_COLORS = {"read": "tab:gray", "decode": "tab:orange", "upload_compute": "tab:blue",
                "compute": "tab:blue", "in_flight": "tab:cyan", "post": "tab:purple",
                "write": "tab:green",
                "starved": "tab:red"}


def read_csv(path):
    if not os.path.exists(path):
        return None
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def num(v):
    try:
        return float(v)
    except (TypeError, ValueError):
        return None


def machine_label(results):
    """'2 x NVIDIA H200' from scaling.sh's machine.txt, or ''."""
    path = os.path.join(results, "machine.txt")
    if not os.path.exists(path):
        return ""
    names = re.findall(r"^GPU \d+: (.+?) \(UUID", open(path, errors="replace").read(), re.M)
    return f"{len(names)} x {names[0]}" if names else ""


def series(rows, kind, metric):
    """[(gpus, rate)] of one kind, sorted, skipping failed or skipped runs."""
    col = "images_per_s" if kind == "peer" else metric
    pts = {}
    for r in rows:
        if r["kind"] == kind and num(r.get(col)) and r.get("rc", "0") == "0":
            pts[int(r["gpus"])] = num(r[col])
    return sorted(pts.items())


def gpu_axis(ax, gpus):
    ax.set_xscale("log", base=2)
    ax.set_xticks(gpus)
    ax.set_xticklabels([str(g) for g in gpus])
    ax.set_xlabel("GPUs")
    ax.grid(True, which="major", alpha=0.3)


def plot_scaling(rows, metric, label, out):
    made = []
    data = {k: series(rows, k, metric) for k in KINDS}
    gpus = sorted({g for s in data.values() for g, _ in s})
    if not gpus:
        print("plot_perf: scaling.csv has no successful run")
        return made
    what = {"images_per_s": "whole command", "si_images_per_s": "shardinfer's own time",
            "steady_images_per_s": "steady state"}.get(metric, metric)
    fig, ax = plt.subplots(figsize=(7, 4.8))
    for k, s in data.items():
        if not s:
            continue
        name, color, marker = KINDS[k]
        ax.plot([g for g, _ in s], [v for _, v in s], marker=marker, color=color, label=name)
        if k != "peer":  # ideal: the smallest count's rate per GPU, times the GPUs
            g0, v0 = s[0]
            ax.plot(gpus, [v0 * g / g0 for g in gpus], linestyle="--", color=color, alpha=0.5,
                    label=f"ideal ({k})")
        for g, v in s:
            ax.annotate(f"{v:,.0f}", (g, v), textcoords="offset points", xytext=(4, 4),
                        fontsize=7, color=color)
    gpu_axis(ax, gpus)
    ax.set_ylim(bottom=0)
    ax.set_ylabel(f"images/s ({what})")
    ax.set_title("Throughput against GPUs" + (f", {label}" if label else ""))
    ax.legend(fontsize=8)
    fig.tight_layout()
    made.append(save(fig, out, "scaling_throughput.png"))

    fig, ax = plt.subplots(figsize=(7, 4.2))
    top = 1.1
    for k, s in data.items():
        if not s:
            continue
        name, color, marker = KINDS[k]
        g0, v0 = s[0]
        eff = [(g, v * g0 / (g * v0)) for g, v in s]
        top = max(top, max(e for _, e in eff) * 1.1)
        ax.plot([g for g, _ in eff], [100 * e for _, e in eff], marker=marker, color=color,
                label=name)
        for g, e in eff:
            ax.annotate(f"{100 * e:.0f}%", (g, 100 * e), textcoords="offset points",
                        xytext=(4, 4), fontsize=7, color=color)
    ax.axhline(100, color="black", linestyle="--", linewidth=1, alpha=0.6, label="ideal")
    gpu_axis(ax, gpus)
    ax.set_ylim(0, 100 * top)
    ax.set_ylabel("scaling efficiency, % (rate at G / (G x rate at 1))")
    ax.set_title("Scaling efficiency" + (f", {label}" if label else ""))
    ax.legend(fontsize=8)
    fig.tight_layout()
    made.append(save(fig, out, "scaling_efficiency.png"))
    return made


def plot_stages(rows, kind, label, out):
    rows = [r for r in rows if r["kind"] == kind]
    if not rows:
        print(f"plot_perf: stages.csv has no {kind} run")
        return []
    cols = [c for c in rows[0] if c.endswith("_pct")]
    cols.sort(key=lambda c: STAGE_ORDER.index(c[:-4]) if c[:-4] in STAGE_ORDER else 99)
    rows.sort(key=lambda r: (int(r["gpus"]), int(r["rank"])))
    n, w = len(rows), 0.8 / max(1, len(cols))
    fig, ax = plt.subplots(figsize=(min(16, max(7, 0.2 * n * len(cols) + 2)), 4.8))
    for j, c in enumerate(cols):
        st = c[:-4]
        ax.bar([i + (j - (len(cols) - 1) / 2) * w for i in range(n)],
               [num(r[c]) or 0 for r in rows], w, label=st,
               color=STAGE_COLORS.get(st, f"C{j}"))
    ax.set_xticks(range(n))
    ax.set_xticklabels([f"{r['gpus']} GPU{'s' if r['gpus'] != '1' else ''}\nrank {r['rank']}"
                        for r in rows], fontsize=7)
    for i in range(1, n):  # a line between GPU counts
        if rows[i]["gpus"] != rows[i - 1]["gpus"]:
            ax.axvline(i - 0.5, color="black", linewidth=0.8, alpha=0.4)
    top = max((num(r[c]) or 0) for r in rows for c in cols)
    ax.set_ylim(0, max(1, top) * 1.2)  # room for the legend above the bars
    ax.set_ylabel("busy, % of the rank's wall time")
    ax.set_title(f"Stage busy time per rank, {kind} scaling" + (f", {label}" if label else "")
                 + "\n(stages overlap: a rank's shares add up to more than 100%)", fontsize=10)
    ax.legend(fontsize=8, ncol=len(cols))
    ax.grid(True, axis="y", alpha=0.3)
    fig.tight_layout()
    return [save(fig, out, "stages.png")]


def plot_timeline(path, rank, label, out):
    # one file, or one per rank (FILE.rank0, FILE.rank1, ...: src/cli/run.c with several ranks)
    rows = [r for p in [path] + sorted(glob.glob(path + ".rank*")) for r in (read_csv(p) or [])]
    if not rows:
        print(f"plot_perf: {path} is empty")
        return []
    ranks = sorted({int(r["rank"]) for r in rows})
    if rank not in ranks:
        print(f"plot_perf: {path} has no rank {rank} (ranks {ranks}); rank {ranks[0]} drawn")
        rank = ranks[0]
    rows = [r for r in rows if int(r["rank"]) == rank]
    stages = sorted({r["stage"] for r in rows},
                    key=lambda s: STAGE_ORDER.index(s) if s in STAGE_ORDER else 99)
    batches = len({r["batch"] for r in rows})
    fig, ax = plt.subplots(figsize=(11, 0.55 * len(stages) + 1.8))
    end = 0.0
    for lane, st in enumerate(stages):
        bars = [(num(r["t0"]), num(r["t1"]), int(r["batch"])) for r in rows if r["stage"] == st]
        bars = [(a, b, k) for a, b, k in bars if a is not None and b is not None and b >= a]
        end = max([end] + [b for _, b, _ in bars])
        color = STAGE_COLORS.get(st, f"C{lane}")
        for parity in (0, 1):  # alternate shades, so neighbouring batches stay apart
            ax.broken_barh([(a, b - a) for a, b, k in bars if k % 2 == parity],
                           (lane - 0.38, 0.76), facecolors=color, alpha=0.9 if parity else 0.6,
                           edgecolors=color, linewidth=0.4)  # an edge: short bars stay visible
        busy = sum(b - a for a, b, _ in bars)
        ax.text(1.005, lane, f"{busy:.2f} s", transform=ax.get_yaxis_transform(), va="center",
                fontsize=7)
    ax.set_yticks(range(len(stages)))
    ax.set_yticklabels(stages)
    ax.invert_yaxis()
    ax.set_xlim(0, end * 1.01 if end > 0 else 1)
    ax.set_xlabel("seconds since the pipeline started")
    name = os.path.splitext(os.path.basename(path))[0]
    ax.set_title(f"Stage timeline, rank {rank} of {len(ranks)}-rank file {name}, {batches} batches"
                 + (f", {label}" if label else ""), fontsize=10)
    ax.grid(True, axis="x", alpha=0.3)
    fig.tight_layout()
    return [save(fig, out, f"{name}.png" if rank == 0 else f"{name}_rank{rank}.png")]


def plot_gather(rows, label, out):
    rows = [r for r in rows if num(r.get("gbps"))]
    if not rows:
        return []
    dims = sorted({int(r["dim"]) for r in rows})
    fig, axes = plt.subplots(1, len(dims), figsize=(5.5 * len(dims), 4.2), squeeze=False)
    for ax, d in zip(axes[0], dims):
        mine = [r for r in rows if int(r["dim"]) == d]
        for k, (m, g) in enumerate(sorted({(r["method"], int(r["ranks"])) for r in mine})):
            pts = sorted((int(r["rows_per_rank"]), num(r["gbps"]), r["ok"] == "1")
                         for r in mine if r["method"] == m and int(r["ranks"]) == g)
            ax.plot([p[0] for p in pts], [p[1] for p in pts],
                    marker="o" if m == "nccl" else "s", linestyle="-" if m == "nccl" else "--",
                    color=f"C{k}", label=f"{m}, {g} ranks")
            bad = [p for p in pts if not p[2]]
            if bad:
                ax.plot([p[0] for p in bad], [p[1] for p in bad], "rx", markersize=12,
                        label="result WRONG")
        ax.set_xscale("log", base=2)
        ax.set_xlabel("rows per rank")
        ax.set_ylim(bottom=0)
        ax.set_ylabel("GB/s (gathered bytes / median time)")
        ax.set_title(f"{d} floats per row", fontsize=10)
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=7)
    fig.suptitle("Gathering GPU rows to rank 0's host memory: NCCL vs D2H + MPI_Gatherv"
                 + (f", {label}" if label else ""), fontsize=10)
    fig.tight_layout()
    return [save(fig, out, "gather.png")]


def save(fig, out, name):
    path = os.path.join(out, name)
    fig.savefig(path, dpi=130)
    plt.close(fig)
    return path


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("results", help="bench/scaling.sh's output directory")
    ap.add_argument("--out", help="where the PNGs go (default: RESULTS)")
    ap.add_argument("--metric", default="images_per_s",
                    choices=["images_per_s", "si_images_per_s", "steady_images_per_s"])
    ap.add_argument("--rank", type=int, default=0, help="the rank whose timeline is drawn")
    ap.add_argument("--stage-kind", default="strong", choices=["strong", "weak"])
    ap.add_argument("--label", help="machine named in the titles (default: from machine.txt)")
    a = ap.parse_args()
    out = a.out or a.results
    os.makedirs(out, exist_ok=True)
    label = a.label if a.label is not None else machine_label(a.results)
    scaling = read_csv(os.path.join(a.results, "scaling.csv"))
    made = plot_scaling(scaling, a.metric, label, out) if scaling else []
    stages = read_csv(os.path.join(a.results, "stages.csv"))
    if stages:
        made += plot_stages(stages, a.stage_kind, label, out)
    timelines = {re.sub(r"\.rank\d+$", "", p)
                 for p in glob.glob(os.path.join(a.results, "timeline_g*.csv*"))}
    for path in sorted(timelines):
        made += plot_timeline(path, a.rank, label, out)
    gather = read_csv(os.path.join(a.results, "gather.csv"))
    if gather:
        made += plot_gather(gather, label, out)
    if not made:
        sys.exit(f"plot_perf: nothing to plot in {a.results}")
    for p in made:
        print(f"plot_perf: {p}")


if __name__ == "__main__":
    main()
