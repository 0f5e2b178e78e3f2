#!/usr/bin/env python3
"""check-layers.py — the include graph of the project, checked against its layers.

Every quoted #include of every source file is resolved to the file it names (beside the including
file first, then under the include roots) and becomes an edge between two layers. The check fails
when an edge goes where the table LAYERS below does not allow it: up the stack, across from one
backend to the other, or into a layer's private headers (PUBLIC). A layer's forbidden system
headers (<mpi.h> in lib/, a CUDA header outside gpu_backend/) fail it too. The build enforces the
same rule with include paths (Makefile, "The layers"); this script also says *which* line is wrong
and checks the picture:

  scripts/check-layers.py             check the tree; exit 1 with one line per problem
  scripts/check-layers.py --dot       print the layer graph the includes make (Graphviz)
  scripts/check-layers.py --edges     print every cross-layer include, grouped by edge
  scripts/check-layers.py --table     print the layer table (markdown): folders, allowed layers, the
                                      Makefile's include paths, the includes each layer makes
  scripts/check-layers.py --root DIR  check another copy of the tree (run-tests.sh uses it to see
                                      that a wrong include really fails)

docs/architecture.md holds neither by hand: its line "<!-- the layers -->" becomes the picture
(--dot: the edges the includes make, tests/ aside, since they may include every layer) and the
table (--table) when `make docs` builds the site (scripts/doxygen-md-filter.py calls this script),
so they cannot go stale; the check fails when that line is missing.
"""
import argparse
import os
import re
import sys

# Layers, bottom first: name, folders, the layers it may include (besides itself), label.
LAYERS = [
    ("core", ["lib/core"], [], "core/\\nTensor, Device, Communicator,\\nCommLedger, SpanSink, RNG, options"),
    ("observe", ["lib/observe"], ["core"], "observe/\\nTimeline, memory ledger, α–β,\\nsimulated link, SVG"),
    ("io", ["lib/io"], ["core"], "io/\\nsafetensors"),
    ("parallel", ["lib/parallel"], ["core", "observe"], "parallel/\\nregion ops, parallel linears,\\nvocab-parallel units"),
    ("text", ["lib/text"], ["core"], "text/\\nGPT-2 BPE tokenizer"),
    ("model", ["lib/model"], ["core", "observe", "io", "parallel"], "model/\\nlayers, GPT, AdamW, data,\\ncheckpoints"),
    ("train", ["lib/train"], ["core", "observe", "io", "parallel", "text", "model"],
     "train/\\nrun plan, step report,\\ncheckpoint lifecycle, options"),
    ("cpu_backend", ["cpu_backend"], ["core", "observe"], "cpu_backend/\\nCpuDevice (OpenMP)"),
    ("mpi", ["mpi"], ["core"], "mpi/\\nMpiCommunicator"),
    ("gpu_backend", ["gpu_backend"], ["core", "mpi"], "gpu_backend/\\nCudaDevice, NcclCommunicator"),
    ("launcher", ["launcher"], ["core", "observe", "cpu_backend", "gpu_backend", "mpi"], "launcher/\\nrun_program, --backend, --comm"),
    ("lessons", ["lessons"], ["core", "observe", "io", "parallel", "text", "model", "launcher"], "lessons/\\nlesson.h, NN_name/main.cpp"),
    ("exercises", ["exercises"], ["core", "observe", "io", "parallel", "text", "model"],
     "exercises/\\nNN_name.cpp: one library body each"),
    ("tools", ["tools"], ["core", "observe", "io", "parallel", "text", "model", "train", "launcher", "mpi", "cpu_backend"], "tools/\\ntp_train, tp_preflight, tp_bench"),
    ("cuda_emu", ["tests/cuda_emu"], [], "tests/cuda_emu/\\nCUDA, cuBLAS, NCCL on the CPU"),
    ("tests", ["tests"], ["core", "observe", "io", "parallel", "text", "model", "train", "cpu_backend", "mpi", "gpu_backend", "launcher"],
     "tests/"),
]
LAYER_FOLDERS = {name: folders for name, folders, _, _ in LAYERS}
# What a layer shows the layers above it (tests see everything: they test the internals).
PUBLIC = {
    "cpu_backend": {"cpu_backend/cpu_device.h", "cpu_backend/cpu_direct.h"},
    "mpi": {"mpi/mpi_communicator.h", "mpi/mpi_util.h", "mpi/mpi_wait.h"},
    "gpu_backend": {"gpu_backend/gpu_entry.h"},
    "launcher": {"launcher/launcher.h"},
}
# System headers a layer must not include: only the layers that talk MPI or CUDA may.
MPI_HEADERS = {"mpi.h"}
CUDA_HEADERS = {"cuda_runtime.h", "cublas_v2.h", "nccl.h", "cuda_bf16.h", "cuda.h", "library_types.h"}
# oneDNN (the CPU's optional bf16 GEMM) stays inside cpu_backend/onednn_gemm.cpp's layer.
ONEDNN_HEADERS = {"dnnl.hpp", "dnnl.h"}
FORBIDDEN = {
    "core": MPI_HEADERS | CUDA_HEADERS, "observe": MPI_HEADERS | CUDA_HEADERS, "io": MPI_HEADERS | CUDA_HEADERS, "text": MPI_HEADERS | CUDA_HEADERS,
    "parallel": MPI_HEADERS | CUDA_HEADERS, "model": MPI_HEADERS | CUDA_HEADERS,
    "train": MPI_HEADERS | CUDA_HEADERS,
    "cpu_backend": MPI_HEADERS | CUDA_HEADERS, "mpi": CUDA_HEADERS, "launcher": CUDA_HEADERS,
    "lessons": MPI_HEADERS | CUDA_HEADERS, "exercises": MPI_HEADERS | CUDA_HEADERS, "tools": CUDA_HEADERS,  # tp_bench times bare MPI calls
}
for _layer in ("core", "observe", "io", "text", "parallel", "model", "train", "mpi", "gpu_backend", "launcher", "lessons", "exercises", "tools"):
    FORBIDDEN[_layer] = FORBIDDEN.get(_layer, set()) | ONEDNN_HEADERS
# The CPU's BLAS and OpenMP stay in cpu_backend/ (and launcher/node.cpp's thread count): lib/ asks
# the device, tools/tp_bench the CPU backend's cpu_direct.h (its direct sgemm, its thread count).
BLAS_OMP_HEADERS = {"cblas.h", "omp.h"}
for _layer in ("core", "observe", "io", "text", "parallel", "model", "train", "mpi", "lessons", "exercises", "tools"):
    FORBIDDEN[_layer] = FORBIDDEN[_layer] | BLAS_OMP_HEADERS
# Where a quoted include that is not beside its file is looked for (the -I roots of the build).
ROOTS = ["lib", "cpu_backend", "mpi", "gpu_backend", "launcher", "lessons", "tests", "tests/cuda_emu/include"]
SOURCES = (".h", ".cpp", ".cu", ".cuh")
INCLUDE = re.compile(r'^\s*#\s*include\s*([<"])([^>"]+)[>"]')


def layer_of(path):
    """The layer of a file (relative path), the most specific folder first; outside every layer,
    its folder ("lib/lesson"), which may include nothing."""
    best = None
    for name, folders, _, _ in LAYERS:
        for f in folders:
            if (path + "/").startswith(f + "/") and (best is None or len(f) > len(best[1])):
                best = (name, f)
    return best[0] if best else os.path.dirname(path)


def resolve(root, src, target):
    """The relative path `#include "target"` in `src` names, or a list of candidates."""
    beside = os.path.normpath(os.path.join(os.path.dirname(src), target))
    if os.path.isfile(os.path.join(root, beside)):
        return beside
    found = [os.path.normpath(os.path.join(r, target)) for r in ROOTS
             if os.path.isfile(os.path.join(root, r, target))]
    return found[0] if len(found) == 1 else found


def scan(root):
    """[(src, line number, kind, target, resolved)] for every include of every source file."""
    out = []
    for top in sorted({f.split("/")[0] for _, folders, _, _ in LAYERS for f in folders}):
        for dirpath, _, files in os.walk(os.path.join(root, top)):
            for fn in sorted(files):
                if not fn.endswith(SOURCES):
                    continue
                src = os.path.relpath(os.path.join(dirpath, fn), root)
                with open(os.path.join(root, src), encoding="utf-8") as fh:
                    for n, line in enumerate(fh, 1):
                        m = INCLUDE.match(line)
                        if m:
                            kind, target = m.groups()
                            out.append((src, n, kind, target, resolve(root, src, target) if kind == '"' else None))
    return out


def check(root):
    """(problems, edges): edges maps (from layer, to layer) to the includes that make it."""
    allowed = {name: set(deps) for name, _, deps, _ in LAYERS}
    allowed["tests"] |= {name for name, *_ in LAYERS}
    problems, edges = [], {}
    for src, n, kind, target, dst in scan(root):
        here = layer_of(src)
        where = f"{src}:{n}: #include {'<' if kind == '<' else chr(34)}{target}{'>' if kind == '<' else chr(34)}"
        if kind == "<":
            if os.path.basename(target) in FORBIDDEN.get(here, set()):
                who = ("cpu_backend/ may (the optional oneDNN GEMM)" if target in ONEDNN_HEADERS else
                       "cpu_backend/ and launcher/ may; tools/ ask "
                       "cpu_backend/cpu_direct.h" if os.path.basename(target) in BLAS_OMP_HEADERS else
                       f"the layers that talk {'MPI' if target in MPI_HEADERS else 'CUDA'} may")
                problems.append(f"{where}: {here} must not include <{target}> (only {who})")
            continue
        if isinstance(dst, list):
            problems.append(f"{where}: " + ("names no file of the project" if not dst else
                            "is ambiguous: " + ", ".join(dst) + " (give two headers of different layers different names)"))
            continue
        there = layer_of(dst)
        if there == here:
            continue
        edges.setdefault((here, there), []).append(f"{src}:{n} → {dst}")
        if there not in allowed.get(here, set()):
            problems.append(f"{where}: {here} may not include {there} ({dst}); {here} may include "
                            f"{', '.join(sorted(allowed.get(here, ()))) or 'nothing outside itself'}")
        elif here != "tests" and there in PUBLIC and dst not in PUBLIC[there]:
            problems.append(f"{where}: {dst} is private to {there}; the layers above see only "
                            f"{', '.join(sorted(PUBLIC[there]))}")
    return problems, edges


def pictured(edges):
    """The edges the picture shows: all but the tests' (tests/ may include every layer)."""
    return {e: w for e, w in edges.items() if e[0] not in ("tests", "cuda_emu")}


def dot(edges):
    """The layer graph as Graphviz, bottom layers at the bottom."""
    edges = pictured(edges)
    label = {name: text for name, _, _, text in LAYERS}
    used = sorted({a for a, _ in edges} | {b for _, b in edges}, key=[n for n, *_ in LAYERS].index)
    lines = ["digraph layers {", "  rankdir=TB;  // a layer above the layers it includes",
             '  node [shape=box, style="rounded,filled", fillcolor="#f4f4f4", fontname="Helvetica", fontsize=10];',
             '  edge [color="#666666", arrowsize=0.7];',
             '  subgraph cluster_lib { label="lib/ (no MPI, no CUDA)"; fontname="Helvetica"; fontsize=10; color="#999999";']
    for n in used:
        if LAYER_FOLDERS[n][0].startswith("lib/"):
            lines.append(f'    {n} [label="{label[n]}"];')
    lines.append("  }")
    for n in used:
        if not LAYER_FOLDERS[n][0].startswith("lib/"):
            lines.append(f'  {n} [label="{label[n]}"];')
    for a, b in sorted(edges, key=lambda e: ([n for n, *_ in LAYERS].index(e[0]), e[1])):
        lines.append(f"  {a} -> {b};")
    lines.append("}")
    return "\n".join(lines)


# The include paths the Makefile gives each layer's sources (its INC_* variables): the build's half
# of the rule, which refuses a wrong include at compile time.
MAKE_INC = {"core": "INC_LIB", "observe": "INC_LIB", "io": "INC_LIB", "parallel": "INC_LIB", "text": "INC_LIB",
            "model": "INC_LIB", "train": "INC_LIB", "cpu_backend": "INC_CPU", "mpi": "INC_MPI",
            "gpu_backend": "INC_GPU", "launcher": "INC_LAUNCHER", "lessons": "INC_LESSON", "exercises": "INC_EXERCISE",
            "tools": "INC_TOOL", "tests": "INC_TEST"}
MARKER = "<!-- the layers -->"


def make_include_paths(root):
    """{INC_NAME: '-Ilib ...'} read from the Makefile."""
    paths = {}
    with open(os.path.join(root, "Makefile"), encoding="utf-8") as fh:
        for line in fh:
            m = re.match(r"^(INC_\w+)\s*:?=\s*(.*?)\s*$", line)
            if m:
                paths[m.group(1)] = m.group(2)
    return paths


def table(root, edges):
    """The layers as a markdown table, bottom first: folders, the layers each may include, the
    include paths the Makefile compiles it with, and the includes it makes into each other layer."""
    inc = make_include_paths(root)
    rows = ["| layer | folders | may include | compiled with | includes it makes (layer: count) |",
            "|---|---|---|---|---|"]
    for name, folders, deps, _ in LAYERS:
        made = sorted(((b, len(w)) for (a, b), w in edges.items() if a == name),
                      key=lambda e: [n for n, *_ in LAYERS].index(e[0]))
        rows.append("| {} | {} | {} | {} | {} |".format(
            name, ", ".join(f"`{f}/`" for f in folders),
            "every layer" if name == "tests" else (", ".join(deps) or "nothing"),
            f"`{inc[MAKE_INC[name]]}`" if MAKE_INC.get(name) in inc else "its own flags (Makefile)",
            ", ".join(f"{b}: {n}" for b, n in made) or "none"))
    return "\n".join(rows)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--root", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
    ap.add_argument("--dot", action="store_true")
    ap.add_argument("--edges", action="store_true")
    ap.add_argument("--table", action="store_true")
    args = ap.parse_args()
    problems, edges = check(args.root)
    if args.dot:
        print(dot(edges))
        return 0
    if args.table:
        print(table(args.root, edges))
        return 0
    if args.edges:
        for (a, b), where in sorted(edges.items()):
            print(f"{a} -> {b}  ({len(where)} includes)")
            for w in where:
                print(f"    {w}")
        return 0
    arch = os.path.join(args.root, "docs/architecture.md")
    if os.path.isfile(arch) and MARKER not in open(arch, encoding="utf-8").read().splitlines():
        problems.append(f"docs/architecture.md lacks the line {MARKER}, where make docs draws the layers")
    for p in problems:
        print(f"✗ {p}")
    if problems:
        return 1
    files = len({src for (src, *_) in scan(args.root)})
    print(f"✓ layers: {files} files, {sum(len(w) for w in edges.values())} includes across "
          f"{len(edges)} layer edges, none the wrong way")
    return 0


if __name__ == "__main__":
    sys.exit(main())
