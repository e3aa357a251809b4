#!/usr/bin/env python3
"""exercises.py — workshop exercises: write a student copy with solution regions blanked, and grade it.

The design card's "modify code in workshops, grade exercises via tests" (docs/INSTRUCTORS.md says how to
run a workshop with it). A solution region is a pair of comment lines in a chapter's source:

    // EXERCISE 02.1 begin: the ring all-reduce's two phases
    ...the solution...
    // EXERCISE 02.1 end

(an exercise may have several regions, e.g. a function's forward and its backward). Its grading is in
tests/exercises/NN_name.txt: the tests that cover it, its points, its minutes, a hint (format below).

    make exercises [CH=NN] [DIR=exercises]     python3 tools/exercises.py make [--ch NN] [--dir DIR]
    make grade CH=NN [DIR=exercises] [JSON=1]  python3 tools/exercises.py grade --ch NN [--dir DIR] [--json]
    make grade-all                             python3 tools/exercises.py sweep   (CI: every exercise)
                                               python3 tools/exercises.py check   (markers, catalogue, mutants)

`make` copies the working tree (git ls-files: tracked and untracked, not ignored) to DIR and replaces the
inside of every region of the chosen chapters (all by default) by a stub that compiles and throws
"exercise NN.k not done" (penta's FAIL: a doctest failure naming the rank, never a crash), keeping the two
marker lines so the student sees where to write. It drops the chapters' mutation catalogues
(tests/mutants/NN_*.txt quote solution lines) and writes DIR/EXERCISES.md, the hand-out.

`grade` first puts the instructor's tests/ back into DIR (a student's edited test cannot grade itself),
builds only the test binaries the chapter's exercises name in DIR (tests_NN and maybe tests_00: never a
later chapter's folder). The library common/ holds a later chapter's exercise (08.1),
and every test binary links it: for that build the regions of every chapter after NN are the instructor's
(a file holding only such regions is swapped whole, a file that also holds chapter NN's or an earlier
one's gets those regions swapped), and the student's files are put back right after it, even when
the build fails or grading is interrupted (a grade killed outright leaves them in DIR/.pentatron-grade-saved/,
which the next grade puts back first). So a half-written 11.1 cannot zero chapter 02. It then runs each
exercise's tests through scripts/run_tests.sh with PENTA_TEST_CASES (its test-case filters) and
PENTA_TEST_TIMEOUT (--timeout, default 300 s per run), so a stub that hangs is killed and counted as a
failure. An exercise passes when its runs pass at least one test and fail none.
It prints the score table (id, covering tests, pass/fail, points) and a total; --json prints one JSON
object instead. Exit status: 0 only for full marks, 1 otherwise, 2 when it could not grade (no DIR, a
build error of code outside any exercise...): a build error in the student's code scores 0 for all.

Catalogue tests/exercises/NN_name.txt, one stanza per exercise:
    ## 02.1: the ring all-reduce's two phases over send/recv
    minutes: 30
    points: 3
    test: tests_02 *ring all-reduce equals all_reduce*      (binary, doctest test-case filter; repeatable)
    files: 02_data_parallel/ring_all_reduce.cpp             (the files a student edits: its regions' files)
    hint: one line for the student (repeatable)
`check` holds `files:` to the files the exercise's markers are in. An exercise of a chapter in OWN_CHAPTER
(02, 04, 06, 07, 11) must be solved in its own chapter's folder (issue 31: an instructor hands out one
folder); the others are told where they are when outside (chapter 01's concept is common/ itself).
The ids of the markers and of the catalogue must be the same set; NN is the chapter's number. An exercise's
tests run its own code only, never another exercise's of its chapter: blanking one exercise must leave the
others at full marks (`sweep` checks it), so a test that runs two exercises' code grades neither.
Environment (as the Makefile passes it): BUILD, CUDA, MPI, DEBUG, ARCH, MPIRUN.
"""
import argparse
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

SRC = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BEGIN = re.compile(r"^(\s*)// EXERCISE (\d\d)\.(\d+) begin: (.+?)\s*$")
END = re.compile(r"^\s*// EXERCISE (\d\d)\.(\d+) end\s*$")
ANY = re.compile(r"EXERCISE \d\d\.\d+ (begin|end)")
SOURCE_EXT = (".cpp", ".hpp", ".cu", ".cuh", ".inc", ".h")


# chapters whose exercises are solved by editing the chapter's own folder only (issue 31's instructor check)
OWN_CHAPTER = ("02", "04", "06", "07", "11")


def die(msg, code=2):
    print(f"exercises: {msg}", file=sys.stderr)
    sys.exit(code)


MARK = ".pentatron-exercises"  # at the root of a student copy: the exercises it blanked


def is_student_copy(root):
    return os.path.isfile(os.path.join(root, MARK))


def tree_files(root):
    """the working tree as git sees it: tracked and untracked files, not the ignored ones. A student copy is
    no git checkout (make exercises copies files, not .git): there, every file but the build's and a grade's
    scratch"""
    r = subprocess.run(["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=root, capture_output=True)
    if r.returncode == 0 and not is_student_copy(root):
        return [f for f in r.stdout.decode().split("\0") if f and os.path.isfile(os.path.join(root, f))]
    if not is_student_copy(root):
        die(f"{root} is neither a git checkout of pentatron (git ls-files: "
            f"{r.stderr.decode().strip() or 'exit ' + str(r.returncode)}) nor a student copy ({MARK} missing)")
    out = []
    for d, dirs, names in os.walk(root):
        rel = os.path.relpath(d, root)
        dirs[:] = [x for x in dirs if not (rel == "." and x in ("build", ".git", SAVED))]
        out += [os.path.normpath(os.path.join(rel, n)) for n in names]
    return sorted(out)


# ---- markers ------------------------------------------------------------------------------------------

def find_regions(root, files=None):
    """{id: [(file, begin_line, end_line, indent, title)]} (1-based lines of the marker lines)"""
    regions = {}
    for f in files if files is not None else tree_files(root):
        if not f.endswith(SOURCE_EXT) or not (re.match(r"\d\d_", f) or f.startswith("common/")):
            continue
        with open(os.path.join(root, f), encoding="utf-8") as fh:
            lines = fh.read().split("\n")
        open_ = None
        for n, line in enumerate(lines, 1):
            b, e = BEGIN.match(line), END.match(line)
            if b:
                if open_:
                    die(f"{f}:{n}: exercise {b[2]}.{b[3]} begins inside exercise {open_[0]} (begun at line {open_[1]})")
                open_ = (f"{b[2]}.{b[3]}", n, b[1], b[4])
            elif e:
                eid = f"{e[1]}.{e[2]}"
                if not open_ or open_[0] != eid:
                    die(f"{f}:{n}: 'EXERCISE {eid} end' without its begin line"
                        + (f" (exercise {open_[0]} is open)" if open_ else ""))
                if n == open_[1] + 1:
                    die(f"{f}:{n}: exercise {eid}'s region is empty")
                regions.setdefault(eid, []).append((f, open_[1], n, open_[2], open_[3]))
                open_ = None
            elif ANY.search(line):
                die(f"{f}:{n}: a malformed exercise marker (the forms are '// EXERCISE NN.k begin: what it is' "
                    f"and '// EXERCISE NN.k end', each alone on its line): {line.strip()}")
        if open_:
            die(f"{f}:{open_[1]}: exercise {open_[0]} is never ended ('// EXERCISE {open_[0]} end')")
    return regions


# ---- the catalogue ------------------------------------------------------------------------------------

def read_catalogue(root):
    """{id: dict(id, chapter, title, minutes, points, tests [(binary, filter)], files [], hints [], where)}"""
    cat = {}
    folder = os.path.join(root, "tests", "exercises")
    if not os.path.isdir(folder):
        die(f"no catalogue folder {folder}")
    for name in sorted(os.listdir(folder)):
        if not re.match(r"\d\d_.*\.txt$", name):
            continue
        ch = name[:2]
        cur = None
        path = os.path.join("tests", "exercises", name)
        with open(os.path.join(folder, name), encoding="utf-8") as fh:
            for n, line in enumerate(fh.read().split("\n"), 1):
                where = f"{path}:{n}"
                if not line.strip() or line.startswith("# "):
                    continue
                m = re.match(r"## (\d\d)\.(\d+): (.+)$", line)
                if m:
                    eid = f"{m[1]}.{m[2]}"
                    if m[1] != ch:
                        die(f"{where}: exercise {eid} is in chapter {ch}'s catalogue (its number must start with {ch})")
                    if eid in cat:
                        die(f"{where}: exercise {eid} is listed twice (also {cat[eid]['where']})")
                    cur = cat[eid] = dict(id=eid, chapter=ch, title=m[3].strip(), minutes=0, points=0, tests=[],
                                          files=[], hints=[], where=where)
                    continue
                m = re.match(r"(minutes|points|test|files|hint): (.+)$", line)
                if not m or cur is None:
                    die(f"{where}: not understood (a stanza is '## NN.k: title', then 'minutes: N', 'points: N', "
                        f"'test: tests_NN FILTER', 'files: PATH ...', 'hint: ...'): {line}")
                key, val = m[1], m[2].strip()
                if key in ("minutes", "points"):
                    if not val.isdigit() or int(val) == 0:
                        die(f"{where}: {key} '{val}' must be a whole number > 0")
                    cur[key] = int(val)
                elif key == "test":
                    parts = val.split(None, 1)
                    if len(parts) != 2 or not re.match(r"tests_\d\d$", parts[0]):
                        die(f"{where}: 'test: {val}' must be 'test: tests_NN FILTER'")
                    if parts[0] not in (f"tests_{ch}", "tests_00"):
                        die(f"{where}: 'test: {val}': chapter {ch} is graded by tests_{ch} or tests_00 only "
                            "(grading a chapter never builds a later one)")
                    if "," in parts[1]:
                        die(f"{where}: 'test: {val}': doctest splits a filter at commas; use * instead")
                    cur["tests"].append((parts[0], parts[1]))
                elif key == "files":
                    cur["files"] += val.split()
                else:
                    cur["hints"].append(val)
        for e in cat.values():
            if e["chapter"] == ch:
                for key in ("minutes", "points"):
                    if not e[key]:
                        die(f"{e['where']}: exercise {e['id']} has no '{key}:' line")
                if not e["tests"]:
                    die(f"{e['where']}: exercise {e['id']} has no 'test:' line: nothing would grade it")
                if not e["files"]:
                    die(f"{e['where']}: exercise {e['id']} has no 'files:' line: the student is not told what to edit")
    return cat


def load(root):
    regions, cat = find_regions(root), read_catalogue(root)
    for eid in regions:
        if eid not in cat:
            f, b = regions[eid][0][:2]
            die(f"{f}:{b}: exercise {eid} has markers but no stanza in tests/exercises/{eid[:2]}_*.txt")
    for eid, e in cat.items():
        if eid not in regions:
            die(f"{e['where']}: exercise {eid} has no '// EXERCISE {eid} begin: ...' region in the sources")
    return regions, cat


def chapter_dirs(root):
    return {d[:2]: d for d in sorted(os.listdir(root)) if re.match(r"\d\d_", d) and os.path.isdir(os.path.join(root, d))}


# ---- make: the student copy ---------------------------------------------------------------------------

def stub_lines(eid, indent, title, tests):
    covered = "; ".join(f"{b} '{f}'" for b, f in tests)
    msg = f"exercise {eid} not done: {title}".replace("\\", "\\\\").replace('"', '\\"').replace("%", "%%")
    return [f"{indent}// TODO exercise {eid}: write this part (graded by {covered}; make grade CH={eid[:2]})",
            f'{indent}FAIL("{msg}");']


def make_copy(dest, chapters=None, only=None, with_build=None, force=False, quiet=False):
    regions, cat = load(SRC)
    chosen = sorted(e for e in cat if (only is None or e in only) and (chapters is None or cat[e]["chapter"] in chapters))
    if only is not None and set(only) - set(cat):
        die(f"no exercise {' '.join(sorted(set(only) - set(cat)))} in the catalogue (there are: {' '.join(sorted(cat))})")
    dest = os.path.abspath(dest)
    if os.path.realpath(dest) == os.path.realpath(SRC) or os.path.realpath(SRC).startswith(os.path.realpath(dest) + os.sep):
        die(f"DIR={dest} is the source tree or above it: choose another folder")
    if os.path.exists(dest) and os.listdir(dest):
        if not force:
            die(f"DIR={dest} exists and is not empty (a student's work?): remove it, or choose another DIR=")
        shutil.rmtree(dest)
    os.makedirs(dest, exist_ok=True)
    t0 = time.time()
    for f in tree_files(SRC):
        os.makedirs(os.path.join(dest, os.path.dirname(f)), exist_ok=True)
        shutil.copy2(os.path.join(SRC, f), os.path.join(dest, f))
    if with_build and os.path.isdir(with_build):
        # timestamps kept: only what a stub changes recompiles (the CI sweep's copies)
        subprocess.run(["cp", "-a", with_build, os.path.join(dest, "build")], check=True)
    by_file = {}
    for eid in chosen:
        for (f, b, e, indent, title) in regions[eid]:
            by_file.setdefault(f, []).append((b, e, eid, indent, title))
    for f, regs in by_file.items():
        path = os.path.join(dest, f)
        with open(path, encoding="utf-8") as fh:
            lines = fh.read().split("\n")
        for b, e, eid, indent, title in sorted(regs, reverse=True):  # bottom up: line numbers stay valid
            lines[b:e - 1] = stub_lines(eid, indent, title, cat[eid]["tests"])
        with open(path, "w", encoding="utf-8") as fh:
            fh.write("\n".join(lines))
    blanked_chapters = sorted({cat[e]["chapter"] for e in chosen})
    for ch in blanked_chapters:  # the mutation catalogues quote solution lines
        for name in os.listdir(os.path.join(dest, "tests", "mutants")) if os.path.isdir(os.path.join(dest, "tests", "mutants")) else []:
            if name.startswith(ch + "_") and name.endswith(".txt"):
                os.remove(os.path.join(dest, "tests", "mutants", name))
    with open(os.path.join(dest, MARK), "w") as fh:
        fh.write(" ".join(chosen) + "\n")
    write_handout(dest, chosen, regions, cat)
    if not quiet:
        print(f"exercises: wrote {dest} in {time.time() - t0:.0f} s: {len(chosen)} exercise(s) blanked"
              + (f" ({' '.join(chosen)})" if chosen else "") + f"; the hand-out is {dest}/EXERCISES.md")
        print(f"exercises: grade one chapter with: make grade CH=NN DIR={dest}")
    return chosen


def write_handout(dest, chosen, regions, cat):
    dirs = chapter_dirs(SRC)
    # the marker lines as they are in the copy (a stub is shorter than its solution: later lines move up)
    here = find_regions(dest, files=sorted({r[0] for eid in chosen for r in regions[eid]}))
    out = ["# Exercises", "",
           "Each exercise below is a region of the code replaced by a stub that fails with \"exercise NN.k not",
           "done\". Write the code between its two `EXERCISE` marker lines, then grade the chapter:", "",
           "```sh", "make grade CH=NN          # from the instructor's tree: make grade CH=NN DIR=<this folder>",
           "```", "", "Chapter NN's README explains what each exercise builds (its Exercises section).", ""]
    for eid in chosen:
        e = cat[eid]
        out += [f"## {eid}: {e['title']}  ({e['minutes']} min, {e['points']} points)", ""]
        out += [f"- where: " + ", ".join(f"`{f}` line {b}" for f, b, *_ in here.get(eid, regions[eid]))]
        out += [f"- graded by: " + "; ".join(f"`{b}` test cases `{f}`" for b, f in e["tests"])]
        out += [f"- chapter: {dirs.get(e['chapter'], e['chapter'])}/README.md"]
        out += [f"- hint: {h}" for h in e["hints"]] + [""]
    with open(os.path.join(dest, "EXERCISES.md"), "w", encoding="utf-8") as fh:
        fh.write("\n".join(out))


# ---- grade ----------------------------------------------------------------------------------------------

def make_opts(dest):
    opts = ["make", "-C", dest, f"-j{os.cpu_count() or 2}", "BUILD=build"]
    for v in ("CUDA", "MPI", "DEBUG", "ARCH"):
        if os.environ.get(v):
            opts.append(f"{v}={os.environ[v]}")
    return opts


def counts_of(log):
    m = None
    for m in re.finditer(r"^total: (\d+) passed, (\d+) failed, (\d+) skipped$", log, re.M):
        pass
    return tuple(int(x) for x in m.groups()) if m else None


def first_failure(log):
    # a run killed at the limit first: doctest's SIGTERM handler prints its own "FAILED:" line before the runner's
    for pat in (r"exercise \d\d\.\d+ not done[^\n\"]*", r"hung: [^\n]*", r"FAILED: [^\n]*", r"ERROR: [^\n]*"):
        m = re.search(pat, log)
        if m:
            return m.group(0)[:200]
    return ""


# ---- grade: a later chapter's regions are the instructor's while chapter NN builds -------------------------

SAVED = ".pentatron-grade-saved"  # in DIR: the student's files while the instructor's regions stand in


def marker_spans(lines):
    """{id: [(begin, end)]}: 0-based indices of each region's marker lines, in file order (a student's file:
    unlike find_regions, it skips what it cannot pair rather than stopping)"""
    spans, open_ = {}, None
    for i, line in enumerate(lines):
        b, e = BEGIN.match(line), END.match(line)
        if b:
            open_ = (f"{b[2]}.{b[3]}", i)
        elif e and open_ and open_[0] == f"{e[1]}.{e[2]}":
            spans.setdefault(open_[0], []).append((open_[1], i))
            open_ = None
    return spans


def put_back_saved(dest):
    """puts back the student's files that a grade set aside (also those of a grade killed before it could:
    they wait in DIR/SAVED); returns their paths. Written now, so each is newer than the object the
    instructor's version compiled to, and the next build recompiles the student's code."""
    saved, back = os.path.join(dest, SAVED), []
    for root, _, names in os.walk(saved):
        for name in names:
            rel = os.path.relpath(os.path.join(root, name), saved)
            shutil.copyfile(os.path.join(root, name), os.path.join(dest, rel))
            back.append(rel)
    shutil.rmtree(saved, ignore_errors=True)
    return sorted(back)


def lend_later_regions(ch, dest, regions):
    """Before building chapter ch in dest: the regions of every later chapter in the files that build
    compiles (common/, the folders of chapters up to ch) become the instructor's, so a later exercise the
    student has not finished (a syntax error in common/moe_cpu.cpp's 08.1) cannot fail chapter ch. A file
    holding only later regions is the instructor's whole; in one that also holds ch's or an earlier region,
    only the later regions are replaced. Each changed file is saved first in DIR/SAVED (put_back_saved).
    Returns {file: [ids]} of what was lent."""
    by_file = {}
    for eid, regs in regions.items():
        for f, *_ in regs:
            by_file.setdefault(f, set()).add(eid)
    lent = {}
    for f, ids in sorted(by_file.items()):
        later = sorted(e for e in ids if e[:2] > ch)
        if not later or (re.match(r"\d\d_", f) and f[:2] > ch):  # the build never compiles a later chapter's folder
            continue
        path = os.path.join(dest, f)
        if not os.path.isfile(path):
            die(f"{path} is missing: it holds exercise {' '.join(later)} and chapter {ch}'s build compiles it; "
                "put it back (the hand-out has it)")
        with open(os.path.join(SRC, f), encoding="utf-8") as fh:
            theirs = fh.read()
        with open(path, encoding="utf-8", errors="surrogateescape") as fh:
            mine = fh.read()
        if len(later) == len(ids):
            new = theirs
        else:
            src_lines, lines = theirs.split("\n"), mine.split("\n")
            # the instructor's marker lines are those find_regions read (1-based); the student's file is read
            # leniently (its own chapter's markers may be broken: that is for its grade to say)
            src_spans = {eid: [(b - 1, e - 1) for ff, b, e, *_ in regions[eid] if ff == f] for eid in later}
            spans = marker_spans(lines)
            for eid in later:
                if len(spans.get(eid, [])) != len(src_spans[eid]):
                    die(f"{path}: the marker lines of exercise {eid} (a later chapter's) are not as handed out "
                        f"({len(src_spans[eid])} begin/end pairs): grading chapter {ch} builds that region from the "
                        "instructor's code between them; put them back")
            spans_at = sorted(((b, e, eid, k) for eid in later for k, (b, e) in enumerate(spans[eid])), reverse=True)
            for b, e, eid, k in spans_at:  # bottom up: the indices above stay valid
                sb, se = src_spans[eid][k]
                lines[b + 1:e] = src_lines[sb + 1:se]
            new = "\n".join(lines)
        if new == mine:
            continue
        os.makedirs(os.path.dirname(os.path.join(dest, SAVED, f)), exist_ok=True)
        shutil.copy2(path, os.path.join(dest, SAVED, f))
        with open(path, "w", encoding="utf-8", errors="surrogateescape") as fh:
            fh.write(new)
        lent[f] = later
    return lent


def on_sigterm(signum, frame):
    sys.exit(128 + signum)  # SystemExit: the finally blocks put the student's files back


def grade(ch, dest, timeout=300, as_json=False, quiet=False):
    regions, cat = load(SRC)
    exs = [cat[e] for e in sorted(cat) if cat[e]["chapter"] == ch]
    if not exs:
        die(f"chapter {ch} has no exercises (catalogue: tests/exercises/); chapters with exercises: "
            f"{' '.join(sorted({e['chapter'] for e in cat.values()}))}")
    dest = os.path.abspath(dest)
    if not os.path.isfile(os.path.join(dest, "Makefile")):
        die(f"DIR={dest} holds no copy of the tree (make exercises writes one; inside a student copy, "
            "`make grade CH=NN` grades the copy itself)")
    # DIR is this tree itself: an instructor grading the reference solution (DIR=.), or a student's
    # self-check inside the copy (tools/exercises.py is the copy's own): its tests are the ones it has
    itself = os.path.realpath(dest) == os.path.realpath(SRC)
    t0 = time.time()
    if not itself:  # the instructor's tests, not the student's
        for f in tree_files(SRC):
            if f.startswith("tests/") and not f.startswith("tests/mutants/"):
                os.makedirs(os.path.join(dest, os.path.dirname(f)), exist_ok=True)
                shutil.copy2(os.path.join(SRC, f), os.path.join(dest, f))
    binaries = sorted({b for e in exs for b, _ in e["tests"]})
    env = dict(os.environ)
    for v in ("MAKEFLAGS", "MFLAGS", "MAKELEVEL"):
        env.pop(v, None)  # the outer make's flags (CH, jobserver) are not this build's business
    back = put_back_saved(dest)  # a grade killed outright left them aside
    if back and not quiet and not as_json:
        print(f"grade: put back {' '.join(back)} (set aside by a grade that was killed)")
    old_term = signal.signal(signal.SIGTERM, on_sigterm)
    try:
        lent = {} if itself else lend_later_regions(ch, dest, regions)
        build = subprocess.run(make_opts(dest) + [f"build/bin/{b}" for b in binaries], env=env, capture_output=True,
                               text=True)
    finally:
        put_back_saved(dest)
        signal.signal(signal.SIGTERM, old_term)
    build_error = ""
    if build.returncode != 0:
        errs = [l for l in (build.stdout + build.stderr).split("\n") if "error" in l]
        build_error = (errs[0] if errs else (build.stdout + build.stderr).strip().split("\n")[-1])[:300]
    rows = []
    for e in exs:
        row = dict(id=e["id"], title=e["title"], tests=[f"{b} {f}" for b, f in e["tests"]], points=e["points"],
                   score=0, passed=False, counts=dict(passed=0, failed=0, skipped=0), why="")
        if build_error:
            row["why"] = "does not build: " + build_error
            rows.append(row)
            continue
        p = f = s = 0
        why = ""
        t = time.time()
        for b in sorted({b for b, _ in e["tests"]}):
            filt = ",".join(fl for bb, fl in e["tests"] if bb == b)
            renv = dict(env, PENTA_TEST_CASES=filt, PENTA_TEST_TIMEOUT=str(timeout), BIN=os.path.join(dest, "build", "bin"))
            r = subprocess.run(["bash", os.path.join(SRC, "scripts", "run_tests.sh"), os.path.join(dest, "build", "bin", b)],
                               env=renv, capture_output=True, text=True, stdin=subprocess.DEVNULL)
            log = r.stdout + r.stderr
            c = counts_of(log)
            if c is None:
                f += 1
                why = why or f"{b}: the runner printed no total (exit status {r.returncode})"
                continue
            p, f, s = p + c[0], f + c[1], s + c[2]
            if c[1]:
                why = why or f"{b}: " + first_failure(log)
        row["counts"] = dict(passed=p, failed=f, skipped=s)
        row["seconds"] = round(time.time() - t)
        if f == 0 and p == 0:
            why = "no test ran (the filters match nothing, or every test skipped)"
        row["passed"] = f == 0 and p > 0
        row["score"] = e["points"] if row["passed"] else 0
        row["why"] = why
        rows.append(row)
    total, best = sum(r["score"] for r in rows), sum(r["points"] for r in rows)
    result = dict(chapter=ch, dir=dest, exercises=rows, total=total, max=best, full_marks=total == best,
                  seconds=round(time.time() - t0), timeout_per_run=timeout,
                  instructor_regions={f: ids for f, ids in lent.items()})
    if as_json:
        print(json.dumps(result, indent=1))
    elif not quiet:
        what = ("a self-check: this copy's own tests, not the instructor's grade" if is_student_copy(dest)
                else "the reference solution") if itself else ""
        print(f"grade: chapter {ch} in {dest}{' (' + what + ')' if what else ''} (each test run limited to {timeout} s)")
        if lent:
            print(f"grade: built with the instructor's code for the later chapters' exercises in "
                  + ", ".join(f"{f} ({' '.join(ids)})" for f, ids in lent.items()) + "; your files are back as they were")
        print(f"{'exercise':<9} {'result':<6} {'points':>6}  tests (passed/failed/skipped)")
        for r in rows:
            c = r["counts"]
            print(f"{r['id']:<9} {'pass' if r['passed'] else 'FAIL':<6} {r['score']:>2} / {r['points']:<2}  "
                  f"{'; '.join(r['tests'])}  ({c['passed']}/{c['failed']}/{c['skipped']})")
            if not r["passed"] and r["why"]:
                print(f"{'':<9} why: {r['why']}")
        print(f"total: {total} / {best} points ({time.time() - t0:.0f} s)")
    return result


# ---- check: markers, catalogue, and the mutation catalogue still applying --------------------------------

def mutant_variants(root):
    """the variants of tests/mutants/NN_*.txt (the format of run_mutants.sh, README there): [dict(id, where,
    exercise ("" or the 'exercise: NN.k' whose region the variant edits), edits [(where, file, old, new)])]"""
    out = []
    folder = os.path.join(root, "tests", "mutants")
    for name in sorted(os.listdir(folder)) if os.path.isdir(folder) else []:
        if not re.match(r"\d\d_.*\.txt$", name):
            continue
        with open(os.path.join(folder, name), encoding="utf-8") as fh:
            lines = fh.read().split("\n")
        cur, file, minus, plus, start = None, None, None, None, 0
        def flush():
            nonlocal minus, plus
            if minus is not None and cur is not None:
                cur["edits"].append((f"tests/mutants/{name}:{start}", file, "\n".join(minus), "\n".join(plus or [])))
            minus, plus = None, None
        for n, line in enumerate(lines + [""], 1):
            if line.startswith("-"):
                if plus is not None:
                    flush()
                if minus is None:
                    minus, start = [], n
                minus.append(line[1:])
                continue
            if line.startswith("+") and minus is not None:
                plus = (plus or []) + [line[1:]]
                continue
            flush()
            m = re.match(r"## ([a-z0-9][a-z0-9-]*):", line)
            if m:
                cur = dict(id=m[1], where=f"tests/mutants/{name}:{n}", exercise="", edits=[])
                out.append(cur)
                file = None
            elif line.startswith("file: "):
                file = line[6:]
            elif line.startswith("exercise: ") and cur is not None:
                cur["exercise"] = line[10:].strip()
    return out


def mutant_edits(root):
    """[(where, file, text)] of every '-' text of tests/mutants/NN_*.txt"""
    return [(w, f, old) for v in mutant_variants(root) for (w, f, old, _) in v["edits"]]


def apply_variant(root, v):
    """applies variant v's edits to the tree at root (each text to replace must occur exactly once, as
    run_mutants.sh requires); returns the edited files"""
    edited = []
    for where, f, old, new in v["edits"]:
        path = os.path.join(root, f)
        with open(path, encoding="utf-8") as fh:
            text = fh.read()
        if text.count(old) != 1:
            die(f"{where}: variant {v['id']}'s text occurs {text.count(old)} times in {f} (must be once)")
        with open(path, "w", encoding="utf-8") as fh:
            fh.write(text.replace(old, new, 1))
        edited.append(f)
    return edited


def exercise_variants(root, regions):
    """{exercise id: [variants tagged 'exercise: id']}, after checking that each tagged variant's edits lie
    inside that exercise's regions; returns (variants, problems)"""
    by_ex, problems = {}, []
    for v in mutant_variants(root):
        eid = v["exercise"]
        if not eid:
            continue
        if eid not in regions:
            problems.append(f"{v['where']}: variant {v['id']} names exercise {eid}, which has no region")
            continue
        for where, f, old, _ in v["edits"]:
            try:
                with open(os.path.join(root, f), encoding="utf-8") as fh:
                    text = fh.read()
            except OSError:
                text = ""
            at = text.find(old)
            first = text[:at].count("\n") + 1 if at >= 0 else -1
            last = first + old.count("\n")
            if at < 0 or not any(rf == f and b < first and last < e for rf, b, e, *_ in regions[eid]):
                problems.append(f"{where}: variant {v['id']} (exercise {eid}) edits {f} "
                                + (f"lines {first}-{last}, outside exercise {eid}'s regions" if at >= 0 else "text it does not hold"))
                break
        else:
            by_ex.setdefault(eid, []).append(v)
    return by_ex, problems


def check():
    regions, cat = load(SRC)
    bad = 0
    for where, f, text in mutant_edits(SRC):
        try:
            with open(os.path.join(SRC, f), encoding="utf-8") as fh:
                n = fh.read().count(text)
        except OSError:
            n = -1
        if n != 1:
            bad += 1
            print(f"check: {where}: the mutant's text occurs {n} times in {f} (must be once): "
                  f"{text.splitlines()[0]!r} — did an exercise marker land inside it?")
    # every exercise has a wrong-but-compiling variant in its region (sweep grades it: below full marks)
    by_ex, problems = exercise_variants(SRC, regions)
    for p in problems:
        bad += 1
        print(f"check: {p}")
    for eid in sorted(cat):
        if eid not in by_ex:
            bad += 1
            print(f"check: exercise {eid} has no known-wrong variant in tests/mutants/ ('exercise: {eid}' on a "
                  "variant that edits its region): write one the grader must fail")
    # the files a student edits: the catalogue's files: line is where the markers are; chapters in OWN_CHAPTER
    # are solved inside their own folder
    dirs = chapter_dirs(SRC)
    for eid in sorted(cat):
        e, marked = cat[eid], sorted({r[0] for r in regions[eid]})
        if sorted(set(e["files"])) != marked:
            bad += 1
            print(f"check: {e['where']}: exercise {eid}'s 'files: {' '.join(e['files'])}' differs from the files "
                  f"its markers are in: {' '.join(marked)}")
        outside = [f for f in marked if not f.startswith(dirs.get(e["chapter"], "?") + "/")]
        if outside and e["chapter"] in OWN_CHAPTER:
            bad += 1
            print(f"check: exercise {eid} is solved in {' '.join(outside)}, outside {dirs.get(e['chapter'])}/ "
                  f"(chapter {e['chapter']}'s exercises are edited in its own folder)")
        elif outside:
            print(f"check: note: exercise {eid} is solved in {' '.join(outside)} (chapter {e['chapter']}'s concept "
                  "lives there)")
    chapters = sorted({e["chapter"] for e in cat.values()})
    for ch in chapters:
        n = [e for e in cat.values() if e["chapter"] == ch]
        print(f"check: chapter {ch}: {len(n)} exercises, {sum(e['minutes'] for e in n)} min, "
              f"{sum(e['points'] for e in n)} points: {' '.join(sorted(e['id'] for e in n))}")
    missing = [ch for ch in chapter_dirs(SRC) if ch not in chapters or sum(1 for e in cat.values() if e["chapter"] == ch) < 2]
    for ch in missing:
        print(f"check: chapter {ch} ({chapter_dirs(SRC)[ch]}) has fewer than two exercises")
    print(f"check: {len(cat)} exercises, {sum(len(r) for r in regions.values())} regions, "
          f"{sum(len(v) for v in by_ex.values())} known-wrong variants in them; "
          f"{len(mutant_edits(SRC))} mutant edits checked, {bad} problems")
    return bad == 0 and not missing


# ---- sweep: every exercise blanked alone, graded ---------------------------------------------------------

def sweep(chapters=None, timeout=300, only=None, variants="first"):
    """For every exercise: a copy with it alone blanked must compile, score 0 on it and full points on every
    other exercise of its chapter; a copy with a known-wrong variant of its region (tests/mutants/, tagged
    'exercise: NN.k'; the first one, or every one with variants="all") applied must score 0 on it too (a wrong
    solution that compiles is below full marks) and full points on the others. And the untouched copy scores
    full marks."""
    regions, cat = load(SRC)
    by_ex, problems = exercise_variants(SRC, regions)
    if problems:
        die("; ".join(problems))
    build = os.environ.get("BUILD", "build")
    build = build if os.path.isabs(build) else os.path.join(SRC, build)
    chs = sorted({e["chapter"] for e in cat.values()} if not chapters else chapters)
    ok = fails = 0
    lines = []
    t0 = time.time()
    for ch in chs:
        ids = sorted(e for e in cat if cat[e]["chapter"] == ch and (only is None or e in only))
        runs = [(None, None)] + [(e, None) for e in ids]
        for e in ids:
            vs = by_ex.get(e, [])
            runs += [(e, v) for v in (vs if variants == "all" else vs[:1])]
            if not vs:
                die(f"exercise {e} has no known-wrong variant in tests/mutants/ (exercises.py check)")
        for blank, variant in runs:
            tmp = tempfile.mkdtemp(prefix="penta_ex_")
            try:
                t = time.time()
                make_copy(tmp, only=[blank] if blank and not variant else [], with_build=build, force=True, quiet=True)
                if variant:
                    apply_variant(tmp, variant)
                res = grade(ch, tmp, timeout=timeout, quiet=True)
                wrong = []
                for r in res["exercises"]:
                    want = r["id"] != blank
                    if r["passed"] != want:
                        wrong.append(f"{r['id']} {'passed' if r['passed'] else 'failed'} ({r['why'][:150]})")
                name = f"chapter {ch}, " + (f"{blank} wrong ({variant['id']})" if variant else
                                            f"{blank} blanked" if blank else "untouched")
                verdict = "PASS" if not wrong else "FAIL"
                line = (f"{verdict}: {name}: {res['total']}/{res['max']} points, {time.time() - t:.0f} s"
                        + (f"; expected otherwise: {'; '.join(wrong)}" if wrong else ""))
                print(f"sweep: {line}", flush=True)
                lines.append(line)
                ok, fails = (ok + 1, fails) if not wrong else (ok, fails + 1)
            finally:
                shutil.rmtree(tmp, ignore_errors=True)
    print(f"sweep took {time.time() - t0:.0f} s")
    print(f"{ok} passed, {fails} failed, 0 skipped")
    return fails == 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    m = sub.add_parser("make", help="write the student copy")
    m.add_argument("--ch", default="", help="only chapter NN's exercises (default: every chapter's)")
    m.add_argument("--only", default="", help="only these exercise ids, comma-separated")
    m.add_argument("--dir", default="exercises")
    m.add_argument("--with-build", default="", help="copy this build folder into the copy (timestamps kept)")
    m.add_argument("--force", action="store_true", help="replace DIR if it exists")
    g = sub.add_parser("grade", help="grade one chapter of a student copy")
    g.add_argument("--ch", required=True)
    g.add_argument("--dir", default=None, help="the copy to grade (default: exercises/; inside a student copy, "
                   "the copy itself)")
    g.add_argument("--json", action="store_true")
    g.add_argument("--timeout", type=int, default=int(os.environ.get("PENTA_GRADE_TIMEOUT", "300")))
    sub.add_parser("check", help="markers, catalogue, and that every mutant edit still applies")
    s = sub.add_parser("sweep", help="CI: every exercise blanked alone scores 0 on it, the rest full")
    s.add_argument("--ch", default="")
    s.add_argument("--only", default="")
    s.add_argument("--timeout", type=int, default=int(os.environ.get("PENTA_GRADE_TIMEOUT", "300")))
    s.add_argument("--variants", choices=("first", "all"), default="first",
                   help="the known-wrong variants of each exercise to grade: its first in tests/mutants/, or all")
    a = ap.parse_args()
    for v in ("ch",):
        val = getattr(a, v, "")
        if val and not re.match(r"^\d\d$", val):
            die(f"CH={val}: a chapter is two digits (02, 10)")
    if a.cmd == "make":
        chosen = make_copy(a.dir, chapters=[a.ch] if a.ch else None, only=a.only.split(",") if a.only else None,
                           with_build=a.with_build or None, force=a.force)
        if a.ch and not chosen:
            die(f"CH={a.ch}: chapter {a.ch} has no exercises")
    elif a.cmd == "grade":
        d = a.dir if a.dir is not None else (SRC if is_student_copy(SRC) else "exercises")
        sys.exit(0 if grade(a.ch, d, timeout=a.timeout, as_json=a.json)["full_marks"] else 1)
    elif a.cmd == "check":
        sys.exit(0 if check() else 1)
    else:
        sys.exit(0 if sweep([a.ch] if a.ch else None, timeout=a.timeout, only=a.only.split(",") if a.only else None,
                            variants=a.variants) else 1)


if __name__ == "__main__":
    main()
