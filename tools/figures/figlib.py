"""tools/figures/figlib.py — what every figure module shares: the Figure record, the Context a figure is built in
(the binaries, a scratch folder, runs of the chapters' programs under mpirun, the C++ formulas), the house style
and saving a figure with the JSON of its numbers.

A figure module is tools/figures/chNN_<topic>.py with a list FIGURES = [Figure(name, ch, build, source)];
build(ctx) returns (fig, data): a matplotlib Figure and a JSON-able dict of every number drawn (the series,
the parameters, the command that produced them; for run-based figures also ctx.machine()).
make_figures.py finds the modules, builds, saves to docs/figures/<name>.png and <name>.json, and with --check
compares the JSON of the formula/planner figures with the committed one.

Numbers never come from Python arithmetic on formulas: ctx.formulas() asks build/bin/formula_dump, which calls
common/formulas.hpp and 09_5d/planner.hpp (tools/figures/formula_dump.cpp). Keep a formula's points in the JSON
as ctx.series(queries) ({"queries", "values"}): the test recomputes a sample of every such series.
"""
import datetime
import json
import os
import platform
import shlex
import subprocess
import tempfile
from dataclasses import dataclass
from typing import Callable

import matplotlib

matplotlib.use("Agg")  # no display: files only
import matplotlib.pyplot as plt  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SOURCES = ("formula", "planner", "run")

# ---- house style: one size, one dpi, one palette per kind of memory ----------------------------------------
FIGSIZE = (10.0, 5.6)  # inches; at DPI 110: 1100 x 616 pixels
DPI = 110
KIND_COLORS = {"params": "#4c72b0", "grads": "#dd8452", "master": "#8c8c8c", "optim": "#55a868",
               "activations": "#c44e52", "comm": "#8172b2"}
plt.rcParams.update({"font.size": 10, "axes.titlesize": 11, "axes.grid": True, "grid.alpha": 0.3,
                     "axes.spines.top": False, "axes.spines.right": False, "legend.fontsize": 9,
                     "figure.titlesize": 12})


@dataclass
class Figure:
    name: str                       # docs/figures/<name>.png and .json
    ch: str                         # "01" ... "11" (04 and 05 share the module of "04")
    build: Callable                 # build(ctx) -> (matplotlib Figure, JSON-able dict)
    source: str = "formula"         # formula | planner | run: --check regenerates formula and planner figures

    def __post_init__(self):
        if self.source not in SOURCES:
            raise ValueError(f"Figure {self.name}: source {self.source!r} is not one of {SOURCES}")


def new_figure(title, section, ncols=1, nrows=1, **kw):
    """A figure in the house style; the title names the playbook section it illustrates."""
    fig, axes = plt.subplots(nrows, ncols, figsize=kw.pop("figsize", FIGSIZE), dpi=DPI, squeeze=False, **kw)
    fig.suptitle(f"{title}\n(playbook: {section})")
    return fig, axes


def GiB(b):
    return b / 2**30


def MiB(b):
    return b / 2**20


def save(name, fig, data, out):
    """Writes out/<name>.png and out/<name>.json (sorted keys, one stable text: the check compares it)."""
    os.makedirs(out, exist_ok=True)
    fig.tight_layout()  # room for the suptitle and every axis title
    fig.savefig(os.path.join(out, name + ".png"), dpi=DPI, bbox_inches="tight")
    plt.close(fig)
    with open(os.path.join(out, name + ".json"), "w") as f:
        f.write(dumps(data))


def dumps(data):
    return json.dumps(data, indent=1, sort_keys=True) + "\n"


def default_mpirun():
    """$MPIRUN as the Makefile exports it; else the Makefile's own flags (root needs --allow-run-as-root, more
    ranks than cores --oversubscribe, one BLAS thread per rank)."""
    env = os.environ.get("MPIRUN")
    if env:
        return shlex.split(env)
    cmd = ["mpirun"] + (["--allow-run-as-root"] if os.geteuid() == 0 else [])
    return cmd + ["--oversubscribe", "--bind-to", "none", "-x", "OPENBLAS_NUM_THREADS=1", "-x", "OMP_NUM_THREADS=1"]


def openblas_core():
    """OpenBLAS's kernel for this CPU (OPENBLAS_CORETYPE overrides it), as the library itself names it."""
    try:
        import ctypes
        lib = ctypes.CDLL("libopenblas.so.0")
        lib.openblas_get_corename.restype = ctypes.c_char_p
        return lib.openblas_get_corename().decode()
    except (OSError, AttributeError):
        return os.environ.get("OPENBLAS_CORETYPE", "unknown")


class RunError(RuntimeError):
    pass


class Context:
    """What a figure's build(ctx) may use. bin: the folder of the built programs; tmp: a scratch folder."""

    def __init__(self, bin_dir, tmp=None):
        self.bin = os.path.abspath(bin_dir)
        self.tmp = tmp or tempfile.mkdtemp(prefix="penta-figures-")
        self.mpirun = default_mpirun()
        self._n = 0
        self._machine = None

    def program(self, name):
        path = os.path.join(self.bin, name)
        if not os.access(path, os.X_OK):
            raise RunError(f"{path}: not built (make figures builds it; or `make {path}`)")
        return path

    def run(self, np, program, args, jsonl=True, timeout=300):
        """Runs `$MPIRUN -np np bin/program args [--log-jsonl F]`; returns (records, stdout, command) where records
        are the JSONL lines parsed (rank 0's log) and command the string to put in a figure's JSON."""
        self._n += 1
        args = [str(a) for a in args]
        log = os.path.join(self.tmp, f"run{self._n}.jsonl")
        cmd = self.mpirun + ["--mca", "mpi_yield_when_idle", "1", "-np", str(np), self.program(program)] + args
        if jsonl:
            cmd += ["--log-jsonl", log]
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
        shown = f"mpirun -np {np} build/bin/{program} {' '.join(args)}".strip()
        if p.returncode != 0:
            raise RunError(f"{shown} exited {p.returncode}:\n{p.stdout[-2000:]}\n{p.stderr[-2000:]}")
        records = []
        if jsonl and os.path.exists(log):
            with open(log) as f:
                records = [json.loads(line) for line in f if line.strip()]
        return records, p.stdout, shown

    def formulas(self, queries):
        """Each query a dict {"fn": ..., args}; the answers of build/bin/formula_dump in order (a list for a list,
        one answer for one dict)."""
        one = isinstance(queries, dict)
        qs = [queries] if one else list(queries)
        p = subprocess.run([self.program("formula_dump")], input=json.dumps(qs), capture_output=True, text=True)
        if p.returncode != 0:
            raise RunError(f"formula_dump: {p.stderr.strip()}")
        out = json.loads(p.stdout)
        return out[0] if one else out

    def series(self, queries):
        """A formula series: {"queries": [...], "values": [...]}, one answer of formula_dump per query. Every such
        dict in a figure's JSON is recomputed, a sample of its points, by tests/tooling/figures_test.sh: draw from
        its "values"."""
        qs = list(queries)
        return {"queries": qs, "values": self.formulas(qs)}

    def machine(self):
        """Where a run-based figure was measured: CPU model, cores, the OpenBLAS kernel, the date (UTC)."""
        if self._machine is None:
            cpu = platform.processor()
            try:
                with open("/proc/cpuinfo") as f:
                    cpu = next((l.split(":", 1)[1].strip() for l in f if l.startswith("model name")), cpu)
            except OSError:
                pass
            self._machine = {"cpu": cpu, "cores": os.cpu_count(), "blas_kernel": openblas_core(),
                             "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d")}
        return self._machine
