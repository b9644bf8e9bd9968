#!/usr/bin/env python3
"""Checks shardinfer result files (layout in io/result.h) from the test suite and by hand:

  check_results.py compare A.h5 B.h5
      A and B must agree exactly on /ids, /index, /status and /topk_class and within 1e-6 on
      /topk_prob: a run on 1 rank and on 4 ranks, or on CPU and GPU with the same model, must
      classify every image the same way. Prints the first difference.

  check_results.py verify R.h5 --input S.h5 [--expect-status INDEX=CODE ...]
                                            [--expect-status-file expected_status.txt]
      R must be a complete, well-formed answer for the packed image set S: every input index
      exactly once and in order, ids copied from /images/ids, statuses as expected (0 where not
      listed), top-k probabilities of ok images sorted descending in (0, 1] with a sum <= 1,
      and failed images with class -1 and probability 0.

Exits 0 with an "OK" line, or 1 with one line saying what is wrong (2 for usage errors).
"""

import argparse
import sys

import h5py
import numpy as np

PROB_TOL = 1e-6
SUM_TOL = 1e-5
DATASETS = ("ids", "index", "status", "topk_class", "topk_prob")


class Failure(Exception):
    pass


def read_strings(ds):
    return [v.decode("utf-8") if isinstance(v, bytes) else str(v) for v in ds[()]]


def read_result(path):
    try:
        f = h5py.File(path, "r")
    except OSError as e:
        raise Failure("%s: cannot open as HDF5 (%s)" % (path, e))
    with f:
        missing = [d for d in DATASETS if d not in f]
        if missing:
            raise Failure("%s: missing dataset(s) %s" % (path, ", ".join("/" + d for d in missing)))
        r = {
            "ids": read_strings(f["ids"]),
            "index": f["index"][()],
            "status": f["status"][()],
            "topk_class": f["topk_class"][()],
            "topk_prob": f["topk_prob"][()],
            "err_index": f["errors/index"][()] if "errors/index" in f else None,
            "err_msg": read_strings(f["errors/message"]) if "errors/message" in f else None,
        }
        expect_types = {"index": np.uint64, "status": np.int32, "topk_class": np.int32,
                        "topk_prob": np.float32}
        for name, t in expect_types.items():
            if r[name].dtype != t:
                raise Failure("%s: /%s is %s, expected %s" % (path, name, r[name].dtype,
                                                             np.dtype(t).name))
    n = len(r["ids"])
    if r["index"].shape != (n,) or r["status"].shape != (n,):
        raise Failure("%s: /index %s and /status %s must have shape (%d,) like /ids"
                      % (path, r["index"].shape, r["status"].shape, n))
    if r["topk_class"].ndim != 2 or r["topk_class"].shape[0] != n:
        raise Failure("%s: /topk_class has shape %s, expected (%d, K)" % (path, r["topk_class"].shape, n))
    if r["topk_prob"].shape != r["topk_class"].shape:
        raise Failure("%s: /topk_prob %s and /topk_class %s differ in shape"
                      % (path, r["topk_prob"].shape, r["topk_class"].shape))
    return r


def compare(a_path, b_path, ignore_ids=False):
    a, b = read_result(a_path), read_result(b_path)
    if len(a["ids"]) != len(b["ids"]):
        raise Failure("row counts differ: %s has %d, %s has %d"
                      % (a_path, len(a["ids"]), b_path, len(b["ids"])))
    if a["topk_class"].shape != b["topk_class"].shape:
        raise Failure("top-k shapes differ: %s vs %s" % (a["topk_class"].shape, b["topk_class"].shape))
    for i, (x, y) in enumerate(zip(a["ids"], b["ids"])):
        if x != y and not ignore_ids:
            raise Failure("/ids differ at row %d: %r vs %r" % (i, x, y))
    for name in ("index", "status"):
        diff = np.nonzero(a[name] != b[name])[0]
        if diff.size:
            i = int(diff[0])
            raise Failure("/%s differs at row %d (id %r): %s vs %s (%d rows differ)"
                          % (name, i, a["ids"][i], a[name][i], b[name][i], diff.size))
    diff = np.nonzero(np.any(a["topk_class"] != b["topk_class"], axis=1))[0]
    if diff.size:
        i = int(diff[0])
        raise Failure("/topk_class differs at row %d (id %r): %s vs %s, probs %s vs %s "
                      "(%d rows differ)" % (i, a["ids"][i], a["topk_class"][i].tolist(),
                                            b["topk_class"][i].tolist(),
                                            a["topk_prob"][i].tolist(), b["topk_prob"][i].tolist(),
                                            diff.size))
    dp = np.abs(a["topk_prob"].astype(np.float64) - b["topk_prob"].astype(np.float64))
    # NaN must count as a difference, which a plain > comparison would miss.
    bad = ~(dp <= PROB_TOL)
    rows = np.nonzero(np.any(bad, axis=1))[0]
    if rows.size:
        i = int(rows[0])
        j = int(np.nonzero(bad[i])[0][0])
        raise Failure("/topk_prob differs at row %d (id %r) rank %d: %.9g vs %.9g (|diff| %.3g > %g;"
                      " %d rows differ)" % (i, a["ids"][i], j, a["topk_prob"][i, j],
                                           b["topk_prob"][i, j], dp[i, j], PROB_TOL, rows.size))
    print("compare: OK: %s and %s agree on %d rows, k=%d (max |dprob| %.3g)"
          % (a_path, b_path, len(a["ids"]), a["topk_class"].shape[1],
             float(dp.max()) if dp.size else 0.0))


def parse_expectations(pairs, status_file, input_ids):
    """{row index: expected status}. The file form maps ids (as make_e2e_set.py writes them:
    relative/path<TAB>status) to their index in the input set."""
    want = {}
    for p in pairs or []:
        try:
            k, v = p.split("=", 1)
            want[int(k)] = int(v)
        except ValueError:
            print("check_results: --expect-status wants INDEX=CODE, got %r" % p, file=sys.stderr)
            sys.exit(2)
    if status_file:
        pos = {s: i for i, s in enumerate(input_ids)}
        with open(status_file, encoding="utf-8") as f:
            for ln, line in enumerate(f, 1):
                line = line.rstrip("\n")
                if not line or line.startswith("#"):
                    continue
                try:
                    ident, code = line.rsplit("\t", 1)
                    code = int(code)
                except ValueError:
                    raise Failure("%s:%d: expected 'id<TAB>status'" % (status_file, ln))
                if ident not in pos:
                    raise Failure("%s:%d: id %r is not in the input set" % (status_file, ln, ident))
                want[pos[ident]] = code
    return want


def verify(r_path, s_path, pairs, status_file):
    r = read_result(r_path)
    # /errors lists exactly the failed images, in index order, each with a message
    if r["err_index"] is None or r["err_msg"] is None:
        raise Failure("%s: missing /errors/index or /errors/message" % r_path)
    failed = np.nonzero(r["status"] != 0)[0]
    if list(r["err_index"]) != list(failed):
        raise Failure("%s: /errors/index %s does not list the failed images %s"
                      % (r_path, list(r["err_index"])[:10], list(failed)[:10]))
    if any(not m for m in r["err_msg"]):
        raise Failure("%s: an entry of /errors/message is empty" % r_path)
    try:
        with h5py.File(s_path, "r") as f:
            input_ids = read_strings(f["images/ids"])
    except (OSError, KeyError) as e:
        raise Failure("%s: cannot read /images/ids (%s)" % (s_path, e))
    n = len(input_ids)
    want = parse_expectations(pairs, status_file, input_ids)
    bad_idx = [k for k in want if not 0 <= k < n]
    if bad_idx:
        raise Failure("expected status given for index %d, but the input has %d images" % (bad_idx[0], n))

    idx = r["index"]
    counts = np.bincount(idx[idx < n].astype(np.int64), minlength=n) if n else np.zeros(0, int)
    if np.any(idx >= n):
        i = int(np.nonzero(idx >= n)[0][0])
        raise Failure("row %d has index %d, beyond the %d input images" % (i, idx[i], n))
    if np.any(counts == 0):
        raise Failure("input index %d is missing from the result (%d of %d missing)"
                      % (int(np.nonzero(counts == 0)[0][0]), int(np.sum(counts == 0)), n))
    if np.any(counts > 1):
        raise Failure("input index %d appears %d times in the result"
                      % (int(np.nonzero(counts > 1)[0][0]), int(counts.max())))
    if len(r["ids"]) != n:
        raise Failure("result has %d rows, input has %d images" % (len(r["ids"]), n))
    out_of_order = np.nonzero(idx != np.arange(n, dtype=np.uint64))[0]
    if out_of_order.size:
        i = int(out_of_order[0])
        raise Failure("rows are not in input order: row %d has index %d" % (i, idx[i]))
    for i, (got, exp) in enumerate(zip(r["ids"], input_ids)):
        if got != exp:
            raise Failure("row %d: id %r, but the input's /images/ids[%d] is %r" % (i, got, i, exp))

    status, cls, prob = r["status"], r["topk_class"], r["topk_prob"]
    for i in range(n):
        exp = want.get(i, 0)
        if int(status[i]) != exp:
            raise Failure("row %d (%s): status %d, expected %d" % (i, input_ids[i], status[i], exp))
    ok = status == 0
    k = cls.shape[1]
    for i in np.nonzero(ok)[0]:
        p, c = prob[i].astype(np.float64), cls[i]
        where = "row %d (%s)" % (i, input_ids[i])
        if not np.all((p > 0) & (p <= 1)):
            raise Failure("%s: top-k probabilities %s not all in (0, 1]" % (where, p.tolist()))
        if np.any(np.diff(p) > 0):
            raise Failure("%s: top-k probabilities %s not sorted descending" % (where, p.tolist()))
        if p.sum() > 1 + SUM_TOL:
            raise Failure("%s: top-k probabilities sum to %.9g > 1" % (where, p.sum()))
        if np.any(c < 0) or len(set(c.tolist())) != k:
            raise Failure("%s: top-k classes %s must be distinct and >= 0" % (where, c.tolist()))
    for i in np.nonzero(~ok)[0]:
        if np.any(cls[i] != -1) or np.any(prob[i] != 0):
            raise Failure("row %d (%s): failed with status %d but has classes %s, probs %s "
                          "(expected -1 and 0)" % (i, input_ids[i], status[i], cls[i].tolist(),
                                                   prob[i].tolist()))
    print("verify: OK: %s covers all %d images of %s (%d ok, %d failed as expected), k=%d"
          % (r_path, n, s_path, int(ok.sum()), int((~ok).sum()), k))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    c = sub.add_parser("compare", help="two result files must agree")
    c.add_argument("a")
    c.add_argument("b")
    c.add_argument("--ignore-ids", action="store_true",
                   help="ids may differ (layouts without an ids dataset use the index)")
    v = sub.add_parser("verify", help="a result file must be a complete answer for its input")
    v.add_argument("result")
    v.add_argument("--input", required=True, help="the packed image set the run read")
    v.add_argument("--expect-status", action="append", metavar="INDEX=CODE",
                   help="expected non-zero status of an input index (repeatable)")
    v.add_argument("--expect-status-file", metavar="FILE",
                   help="lines 'id<TAB>status' (make_e2e_set.py's expected_status.txt)")
    args = ap.parse_args()
    try:
        if args.cmd == "compare":
            compare(args.a, args.b, args.ignore_ids)
        else:
            verify(args.result, args.input, args.expect_status, args.expect_status_file)
    except Failure as e:
        print("check_results %s: FAIL: %s" % (args.cmd, e))
        sys.exit(1)


if __name__ == "__main__":
    main()
