#!/usr/bin/env python3
"""playbook_map_check.py — what tests/tooling/playbook_map_test.sh runs on docs/PLAYBOOK_MAP.md (or a planted copy).

The map (issue 22, issue 33) gives each claim of the seeds a status and the tests that show it. Checked here:
  1. Citations are real. A row (or a prose paragraph) is read left to right; a backticked text with a space in
     it that comes after a tests_NN or seed_numbers mention cites a test of that binary (identifiers, paths and
     flags - no space, or a leading '-' - are not, nor suite names like `ch00 np3`, nor a program's command
     line like `09_5d_plan --gpus 64`). A citation may be cut
     short: its words must begin a test's name in `tests_NN -ltc`, and a "..." inside it stands for any run of
     words. A backticked path of a file (a '/' and an extension) must exist.
  2. One vocabulary. A row's status is one or more of measured, logical clock, predicted, formula,
     compiled, not run, printed, not here - joined by " + " or "; ", each maybe followed by a qualifier in
     parentheses or after a comma.
  3. A measured or logical-clock row names its assertion: one of the tests (or test scripts) it cites carries
     the marker `playbook: ID` (ID = the row's number; a comment, `// playbook: 000.04.10 ...` in C++, `#` in
     a script) inside that test case's body (or a function of the same file that the body calls), within three
     lines before a line that checks (CHECK, REQUIRE, a check_* call, or a call of a function of the file that
     checks). The marker is where the quantity the row names is asserted, not only a test that exists.
     A row that says "row 000.04.13" instead of citing tests leans on that row's marked test.
  4. GPU tests are not measured here: a row citing a test that skips without a GPU (SKIP_WITHOUT_GPU,
     gpu_unavailable(), "built without CUDA", or named "[gpu] ...") must say `compiled, not run`, and such a test's marker does not make a row measured.
Prints one line per problem, "FILE:LINE: ..."; exit status 1 when there is one.
  python3 tests/tooling/playbook_map_check.py MAP SRC LTC_DIR        (LTC_DIR: NN.ltc, the -ltc listing of tests_NN)
"""
import glob
import os
import re
import sys

TERMS = ["measured", "logical clock", "predicted", "formula", "compiled, not run", "printed", "not here"]
ROW_ID = re.compile(r"^\d{3}\.[0-9A-Z]+\.\d+b?$")
MARK = re.compile(r"playbook:((?:\s+\d{3}\.[0-9A-Z]+\.\d+b?)+)")
CHECKS = re.compile(r"CHECK|REQUIRE|\bcheck_\w*\(|\bcheck\(")
GPU = re.compile(r"SKIP_WITHOUT_GPU|gpu_unavailable\(\)|SKIP_TEST\(\"built without (CUDA|NCCL)")


def listing(ltc, n, cache={}):
    if n not in cache:
        f = os.path.join(ltc, n + ".ltc")
        cache[n] = [l.rstrip("\n") for l in open(f, encoding="utf-8")] if os.path.exists(f) else None
    return cache[n]


def matches(name, cite):  # cite abbreviates name ("..." = any words)
    parts = re.split(r"\.\.\.|…", cite)
    p = parts[0].strip()
    if not name.startswith(p):
        return False
    rest = name[len(p):]
    for p in (x.strip() for x in parts[1:]):
        if not p:
            continue
        at = rest.find(p)
        if at < 0:
            return False
        rest = rest[at + len(p):]
    return True


def test_bodies(src):
    """(binary, full name) -> (file, first line, body lines) for every TEST_CASE("...") in tests/NN_*/*.cpp"""
    bodies = {}
    lit = re.compile(r'\s*"((?:[^"\\]|\\.)*)"')
    for f in sorted(glob.glob(os.path.join(src, "tests", "[0-9][0-9]_*", "*.cpp"))):
        n = os.path.basename(os.path.dirname(f))[:2]
        text = open(f, encoding="utf-8").read()
        helpers = checking_helpers(text)
        starts = [m.start() for m in re.finditer(r"\bTEST_CASE\(", text)]
        for i, at in enumerate(starts):
            pos, name = at + len("TEST_CASE("), ""
            while True:
                m = lit.match(text, pos)
                if not m:
                    break
                name += m.group(1).replace('\\"', '"').replace("\\\\", "\\")
                pos = m.end()
            if not name:
                continue  # TEST_CASE(name) inside a macro: its tests are not searched for markers
            end = starts[i + 1] if i + 1 < len(starts) else len(text)
            bodies[(n, name)] = (f, text.count("\n", 0, at) + 1, text[at:end].split("\n"), helpers)
        # X-macro lists, X("name", function): the test's body is the function's definition in the same file
        for m in re.finditer(r'\bX\(\s*"((?:[^"\\]|\\.)*)"\s*(?:\\\s*)?,\s*(?:\\\s*)?(\w+)\s*\)', text):
            d = re.search(r"^\w[\w:<>]*\s+" + m.group(2) + r"\([^)]*\)\s*\{", text, re.M)
            if d:
                end = text.find("\n}", d.start())
                bodies[(n, m.group(1))] = (f, text.count("\n", 0, d.start()) + 1,
                                           text[d.start():end + 2 if end >= 0 else len(text)].split("\n"), helpers)
    return bodies


def checking_helpers(text):  # the functions a test file defines whose bodies check something: name -> lines
    helpers = {}
    for d in re.finditer(r"^\w[\w:<>,&*\s]*?\b(\w+)\([^;{]*\)\s*\{", text, re.M):
        end = text.find("\n}", d.start())
        body = text[d.start():end if end >= 0 else len(text)]
        if CHECKS.search(body):
            helpers[d.group(1)] = body.split("\n")
    return helpers


def reachable(lines, helpers, depth=2):  # the body, and the bodies of the file's checking helpers it calls
    out = list(lines)
    if depth and helpers:
        calls = re.compile(r"\b(" + "|".join(sorted(helpers)) + r")\(")
        for name in sorted({m.group(1) for l in lines for m in calls.finditer(l)}):
            if helpers[name] is not lines:
                out += reachable(helpers[name], {k: v for k, v in helpers.items() if k != name}, depth - 1)
    return out


def marked(lines, rid, helpers=(), script=False):
    """a marker naming rid, followed within 3 lines by a check (or a call of a helper of the file that checks)"""
    calls = re.compile(r"\b(" + "|".join(sorted(helpers)) + r")\(") if helpers else None
    for i, line in enumerate(lines):
        m = MARK.search(line)
        if not m or rid not in m.group(1).split():
            continue
        if script or any(CHECKS.search(l) or (calls and calls.search(l)) for l in lines[i:i + 4]):
            return True
    return False


def units(path):  # (line, text, status or None, row id or None): table rows and prose paragraphs
    para, pline = "", 0
    for no, line in enumerate(open(path, encoding="utf-8"), 1):
        line = line.rstrip("\n")
        if line.startswith("|"):
            if para:
                yield pline, para, None, None
            para = ""
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            if len(cells) >= 4 and ROW_ID.match(cells[0]):
                yield no, " ".join(cells[3:]), cells[2], cells[0]
            else:
                yield no, line, None, None
        elif not line.strip() or line.startswith("#"):
            if para:
                yield pline, para, None, None
            para = ""
        else:
            if not para:
                pline = no
            para += " " + line
    if para:
        yield pline, para, None, None


def status_parts(status):  # split at " + " and "; " outside parentheses
    parts, depth, cur = [], 0, ""
    text = status.replace("**", "")
    i = 0
    while i < len(text):
        ch = text[i]
        depth += (ch == "(") - (ch == ")")
        sep = next((x for x in (" + ", "; ") if text.startswith(x, i)), None)
        if sep and depth == 0:
            parts.append(cur.strip())
            cur, i = "", i + len(sep)
            continue
        cur += ch
        i += 1
    parts.append(cur.strip())
    out = []
    for p in parts:
        term = next((t for t in TERMS if p == t or p.startswith(t + " ") or p.startswith(t + ",")
                     or p.startswith(t + " (")), None)
        out.append((p, term))
    return out


def check(path, src, ltc):
    bad, pending, asserted = [], [], {}
    cites = 0
    bodies = test_bodies(src)
    for no, text, status, rid in units(path):
        where = f"{path}:{no}"
        n, pre = None, ""
        cited = []  # (n, full names) of each citation, and script paths
        scripts = []
        for tok in re.findall(r"tests_\d\d|seed_numbers|`[^`]+`", text):
            if tok == "seed_numbers":
                n, pre = "00", "seed numbers: "
                continue
            if tok.startswith("tests_"):
                n, pre = tok[6:], ""
                continue
            code = tok[1:-1]
            if re.fullmatch(r"[A-Za-z0-9_./-]+/[A-Za-z0-9_.-]+\.(sh|cpp|hpp|cu|md|txt|py)", code):
                if not os.path.exists(os.path.join(src, code)):
                    bad.append(f"{where}: `{code}`: no such file")
                elif code.endswith(".sh"):
                    scripts.append(code)
            if (n is None or " " not in code or code.startswith("-") or re.fullmatch(r"ch\d\d np\d+", code)
                    or re.match(r"\d\d_\w+ ", code)):  # a suite name, a program's command line
                continue
            cites += 1
            cite = code if (not pre or code.startswith(pre)) else pre + code
            names = listing(ltc, n)
            if names is None:
                bad.append(f"{where}: tests_{n} `{cite}`: build/bin/tests_{n} is not built (or lists no test)")
                continue
            full = [x for x in names if matches(x, cite)]
            if not full:
                bad.append(f"{where}: tests_{n} `{cite}`: no test of tests_{n} begins so")
                continue
            cited.append((n, cite, full))
        if status is None:
            continue
        parts = status_parts(status)
        for p, term in parts:
            if term is None:
                bad.append(f"{where}: {rid}: status '{p}' is not one of: " + ", ".join(TERMS))
        terms = {t for _, t in parts}
        gpu_cites = [c for n2, c, full in cited
                     if any(x.startswith("[gpu]") or GPU.search("\n".join(bodies[(n2, x)][2])) for x in full
                            if (n2, x) in bodies)]
        if gpu_cites and "compiled, not run" not in terms:
            bad.append(f"{where}: {rid}: cites GPU test `{gpu_cites[0]}` (skipped without a GPU), "
                       f"so its status must say 'compiled, not run'")
        if terms & {"measured", "logical clock"}:
            ok = False
            for n2, c, full in cited:
                for x in full:
                    b = bodies.get((n2, x))
                    if b and not GPU.search("\n".join(b[2])) and marked(reachable(b[2], b[3]), rid, b[3]):
                        ok = True
            for s in scripts:
                if marked(open(os.path.join(src, s), encoding="utf-8").read().split("\n"), rid, script=True):
                    ok = True
            refs = [r for r in re.findall(r"\b\d{3}\.[0-9A-Z]+\.\d+b?\b", text) if r != rid]
            pending.append((where, rid, status, ok, refs))
            asserted[rid] = ok
    # a row that cites no marked test of its own may lean on the rows it names ("row 000.04.13"), if they do
    for where, rid, status, ok, refs in pending:
        if not ok and not any(asserted.get(r) for r in refs):
            bad.append(f"{where}: {rid}: status '{status}' but none of the CPU tests it cites asserts it: "
                       f"no `playbook: {rid}` marker next to a check in their bodies (nor in a row it names)")
    return bad, cites


if __name__ == "__main__":
    problems, n = check(*sys.argv[1:4])
    for p in problems:
        print(p)
    print(n, file=open(os.path.join(sys.argv[3], "cites"), "w"))
    sys.exit(1 if problems else 0)
