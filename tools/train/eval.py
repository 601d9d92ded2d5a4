#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""eval.py - the agent model's held-out evaluation, through the engine.

Owns the agent loop of the evaluation: each held-out question (numbers,
names and paths never drawn in training, corpus.py's split) is rendered in
the training chat format and sent to kve-chat (the engine, greedy); a tool
call in the reply is executed for real - calc evaluates the expression,
read_file and list_dir read a scratch directory holding the conversation's
files, c_compile_run compiles the code with cc and runs it - and its
result is appended as a tool message, until the model answers.

Scores per conversation: right tool (the sequence of tools called is the
expected one; none for small talk), right arguments (each call parses and
is correct: the expression has the expected value, the path is the
expected one, the program prints the expected output), right final answer
(the answer contains the expected result; small talk: is the expected
reply).

  eval.py --chat BIN --model GGUF [--n 200] [--seed S] [--show K]
  eval.py --chat BIN --model GGUF --smoke     one held-out calc question
  eval.py --chat BIN --model GGUF --oracle    the file families' final answers
      given the right tool results (the conversation up to its last
      assistant turn; Documentation/model.md, "Copying drawn names")
"""
import argparse
import ast
import collections
import json
import operator
import os
import re
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import corpus     # noqa: E402

CALL_RE = re.compile(r"<tool_call>\s*(.*?)\s*</tool_call>", re.S)
OPS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul}


class Chat:
    """kve-chat as a child process."""

    def __init__(self, binary, model, threads):
        # the longest assistant turn in the corpus is ~80 tokens
        self.p = subprocess.Popen([binary, model, "--threads", str(threads), "--max-new", "160"],
                                  stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE)

    def complete(self, text):
        b = text.encode()
        self.p.stdin.write(b"PROMPT %d\n" % len(b) + b)
        self.p.stdin.flush()
        head = self.p.stdout.readline().decode()
        if not head.startswith("GEN "):
            raise RuntimeError("kve-chat: %r; stderr: %s" % (head, self.p.stderr.read().decode()))
        n = int(head.split()[1])
        return self.p.stdout.read(n).decode("utf-8", "replace")

    def close(self):
        self.p.stdin.close()
        err = self.p.stderr.read().decode()
        rc = self.p.wait()
        if rc:
            raise RuntimeError("kve-chat exited %d: %s" % (rc, err))
        return err.strip()


def calc(expr):
    """+, -, * and parentheses over integers; anything else is an error."""
    def ev(n):
        if isinstance(n, ast.Expression):
            return ev(n.body)
        if isinstance(n, ast.Constant) and type(n.value) is int:
            return n.value
        if isinstance(n, ast.BinOp) and type(n.op) in OPS:
            return OPS[type(n.op)](ev(n.left), ev(n.right))
        if isinstance(n, ast.UnaryOp) and isinstance(n.op, ast.USub):
            return -ev(n.operand)
        raise ValueError("unsupported expression")
    if len(expr) > 200:
        raise ValueError("expression too long")
    return ev(ast.parse(expr, mode="eval"))


def run_c(code, tmp):
    src, exe = os.path.join(tmp, "prog.c"), os.path.join(tmp, "prog")
    with open(src, "w") as f:
        f.write(code)
    cc = subprocess.run(["cc", "-O0", "-w", "-o", exe, src], capture_output=True, text=True,
                        timeout=60)
    if cc.returncode:
        return "error: compilation failed: " + (cc.stderr.splitlines() or [""])[0]
    r = subprocess.run([exe], capture_output=True, text=True, timeout=10)
    return r.stdout.rstrip("\n") + ("" if r.returncode == 0 else "\nexit status %d" % r.returncode)


def execute(name, args, root, tmp):
    """(result text, value for scoring)."""
    try:
        if name == "calc":
            v = calc(args["expression"])
            return str(v), v
        if name == "read_file":
            p = os.path.normpath(root + "/" + args["path"])
            with open(p) as f:
                return f.read(), args["path"]
        if name == "list_dir":
            p = os.path.normpath(root + "/" + args["path"])
            return "\n".join(sorted(os.listdir(p))), args["path"]
        if name == "c_compile_run":
            out = run_c(args["code"], tmp)
            return out, out
    except (OSError, ValueError, SyntaxError, KeyError, TypeError, RecursionError) as e:
        return "error: %s" % (e.strerror if isinstance(e, OSError) else e), None
    return "error: no tool named %s" % name, None


def make_fs(root, exp):
    for d in exp.get("dirs", []):
        os.makedirs(root + d, exist_ok=True)
    for p, body in exp.get("files", {}).items():
        os.makedirs(os.path.dirname(root + p), exist_ok=True)
        with open(root + p, "w") as f:
            f.write(body)


def run_one(chat, conv, tmp):
    root = os.path.join(tmp, "fs")
    shutil.rmtree(root, ignore_errors=True)
    os.makedirs(root)
    make_fs(root, conv["expect"])
    msgs = [conv["messages"][0]]
    calls, values, answer = [], [], None
    for _ in range(3):     # at most two tool rounds are expected
        reply = chat.complete(corpus.render(msgs, add_generation_prompt=True))
        m = CALL_RE.search(reply)
        if not m:
            answer = reply
            break
        try:
            call = json.loads(m.group(1))
            name, args = call["name"], call["arguments"]
            if not isinstance(args, dict):
                raise TypeError
        except (ValueError, KeyError, TypeError):
            calls.append(None)
            values.append(None)
            msgs += [("assistant", reply), ("tool", corpus.tool_result_text("error: bad tool call"))]
            continue
        result, value = execute(name, args, root, tmp)
        calls.append(name)
        values.append(value)
        msgs += [("assistant", reply), ("tool", corpus.tool_result_text(result))]
    return score(conv, calls, values, answer) + (msgs + ([("assistant", answer)] if answer else []),)


def score(conv, calls, values, answer):
    """(right tool, right arguments, right final answer) of one evaluated
    conversation: calls, the tools called in order (None: a call that did
    not parse); values, what each call computed (execute()); answer, the
    final reply (None: there was none)."""
    exp = conv["expect"]
    fam = conv["family"]
    right_tool = calls == exp["tools"]
    if not right_tool:
        right_args = False
    elif fam in ("calc", "calc2"):
        right_args = values == exp["values"]
    elif fam == "c_compile_run":
        right_args = values == exp["outputs"]
    elif fam == "talk":
        right_args = True
    else:
        right_args = values == [a["path"] for a in exp["args"]]
    if answer is None:
        right_final = False
    elif fam == "talk":
        right_final = answer.strip() == exp["answer"]
    else:
        right_final = exp["answer"] in answer
    return right_tool, right_args, right_final


class Table:
    """Per-family counts and the printed table (the same for the engine
    and the HTTP evaluation)."""

    def __init__(self):
        self.stats = collections.defaultdict(lambda: [0, 0, 0, 0])

    def add(self, family, t, g, f):
        for key in (family, "all"):
            s = self.stats[key]
            s[0] += 1
            s[1] += t
            s[2] += g
            s[3] += f

    def all_right(self):
        return self.stats["all"][1:] == [self.stats["all"][0]] * 3

    def print(self, speed=None):
        print("%-14s %5s %8s %10s %8s" % ("family", "n", "tool", "arguments", "answer"))
        for k in sorted(k for k in self.stats if k != "all") + ["all"]:
            n, t, g, f = self.stats[k]
            print("%-14s %5d %7.1f%% %9.1f%% %7.1f%%" % (k, n, 100 * t / n, 100 * g / n,
                                                        100 * f / n))
        if speed:
            print(speed)
        n, t, g, f = self.stats["all"]
        print("right tool: %.1f%%" % (100 * t / n))
        print("right arguments: %.1f%%" % (100 * g / n))
        print("right final answer: %.1f%%" % (100 * f / n))


def oracle(a):
    """Is the final answer right when the tool results are? Copying
    a file's contents or a listing, apart from finding the path."""
    chat = Chat(a.chat, a.model, a.threads)
    st = collections.defaultdict(lambda: [0, 0])
    for c in corpus.generate(a.seed, a.n, "eval"):
        if c["family"] not in ("read_file", "list_dir", "find_read"):
            continue
        reply = chat.complete(corpus.render(c["messages"][:-1], add_generation_prompt=True))
        st[c["family"]][0] += 1
        st[c["family"]][1] += c["expect"]["answer"] in reply
    speed = chat.close()
    for f in ("read_file", "list_dir", "find_read"):
        print("oracle %s: %d of %d final answers right" % (f, st[f][1], st[f][0]))
    print(speed)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--chat", required=True, help="kve-chat binary")
    ap.add_argument("--model", required=True)
    ap.add_argument("--n", type=int, default=200)
    ap.add_argument("--seed", type=int, default=2026)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--show", type=int, default=3, help="print this many failed conversations")
    ap.add_argument("--smoke", action="store_true")
    ap.add_argument("--oracle", action="store_true",
                    help="read_file, list_dir, find_read answers after the right tool results "
                    "(use --seed 12345 --n 400 for the figures in model.md)")
    a = ap.parse_args()
    if a.oracle:
        oracle(a)
        return
    convs = corpus.generate(a.seed, a.n, "eval")
    if a.smoke:
        convs = [c for c in convs if c["family"] == "calc"][:1]
    chat = Chat(a.chat, a.model, a.threads)
    table = Table()
    shown = 0
    with tempfile.TemporaryDirectory(prefix="kve-eval-") as tmp:
        for conv in convs:
            t, g, f, transcript = run_one(chat, conv, tmp)
            table.add(conv["family"], t, g, f)
            if a.smoke or (not (t and g and f) and shown < a.show):
                shown += 1
                print("---- %s: tool %s, arguments %s, answer %s" % (conv["family"], t, g, f))
                for role, content in transcript:
                    print("[%s] %s" % (role, content))
    speed = chat.close()
    if a.smoke:
        ok = table.all_right()
        print("smoke: held-out calc question through a real calc round trip: %s (%s)"
              % ("right number" if ok else "wrong", speed))
        sys.exit(0 if ok else 1)
    table.print(speed)


if __name__ == "__main__":
    main()
