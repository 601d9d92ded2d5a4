#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""corpus.py - the seeded synthetic corpus the agent model is trained on.

Owns the chat format (ChatML with Hermes tool calls: the exact bytes the
model sees), the tool declarations, the task families and their phrasings,
and the train / held-out split of numbers and names. Nothing is downloaded:
every conversation is drawn from a random.Random(seed), so the same seed
gives the same bytes (tests/model checks it).

  corpus.py --seed S --n N [--split train|eval] [--out FILE] [--drill]
writes N conversations as JSON lines: {"family", "messages", "expect"};
--drill: the copy drill of train.py --copy-drill (tried for issue 15, not
used by make model) instead of the corpus.

The format, byte for byte (Documentation/model.md repeats it):
  <|im_start|>system\\n{SYSTEM}<|im_end|>\\n
  <|im_start|>user\\n{question}<|im_end|>\\n
  <|im_start|>assistant\\n<tool_call>\\n{"name": ..., "arguments": {...}}\\n</tool_call><|im_end|>\\n
  <|im_start|>tool\\n<tool_response>\\n{result}\\n</tool_response><|im_end|>\\n
  <|im_start|>assistant\\n{answer}<|im_end|>\\n
"""
import argparse
import json
import random
import sys
import zlib

IM_START, IM_END = "<|im_start|>", "<|im_end|>"
# Strings the tokenizer keeps as single tokens.
MARKERS = [IM_START, IM_END, "<tool_call>", "</tool_call>", "<tool_response>",
           "</tool_response>", "<tools>", "</tools>"]


def _tool(name, desc, pname, pdesc):
    return {"type": "function", "function": {
        "name": name, "description": desc,
        "parameters": {"type": "object",
                       "properties": {pname: {"type": "string", "description": pdesc}},
                       "required": [pname]}}}


TOOLS = [
    _tool("calc", "Evaluate an arithmetic expression.", "expression",
          "integers with + - *"),
    _tool("read_file", "Read a text file.", "path", "absolute path"),
    _tool("list_dir", "List the entries of a directory.", "path", "absolute path"),
    _tool("c_compile_run", "Compile a C program and run it; returns its output.",
          "code", "C source"),
]

SYSTEM = (
    "You are a helpful assistant.\n\n# Tools\n\n"
    "You may call one or more functions to assist with the user query.\n\n"
    "You are provided with function signatures within <tools></tools> XML tags:\n<tools>\n"
    + "\n".join(json.dumps(t) for t in TOOLS) +
    "\n</tools>\n\nFor each function call, return a json object with function name and "
    "arguments within <tool_call></tool_call> XML tags:\n<tool_call>\n"
    "{\"name\": <function-name>, \"arguments\": <args-json-object>}\n</tool_call>")


def tool_call_text(name, args):
    return "<tool_call>\n" + json.dumps({"name": name, "arguments": args}) + "\n</tool_call>"


def tool_result_text(result):
    return "<tool_response>\n" + result + "\n</tool_response>"


def render(messages, add_generation_prompt=False):
    """The conversation as the model sees it. messages: (role, content)."""
    out = [IM_START + "system\n" + SYSTEM + IM_END + "\n"]
    for role, content in messages:
        out.append(IM_START + role + "\n" + content + IM_END + "\n")
    if add_generation_prompt:
        out.append(IM_START + "assistant\n")
    return "".join(out)


# ---- held-out split ---------------------------------------------------
# A number or name belongs to the held-out set when its CRC32 is 0 mod 5;
# training never draws one, evaluation draws only those.

def held_out(s):
    return zlib.crc32(str(s).encode()) % 5 == 0


SYL = ["ka", "lo", "mi", "ren", "ta", "vo", "shi", "del", "an", "bur", "co", "fen",
       "gil", "ho", "ix", "jo", "ku", "lam", "mor", "nel", "ost", "pa", "qui", "ras",
       "sen", "tor", "ul", "ven", "wyn", "ya", "zed", "bri", "cas", "dor", "el", "fa",
       "ab", "ek", "ir", "om", "un", "ba", "di", "ge", "hu", "ji", "ke", "ly", "ne", "pi",
       "ro", "su", "te", "wi", "xa", "zu"]
EXTS = ["txt", "md", "conf", "log", "csv", "ini"]
TOP = ["/home", "/srv", "/etc", "/var/lib", "/opt", "/data", "/tmp", "/usr/share"]
KEYS = ["port", "host", "user", "mode", "level", "limit", "owner", "color", "size", "name"]
DAYS = ["Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday"]


class Gen:
    def __init__(self, seed, split):
        self.r = random.Random(seed)
        self.ev = split == "eval"

    def ok(self, s):
        return held_out(s) == self.ev

    def word(self, lo=2, hi=3):
        while True:
            w = "".join(self.r.choice(SYL) for _ in range(self.r.randint(lo, hi)))
            if self.ok(w):
                return w

    def name(self):
        return self.word(2, 3).capitalize()

    def num(self, lo_digits=3, hi_digits=6):
        while True:
            d = self.r.randint(lo_digits, hi_digits)
            n = self.r.randint(10 ** (d - 1), 10 ** d - 1)
            if self.ok(n):
                return n

    def dirpath(self):
        top = self.r.choice(TOP)
        parts = [self.word() for _ in range(self.r.randint(1, 2))]
        return top + "/" + "/".join(parts)

    def filename(self, ext=None):
        return self.word() + "." + (ext or self.r.choice(EXTS))

    def content(self):
        r = self.r
        k = r.randint(0, 3)
        if k == 0:
            return "\n".join("%s = %s" % (r.choice(KEYS), r.choice([self.word(), str(self.num(2, 5))]))
                             for _ in range(r.randint(1, 3)))
        if k == 1:
            return "The meeting with %s is on %s at %d:00." % (self.name(), r.choice(DAYS),
                                                                 r.randint(8, 18))
        if k == 2:
            return "%s owes %s %d coins." % (self.name(), self.name(), self.num(2, 4))
        return "todo: %s the %s" % (r.choice(["fix", "check", "clean", "send", "move"]), self.word())

    # ---- families -----------------------------------------------------
    OPS = [("+", "plus"), ("-", "minus"), ("*", "times")]

    def calc(self):
        r = self.r
        a, b = self.num(), self.num()
        op, opw = r.choice(self.OPS)
        expr = "%d %s %d" % (a, op, b)
        q = r.choice([
            "What is {e}?", "Calculate {e}.", "How much is {e}?", "Compute {e}, please.",
            "I need the result of {e}.", "What is {a} {w} {b}?",
            "Can you work out {a} {w} {b} for me?", "{e} = ?", "Please evaluate {e}.",
        ] + {"+": ["Add {a} and {b}.", "What is the sum of {a} and {b}?"],
             "-": ["Subtract {b} from {a}.", "What is {a} take away {b}?"],
             "*": ["Multiply {a} by {b}.", "What is the product of {a} and {b}?"]}[op]
        ).format(e=expr, a=a, b=b, w=opw)
        res = str(eval(expr))   # integers and + - * only: exact
        ans = r.choice(["{e} = {v}.", "The result is {v}.", "The answer is {v}.",
                        "{a} {w} {b} is {v}."]).format(e=expr, v=res, a=a, b=b, w=opw)
        return {"family": "calc",
                "messages": [("user", q), ("assistant", tool_call_text("calc", {"expression": expr})),
                             ("tool", tool_result_text(res)), ("assistant", ans)],
                "expect": {"tools": ["calc"], "values": [int(res)], "answer": res}}

    def calc2(self):
        r = self.r
        a, b, c = self.num(3, 4), self.num(3, 4), self.num()
        op2, w2 = r.choice([("+", "add"), ("-", "subtract")])
        e1 = "%d * %d" % (a, b)
        r1 = a * b
        e2 = "%d %s %d" % (r1, op2, c)
        r2 = eval(e2)
        q = r.choice([
            "Compute {a} * {b}, then {w} {c}.", "First multiply {a} by {b}, then {w} {c}.",
            "Multiply {a} and {b}; {w} {c} to the result." if op2 == "+" else
            "Multiply {a} and {b}; {w} {c} from the result.",
        ]).format(a=a, b=b, c=c, w=w2)
        ans = r.choice(["The result is {v}.", "The answer is {v}.", "{e} = {v}."]).format(v=r2, e=e2)
        return {"family": "calc2",
                "messages": [("user", q), ("assistant", tool_call_text("calc", {"expression": e1})),
                             ("tool", tool_result_text(str(r1))),
                             ("assistant", tool_call_text("calc", {"expression": e2})),
                             ("tool", tool_result_text(str(r2))), ("assistant", ans)],
                "expect": {"tools": ["calc", "calc"], "values": [r1, r2], "answer": str(r2)}}

    def read_file(self):
        r = self.r
        path = self.dirpath() + "/" + self.filename()
        body = self.content()
        q = r.choice(["Read {p}.", "Show me the contents of {p}.", "What is in the file {p}?",
                      "Open {p} and tell me what it says.", "cat {p}", "Please read the file {p}.",
                      "What does {p} contain?"]).format(p=path)
        ans = r.choice(["The file {p} contains:\n{c}", "Here is {p}:\n{c}"]).format(p=path, c=body)
        return {"family": "read_file",
                "messages": [("user", q), ("assistant", tool_call_text("read_file", {"path": path})),
                             ("tool", tool_result_text(body)), ("assistant", ans)],
                "expect": {"tools": ["read_file"], "args": [{"path": path}], "answer": body,
                           "files": {path: body}}}

    def entries(self):
        n = self.r.randint(2, 5)
        names = set()
        while len(names) < n:
            names.add(self.filename() if self.r.random() < 0.8 else self.word())
        return sorted(names)

    def list_dir(self):
        r = self.r
        path = self.dirpath()
        ents = self.entries()
        listing = "\n".join(ents)
        q = r.choice(["List {p}.", "What is in the directory {p}?", "Show me the files in {p}.",
                      "ls {p}", "Which files are in {p}?", "List the contents of {p}, please."]
                     ).format(p=path)
        ans = r.choice(["The directory {p} contains:\n{l}", "{p} has these entries:\n{l}"]
                       ).format(p=path, l=listing)
        files = {path + "/" + e: "" for e in ents if "." in e}
        dirs = [path + "/" + e for e in ents if "." not in e]
        return {"family": "list_dir",
                "messages": [("user", q), ("assistant", tool_call_text("list_dir", {"path": path})),
                             ("tool", tool_result_text(listing)), ("assistant", ans)],
                "expect": {"tools": ["list_dir"], "args": [{"path": path}], "answer": listing,
                           "files": files, "dirs": dirs}}

    def find_read(self):
        """Two rounds: list a directory, then read the one file with an extension."""
        r = self.r
        path = self.dirpath()
        ext = r.choice(EXTS)
        others = [e for e in self.entries() if not e.endswith("." + ext)]
        target = self.filename(ext)
        ents = sorted(set(others[:3] + [target]))
        body = self.content()
        q = r.choice(["Find the .{x} file in {p} and show it to me.",
                      "There is one .{x} file in {p}. What does it say?",
                      "Read the .{x} file in {p}."]).format(x=ext, p=path)
        full = path + "/" + target
        ans = r.choice(["The file {f} contains:\n{c}", "Here is {f}:\n{c}"]).format(f=full, c=body)
        files = {path + "/" + e: "" for e in ents if "." in e}
        files[full] = body
        return {"family": "find_read",
                "messages": [("user", q), ("assistant", tool_call_text("list_dir", {"path": path})),
                             ("tool", tool_result_text("\n".join(ents))),
                             ("assistant", tool_call_text("read_file", {"path": full})),
                             ("tool", tool_result_text(body)), ("assistant", ans)],
                "expect": {"tools": ["list_dir", "read_file"],
                           "args": [{"path": path}, {"path": full}], "answer": body,
                           "files": files, "dirs": [path + "/" + e for e in ents if "." not in e]}}

    def c_run(self):
        r = self.r
        k = r.randint(0, 2)
        if k == 0:
            a, b = self.num(3, 4), self.num(3, 4)
            op, opw = r.choice([("+", "sum"), ("-", "difference"), ("*", "product")])
            q = r.choice(["Write a C program that prints the {w} of {a} and {b}, then run it.",
                          "Compile and run a C program printing the {w} of {a} and {b}.",
                          "Use C to print the {w} of {a} and {b}."]).format(w=opw, a=a, b=b)
            code = ("#include <stdio.h>\nint main(void) { printf(\"%%d\\n\", %d %s %d); return 0; }\n"
                    % (a, op, b))
            out = str(eval("%d %s %d" % (a, op, b)))
        elif k == 1:
            n = self.num(2, 4)
            q = r.choice(["Write a C program that sums the numbers from 1 to {n} and run it.",
                          "Use a C loop to add up 1 to {n}, and run it."]).format(n=n)
            code = ("#include <stdio.h>\nint main(void) { long s = 0; for (long i = 1; i <= %d; i++) "
                    "s += i; printf(\"%%ld\\n\", s); return 0; }\n" % n)
            out = str(n * (n + 1) // 2)
        else:
            nm = self.name()
            g = r.choice(["Hello", "Hi", "Good morning", "Welcome"])
            q = r.choice(["Write a C program that prints \"{g}, {n}!\" and run it.",
                          "Compile and run a C hello world that greets {n} with \"{g}\"."]
                         ).format(g=g, n=nm)
            code = ("#include <stdio.h>\nint main(void) { puts(\"%s, %s!\"); return 0; }\n" % (g, nm))
            out = "%s, %s!" % (g, nm)
        ans = r.choice(["The program printed: {o}", "It printed {o}", "Output: {o}"]).format(o=out)
        return {"family": "c_compile_run",
                "messages": [("user", q),
                             ("assistant", tool_call_text("c_compile_run", {"code": code})),
                             ("tool", tool_result_text(out)), ("assistant", ans)],
                "expect": {"tools": ["c_compile_run"], "outputs": [out], "answer": out}}

    TALK = [
        (["Hi!", "Hello.", "Hello there!", "Good morning!", "Hey."],
         "Hello! How can I help you today?"),
        (["Thanks!", "Thank you very much.", "Thanks a lot, that helped."], "You're welcome!"),
        (["What can you do?", "What are your tools?", "How can you help me?"],
         "I can do arithmetic, read files, list directories, and compile and run C programs."),
        (["Bye!", "Goodbye.", "See you later."], "Goodbye! Have a nice day."),
        (["How are you?", "How are you doing today?"], "I'm fine, thank you! How can I help you?"),
    ]

    def talk(self):
        r = self.r
        if r.random() < 0.35:
            nm = self.name()
            q = r.choice(["Hi, my name is {n}.", "I'm {n}.", "Hello, I am {n}!", "Call me {n}."]
                         ).format(n=nm)
            ans = "Nice to meet you, %s! How can I help you today?" % nm
        else:
            qs, ans = r.choice(self.TALK)
            q = r.choice(qs)
        return {"family": "talk", "messages": [("user", q), ("assistant", ans)],
                "expect": {"tools": [], "answer": ans}}

    # ---- the copy drill (train.py --copy-drill; not a corpus family) ----
    # The reply is drawn material from the question, copied: names, paths,
    # listings, file lines. Every reply token can be found in the question,
    # so the only way to lower the loss is to copy: it trains the heads that
    # the file families need (find the question's piece, emit the next one).
    def _items(self):
        r = self.r
        pick = r.random()
        if pick < 0.4:
            return [self.name() for _ in range(r.randint(1, 8))]
        if pick < 0.7:
            return [self.word() for _ in range(r.randint(1, 8))]
        return [r.choice([self.name, self.word, self.filename])() if r.random() < 0.85
                else str(self.num(2, 5)) for _ in range(r.randint(1, 8))]

    def drill(self):
        r = self.r
        k = r.randint(0, 4)
        if k == 0:      # a sequence of names on one line
            s = " ".join(self._items())
            q = r.choice(["Repeat exactly: {s}", "Say this back: {s}", "Echo: {s}",
                          "Copy this: {s}", "Repeat after me: {s}"]).format(s=s)
            a = s
        elif k == 1:    # a path, as the file families write it
            s = self.dirpath()
            if r.random() < 0.6:
                s += "/" + self.filename()
            q = r.choice(["Say the path back: {s}", "Repeat the path {s}", "Which path? {s}",
                          "Echo the path: {s}"]).format(s=s)
            a = r.choice(["{s}", "The path is {s}.", "{{\"path\": \"{s}\"}}"]).format(s=s)
        elif k == 2:    # a listing, one entry a line
            s = "\n".join(self.entries() if r.random() < 0.6 else self._items())
            q = r.choice(["Repeat this list:\n{s}", "Echo these lines:\n{s}",
                          "Copy the list:\n{s}"]).format(s=s)
            a = r.choice(["{s}", "The list:\n{s}"]).format(s=s)
        elif k == 3:    # file-like lines
            s = "\n".join(self.content() for _ in range(r.randint(1, 3)))
            q = r.choice(["Repeat exactly:\n{s}", "Say this back:\n{s}",
                          "Copy this text:\n{s}"]).format(s=s)
            a = r.choice(["{s}", "Here it is:\n{s}"]).format(s=s)
        else:           # a path and a file's lines, answered as read_file's answers are
            p = self.dirpath() + "/" + self.filename()
            s = self.content()
            q = r.choice(["{p} says:\n{s}\nRepeat it.", "The file {p} holds:\n{s}\nCopy it."]
                         ).format(p=p, s=s)
            a = r.choice(["The file {p} contains:\n{s}", "Here is {p}:\n{s}"]).format(p=p, s=s)
        return {"family": "drill", "messages": [("user", q), ("assistant", a)],
                "expect": {"tools": [], "answer": a}}

    FAMILIES = [("calc", 32), ("calc2", 8), ("read_file", 15), ("list_dir", 14),
                ("find_read", 7), ("c_run", 13), ("talk", 11)]

    def one(self):
        names = [f for f, _ in self.FAMILIES]
        w = [w for _, w in self.FAMILIES]
        return getattr(self, self.r.choices(names, w)[0])()


def generate(seed, n, split="train"):
    g = Gen(seed, split)
    return [g.one() for _ in range(n)]


def drill(seed, n, split="train"):
    """n copy-drill conversations, drawn from their own stream (the corpus
    of the same seed is unchanged) and with the split's names only."""
    g = Gen("drill-%d" % seed, split)
    return [g.drill() for _ in range(n)]


def dumps(conv):
    return json.dumps(conv, sort_keys=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--n", type=int, default=1000)
    ap.add_argument("--split", choices=["train", "eval"], default="train")
    ap.add_argument("--out", default="-")
    ap.add_argument("--render", action="store_true", help="print rendered ChatML text")
    ap.add_argument("--drill", action="store_true",
                    help="the copy drill of train.py --copy-drill instead of the corpus")
    a = ap.parse_args()
    f = sys.stdout if a.out == "-" else open(a.out, "w")
    for c in (drill if a.drill else generate)(a.seed, a.n, a.split):
        f.write((render(c["messages"]) if a.render else dumps(c)) + "\n")
    if f is not sys.stdout:
        f.close()


if __name__ == "__main__":
    main()
