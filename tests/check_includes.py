#!/usr/bin/env python3
"""The include rules of docs/architecture.md, checked over every source file (of the tree given,
else this one): includes run one way
(io/ -> src/ -> cuda/ -> mpi/ along the data's path), the engine knows no JPEG and no rank, the
pipeline no CUDA and no MPI, and a backend's view of the engine (engine/backend.h) is for the
engine, the backends and tests. Exits 1 naming each include that breaks a rule."""
import os
import re
import sys

ROOT = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), ".."))
SOURCES = (".c", ".h", ".cu", ".cuh")
INCLUDE = re.compile(r'^\s*#\s*include\s*[<"]([^">]+)[">]', re.M)

# (folder the including file is in, what it may not include, why)
RULES = [
    ("io/", r"^(engine|pipeline|job|cli|post|cpu|decode)/|^cuda/|^mpi/|^mpi\.h$",
     "io/ reads files: it includes only base/ and io/"),
    ("src/engine/", r"^(io/(jpeg|yuv|jpeg_scan|source)\.h|decode/|pipeline/|job/|cli/|post/)|"
     r"^cuda/|^mpi/|^mpi\.h$",
     "the engine runs models: no decoder, no pipeline, no backend's own code, no ranks"),
    ("src/cpu/", r"^(decode|pipeline|job|cli)/|^cuda/|^mpi/|^mpi\.h$",
     "the CPU backend sees the engine only"),
    ("src/pipeline/", r"^cuda/|^mpi/|^mpi\.h$|^(job|cli)/|^engine/backend\.h$",
     "the pipeline knows no CUDA and no ranks (its hooks are the job's)"),
    ("src/decode/", r"^cuda/|^mpi/|^mpi\.h$|^(pipeline|job|cli)/|^engine/backend\.h$",
     "the decoders' interface knows no CUDA code, no ranks and no pipeline"),
    ("src/post/", r"^cuda/|^mpi/|^mpi\.h$|^(pipeline|job|cli|decode)/|^engine/backend\.h$",
     "postprocessing works on output rows"),
    ("src/job/", r"^engine/backend\.h$", "the job uses the engine through engine/engine.h"),
    ("src/cli/", r"^engine/backend\.h$", "the command line uses the engine through engine.h"),
    ("mpi/", r"^engine/backend\.h$|^cuda/", "ranks and messages: no backend"),
]


def main():
    bad = []
    n = 0
    for top in ("io", "src", "cuda", "mpi"):
        for d, _, files in os.walk(os.path.join(ROOT, top)):
            for f in sorted(files):
                if not f.endswith(SOURCES):
                    continue
                path = os.path.join(d, f)
                rel = os.path.relpath(path, ROOT)
                with open(path, encoding="utf-8", errors="replace") as fh:
                    text = fh.read()
                n += 1
                for inc in INCLUDE.findall(text):
                    for folder, pattern, why in RULES:
                        if rel.startswith(folder) and re.search(pattern, inc):
                            bad.append(f"{rel}: #include \"{inc}\": {why}")
    for b in bad:
        print(b)
    print(f"check_includes: {n} files, {len(bad)} include(s) against the rules")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
