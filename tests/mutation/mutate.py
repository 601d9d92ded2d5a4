#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""mutate.py - the mutation lane (make check-mutation).

Finds mutants in the sources themselves (no list of line numbers to rot):
relational operators moved by one (< <=, > >=) or flipped (== !=, < >),
arithmetic and logic operators swapped (+ -, * /, << >>, & |, && ||),
negations dropped, integer constants moved by +-1, whole `if` conditions
replaced by 0 and single operands of an `if`'s top-level || dropped
(dropped checks), and adjacent call arguments swapped (not calloc's, which
commute). Only code inside
function bodies is mutated, never comments, strings, preprocessor lines or
the arguments of message functions (printf, snprintf, ERR, ...).

The candidates are enumerated in a fixed order and shuffled with --seed, so
a seed names the same mutants as long as the sources do not change. Each
mutant is applied to a scratch copy of the tree (build/mutation/tree; the
worktree's sources are never written), rebuilt, and the group's fast host
suites run on it, stopping at the first failure: a failure or a timeout
kills the mutant; a mutant that does not compile is replaced by the next
candidate and does not count. Code of #ifdef KVD_TEST_HOOKS blocks (what
only the tests are built with) is not mutated. A group split into parts (sched: the
orchestrator's and the disk tier's tests one KVD_TEST_ONLY name at a time,
and the radix index's property test) times each part on
the unmutated tree, learns once which parts reach which lines (a build with
gcov's counters, cached while the sources stay the same), and runs for each
mutant only the parts that reach its line, fastest first, each limited to
3 x its unmutated time; a mutant on a line no part reaches is built (one
that does not compile is replaced) and survives without a run
("uncovered"). The per-file and total scores and the
surviving mutants are printed at the end; survivors listed in
tests/mutation/equivalent.txt (same file, same source line, same change)
are reported as equivalent, with the reason given there, and leave the
score's denominator.

usage: tests/mutation/mutate.py [--seed S] [-n N] [--groups core,lib,engine,api,sched,mcp]
                                [--timeout SEC] [--part-timeout SEC] [--no-cover]
                                [--list] [--file F] [--match KEY] [--scratch DIR]
"""

import argparse
import glob
import hashlib
import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import time

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
SCRATCH = os.path.join(ROOT, "build", "mutation")
TREE = os.path.join(SCRATCH, "tree")
EQUIV = os.path.join(ROOT, "tests", "mutation", "equivalent.txt")
SOURCES = {}	# file -> its text when the candidates were enumerated

# the sanitized library's binaries only: kve-demo (the unsanitized build)
# is skipped, test_arena covers its hand-over
ENGINE_BINS = ["build/engine/tests/test_%s" % t for t in
               ("gguf", "kernels", "tokenizer", "engine", "fuzz", "threads", "arena",
                "oom", "constrain", "selfcheck")] + [
    "build/engine/tests/kve-logits", "build/engine/tests/kvc-gen", "build/bin/kva-mkmodel"]
CORE_BINS = ["build/tests/core/test_core", "build/tests/lib/test_lib",
             "build/tests/toolwait/test_predict"]
CORE_TESTS = [["make", "-s", "--no-print-directory", "check-core"],
              ["make", "-s", "--no-print-directory", "check-lib"],
              ["make", "-s", "--no-print-directory", "check-toolwait-predict"]]

# the orchestrator's test, one part per KVD_TEST_ONLY name
ORCH = "build/daemon/tests/test_orch"
ORCH_MODEL = "build/daemon/tests/orch-bpe.gguf"
ORCH_SPM = "build/daemon/tests/orch-spm.gguf"	# spm_turns finds it beside ORCH_MODEL
ORCH_PLUGIN = "build/lib/kvarenad/backend-cpu.so"
ORCH_PARTS = ["greedy_and_turns", "prefix_sharing", "fork", "copy_mode", "pressure",
              "worker_death", "plugin", "agent_loop", "paths", "preempt", "worker_storm",
              "stall", "fairness", "shared_start", "session_keys", "never_fits",
              "index_chain", "bisect", "utf8_clean", "program_fcfs", "fair_join",
              "retention", "dropped_events", "admission", "stop_cut", "worker_answers",
              "idle_sleeps", "expire", "context_end", "tenant_budget",
              "session_cap", "utf8_tail", "preempt_cached", "readmit_first", "route_order",
              "constrained_long", "stop_in_token", "spm_turns", "void_behind",
              "many_candidates", "budget_admit", "admit_fair", "last_block",
              "queued_kv_line", "queued_kv_grow", "expire_claimed",
              "queued_kv_tenants", "stage_down", "kstate_stages", "room_edge",
              "reserve_in_flight", "lost_in_turn",
              "round_edges", "round_restore_waits", "program_chunks", "end_of_turn",
              "worker_fd0", "reserve_fail"]
# the disk tier's test, one part per KVD_TEST_ONLY name: the scheduler's
# paths with a tier (spills in the poll set, room made for restores);
# idle1000 (1000 conversations' memory bound) runs unsanitized in
# check-tiering, not here
# the scheduler's allocations failing one by one (conv.c, radix.c)
SCHED_OOM = "build/daemon/tests/test_sched_oom"
TIER = "build/daemon/tests/test_tiering"
TIER_WORK = "build/daemon/tests/tiering"
TIER_PARTS = ["spill_restore", "prefetch", "new_class", "lazy_spill", "corrupt", "cap",
              "overrun", "killed", "decisions_off", "make_room", "shared_prefix",
              "wait_at_arrival", "prefetch_once", "prefetch_order", "restore_first",
              "closed_mid_spill", "closed_mid_restore", "restore_shared", "lost_shared",
              "expire_tier", "discard_shares", "discard_waits",
              "timer_sleeps", "prefetch_first", "prefetch_taken", "overrun_hold",
              "overrun_prefetch", "expire_miss"]

# What each group mutates, what it builds, what it runs. A group whose
# files do not exist yet (the daemon's, as they land) is skipped.
GROUPS = {
    "core": dict(files=["kmod/core/*.c", "kmod/core/kvc_pool.h"],
                 build=CORE_BINS, tests=CORE_TESTS),
    "lib": dict(files=["lib/memfd.c"], build=CORE_BINS, tests=CORE_TESTS),
    # the SIMD sets' files only where the host runs them (HOST_NEEDS)
    "engine": dict(files=["daemon/engine/*.c"],
                   build=ENGINE_BINS,
                   tests=[["sh", "tests/engine/run.sh"]],
                   env={"ENGINE_FAIL_FAST": "1", "ENGINE_FUZZ_ITERS": "600",
                        "ENGINE_SKIP_DEMO": "1"}),
    # kvarenad's request parsing under the API's unit tests; the HTTP
    # suites (check-api, a minute) are not run per mutant
    "api": dict(files=["daemon/api/chat_request.c"],
                build=["build/api/tests/test_api"],
                tests=[["make", "-s", "--no-print-directory", "check-api-unit"]]),
    # the model families (templates, the tool-call parser) under their
    # unit tests
    "chat": dict(files=["daemon/chat/*.c"],
                 build=["build/chat/tests/test_chat"],
                 tests=[["make", "-s", "--no-print-directory", "check-chat-unit"]]),
    # the scheduler under the orchestrator's test (real workers, engine,
    # memfd arena), less its sandbox parts (escape, MCP servers, tool
    # tenants: npm servers, minutes), and the radix index under its
    # property test; split into parts, each mutant running only the parts
    # that reach its line (cover below), fastest first
    "sched": dict(files=["daemon/kvarenad/sched.c", "daemon/kvarenad/step.c",
                         "daemon/kvarenad/admit.c", "daemon/kvarenad/fair.c",
                         "daemon/kvarenad/conv.c", "daemon/kvarenad/prefix.c",
                         "daemon/kvarenad/radix.c", "daemon/kvarenad/router.c"],
                  build=[ORCH, TIER, "build/daemon/tests/test_radix", SCHED_OOM, ORCH_MODEL,
                         ORCH_SPM, ORCH_PLUGIN],
                  parts=[("radix", ["build/daemon/tests/test_radix", "{seed}", "20000"], {}),
                         ("sched_oom", [SCHED_OOM, ORCH_MODEL, ORCH_SPM], {})] +
                        [("orch:" + t, [ORCH, ORCH_MODEL, ORCH_PLUGIN], {"KVD_TEST_ONLY": t})
                         for t in ORCH_PARTS] +
                        [("tier:" + t, [TIER, ORCH_MODEL, TIER_WORK], {"KVD_TEST_ONLY": t})
                         for t in TIER_PARTS],
                  env={"KVD_TEST_FAIL_FAST": "1", "ASAN_OPTIONS": "detect_leaks=1"},
                  cover=dict(build=["build/daemon/tests/test_orch_cov",
                                    "build/daemon/tests/test_tiering_cov",
                                    "build/daemon/tests/test_radix_cov",
                                    "build/daemon/tests/test_sched_oom_cov"],
                             binaries={ORCH: "build/daemon/tests/test_orch_cov",
                                       TIER: "build/daemon/tests/test_tiering_cov",
                                       "build/daemon/tests/test_radix":
                                           "build/daemon/tests/test_radix_cov",
                                       SCHED_OOM: "build/daemon/tests/test_sched_oom_cov"},
                             objdir="build/daemon/cov")),
    # what a hostile MCP server's bytes reach (issue 36.8): the client
    # against the hostile fake and 20,000 inputs of the reference-checked
    # fuzz harness
    "mcp": dict(files=["daemon/sandbox/mcp_wire.c"],
                build=["build/sandbox/test_mcp", "build/sandbox/kvs-mcp-fake",
                       "build/sandbox/fuzz_mcp"],
                tests=[["make", "-s", "--no-print-directory", "check-sandbox-mcp"]]),
}

# calls whose arguments are messages: mutating them changes only text
MESSAGE_CALLS = {"printf", "fprintf", "snprintf", "vsnprintf", "sprintf", "fputs",
                 "puts", "perror", "set_err", "ERR", "TERR", "fail", "CHECK",
                 "pr_err", "pr_warn", "pr_info", "pr_debug", "kvd_log", "log_msg",
                 "sc_msg"}
# calls whose adjacent arguments commute: swapping them is always equivalent
COMMUTING_CALLS = {"calloc"}
NOT_CALLS = {"if", "while", "for", "switch", "return", "sizeof", "defined",
             "__typeof__", "typeof", "_Alignof", "alignof", "case"}

TOKEN_RE = re.compile(r"""
    (?P<num>0[xX][0-9a-fA-F]+[uUlL]*|[0-9]+\.[0-9]*(?:[eE][-+]?[0-9]+)?[fFlL]?|
            [0-9]+[eE][-+]?[0-9]+[fFlL]?|[0-9]+[uUlL]*)
  | (?P<id>[A-Za-z_][A-Za-z0-9_]*)
  | (?P<op>>>=|<<=|->|\+\+|--|<<|>>|<=|>=|==|!=|&&|\|\||\+=|-=|\*=|/=|%=|&=|\|=|\^=|
           [-+*/%&|^!~<>=?:;,.(){}\[\]])
  | (?P<ws>\s+)
  | (?P<other>.)
""", re.X | re.S)

SWAP = {"<": ["<=", ">"], "<=": ["<"], ">": [">=", "<"], ">=": [">"],
        "==": ["!="], "!=": ["=="], "&&": ["||"], "||": ["&&"],
        "+": ["-"], "-": ["+"], "*": ["/"], "/": ["*"], "%": ["/"],
        "<<": [">>"], ">>": ["<<"], "&": ["|"], "|": ["&"], "^": ["|"],
        "+=": ["-="], "-=": ["+="]}
SPACED = {"+", "-", "*", "&", "|", "^", "/", "%"}	# binary only when spaced


def hooks_blanked(src):
    """src with the code of #ifdef KVD_TEST_HOOKS blocks blanked (up to
    their #else or #endif): test hooks the daemon is never built with
    (daemon/kvarenad/kvarenad.mk), not code to mutate"""
    out, depth, hook = [], 0, None
    for line in src.split("\n"):
        d = line.strip().replace("# ", "#")
        if d.startswith("#if"):
            depth += 1
            if hook is None and d.split()[:2] == ["#ifdef", "KVD_TEST_HOOKS"]:
                hook = depth
                out.append(line)
                continue
        elif d.startswith("#else") and hook == depth:
            hook = None
        elif d.startswith("#endif"):
            if hook == depth:
                hook = None
            depth -= 1
        out.append(" " * len(line) if hook is not None else line)
    return "\n".join(out)


def mask(src):
    """src with comments, string and char literals, preprocessor lines and
    test hooks (hooks_blanked) blanked (same length, newlines kept)."""
    src = hooks_blanked(src)
    out = list(src)
    i, n = 0, len(src)
    line_start = True
    while i < n:
        c = src[i]
        if line_start and c == "#" or (line_start and c in " \t" and
                                        src[i:].lstrip(" \t").startswith("#")):
            j = i
            while j < n:
                if src[j] == "\n" and src[j - 1] != "\\":
                    break
                j += 1
            for k in range(i, j):
                if out[k] != "\n":
                    out[k] = " "
            i = j
            continue
        if src.startswith("/*", i):
            j = src.find("*/", i + 2)
            j = n if j < 0 else j + 2
        elif src.startswith("//", i):
            j = src.find("\n", i)
            j = n if j < 0 else j
        elif c in "\"'":
            j = i + 1
            while j < n and src[j] != c:
                j += 2 if src[j] == "\\" else 1
            j += 1
        else:
            line_start = c == "\n" or (line_start and c in " \t")
            i += 1
            continue
        for k in range(i, min(j, n)):
            if out[k] != "\n":
                out[k] = " "
        # a literal keeps a placeholder so the code around it still parses
        if c in "\"'":
            out[i] = "@"
        line_start = False
        i = j
    return "".join(out)


class Tok:
    __slots__ = ("kind", "text", "pos", "body", "calls")

    def __init__(self, kind, text, pos):
        self.kind, self.text, self.pos = kind, text, pos
        self.body = False
        self.calls = ()


def tokens(masked):
    toks = []
    for m in TOKEN_RE.finditer(masked):
        k = m.lastgroup
        if k != "ws":
            toks.append(Tok(k, m.group(), m.start()))
    # function bodies: a '{' at file scope right after ')'
    depth, in_body, stack = 0, False, []
    prev = None
    for t in toks:
        if t.text == "{":
            if depth == 0 and prev is not None and prev.text == ")":
                in_body = True
            depth += 1
        t.body = in_body
        if t.text == "}":
            depth -= 1
            if depth == 0:
                in_body = False
        # enclosing calls, innermost last
        if t.text == "(":
            name = prev.text if prev is not None and prev.kind == "id" else ""
            stack.append(name)
        t.calls = tuple(stack)
        if t.text == ")" and stack:
            stack.pop()
        prev = t
    return toks


def match_paren(toks, i):
    depth = 0
    for j in range(i, len(toks)):
        if toks[j].text == "(":
            depth += 1
        elif toks[j].text == ")":
            depth -= 1
            if depth == 0:
                return j
    return -1


def split_top(toks, a, b, sep):
    """indices of the separators at paren depth 0 in toks[a:b]"""
    out, depth = [], 0
    for j in range(a, b):
        x = toks[j].text
        if x in "([{":
            depth += 1
        elif x in ")]}":
            depth -= 1
        elif x == sep and depth == 0:
            out.append(j)
    return out


def candidates(path, src):
    """(start, end, replacement, kind) edits of src, in source order"""
    masked = mask(src)
    toks = tokens(masked)
    res = []

    def ok(t):
        return t.body and not (set(t.calls) & MESSAGE_CALLS)

    for i, t in enumerate(toks):
        if not ok(t):
            continue
        prev = toks[i - 1] if i else None
        nxt = toks[i + 1] if i + 1 < len(toks) else None
        if t.kind == "op" and t.text in SWAP:
            if t.text in SPACED or t.text in ("-", "+"):
                before = src[t.pos - 1:t.pos]
                after = src[t.pos + len(t.text):t.pos + len(t.text) + 1]
                if not (before.isspace() and after.isspace()):
                    continue
                if prev is None or not (prev.kind in ("id", "num") or prev.text in ")]"):
                    continue
            for r in SWAP[t.text]:
                kind = "bound" if {t.text, r} in ({"<", "<="}, {">", ">="}) else "operator"
                res.append((t.pos, t.pos + len(t.text), r, kind))
        elif t.kind == "op" and t.text == "!" and nxt is not None and nxt.text != "=":
            res.append((t.pos, t.pos + 1, "", "negation"))
        elif t.kind == "num" and not re.search(r"[.eE]", t.text.lstrip("0xX")
                                                 if not t.text.lower().startswith("0x")
                                                 else ""):
            if prev is not None and prev.text == "[" and nxt is not None and nxt.text == "]":
                continue	# array sizes and fixed indices
            if "sizeof" in t.calls:
                continue
            m = re.match(r"(0[xX][0-9a-fA-F]+|[0-9]+)([uUlL]*)$", t.text)
            if not m:
                continue
            v = int(m.group(1), 0)
            hexa = m.group(1).lower().startswith("0x")
            for nv in (v + 1, v - 1):
                if nv < 0:
                    continue
                s = (hex(nv) if hexa else str(nv)) + m.group(2)
                res.append((t.pos, t.pos + len(t.text), s, "constant"))
        elif t.kind == "id" and t.text == "if" and nxt is not None and nxt.text == "(":
            j = match_paren(toks, i + 1)
            if j < 0:
                continue
            a, b = toks[i + 2].pos, toks[j].pos
            res.append((a, b, "0", "dropped check"))
            ors = split_top(toks, i + 2, j, "||")
            starts = [i + 2] + [k + 1 for k in ors]
            ends = ors + [j]
            for k in range(len(ors) + 1 if ors else 0):
                # drop operand k and one || next to it
                if k == 0:
                    st, en = toks[starts[0]].pos, toks[starts[1]].pos
                else:
                    st, en = toks[ors[k - 1]].pos, toks[ends[k]].pos
                res.append((st, en, "", "dropped check"))
        elif t.kind == "id" and nxt is not None and nxt.text == "(" and \
                t.text not in NOT_CALLS and t.text not in MESSAGE_CALLS and \
                t.text not in COMMUTING_CALLS and \
                (prev is None or prev.kind != "id" or prev.text == "return"):
            j = match_paren(toks, i + 1)
            if j < 0:
                continue
            commas = split_top(toks, i + 2, j, ",")
            if not commas:
                continue
            bounds = [i + 2] + [k + 1 for k in commas] + [j + 1]
            args = []
            for k in range(len(bounds) - 1):
                a = toks[bounds[k]].pos
                b = toks[bounds[k + 1] - 1].pos
                args.append((a, b))
            for k in range(len(args) - 1):
                (a0, b0), (a1, b1) = args[k], args[k + 1]
                x, y = src[a0:b0].rstrip(), src[a1:b1].rstrip()
                if x == y or '"' in x + y:
                    continue
                rep = y + src[a0 + len(x):a1] + x + src[a1 + len(y):b1]
                res.append((a0, b1, rep, "swapped arguments"))
    return res


def line_of(src, pos):
    return src.count("\n", 0, pos) + 1


def line_text(src, pos):
    a = src.rfind("\n", 0, pos) + 1
    b = src.find("\n", pos)
    return src[a:b if b >= 0 else len(src)]


def describe(path, src, m):
    st, en, rep, kind = m
    orig = " ".join(src[st:en].split())
    new = " ".join(rep.split())
    ln = line_of(src, st)
    return ln, "%s: %s '%s' -> '%s'" % (kind, "drop" if not new else "replace",
                                          orig, new) if new or orig else kind


def base_key(path, src, m):
    st, en, rep, kind = m
    return "%s | %s | %s -> %s" % (path, " ".join(line_text(src, st).split()),
                                     " ".join(src[st:en].split()) or "''",
                                     " ".join(rep.split()) or "''")


_SAME_KEY = {}


def key_of(path, src, m):
    """stable across line moves: file, the source line's text, the change;
    where one line has the same change in several places (the three 0s
    of build(d, w, 0, 1, 0, 0, ...)), " #n" says which, in source order"""
    base = base_key(path, src, m)
    memo = (path, hash(src))
    if memo not in _SAME_KEY:
        by = {}
        for x in candidates(path, src):
            by.setdefault(base_key(path, src, x), []).append(x)
        _SAME_KEY.clear()
        _SAME_KEY[memo] = by
    same = _SAME_KEY[memo].get(base, [m])
    return base if len(same) < 2 or m not in same else "%s #%d" % (base, same.index(m) + 1)


class Equiv:
    """tests/mutation/equivalent.txt: KEY || why. Keys hold ' || '
    themselves (a dropped operand of a || chain), so a line is matched by
    its start: the survivor's key, then ' || ', then the reason."""

    def __init__(self, path):
        self.lines = []
        if os.path.exists(path):
            for raw in open(path):
                line = " ".join(raw.split())
                if line and not line.startswith("#") and " || " in line:
                    self.lines.append(line)

    def get(self, key):
        """a key with its place (" #n") matches a line naming that place,
        else one naming none (written for every place of the change)"""
        key = " ".join(key.split())
        keys = [key]
        if re.search(r" #\d+$", key):
            keys.append(re.sub(r" #\d+$", "", key))
        for k in keys:
            for line in self.lines:
                if line.startswith(k + " || "):
                    return line[len(k) + 4:].strip() or "(no reason given)"
        return None

    def __contains__(self, key):
        return self.get(key) is not None


def load_equiv():
    return Equiv(EQUIV)


# Kernel files and the CPU flags (/proc/cpuinfo) a host needs to run them
# at all: elsewhere no test can reach their code, so their mutants are not
# drawn (check-engine-avx512 runs the AVX-512 ones under emulation, minutes
# a run). A seed's draw therefore depends on the host's flags; the run's
# first lines name the files left out.
HOST_NEEDS = {
    "daemon/engine/kernels_avx512.c": {"avx512f", "avx512bw", "avx512vl"},
    "daemon/engine/kernels_avx512vnni.c": {"avx512f", "avx512bw", "avx512vl",
                                           "avx512_vnni"},
    "daemon/engine/kernels_avxvnni.c": {"avx_vnni"},
}


def host_flags():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("flags"):
                    return set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return set()


def host_cannot_run():
    """{file: missing flags} for the kernel files this host cannot run"""
    have = host_flags()
    return {f: sorted(need - have) for f, need in HOST_NEEDS.items() if need - have}


def group_files(g):
    files = []
    for pat in g["files"]:
        files += sorted(glob.glob(os.path.join(ROOT, pat)))
    ex = {os.path.join(ROOT, e) for e in g.get("exclude", [])}
    ex |= {os.path.join(ROOT, e) for e in host_cannot_run()}
    return [os.path.relpath(f, ROOT) for f in files if f not in ex]


APPLIED = os.path.join(SCRATCH, "applied")	# names a file while it is mutated


def copy_tree():
    """tracked and untracked-but-not-ignored files, plus build outputs the
    suites reuse (bpf skeleton, engine models), into the scratch tree"""
    # a run killed while a mutant was applied: that file's objects are the
    # mutant's, so give its restored copy a new mtime below
    stale = None
    if os.path.exists(APPLIED):
        stale = open(APPLIED).read().strip()
        os.unlink(APPLIED)
    files = subprocess.run(["git", "ls-files", "-co", "--exclude-standard", "-z"],
                           cwd=ROOT, capture_output=True, check=True).stdout
    for f in files.decode().split("\0"):
        if not f or not os.path.isfile(os.path.join(ROOT, f)):
            continue
        dst = os.path.join(TREE, f)
        os.makedirs(os.path.dirname(dst), exist_ok=True)
        if not os.path.exists(dst) or open(dst, "rb").read() != open(
                os.path.join(ROOT, f), "rb").read():
            shutil.copyfile(os.path.join(ROOT, f), dst)	# new mtime: rebuilt
            shutil.copymode(os.path.join(ROOT, f), dst)
    if stale and os.path.exists(os.path.join(TREE, stale)):
        shutil.copyfile(os.path.join(ROOT, stale), os.path.join(TREE, stale))
    for d in ("build/bpf",):
        s = os.path.join(ROOT, d)
        if os.path.isdir(s) and not os.path.isdir(os.path.join(TREE, d)):
            shutil.copytree(s, os.path.join(TREE, d))


def run(cmd, env, timeout, log):
    """(rc, seconds); rc None on timeout (the process group is killed)"""
    t0 = time.time()
    p = subprocess.Popen(cmd, cwd=TREE, env=env, stdout=log, stderr=subprocess.STDOUT,
                         start_new_session=True)
    try:
        rc = p.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)
        p.wait()
        rc = None
    except BaseException:
        # interrupted: the suite runs in its own session, end it too
        os.killpg(p.pid, signal.SIGKILL)
        p.wait()
        raise
    # what it left behind (worker processes of a test that exited at its
    # first failure) goes with it
    try:
        os.killpg(p.pid, signal.SIGKILL)
    except OSError:
        pass
    return rc, time.time() - t0


def build(g, env, log):
    if not g["build"]:
        return 0
    rc, _ = run(["make", "-s", "-j2", "--no-print-directory"] + g["build"], env, 900, log)
    return rc


def test(g, env, timeout, log):
    """'killed', 'timeout' or 'survived', and the seconds it took"""
    t0 = time.time()
    for cmd in g["tests"]:
        left = timeout - (time.time() - t0)
        if left <= 0:
            return "timeout", time.time() - t0
        rc, _ = run(cmd, env, left, log)
        if rc is None:
            return "timeout", time.time() - t0
        if rc:
            return "killed", time.time() - t0
    return "survived", time.time() - t0


def group_parts(g, seed):
    """[(name, cmd, env)]: a group's named parts ({seed}: the lane's seed)"""
    return [(n, [c.replace("{seed}", str(seed)) for c in cmd], e) for n, cmd, e in g["parts"]]


def test_parts(sel, times, genv, floor, log):
    """the selected parts, fastest first, stopping at the first failure;
    each part's limit is 3 x its unmutated time (at least floor)"""
    t0 = time.time()
    for name, cmd, penv in sorted(sel, key=lambda p: times[p[0]]):
        env = dict(genv)
        env.update(penv)
        rc, _ = run(cmd, env, max(floor, 3 * times[name]), log)
        if rc is None:
            return "timeout", time.time() - t0
        if rc:
            return "killed", time.time() - t0
    return "survived", time.time() - t0


GCOV_LINE = re.compile(r"^\s*([0-9]+\*?|#####|=====|-):\s*([0-9]+):")


def gcov_lines(objdir, f):
    """(reached, recorded) line sets of f from its .gcno/.gcda in objdir"""
    obj = os.path.join(objdir, os.path.dirname(f))
    r = subprocess.run(["gcov", "-t", "-o", obj, f], cwd=TREE, capture_output=True, text=True)
    reached, recorded, mine = set(), set(), False
    for line in r.stdout.splitlines():
        m = GCOV_LINE.match(line)
        if not m:
            continue
        cnt, ln = m.group(1), int(m.group(2))
        if ln == 0:
            if ":Source:" in line:
                mine = line.split(":Source:", 1)[1].strip() == f
            continue
        if not mine or cnt == "-":
            continue
        recorded.add(ln)
        if cnt[0].isdigit() and int(cnt.rstrip("*")) > 0:
            reached.add(ln)
    return reached, recorded


def tree_digest(extra):
    """what the coverage depends on: the tree's sources (daemon, lib,
    include, the daemon's tests) and the parts run"""
    h = hashlib.sha256(repr(extra).encode())
    files = subprocess.run(["git", "ls-files", "-co", "--exclude-standard", "-z", "daemon", "lib",
                            "include", "tests/daemon", "Makefile"],
                           cwd=ROOT, capture_output=True, check=True).stdout
    for f in sorted(x for x in files.decode().split("\0") if x):
        p = os.path.join(TREE, f)
        if os.path.isfile(p):
            h.update(f.encode() + b"\0" + open(p, "rb").read())
    return h.hexdigest()


def coverage(name, g, genv, parts, times, files, log):
    """{file: (recorded lines, {line: {part}})}: which parts reach which
    lines of the group's files, from one run of each part built with
    gcov's counters (cached in the scratch directory while the sources are
    the same); None if that build fails"""
    cv = g["cover"]
    # the parts as defined, not as run: test_radix's coverage from
    # another seed's 20,000 operations stands for this one's
    key = tree_digest((files, g["parts"]))
    cache = os.path.join(SCRATCH, "cover-%s.json" % name)
    if os.path.exists(cache):
        c = json.load(open(cache))
        if c.get("key") == key:
            print("# %s: line coverage per part from %s" % (name, os.path.relpath(cache, ROOT)))
            return {f: (set(v[0]), {int(k): set(x) for k, x in v[1].items()})
                    for f, v in c["files"].items()}
    objdir = os.path.join(TREE, cv["objdir"])
    # built afresh: gcov's objects name their counters' files by absolute
    # path, so objects copied from another tree count into that one
    shutil.rmtree(objdir, ignore_errors=True)
    for b in cv["build"]:
        if os.path.exists(os.path.join(TREE, b)):
            os.unlink(os.path.join(TREE, b))
    rc, _ = run(["make", "-s", "-j2", "--no-print-directory", "KVD_COV_SRCS=" + " ".join(files)]
                + cv["build"], genv, 1800, log)
    if rc != 0:
        return None
    out = {f: (set(), {}) for f in files}
    t0 = time.time()
    for pname, cmd, penv in parts:
        for d, _, fs in os.walk(objdir):
            for x in fs:
                if x.endswith(".gcda"):
                    os.unlink(os.path.join(d, x))
        env = dict(genv)
        env.update(penv)
        rc, secs = run([cv["binaries"].get(c, c) for c in cmd], env,
                       max(600, 10 * times[pname]), log)
        if rc != 0:
            # counted as reaching every line: it can then only cost time
            print("# %s: the coverage run of %s failed (%s): run for every mutant"
                  % (name, pname, "timeout" if rc is None else "exit %d" % rc))
        for f in files:
            reached, recorded = gcov_lines(objdir, f)
            out[f][0].update(recorded)
            for ln in (recorded if rc != 0 else reached):
                out[f][1].setdefault(ln, set()).add(pname)
    if not any(by for _, by in out.values()):
        # counters that recorded nothing: no verdict can rest on them
        print("# %s: the coverage run reached no line at all" % name)
        return None
    print("# %s: line coverage of %d parts in %.0fs" % (name, len(parts), time.time() - t0))
    json.dump({"key": key, "files": {f: (sorted(v[0]), {str(k): sorted(x) for k, x in v[1].items()})
                                      for f, v in out.items()}}, open(cache, "w"))
    return out


def covering(cover, parts, f, ln):
    """the parts that reach line ln of f; a line gcov does not count (a
    statement's continuation) takes the parts of the counted lines on
    either side"""
    if cover is None or f not in cover:
        return list(parts)
    recorded, by_line = cover[f]
    if ln in recorded:
        lines = [ln]
    else:
        lines = [max((x for x in recorded if x < ln), default=None),
                 min((x for x in recorded if x > ln), default=None)]
    names = set()
    for x in lines:
        if x is not None:
            names |= by_line.get(x, set())
    return [p for p in parts if p[0] in names]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seed", type=int, default=None)
    ap.add_argument("-n", type=int, default=20, help="mutants per group")
    ap.add_argument("--groups", default="core,lib,engine,api,sched,mcp")
    ap.add_argument("--timeout", type=float, default=60, help="test seconds per mutant")
    ap.add_argument("--part-timeout", type=float, default=30,
                    help="least test seconds per part, for groups split into parts")
    ap.add_argument("--no-cover", action="store_true",
                    help="groups split into parts: run every part for every mutant "
                         "instead of those that reach its line")
    ap.add_argument("--list", action="store_true", help="count candidates, run nothing")
    ap.add_argument("--file", action="append", default=[],
                    help="only mutants in this file (repeatable)")
    ap.add_argument("--match", action="append", default=[],
                    help="only mutants whose key (as printed for survivors) "
                         "contains this text (repeatable): to rerun some")
    ap.add_argument("--at", action="append", default=[],
                    help="only mutants on this FILE:LINE (repeatable): a survivor whose "
                         "key also matches other lines")
    ap.add_argument("--scratch", default=None,
                    help="scratch directory (build/mutation): two runs at once "
                         "need two")
    a = ap.parse_args()
    if a.scratch:
        global SCRATCH, TREE, APPLIED
        SCRATCH = os.path.abspath(a.scratch)
        TREE = os.path.join(SCRATCH, "tree")
        APPLIED = os.path.join(SCRATCH, "applied")
    seed = a.seed if a.seed is not None else int(time.time()) % 100000
    equiv = load_equiv()
    env = dict(os.environ)
    env.pop("MAKEFLAGS", None)
    env.pop("MFLAGS", None)
    env.pop("MAKELEVEL", None)

    plan = []
    for name in a.groups.split(","):
        g = GROUPS[name]
        files = group_files(g)
        if a.file:
            files = [f for f in files if f in a.file]
        if not files:
            print("# group %s: no files (yet); skipped" % name)
            continue
        if g.get("needs_target"):
            r = subprocess.run(["make", "-n", g["needs_target"]], cwd=ROOT,
                               capture_output=True)
            if r.returncode:
                print("# group %s: no make %s (yet); skipped" % (name, g["needs_target"]))
                continue
        cands = []
        for f in files:
            src = open(os.path.join(ROOT, f)).read()
            SOURCES[f] = src
            for m in candidates(f, src):
                if a.at and "%s:%d" % (f, line_of(src, m[0])) not in a.at:
                    continue
                if not a.match or any(t in key_of(f, src, m) for t in a.match):
                    cands.append((f, m))
        print("# group %s: %d candidate mutants in %d files" % (name, len(cands), len(files)))
        plan.append((name, g, cands))
    if a.list:
        for name, g, cands in plan:
            per = {}
            for f, m in cands:
                per.setdefault(f, {}).setdefault(m[3], 0)
                per[f][m[3]] += 1
            for f in sorted(per):
                print("  %-32s %s" % (f, ", ".join("%s %d" % kv for kv in sorted(per[f].items()))))
        return 0

    os.makedirs(SCRATCH, exist_ok=True)
    copy_tree()
    print("mutation lane: seed %d, %d mutants per group, test timeout %gs, scratch %s"
          % (seed, a.n, a.timeout, os.path.relpath(TREE, ROOT)))
    for f, missing in sorted(host_cannot_run().items()):
        print("  not drawn: %s (this CPU lacks %s)" % (f, " ".join(missing)))
    results = []	# (group, file, line, desc, key, outcome, secs)

    def stop(signum, frame):
        # interrupted (Ctrl-C, timeout, kill): report what is done; the
        # mutated file is restored by the finally below
        raise KeyboardInterrupt
    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    try:
        rc = run_groups(a, plan, env, results, seed)
        if rc:
            return rc
    except KeyboardInterrupt:
        print("\ninterrupted: the report covers the %d mutants done" % len(results))
    return report(results, equiv, seed)


def run_groups(a, plan, env, results, seed):
    log_path = os.path.join(SCRATCH, "last.log")
    for name, g, cands in plan:
        genv = dict(env)
        genv.update(g.get("env", {}))
        # the unmutated tree must build and pass, or no verdict means anything
        with open(log_path, "w") as log:
            if build(g, genv, log) != 0:
                print("FAIL %s: the unmutated tree does not build (%s)" % (name, log_path))
                return 2
            if "parts" in g:
                # every part on its own, timed: a mutant's parts are a
                # selection of these, each limited by its own time
                parts, times, secs = group_parts(g, seed), {}, 0
                for pname, cmd, penv in parts:
                    verdict, times[pname] = test_parts([(pname, cmd, penv)], {pname: 300},
                                                       genv, 0, log)
                    secs += times[pname]
                    if verdict != "survived":
                        break
            else:
                verdict, secs = test(g, genv, a.timeout * 3, log)
        if verdict != "survived":
            print("FAIL %s: the unmutated tree fails its suites (%s, %s)" % (name, verdict, log_path))
            return 2
        if "parts" in g:
            print("# %s: unmutated parts pass in %.0fs: %s" % (name, secs, ", ".join(
                "%s %.0fs" % (p, t) for p, t in sorted(times.items(), key=lambda x: x[1]))))
            cover = None
            if not a.no_cover:
                with open(log_path, "w") as log:
                    cover = coverage(name, g, genv, parts, times,
                                     sorted({f for f, _ in cands}), log)
                if cover is None:
                    print("# %s: no line coverage (%s): every part runs for every "
                          "mutant" % (name, log_path))
            if cover is not None:
                for f in sorted(cover):
                    rec, by = cover[f]
                    print("#   %-30s %4d lines counted, %4d reached by no part"
                          % (f, len(rec), len([x for x in rec if not by.get(x)])))
            print("# %s: each mutant runs the parts that reach its line, fastest first, "
                  "each limited to 3 x its time (at least %ds)" % (name, a.part_timeout))
        else:
            # a timeout counts as a kill: keep it well above what correct code
            # takes on this machine now
            limit = max(a.timeout, round(2.5 * secs))
            print("# %s: unmutated suites pass in %.0fs; test timeout %ds per mutant"
                  % (name, secs, limit))
        order = list(range(len(cands)))
        random.Random("%d:%s" % (seed, name)).shuffle(order)
        # the first n in seeded order, run grouped by file (a file's object
        # is rebuilt once per mutant, not twice); those that do not compile
        # are replaced by the next ones in the same order
        queue, nxt = sorted(order[:a.n]), a.n
        done, nobuild, seen = 0, 0, set()
        while queue:
            idx = queue.pop(0)
            f, m = cands[idx]
            path = os.path.join(TREE, f)
            # the text the candidates were found in: an edit of the
            # worktree during a run must not shift the offsets
            orig = SOURCES[f]
            st, en, rep, kind = m
            mutated = orig[:st] + rep + orig[en:]
            if (f, mutated) in seen:
                if nxt < len(order):
                    queue.insert(0, order[nxt])
                    nxt += 1
                continue
            seen.add((f, mutated))
            ln, desc = describe(f, orig, m)
            key = key_of(f, orig, m)
            sel = covering(cover, parts, f, ln) if "parts" in g else None
            with open(APPLIED, "w") as out:
                out.write(f)
            with open(path, "w") as out:
                out.write(mutated)
            try:
                with open(log_path, "w") as log:
                    rc = build(g, genv, log)
                    if rc != 0:
                        nobuild += 1
                        if nxt < len(order):
                            queue.insert(0, order[nxt])
                            nxt += 1
                        continue
                    if sel == []:
                        # no test runs this line: it survives (built first,
                        # so one that does not compile is replaced as any)
                        verdict, secs = "uncovered", 0.0
                    elif "parts" in g:
                        verdict, secs = test_parts(sel, times, genv, a.part_timeout, log)
                    else:
                        verdict, secs = test(g, genv, limit, log)
            finally:
                with open(path, "w") as out:
                    out.write(orig)
                os.unlink(APPLIED)
            done += 1
            results.append((name, f, ln, desc, key, verdict, secs))
            print("[%s %2d/%d] %-8s %5.1fs %s:%d %s%s" % (
                name, done, a.n, verdict.upper(), secs, f, ln, desc,
                " (parts: %s)" % " ".join(p[0] for p in sel) if sel else ""),
                flush=True)
        if nobuild:
            print("# %s: %d mutants did not compile (not counted)" % (name, nobuild))
        # leave the scratch tree built from the real sources
        with open(log_path, "w") as log:
            build(g, genv, log)
    return 0


def report(results, equiv, seed):
    print("\nmutation scores (seed %d): killed / (mutants - known equivalent)" % seed)
    by_file, by_group = {}, {}
    survivors = []
    for grp, f, ln, desc, key, verdict, secs in results:
        lived = verdict in ("survived", "uncovered")
        eqv = lived and key in equiv
        for d, k in ((by_file, f), (by_group, grp)):
            s = d.setdefault(k, [0, 0, 0])
            s[0] += not lived
            s[1] += 1
            s[2] += eqv
        if lived:
            survivors.append((f, ln, desc + (" (no test reaches the line)"
                                             if verdict == "uncovered" else ""),
                              key, equiv.get(key)))

    def pct(s):
        den = s[1] - s[2]
        return "%5.1f%%" % (100.0 * s[0] / den) if den else "  n/a"

    for f in sorted(by_file):
        s = by_file[f]
        print("  %-34s %3d / %3d  %s%s" % (f, s[0], s[1] - s[2], pct(s),
                                           "  (%d equivalent)" % s[2] if s[2] else ""))
    tot = [0, 0, 0]
    for g in sorted(by_group):
        s = by_group[g]
        tot = [x + y for x, y in zip(tot, s)]
        print("group %-28s %3d / %3d  %s%s" % (g, s[0], s[1] - s[2], pct(s),
                                              "  (%d equivalent)" % s[2] if s[2] else ""))
    print("total %-28s %3d / %3d  %s" % ("", tot[0], tot[1] - tot[2], pct(tot)))
    if survivors:
        print("\nsurvivors (key for tests/mutation/equivalent.txt after the line):")
        for f, ln, desc, key, why in survivors:
            print("  %s:%d %s%s\n      %s" % (f, ln, desc,
                                              "\n      equivalent: " + why if why else "",
                                              key))
    return 0


if __name__ == "__main__":
    sys.exit(main())
