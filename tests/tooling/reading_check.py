#!/usr/bin/env python3
"""reading_check.py — the reading paths of the chapter READMEs and the playbook-term table, held to the code.

Issue 31: a reader who opens a chapter folder finds its concept first. Two promises are checked here:

1. Every chapter README opens with "## Read this first": an ordered table of line ranges, the concept and not
   the plumbing, then "Total: **N lines**". A row names a file (relative to the README), its first and last
   line, and the text each of those two lines holds (a function name, a class, a marker):

     | 1 | [tensor_parallel.hpp:25-61](tensor_parallel.hpp#L25-L61) | `struct ColumnParallelLinear` … `};` | f, g |

   The check: the file exists, line 25 holds the first text and line 61 the second, N is the sum of the
   rows' lengths, and the total is within the chapter's budget (BUDGET below, from issue 31) unless the
   section has a line "Over budget: <why>". It prints a table of totals per chapter.
2. docs/PLAYBOOK_TERMS.md maps each playbook term to the file:line where it is defined:

     | column-parallel linear | 04 | `ColumnParallelLinear` | [04_tensor_parallel/tensor_parallel.hpp:40](...) |

   The check: the file is in the chapter's folder (NN_*/; 00 = common/, for a term every chapter still
   needs), and that line DEFINES the symbol (a class,
   struct, enum, using, constexpr or a function's declaration / definition; not a call). Renaming or moving
   a definition fails here.

   python3 tests/tooling/reading_check.py            # both checks; exit 1 on any problem
   python3 tests/tooling/reading_check.py --fix      # rewrite the line numbers from the texts (after an edit)
   python3 tests/tooling/reading_check.py --root DIR # check a copy (the test plants renamed symbols in one)
Test: tests/tooling/reading_paths_test.sh (run by `make test`).
"""
import argparse
import os
import re
import sys

BUDGET = {"01": 1500, "02": 500, "03": 700, "04": 600, "05": 300, "06": 450, "07": 700, "08": 700, "11": 600}
ROW = re.compile(r"^\|\s*(\d+)\s*\|\s*\[([^\]\s]+):(\d+)-(\d+)\]\(([^)]*)\)\s*\|\s*`(.+?)`\s*…\s*`(.+?)`\s*\|(.*)\|\s*$")
TOTAL = re.compile(r"^Total: \*\*([\d,]+) lines\*\*")
TERM = re.compile(r"^\|\s*([^|]+?)\s*\|\s*(\d\d)\s*\|\s*`([^`]+)`\s*\|\s*\[([^\]\s]+):(\d+)\]\(([^)]*)\)\s*\|\s*$")


def chapters(root):
    return sorted(d for d in os.listdir(root) if re.match(r"\d\d_", d) and os.path.isdir(os.path.join(root, d)))


def read_lines(path):
    with open(path, encoding="utf-8") as fh:
        return fh.read().split("\n")


def section(lines):
    """(first, end) line indices of the '## Read this first' section, or None"""
    start = next((i for i, l in enumerate(lines) if l.strip() == "## Read this first"), None)
    if start is None:
        return None
    end = next((i for i in range(start + 1, len(lines)) if lines[i].startswith("## ")), len(lines))
    return start, end


def nearest(lines, text, around, lo=1):
    """the 1-based line at or after lo holding text, nearest to `around`; None when absent"""
    hits = [i + 1 for i, l in enumerate(lines) if i + 1 >= lo and text in l]
    return min(hits, key=lambda n: abs(n - around)) if hits else None


def check_paths(root, fix, out):
    problems, table = [], []
    for ch_dir in chapters(root):
        ch = ch_dir[:2]
        readme = os.path.join(root, ch_dir, "README.md")
        if not os.path.exists(readme):
            problems.append(f"{ch_dir}/README.md: missing")
            continue
        lines = read_lines(readme)
        sec = section(lines)
        where = f"{ch_dir}/README.md"
        if sec is None:
            problems.append(f"{where}: no '## Read this first' section")
            continue
        if any(l.startswith("## ") for l in lines[: sec[0]]):
            problems.append(f"{where}: '## Read this first' is not the first section")
        total, rows, stated, over = 0, 0, None, False
        for i in range(*sec):
            line = lines[i]
            if TOTAL.match(line):
                stated = (i, int(TOTAL.match(line)[1].replace(",", "")))
            if line.startswith("Over budget:"):
                over = True
            m = ROW.match(line)
            if not m:
                if line.startswith("|") and re.match(r"^\|\s*\d+\s*\|", line):
                    problems.append(f"{where}:{i + 1}: a reading-path row not understood (| n | [file:a-b](link) "
                                    f"| `first` … `last` | what |): {line}")
                continue
            rows += 1
            _, rel, a, b, link, first, last, what = m.groups()
            a, b = int(a), int(b)
            path = os.path.normpath(os.path.join(root, ch_dir, rel))
            if not os.path.exists(path):
                problems.append(f"{where}:{i + 1}: {rel} does not exist")
                continue
            src = read_lines(path)
            if fix:
                na = nearest(src, first, a)
                nb = nearest(src, last, b + ((na or a) - a), lo=na or 1)
                if na and nb:
                    a, b = na, nb
                    lines[i] = (f"| {m[1]} | [{rel}:{a}-{b}]({rel}#L{a}-L{b}) | `{first}` … `{last}` |{what}|")
            ok = True
            if not (1 <= a <= len(src)) or first not in src[a - 1]:
                problems.append(f"{where}:{i + 1}: {rel}:{a} does not hold `{first}` (was the code edited? "
                                "`python3 tests/tooling/reading_check.py --fix` renumbers)")
                ok = False
            if not (a <= b <= len(src)) or last not in src[b - 1]:
                problems.append(f"{where}:{i + 1}: {rel}:{b} does not hold `{last}`")
                ok = False
            if ok:
                total += b - a + 1
        if rows == 0:
            problems.append(f"{where}: the reading path has no rows")
        if stated is None:
            problems.append(f"{where}: the reading path has no 'Total: **N lines**' line")
        elif fix and stated[1] != total:
            lines[stated[0]] = TOTAL.sub(f"Total: **{total:,} lines**", lines[stated[0]])
        elif stated[1] != total:
            problems.append(f"{where}:{stated[0] + 1}: Total says {stated[1]:,} lines, the rows add up to {total:,}")
        budget = BUDGET.get(ch)
        if budget and total > budget and not over:
            problems.append(f"{where}: the reading path is {total:,} lines, over chapter {ch}'s budget of {budget:,} "
                            "(shorten it, or say why on a line 'Over budget: ...')")
        table.append((ch_dir, rows, total, budget))
        if fix:
            with open(readme, "w", encoding="utf-8") as fh:
                fh.write("\n".join(lines))
    out.append(f"{'chapter':24} {'ranges':>6} {'lines':>6} {'budget':>6}")
    for ch_dir, rows, total, budget in table:
        flag = "" if not budget or total <= budget else "  over (explained in the README)"
        out.append(f"{ch_dir:24} {rows:>6} {total:>6} {budget if budget else '-':>6}{flag}")
    return problems


def defines(line, sym):
    """true when the line declares or defines sym (not a call or a mention)"""
    s = re.escape(sym)
    code = line.split("//")[0]
    if re.search(rf"\b(class|struct|enum(\s+class)?|using|namespace)\s+(\w+::)*{s}\b", code):
        return True
    if re.search(rf"\b(constexpr|const)\b[^=;]*\b{s}\s*(=|\[|\{{)", code):
        return True
    # a function: a type before the name, then "(" (a definition or a declaration); a call has no type before
    m = re.search(rf"^\s*(template\s*<[^>]*>\s*)?([\w:<>,&*\s]+?)\s+[&*]?(\w+::)*{s}\s*\(", code)
    return bool(m) and not re.match(r"^\s*(return|else|if|while|for|case|new|delete|throw)\b", code)


def check_terms(root, fix, out):
    path = os.path.join(root, "docs", "PLAYBOOK_TERMS.md")
    if not os.path.exists(path):
        return ["docs/PLAYBOOK_TERMS.md: missing"]
    lines, problems, n = read_lines(path), [], 0
    dirs = {d[:2]: d for d in chapters(root)}
    dirs["00"] = "common"  # a term still defined below every chapter (chapter 11's, until it moves)
    for i, line in enumerate(lines):
        m = TERM.match(line)
        if not m:
            if line.startswith("| ") and "](" in line:
                problems.append(f"docs/PLAYBOOK_TERMS.md:{i + 1}: a row not understood (| term | NN | `Symbol` | "
                                f"[file:line](link) |): {line}")
            continue
        n += 1
        term, ch, sym, rel, at, link = m.groups()
        at = int(at)
        where = f"docs/PLAYBOOK_TERMS.md:{i + 1} ({term})"
        if not rel.startswith(dirs.get(ch, ch + "_") + "/"):
            problems.append(f"{where}: {rel} is not in chapter {ch}'s folder {dirs.get(ch, '?')}/")
        full = os.path.join(root, rel)
        if not os.path.exists(full):
            problems.append(f"{where}: {rel} does not exist")
            continue
        src = read_lines(full)
        if fix:
            hits = [k + 1 for k, l in enumerate(src) if defines(l, sym)]
            if hits:
                at = min(hits, key=lambda k: abs(k - at))
                lines[i] = f"| {term} | {ch} | `{sym}` | [{rel}:{at}](../{rel}#L{at}) |"
        if not (1 <= at <= len(src)) or not defines(src[at - 1], sym):
            hits = [k + 1 for k, l in enumerate(src) if defines(l, sym)]
            problems.append(f"{where}: {rel}:{at} does not define `{sym}`"
                            + (f" (it is defined at line {hits[0]}: --fix renumbers)" if hits else
                               " (not defined anywhere in the file: renamed or moved?)"))
    if fix:
        with open(path, "w", encoding="utf-8") as fh:
            fh.write("\n".join(lines))
    if n == 0:
        problems.append("docs/PLAYBOOK_TERMS.md: no term rows")
    out.append(f"playbook terms: {n} checked")
    return problems


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--root", default=os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")))
    ap.add_argument("--fix", action="store_true", help="rewrite line numbers from the texts they must hold")
    ap.add_argument("--only", choices=["paths", "terms"])
    a = ap.parse_args()
    out, problems = [], []
    if a.only != "terms":
        problems += check_paths(a.root, a.fix, out)
    if a.only != "paths":
        problems += check_terms(a.root, a.fix, out)
    print("\n".join(out))
    for p in problems:
        print("reading_check: " + p)
    print(f"reading_check: {len(problems)} problems")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
