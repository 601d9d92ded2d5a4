#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""untaken.py - from gcov -b output, the branches a test run never took.

usage: untaken.py GCOV_DIR SOURCE...

Prints a table (per source file: branches, never taken, lines with one)
and then, file by file, each source line holding a branch never taken:
its line number, how often the line ran ("-" never), how many of its
branches were never taken, and its text.
"""
import os
import re
import sys

LINE = re.compile(r"^ *([-#0-9*=]+):\s*(\d+):(.*)$")


def scan(path):
    """[(line, count, text, untaken branches)], branches in all"""
    rows, cur, total = {}, None, 0
    with open(path, errors="replace") as f:
        for ln in f:
            m = LINE.match(ln)
            if m:
                cur = (int(m.group(2)), m.group(1).strip().rstrip("*"), m.group(3))
                continue
            if ln.startswith("branch") and cur:
                total += 1
                if "never executed" in ln or "taken 0%" in ln:
                    rows[cur] = rows.get(cur, 0) + 1
    out = [(n, "-" if c in ("#####", "=====") else c, t, k) for (n, c, t), k in rows.items()]
    return sorted(out), total


def main():
    d, sources = sys.argv[1], sys.argv[2:]
    table, detail = [], []
    for src in sources:
        g = os.path.join(d, os.path.basename(src) + ".gcov")
        if not os.path.exists(g):
            continue
        rows, total = scan(g)
        table.append((src, total, sum(r[3] for r in rows), len(rows)))
        detail.append((src, rows))
    print("%-36s %8s %11s %6s" % ("file", "branches", "never taken", "lines"))
    for src, total, never, lines in table:
        print("%-36s %8d %11d %6d" % (src, total, never, lines))
    print()
    for src, rows in detail:
        print("== %s" % src)
        for n, c, t, k in rows:
            print("%5d %8s %d| %s" % (n, c, k, t.strip()[:120]))
        print()


if __name__ == "__main__":
    sys.exit(main())
