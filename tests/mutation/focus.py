#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""focus.py COMMIT SEED N [orch:PART ...]: a sweep of the scheduler's weakly
tested lines, to find tests to write (not an evaluation: the lane's seeds
are that, testing.md).

The lane's line coverage (build/mutation/cover-sched.json, written by a
`mutate.py --groups sched` run at COMMIT) says which parts reach each line.
This draws, in SEED's order, the candidates on lines that one or two
test_orch parts reach (those PARTs only, when named), maps them to the
current sources through a diff against COMMIT, applies each to the lane's
scratch tree, rebuilds test_orch only and runs only those parts. It prints
one verdict a mutant, as the lane does; a survivor is a test to write or
an equivalent to explain. Run from the repository root after a lane run.
"""
# (test_orch rebuilt per mutant). Not an evaluation: a finder of weak tests.
import difflib
import json
import os
import random
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import mutate as M  # noqa: E402


def weak_candidates(old, parts_wanted):
    """[(file, mutation, parts)]: candidates on lines one or two test_orch
    parts reach, by the cover json written at commit old"""
    cover = json.load(open(os.path.join(M.SCRATCH, "cover-sched.json")))["files"]
    equiv = M.load_equiv()
    out = []
    for f in M.group_files(M.GROUPS["sched"]):
        src = open(f).read()
        M.SOURCES[f] = src
        was = subprocess.run(["git", "show", "%s:%s" % (old, f)], capture_output=True,
                             text=True).stdout
        new_to_old = {}
        sm = difflib.SequenceMatcher(None, was.splitlines(), src.splitlines(), autojunk=False)
        for a, b, k in sm.get_matching_blocks():
            for x in range(k):
                new_to_old[b + x + 1] = a + x + 1
        by = {int(k): v for k, v in cover[f][1].items()} if f in cover else {}
        for m in M.candidates(f, src):
            parts = by.get(new_to_old.get(M.line_of(src, m[0]), 0))
            if not parts or len(parts) > 2 or not all(p.startswith("orch:") for p in parts):
                continue
            if parts_wanted and not set(parts) & parts_wanted:
                continue
            if M.key_of(f, src, m) in equiv:
                continue
            out.append((f, m, parts))
    return out


def main():
    if len(sys.argv) < 4:
        sys.exit(__doc__)
    old, seed, n = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    cands = weak_candidates(old, set(sys.argv[4:]))
    print("# %d candidates" % len(cands), flush=True)
    random.Random(seed).shuffle(cands)
    env = dict(os.environ)
    env.update({"KVD_TEST_FAIL_FAST": "1", "ASAN_OPTIONS": "detect_leaks=1"})
    make = ["make", "-s", "-j2", "--no-print-directory", M.ORCH]
    M.copy_tree()
    log = open(os.path.join(M.SCRATCH, "focus.log"), "w")
    if M.run(make, env, 900, log)[0] != 0:
        sys.exit("focus: the unmutated tree does not build (%s)" % log.name)
    done = 0
    for f, m, parts in cands:
        if done >= n:
            break
        orig = M.SOURCES[f]
        st, en, rep, _ = m
        path = os.path.join(M.TREE, f)
        ln, desc = M.describe(f, orig, m)
        with open(M.APPLIED, "w") as out:
            out.write(f)
        with open(path, "w") as out:
            out.write(orig[:st] + rep + orig[en:])
        try:
            if M.run(make, env, 900, log)[0] != 0:
                continue	# does not compile: the next one
            verdict, t0 = "survived", time.time()
            for p in parts:
                penv = dict(env)
                penv["KVD_TEST_ONLY"] = p[len("orch:"):]
                rc, _ = M.run([M.ORCH, M.ORCH_MODEL, M.ORCH_PLUGIN], penv, 180, log)
                if rc is None or rc:
                    verdict = "timeout" if rc is None else "killed"
                    break
        finally:
            with open(path, "w") as out:
                out.write(orig)
            os.unlink(M.APPLIED)
        done += 1
        print("%-8s %5.1fs %s:%d %s (%s)" % (verdict.upper(), time.time() - t0, f, ln, desc,
                                            " ".join(parts)), flush=True)
    # leave the scratch tree built from the real sources
    M.run(make, env, 900, log)


if __name__ == "__main__":
    main()
