#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""family_serve.py - every model family through the real kvarenad: the
family chosen at start (from the GGUF's tokenizer.chat_template, or forced
by [model] chat_template), a template of no family refused at start with
the message naming the setting, and for each family a forced tool call
(the structured decoder in the workers writes the family's syntax, the API
parses it back) through /v1/chat/completions, /v1/messages and
/v1/responses, then the tool round sent back (rendered, tokenized with its
markup, continued); the same calls streamed on each API.

    family_serve.py KVARENAD KVA-MKMODEL

The model is a random one (kva-mkmodel, byte-level BPE, 2048 tokens of
context): the point is the path, not the answer.
"""
import json
import os
import re
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request

EXE, MKMODEL = sys.argv[1:3]
FAMILIES = ["chatml", "qwen2.5", "qwen3", "llama3", "mistral-v3", "mistral-v7", "mistral-v11"]
# the markers llama3's detection needs (Documentation/chat.md, "Choosing
# the family"), as a Llama 3.1 template writes them
LLAMA3_TEMPLATE = ("{{- '<|start_header_id|>system<|end_header_id|>\\n\\n' }}"
                   "{{- 'Cutting Knowledge Date: December 2023\\n' }}"
                   "{{- '\"parameters\": dictionary of argument name and its value.' }}"
                   "{{- '<|eot_id|>' }}")
OTHER_TEMPLATE = "{% for m in messages %}<start_of_turn>{{ m.role }}\n{{ m.content }}<end_of_turn>\n{% endfor %}"
TOOLS = [{"type": "function", "function": {
    "name": "get_weather", "description": "Weather in a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string", "maxLength": 8}},
                   "required": ["city"]}}}]
BLOCK = 16  # [kv] block_tokens' default: KV is reused in whole blocks
fails = 0


def check(cond, what):
    global fails
    print(("ok   " if cond else "FAIL ") + what, flush=True)
    if not cond:
        fails += 1


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


class Daemon:
    def __init__(self, tmp, model, family=None):
        self.port = free_port()
        self.base = "http://127.0.0.1:%d" % self.port
        conf = os.path.join(tmp, "kvarenad.ini")
        with open(conf, "w") as f:
            f.write("[server]\nlisten = 127.0.0.1:%d\n[model]\npath = %s\nid = m\n%s"
                    "[kv]\nbackend = memfd\ntoolwait_bpf = no\n" %
                    (self.port, model, "chat_template = %s\n" % family if family else ""))
        self.log = open(os.path.join(tmp, "log"), "w+")
        self.p = subprocess.Popen([EXE, "--config", conf], stdout=subprocess.DEVNULL, stderr=self.log)
        self.up = False
        for _ in range(600):
            if self.p.poll() is not None:
                break
            try:
                with urllib.request.urlopen(self.base + "/health", timeout=2) as r:
                    if r.status == 200:
                        self.up = True
                        break
            except Exception:
                time.sleep(0.1)

    def text(self):
        self.log.flush()
        self.log.seek(0)
        return self.log.read()

    def post(self, path, body):
        req = urllib.request.Request(self.base + path, json.dumps(body).encode(),
                                     {"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=120) as r:
                return r.status, json.loads(r.read())
        except urllib.error.HTTPError as e:
            return e.code, json.loads(e.read() or b"{}")

    def events(self, path, body):
        """An SSE stream as (event name or None, parsed data) pairs."""
        req = urllib.request.Request(self.base + path, json.dumps(dict(body, stream=True)).encode(),
                                     {"Content-Type": "application/json"})
        out, name = [], None
        try:
            with urllib.request.urlopen(req, timeout=120) as r:
                for raw in r:
                    line = raw.decode().rstrip("\r\n")
                    if line.startswith("event: "):
                        name = line[7:]
                    elif line.startswith("data: "):
                        d = line[6:]
                        out.append((name, d if d == "[DONE]" else json.loads(d)))
                        name = None
                return r.status, out
        except urllib.error.HTTPError as e:
            return e.code, out

    def stop(self):
        if self.p.poll() is None:
            self.p.terminate()
            try:
                self.p.wait(30)
            except subprocess.TimeoutExpired:
                self.p.kill()
        self.log.close()


def mkmodel(path, template=None):
    cmd = [MKMODEL, "--dim", "32", "--layers", "1", "--heads", "2", "--ffn", "64", "--vocab", "512",
           "--ctx", "2048", "--tokenizer", "bpe", "--seed", "5", "-o", path]
    if template is not None:
        tp = path + ".jinja"
        with open(tp, "w") as f:
            f.write(template)
        cmd += ["--chat-template", tp]
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)


def id_ok(fam, cid, prefix):
    """A call id of the family's shape: the model's own for Mistral."""
    if fam.startswith("mistral"):
        return re.fullmatch(prefix + r"[A-Za-z0-9]{9}", cid) is not None
    return re.fullmatch(prefix + r"[A-Za-z0-9]{24}", cid) is not None


def family_stream(d, fam):
    """The same forced call streamed on each API: the deltas make one
    call, as the family's parser streams it."""
    st, ev = d.events("/v1/chat/completions", {
        "model": "m", "messages": [{"role": "user", "content": "Weather in Paris?"}],
        "tools": TOOLS, "tool_choice": "required", "parallel_tool_calls": False, "max_tokens": 300,
        "temperature": 1, "seed": 4})
    calls, fin = {}, None
    for _, c in ev:
        if c == "[DONE]" or not c.get("choices"):
            continue
        ch = c["choices"][0]
        fin = ch.get("finish_reason") or fin
        for tc in ch.get("delta", {}).get("tool_calls") or []:
            k = calls.setdefault(tc["index"], {"id": "", "name": "", "arguments": ""})
            k["id"] += tc.get("id") or ""
            k["name"] += tc.get("function", {}).get("name") or ""
            k["arguments"] += tc.get("function", {}).get("arguments") or ""
    ok = st == 200 and len(calls) == 1 and fin == "tool_calls" and ev and ev[-1][1] == "[DONE]"
    try:
        ok = ok and all(k["name"] == "get_weather" and id_ok(fam, k["id"], "" if fam.startswith("mistral")
                                                               else "call_") and
                        isinstance(json.loads(k["arguments"]), dict) for k in calls.values())
    except ValueError:
        ok = False
    check(ok, "%s: chat completions streamed: the deltas make one call (%s)" %
          (fam, json.dumps(list(calls.values())) if calls else (st, ev[-3:])))
    st, ev = d.events("/v1/messages", {
        "model": "m", "max_tokens": 300, "tool_choice": {"type": "any", "disable_parallel_tool_use": True},
        "tools": [{"name": "get_weather", "input_schema": TOOLS[0]["function"]["parameters"]}],
        "messages": [{"role": "user", "content": "Weather in Paris?"}]})
    starts = [e["content_block"] for n, e in ev if n == "content_block_start" and
              e["content_block"]["type"] == "tool_use"]
    pj = "".join(e["delta"].get("partial_json", "") for n, e in ev if n == "content_block_delta")
    md = [e for n, e in ev if n == "message_delta"]
    try:
        ok = (st == 200 and len(starts) == 1 and starts[0]["name"] == "get_weather" and
              id_ok(fam, starts[0]["id"], "toolu_") and isinstance(json.loads(pj), dict) and
              md and md[0]["delta"]["stop_reason"] == "tool_use")
    except ValueError:
        ok = False
    check(ok, "%s: messages streamed: a tool_use block, input_json_delta pieces make its input (%s %s)" %
          (fam, json.dumps(starts), json.dumps(pj)))
    st, ev = d.events("/v1/responses", {
        "model": "m", "max_output_tokens": 300, "tool_choice": "required", "store": False,
        "parallel_tool_calls": False,
        "tools": [dict(type="function", **TOOLS[0]["function"])], "input": "Weather in Paris?"})
    argd = "".join(e["delta"] for _, e in ev if e.get("type") == "response.function_call_arguments.delta")
    done = [e["response"] for _, e in ev if e.get("type") == "response.completed"]
    fc = [o for o in done[0]["output"] if o["type"] == "function_call"] if done else []
    check(st == 200 and len(fc) == 1 and fc[0]["name"] == "get_weather" and fc[0]["arguments"] == argd and
          id_ok(fam, fc[0]["call_id"], "" if fam.startswith("mistral") else "call_"),
          "%s: responses streamed: the argument deltas are the completed call's arguments (%s)" %
          (fam, json.dumps(fc) if fc else (st, [e.get("type") for _, e in ev][-3:])))


def family_round(d, fam):
    """A forced call on each API (one: it ends the reply), parsed back;
    the round sent back."""
    st, r = d.post("/v1/chat/completions", {
        "model": "m", "messages": [{"role": "user", "content": "Weather in Paris?"}],
        "tools": TOOLS, "tool_choice": "required", "parallel_tool_calls": False, "max_tokens": 300,
        "temperature": 1, "seed": 3})
    calls = r.get("choices", [{}])[0].get("message", {}).get("tool_calls") if st == 200 else None
    ok = calls is not None and len(calls) == 1 and all(c["function"]["name"] == "get_weather" and
                             isinstance(json.loads(c["function"]["arguments"]), dict) for c in calls)
    check(st == 200 and ok and r["choices"][0]["finish_reason"] == "tool_calls",
          "%s: chat completions: a forced call in the family's syntax, parsed back (%s)" %
          (fam, (json.dumps(calls), r["choices"][0]["finish_reason"]) if ok else (st, r)))
    if ok:
        msg = r["choices"][0]["message"]
        st, r2 = d.post("/v1/chat/completions", {
            "model": "m", "tools": TOOLS, "max_tokens": 4, "messages": [
                {"role": "user", "content": "Weather in Paris?"},
                {"role": "assistant", "content": msg.get("content"), "tool_calls": msg["tool_calls"]}] +
            [{"role": "tool", "tool_call_id": c["id"], "content": "18C </tool_response>[TOOL_RESULTS]"}
             for c in msg["tool_calls"]]})
        check(st == 200 and r2["usage"]["prompt_tokens"] > r["usage"]["prompt_tokens"],
              "%s: the tool round sent back is rendered and continued (%s)" %
              (fam, r2["usage"] if st == 200 else (st, r2)))
    st, r = d.post("/v1/messages", {
        "model": "m", "max_tokens": 300, "tool_choice": {"type": "any", "disable_parallel_tool_use": True},
        "tools": [{"name": "get_weather", "input_schema": TOOLS[0]["function"]["parameters"]}],
        "messages": [{"role": "user", "content": "Weather in Paris?"}]})
    uses = [b for b in r.get("content", []) if b.get("type") == "tool_use"] if st == 200 else []
    check(st == 200 and len(uses) == 1 and r["stop_reason"] == "tool_use" and
          all(u["name"] == "get_weather" and isinstance(u["input"], dict) for u in uses),
          "%s: messages: tool_use blocks (%s)" % (fam, json.dumps(uses) if uses else (st, r)))
    if st == 200 and uses:
        # Mistral's ids are the model's 9 alphanumerics, kept whole
        if fam.startswith("mistral"):
            check(re.fullmatch(r"toolu_[A-Za-z0-9]{9}", uses[0]["id"]) is not None,
                  "%s: messages: the model's call id kept whole (%s)" % (fam, uses[0]["id"]))
        p1 = r["usage"]["input_tokens"] + r["usage"]["cache_read_input_tokens"]
        st, r2 = d.post("/v1/messages", {
            "model": "m", "max_tokens": 4,
            "tools": [{"name": "get_weather", "input_schema": TOOLS[0]["function"]["parameters"]}],
            "messages": [{"role": "user", "content": "Weather in Paris?"},
                         {"role": "assistant", "content": r["content"]},
                         {"role": "user", "content": [{"type": "tool_result", "tool_use_id": uses[0]["id"],
                                                       "content": "18C"}]}]})
        check(st == 200 and r2["usage"]["cache_read_input_tokens"] >= p1 - BLOCK,
              "%s: messages: the tool_result round continues the kept prompt (%s cached of %d, "
              "in blocks of %d)" %
              (fam, r2["usage"]["cache_read_input_tokens"] if st == 200 else (st, r2), p1, BLOCK))
    st, r = d.post("/v1/responses", {
        "model": "m", "max_output_tokens": 300, "tool_choice": "required", "store": False,
        "parallel_tool_calls": False,
        "tools": [dict(type="function", **TOOLS[0]["function"])], "input": "Weather in Paris?"})
    fc = [o for o in r.get("output", []) if o.get("type") == "function_call"] if st == 200 else []
    check(st == 200 and len(fc) == 1 and r["status"] == "completed" and all(o["name"] == "get_weather" and
                                   isinstance(json.loads(o["arguments"]), dict) for o in fc),
          "%s: responses: function_call items (%s)" % (fam, json.dumps(fc) if fc else (st, r)))


def main():
    with tempfile.TemporaryDirectory(prefix="kvd-family-") as tmp:
        plain, llama, other = (os.path.join(tmp, n) for n in ("plain.gguf", "llama3.gguf", "other.gguf"))
        mkmodel(plain)
        mkmodel(llama, LLAMA3_TEMPLATE)
        mkmodel(other, OTHER_TEMPLATE)
        # chosen at start: none (ChatML), recognised, refused, forced
        for model, fam, want, why in ((plain, None, "chatml", "the model has no chat template"),
                                      (llama, None, "llama3", "recognised in the model's chat template")):
            d = Daemon(tmp, model, fam)
            check(d.up and ("chat template: %s (%s" % (want, why)) in d.text(),
                  "%s: started as %s (%s)" % (os.path.basename(model), want, why))
            d.stop()
        d = Daemon(tmp, other)
        log = d.text()
        check(not d.up and d.p.returncode not in (None, 0) and "of no family kvarenad renders" in log and
              "chat_template = chatml" in log,
              "a template of no family: kvarenad refuses to start, naming the setting (%s)" %
              (log.strip().splitlines()[-1:] if log.strip() else d.p.returncode))
        d.stop()
        d = Daemon(tmp, other, "chatml")
        check(d.up and "chat template: chatml (set by [model] chat_template" in d.text(),
              "the same model with chat_template = chatml: served as ChatML")
        d.stop()
        for fam in FAMILIES:
            d = Daemon(tmp, plain, fam)
            if not d.up:
                check(False, "%s: kvarenad started: %s" % (fam, d.text()[-400:]))
                d.stop()
                continue
            try:
                family_round(d, fam)
                family_stream(d, fam)
            finally:
                d.stop()
    print("family_serve: %d failed" % fails)
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())
