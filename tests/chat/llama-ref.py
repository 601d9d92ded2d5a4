#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""llama-ref.py - the model families against llama.cpp: each family's
template, taken at test time from the llama.cpp sources in the peer cache
(models/templates/*.jinja there, never committed), must be recognised as
that family, and multi-turn conversations with tools and tool results must
render byte for byte as llama.cpp's own chat code renders them
(common_chat_templates_apply: its Jinja engine over the same template,
tests/chat/llama-chat-ref.cpp). Then each family's tool-call syntax: a
reply in it, parsed by llama.cpp's parser and by ours, gives the same
calls.

    llama-ref.py KVD_CHAT_RENDER LLAMA_CHAT_REF TEMPLATES_DIR

What is compared with what, precisely: the prompt (add_generation_prompt
true) less llama.cpp's leading BOS text (kvarenad leaves BOS to the
tokenizer); the conversations hold no real whose shortest text has more
than 6 significant digits nor an integral real (llama.cpp's Jinja writes
those differently; chat.md). Dates: llama.cpp writes today's, and so do
we; a run across midnight may fail once. Parsing: names, arguments (as
JSON), ids the model wrote (Mistral), content less the newline before a
Hermes call, and reasoning less the newlines around it (both kept by
llama.cpp, dropped by us: the templates write them back).
"""
import ast
import json
import os
import subprocess
import sys
import tempfile
import time

RENDER, REF, TDIR = sys.argv[1:4]

TOOLS = [
    {"type": "function", "function": {
        "name": "get_weather", "description": "Weather for a city, \u00e9t\u00e9 \"quoted\"",
        "parameters": {"type": "object", "properties": {
            "city": {"type": "string", "description": "the city"},
            "days": {"type": "integer", "default": 1},
            "scale": {"type": "number", "default": 0.5},
            "units": {"type": "string", "enum": ["c", "f"]}},
            "required": ["city"]}}},
    {"type": "function", "function": {
        "name": "list_dir", "parameters": {"type": "object", "properties": {
            "path": {"type": "string"}}}}},
    {"type": "function", "function": {"name": "now", "description": "The time."}},
]


def call(cid, name, args):
    return {"id": cid, "type": "function",
            "function": {"name": name, "arguments": json.dumps(args)}}


SYS = {"role": "system", "content": "You are terse.\nAnswer in English."}
CONVS = {
    "plain": {"messages": [SYS, {"role": "user", "content": "Hello there"}]},
    "no_system": {"messages": [{"role": "user", "content": "Hi"}]},
    "turns": {"messages": [
        SYS,
        {"role": "user", "content": "What is 2+2?"},
        {"role": "assistant", "content": "4."},
        {"role": "user", "content": "And 3+3?\n"},
        {"role": "assistant", "content": "6."},
        {"role": "user", "content": "Thanks \U0001f44b"}]},
    "tools_round": {"tools": TOOLS, "messages": [
        SYS,
        {"role": "user", "content": "Weather in Paris?"},
        {"role": "assistant", "content": None,
         "tool_calls": [call("abcdefgh1", "get_weather", {"city": "Paris", "days": 2})]},
        {"role": "tool", "tool_call_id": "abcdefgh1", "content": "18C, \"sunny\"\nwind 5"},
        {"role": "assistant", "content": "It is 18C and sunny."},
        {"role": "user", "content": "And in Nice?"}]},
    "tools_pending": {"tools": TOOLS, "messages": [
        {"role": "user", "content": "Weather in \u00c9vian?"},
        {"role": "assistant", "content": None,
         "tool_calls": [call("Xy12Zw34q", "get_weather", {"city": "\u00c9vian", "scale": 1.5, "units": "c"})]},
        {"role": "tool", "tool_call_id": "Xy12Zw34q", "content": "{\"temp\": 21}"}]},
    "parallel": {"tools": TOOLS, "messages": [
        SYS,
        {"role": "user", "content": "List /tmp and tell the weather"},
        {"role": "assistant", "content": "Doing both.",
         "tool_calls": [call("aaaaaaaa1", "list_dir", {"path": "/tmp"}),
                        call("aaaaaaaa2", "get_weather", {"city": "Oslo"})]},
        {"role": "tool", "tool_call_id": "aaaaaaaa1", "content": "a.txt\nb.txt"},
        {"role": "tool", "tool_call_id": "aaaaaaaa2", "content": "-3C"}]},
    "no_args": {"tools": TOOLS, "messages": [
        {"role": "user", "content": "time?"},
        {"role": "assistant", "content": "", "tool_calls": [call("t00000001", "now", {})]},
        {"role": "tool", "tool_call_id": "t00000001", "content": "12:00"},
        {"role": "assistant", "content": "Noon."},
        {"role": "user", "content": "ok"}]},
    "think_history": {"tools": TOOLS, "messages": [
        {"role": "user", "content": "Weather in Rome?"},
        {"role": "assistant", "content": "<think>\nThe user wants weather.\n</think>\n\nChecking.",
         "tool_calls": [call("r00000001", "get_weather", {"city": "Rome"})]},
        {"role": "tool", "tool_call_id": "r00000001", "content": "25C"},
        {"role": "assistant", "content": "<think>\nGot it.\n</think>\n\n25C in Rome."},
        {"role": "user", "content": "And Milan?"},
        {"role": "assistant", "content": "", "reasoning_content": "Need a call.",
         "tool_calls": [call("r00000002", "get_weather", {"city": "Milan"})]},
        {"role": "tool", "tool_call_id": "r00000002", "content": "22C"}]},
    # thinking off (chat_template_kwargs enable_thinking false): llama.cpp
    # is told so too (its enable_thinking)
    "think_off": {"thinking": False, "tools": TOOLS, "messages": [
        SYS,
        {"role": "user", "content": "Weather in Rome?"},
        {"role": "assistant", "content": "",
         "tool_calls": [call("r00000001", "get_weather", {"city": "Rome"})]},
        {"role": "tool", "tool_call_id": "r00000001", "content": "25C"}]},
}

# family -> (templates, conversations)
ALL = ["plain", "no_system", "turns", "tools_round", "tools_pending", "parallel", "no_args"]
FAMILIES = {
    "qwen2.5": (["Qwen-Qwen2.5-7B-Instruct.jinja", "MiMo-VL.jinja"], ALL + ["think_off"]),
    "qwen3": (["Qwen-Qwen3-0.6B.jinja"], ALL + ["think_history", "think_off"]),
    "llama3": (["meta-llama-Llama-3.1-8B-Instruct.jinja", "meta-llama-Llama-3.2-3B-Instruct.jinja",
                "meta-llama-Llama-3.3-70B-Instruct.jinja"],
               [c for c in ALL if c != "parallel"]),
    "mistral-v3": (["mistralai-Mistral-Nemo-Instruct-2407.jinja"], ALL),
    "mistral-v7": (["Mistral-Small-3.2-24B-Instruct-2506.jinja"], ALL),
    "mistral-v11": (["mistralai-Ministral-3-14B-Reasoning-2512.jinja",
                     "unsloth-mistral-Devstral-Small-2507.jinja"], ALL),
}

# ChatML templates of other formats (tools or reasoning of their own;
# QwQ: Qwen's markers, but every reply opened with <think>, none kept):
# kvarenad refuses them unless the operator forces a family
OTHERS = ["NousResearch-Hermes-2-Pro-Llama-3-8B-tool_use.jinja",
          "NousResearch-Hermes-3-Llama-3.1-8B-tool_use.jinja", "HuggingFaceTB-SmolLM3-3B.jinja",
          "LFM2-8B-A1B.jinja", "LFM2.5-8B-A1B.jinja", "LFM2.5-Instruct.jinja",
          "openbmb-MiniCPM5-1B.jinja", "Qwen-QwQ-32B.jinja"]

# replies in each family's syntax: llama.cpp's parser and ours must find
# the same content, reasoning and calls (arguments compared as JSON)
REPLIES = {
    "qwen2.5": ["It is 18C.",
                "Checking.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>",
                "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>\n"
                "<tool_call>\n{\"name\": \"list_dir\", \"arguments\": {\"path\": \"/tmp\"}}\n</tool_call>"],
    "qwen3": ["<think>\nThe user greets.\n</think>\n\nHello!",
              "<think>\nNeed the weather.\n</think>\n\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>"],
    "llama3": ["It is 18C.",
               "{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Paris\", \"days\": 2}}"],
    "mistral-v3": ["It is 18C.",
                   "[TOOL_CALLS][{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}, \"id\": \"abcdefgh1\"}, "
                   "{\"name\": \"list_dir\", \"arguments\": {\"path\": \"/tmp\"}, \"id\": \"abcdefgh2\"}]"],
    "mistral-v7": ["It is 18C.",
                   "[TOOL_CALLS]get_weather[CALL_ID]abcdefgh1[ARGS]{\"city\": \"Paris\"}"
                   "[TOOL_CALLS]list_dir[CALL_ID]000000002[ARGS]{\"path\": \"/tmp\"}"],
    "mistral-v11": ["It is 18C.",
                    "Let me look.[TOOL_CALLS]get_weather[ARGS]{\"city\": \"Paris\"}[TOOL_CALLS]list_dir[ARGS]{\"path\": \"/tmp\"}"],
}


def calls_of(msg):
    out = []
    for c in msg.get("tool_calls") or []:
        f = c.get("function", c)
        out.append((f["name"], json.loads(f["arguments"]) if f["arguments"] else {},
                    c.get("id") or None))
    return out


# the chatml family against libllama's built-in "chatml" renderer
# (llama_chat_apply_template), for conversations without tools
BUILTIN = {"chatml": ["plain", "no_system", "turns"]}

fails = 0
checks = 0


def run(cmd):
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    return r.returncode, r.stdout, r.stderr.decode(errors="replace")


with tempfile.TemporaryDirectory() as tmp:
    for fam, (templates, convs) in FAMILIES.items():
        for tname in templates:
            tpath = os.path.join(TDIR, tname)
            if not os.path.exists(tpath):
                print("FAIL %s: %s is not in the peer's templates" % (fam, tname))
                fails += 1
                continue
            for cname in convs:
                checks += 1
                cpath = os.path.join(tmp, cname + ".json")
                with open(cpath, "w") as f:
                    json.dump(CONVS[cname], f)
                rc, ours, err = run([RENDER, tpath, cpath])
                got_fam = err.split("family: ")[1].split()[0] if "family: " in err else "?"
                if got_fam != fam:
                    print("FAIL %s %s: recognised as %s (%s)" % (tname, cname, got_fam, err.strip()))
                    fails += 1
                    continue
                cmd = [REF, "render", tpath, cpath]
                if CONVS[cname].get("thinking") is False:
                    cmd += [str(int(time.time())), "0"]
                rrc, ref, rerr = run(cmd)
                if rrc != 0:
                    print("FAIL %s %s: llama.cpp refused: %s" % (tname, cname, rerr.strip()))
                    fails += 1
                    continue
                if ref.startswith(b"<s>"):
                    ref = ref[3:]
                if rc != 0 or ours != ref:
                    n = next((i for i in range(min(len(ours), len(ref))) if ours[i] != ref[i]),
                             min(len(ours), len(ref)))
                    print("FAIL %s %s: differs at byte %d\n  llama.cpp: %r\n  kvarenad:  %r\n%s" %
                          (tname, cname, n, ref[max(0, n - 60):n + 60], ours[max(0, n - 60):n + 60],
                           err.strip()))
                    fails += 1
                    continue
                print("ok   %s %s: %d bytes equal" % (tname, cname, len(ours)))
    for fam, replies in REPLIES.items():
        tpath = os.path.join(TDIR, FAMILIES[fam][0][0])
        cpath = os.path.join(tmp, "parse_conv.json")
        with open(cpath, "w") as f:
            json.dump(CONVS["tools_round"], f)
        for k, reply in enumerate(replies):
            checks += 1
            rpath = os.path.join(tmp, "reply.txt")
            with open(rpath, "w") as f:
                f.write(reply)
            rc, ours, err = run([RENDER, tpath, "--parse", rpath])
            rrc, ref, rerr = run([REF, "parse", tpath, cpath, rpath])
            if rc != 0 or rrc != 0:
                print("FAIL parse %s %d: %s %s" % (fam, k, err.strip(), rerr.strip()))
                fails += 1
                continue
            o, r = json.loads(ours), json.loads(ref)
            oc, rc_ = calls_of(o), calls_of(r)
            # llama.cpp keeps the newline that separates content from a
            # Hermes call, and the newlines around reasoning; we drop them
            # (the templates write them back), so they are not compared
            rcontent = r.get("content") or ""
            if oc and rcontent.endswith("\n"):
                rcontent = rcontent[:-1]
            same = ([(n, a) for n, a, _ in oc] == [(n, a) for n, a, _ in rc_] and
                    o["content"] == rcontent and
                    o["reasoning_content"] == (r.get("reasoning_content") or "").strip("\n"))
            # ids the model wrote are kept by both
            if fam in ("mistral-v3", "mistral-v7"):
                same = same and [i for _, _, i in oc] == [i for _, _, i in rc_]
            if not same:
                print("FAIL parse %s %d: %r\n  llama.cpp: %s\n  kvarenad:  %s" % (fam, k, reply, ref.decode().strip(),
                                                                                 ours.decode().strip()))
                fails += 1
                continue
            print("ok   parse %s %d: %d call(s), content and reasoning equal" % (fam, k, len(oc)))
    for fam, convs in BUILTIN.items():
        for cname in convs:
            checks += 1
            cpath = os.path.join(tmp, cname + ".json")
            with open(cpath, "w") as f:
                json.dump(CONVS[cname], f)
            rc, ours, err = run([RENDER, "--family", fam, os.devnull, cpath])
            rrc, ref, rerr = run([REF, "builtin", fam, cpath])
            if rc != 0 or rrc != 0 or ours != ref:
                print("FAIL builtin %s %s:\n  llama.cpp: %r\n  kvarenad:  %r %s %s" %
                      (fam, cname, ref, ours, err.strip(), rerr.strip()))
                fails += 1
                continue
            print("ok   builtin %s %s: %d bytes equal" % (fam, cname, len(ours)))
    # ChatML turns with tools or reasoning of their own: refused, not
    # rendered as chatml (the peer's copies, those it has)
    for tname in OTHERS:
        tpath = os.path.join(TDIR, tname)
        if not os.path.exists(tpath):
            continue
        checks += 1
        with open(os.path.join(tmp, "c.json"), "w") as f:
            json.dump(CONVS["plain"], f)
        rc, ours, err = run([RENDER, tpath, os.path.join(tmp, "c.json")])
        if rc != 2 or "family:" in err:
            print("FAIL %s: not refused (%d, %s)" % (tname, rc, err.strip()))
            fails += 1
        else:
            print("ok   %s: refused, of no family" % tname)
    # the shipped agent model's template (tools/train/export_gguf.py) is
    # recognised as chatml, the family it was trained in
    checks += 1
    src = open(os.path.join(os.path.dirname(__file__), "..", "..", "tools", "train",
                            "export_gguf.py")).read()
    agent = next(ast.literal_eval(n.value) for n in ast.parse(src).body
                 if isinstance(n, ast.Assign) and getattr(n.targets[0], "id", "") == "CHAT_TEMPLATE")
    tpath = os.path.join(tmp, "agent.jinja")
    with open(tpath, "w") as f:
        f.write(agent)
    with open(os.path.join(tmp, "c.json"), "w") as f:
        json.dump(CONVS["plain"], f)
    rc, ours, err = run([RENDER, tpath, os.path.join(tmp, "c.json")])
    if rc != 0 or "family: chatml" not in err:
        print("FAIL the agent model's template: %s" % err.strip())
        fails += 1
    else:
        print("ok   the agent model's template is chatml's")
print("llama-ref: %d checks, %d failed" % (checks, fails))
sys.exit(1 if fails else 0)
