#!/usr/bin/env python3
"""help_check.py — one program's --help against what tests/tooling/help_test.sh records for it.

   python3 tests/tooling/help_check.py HELP_FILE PROGRAM 'FIRST HEADING' 'flag flag ...'

HELP_FILE is the program's --help output (common/config.cpp's Flags::usage): "usage: PROGRAM [flags]", the
summary, then groups, each a blank line, "Heading:" and its flags ("  --name ..."). Checks that the first
heading is FIRST HEADING (the chapter's own flags come first), that no heading comes twice, that every flag
stands under a heading and appears once, and that the flags are exactly the recorded ones. Prints one line
per problem; exit status 1 when there is one.
"""
import re
import sys


def problems(text, program, first, flags):
    out = []
    lines = text.splitlines()
    if not lines or lines[0] != f"usage: {program} [flags]":
        return [f"the first line is {lines[0] if lines else '(nothing)'!r}, not 'usage: {program} [flags]'"]
    headings, seen, heading = [], {}, None
    for i, line in enumerate(lines[2:], 3):
        m = re.match(r"  --(\S+)", line)
        if m:
            if heading is None:
                out.append(f"line {i}: --{m.group(1)} stands under no heading")
            seen.setdefault(m.group(1), []).append(heading)
        elif line.endswith(":") and not line.startswith(" ") and i > 3 and lines[i - 2] == "":
            heading = line[:-1]
            if heading in headings:
                out.append(f"line {i}: the heading '{heading}' comes a second time")
            headings.append(heading)
        elif line:
            out.append(f"line {i}: neither a heading nor a flag: {line!r}")
    if not headings:
        out.append("no heading")
    elif headings[0] != first:
        out.append(f"the first heading is '{headings[0]}', not the chapter's '{first}' (headings: {headings})")
    for name, where in sorted(seen.items()):
        if len(where) > 1:
            out.append(f"--{name} appears {len(where)} times (under {where})")
    want = set(flags.split())
    for name in sorted(want - set(seen)):
        out.append(f"--{name} is missing")
    for name in sorted(set(seen) - want):
        out.append(f"--{name} is new (not recorded in help_test.sh)")
    return out


if __name__ == "__main__":
    path, program, first, flags = sys.argv[1:5]
    with open(path, encoding="utf-8") as f:
        found = problems(f.read(), program, first, flags)
    for p in found:
        print(f"{program}: {p}")
    sys.exit(1 if found else 0)
