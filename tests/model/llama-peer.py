#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""llama-peer.py - the shipped agent model read by llama.cpp as kvarenad
reads it (issue 38.5; part of `make check-engine-peer`).

For each models/kvarena-agent-*.gguf and each conversation (held-out
corpus conversations with tool calls and results, and hand-written ones:
no system, several turns, content before a call, two calls at once):

  1. kvarenad's prompt (the chat room's rendering from the file's own
     tokenizer.chat_template: kvd-chat-render) is the bytes training saw
     (corpus.render), where the conversation is a corpus one;
  2. llama.cpp's Jinja rendering of the file's template (common_chat_
     templates_apply: llama-chat-ref render) is byte-equal to kvarenad's;
  3. llama.cpp's built-in renderer (llama_chat_apply_template with the
     file's template text, messages as role and content) too;
  4. llama.cpp's tokenizer on its own rendering (llama_tokenize with
     add_special and parse_special, as llama-server tokenizes a prompt)
     gives the ids of the engine's tokenizer on kvarenad's prompt (add_bos,
     as kvarenad starts a conversation) and of training's (tokenizer.py's
     encode, as train.py: the lone dummy-prefix token first);
  5. control: the same file with tokenizer.ggml.add_space_prefix true (as
     shipped before) makes llama.cpp tokenize otherwise: the check can
     fail.

usage: llama-peer.py LLAMA_REF LLAMA_CHAT_REF KVD_CHAT_RENDER KVE_LOGITS WORKDIR
"""
import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "tools", "train"))
import corpus                     # noqa: E402
import gguf_io as G               # noqa: E402
from tokenizer import Tokenizer   # noqa: E402

REF, CHAT_REF, RENDER, KVE, WORK = sys.argv[1:6]
MODELS = os.environ.get("LLAMA_PEER_MODELS", "").split() or \
    ["models/kvarena-agent-%s.gguf" % t for t in ("f32", "f16", "q8_0")]
os.makedirs(WORK, exist_ok=True)
fails = 0
checks = 0


def report(ok, msg):
    global fails, checks
    checks += 1
    if not ok:
        fails += 1
    print("%s %s" % ("ok  " if ok else "FAIL", msg))


def run(cmd, stdin=None):
    r = subprocess.run(cmd, input=stdin, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    if r.returncode != 0:
        raise RuntimeError("%s: exit %d: %s" % (cmd[0], r.returncode,
                                                r.stderr.decode(errors="replace").strip()))
    return r.stdout


def openai(messages):
    """A corpus conversation ((role, content) as training renders it) as
    an OpenAI request: the system prompt without the tool block (tools
    apart), calls as tool_calls, results as tool messages."""
    out = [{"role": "system", "content": "You are a helpful assistant."}]
    for role, content in messages:
        if role == "assistant" and content.startswith("<tool_call>\n"):
            calls = []
            for k, part in enumerate(content.split("\n</tool_call>")[:-1]):
                c = json.loads(part.split("<tool_call>\n", 1)[1])
                calls.append({"id": "call%05d%d" % (len(out), k), "type": "function",
                              "function": {"name": c["name"],
                                           "arguments": json.dumps(c["arguments"])}})
            out.append({"role": "assistant", "content": None, "tool_calls": calls})
        elif role == "tool":
            body = content[len("<tool_response>\n"):-len("\n</tool_response>")]
            out.append({"role": "tool", "tool_call_id": out[-1]["tool_calls"][0]["id"],
                        "content": body})
        else:
            out.append({"role": role, "content": content})
    return {"tools": corpus.TOOLS, "messages": out}


def builtin_messages(conv, prompt_system):
    """The same conversation as role and content only (what
    llama_chat_apply_template takes): calls and results as the text the
    template writes for them."""
    out = []
    msgs = conv["messages"]
    if conv.get("tools"):       # the tool block in the system turn
        block = prompt_system.split("\n\n", 1)[1]
        if msgs[0]["role"] == "system":
            msgs = [dict(msgs[0], content=msgs[0]["content"] + "\n\n" + block)] + msgs[1:]
        else:
            msgs = [{"role": "system", "content": block}] + msgs
    for m in msgs:
        c = m.get("content") or ""
        if m.get("tool_calls"):
            c += "".join(("\n" if k or c else "") + "<tool_call>\n" + json.dumps(
                {"name": t["function"]["name"], "arguments": json.loads(t["function"]["arguments"])})
                + "\n</tool_call>" for k, t in enumerate(m["tool_calls"]))
        if m["role"] == "tool":
            c = "<tool_response>\n" + c + "\n</tool_response>"
        out += [m["role"], c]
    return ("\0".join(out) + "\0").encode()


def call(cid, name, args):
    return {"id": cid, "type": "function",
            "function": {"name": name, "arguments": json.dumps(args)}}


CONVS = [("corpus %d (%s)" % (i, c["family"]), openai(c["messages"]),
          corpus.render(c["messages"], add_generation_prompt=True))
         for i, c in enumerate(corpus.generate(4242, 6, "eval"))]
SYS = {"role": "system", "content": "You are a helpful assistant."}
CONVS += [
    ("no system, no tools", {"messages": [{"role": "user", "content": "Hi there"}]}, None),
    ("turns", {"messages": [
        {"role": "system", "content": "Be terse.\nAnswer in English."},
        {"role": "user", "content": "What is 2+2?"},
        {"role": "assistant", "content": "4."},
        {"role": "user", "content": "And 3+3?\n"}]}, None),
    ("content before a call, two calls", {"tools": corpus.TOOLS, "messages": [
        SYS, {"role": "user", "content": "List /tmp and add 2+3"},
        {"role": "assistant", "content": "Doing both.",
         "tool_calls": [call("a1", "list_dir", {"path": "/tmp"}),
                        call("a2", "calc", {"expression": "2+3"})]},
        {"role": "tool", "tool_call_id": "a1", "content": "a.txt\nb.txt"},
        {"role": "tool", "tool_call_id": "a2", "content": "5"}]}, None),
    ("tools without a system message", {"tools": corpus.TOOLS, "messages": [
        {"role": "user", "content": "Read /etc/x.conf"},
        {"role": "assistant", "content": None,
         "tool_calls": [call("b1", "read_file", {"path": "/etc/x.conf"})]},
        {"role": "tool", "tool_call_id": "b1", "content": "port = 80"},
        {"role": "assistant", "content": "It says port = 80."},
        {"role": "user", "content": "thanks"}]}, None),
]


def hexfile(path, texts):
    with open(path, "w") as f:
        for t in texts:
            f.write(t.hex() + "\n")


for model in MODELS:
    r = G.Reader(model)
    name = os.path.basename(model)
    tmpl = os.path.join(WORK, "agent.jinja")
    with open(tmpl, "w") as f:
        f.write(r.kv["tokenizer.chat_template"])
    sp = r.kv["tokenizer.ggml.tokens"].index("\u2581")
    report(r.kv.get("tokenizer.ggml.add_space_prefix") is False and
           r.kv.get("tokenizer.ggml.add_bos_token") is True and
           r.kv.get("tokenizer.ggml.bos_token_id") == sp,
           "%s: tokenizer.ggml.add_space_prefix false, BOS the dummy-prefix token %d" % (name, sp))
    tok = Tokenizer(r.kv["tokenizer.ggml.tokens"], r.kv["tokenizer.ggml.scores"],
                    r.kv["tokenizer.ggml.token_type"])
    system = corpus.SYSTEM
    ours_all, ref_all = [], []
    for cname, conv, trained in CONVS:
        cpath = os.path.join(WORK, "conv.json")
        with open(cpath, "w") as f:
            json.dump(conv, f)
        try:
            ours = run([RENDER, tmpl, cpath])
            ref = run([CHAT_REF, "render", tmpl, cpath])
            builtin = run([REF, "template", tmpl, "1"], builtin_messages(conv, system))
            ref_ids = [int(x) for x in run([REF, "tokenize", model, "1", "1"], ref).split()]
        except RuntimeError as e:
            report(False, "%s %s: %s" % (name, cname, e))
            continue
        same = [ours == ref, ours == builtin] + ([ours == trained.encode()] if trained else [])
        report(all(same), "%s %s: kvarenad's prompt (%d bytes) == llama.cpp's Jinja rendering %s"
               ", llama_chat_apply_template's %s%s" %
               (name, cname, len(ours), same[0], same[1],
                ", training's %s" % same[2] if trained else ""))
        if not all(same):
            for what, other in (("jinja", ref), ("builtin", builtin)):
                if other != ours:
                    n = next((i for i in range(min(len(ours), len(other)))
                              if ours[i] != other[i]), min(len(ours), len(other)))
                    print("  %s differs at byte %d: llama.cpp %r, kvarenad %r" %
                          (what, n, other[max(0, n - 40):n + 40], ours[max(0, n - 40):n + 40]))
        train_ids = tok.encode(ours.decode())
        ours_all.append((cname, ours, ref_ids, train_ids))
    hexfile(os.path.join(WORK, "prompts.hex"), [o for _, o, _, _ in ours_all])
    eng = [[int(x) for x in ln.split()] for ln in
           run([KVE, "--tokenize-bos", model, os.path.join(WORK, "prompts.hex")]).decode().splitlines()]
    for (cname, _, ref_ids, train_ids), e in zip(ours_all, eng):
        report(e == ref_ids == train_ids,
               "%s %s: %d token ids: llama_tokenize's == the engine's %s == training's %s" %
               (name, cname, len(ref_ids), e == ref_ids, train_ids == ref_ids))
    # control: llama.cpp reads the dummy-prefix flag (as shipped before)
    old = os.path.join(WORK, "with-space-prefix.gguf")
    G.set_meta(model, old, [("tokenizer.ggml.add_space_prefix", G.GGUF_BOOL, True)])
    cname, prompt, ref_ids, _ = ours_all[0]
    old_ids = [int(x) for x in run([REF, "tokenize", old, "1", "1"], prompt).split()]
    report(old_ids != ref_ids, "%s control: with add_space_prefix true llama.cpp tokenizes %s "
           "otherwise (%d ids, not %d)" % (name, cname, len(old_ids), len(ref_ids)))
    os.unlink(old)

print("llama-peer: %d checks, %d failed" % (checks, fails))
sys.exit(1 if fails else 0)
