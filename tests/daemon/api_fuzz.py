#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""api_fuzz.py - an attacker's requests to the four front ends: valid
bodies (chat completions, completions, responses, messages, each with
tools, tool rounds, schemas, reasoning and streaming) mutated at random,
the JSON tree (values replaced by other types, huge or negative numbers,
deep nesting, long or odd strings, keys dropped or added) and the bytes
(cut, flipped, invalid UTF-8), sent to the ASan/UBSan test server
(kvd-api-testserver, the front ends' real code over a scripted
orchestrator) rendering as each model family.

Every answer must be a status the API documents with a well-formed body
(JSON, or an event stream for a 200 stream) and an error object for a
4xx; a 5xx other than 503 is a finding; the server must answer /health
after every request and never die (a sanitizer report ends it). A failing
request is written to build/api/fuzz-fail-N.bin.

With --kvarenad, the same against the real daemon and the CPU engine (a
small GGUF, each family forced by [model] chat_template): the scheduler,
the structured decoder's schemas and grammars, and the sampling
parameters as they are served.

usage: api_fuzz.py KVD-API-TESTSERVER [SECONDS]
       api_fuzz.py --kvarenad KVARENAD MODEL.gguf [SECONDS]
(KVD_API_FUZZ_SEED=N replays a seed; KVD_API_FUZZ_ARGS adds the test
server's arguments, e.g. --server-tools)
"""
import copy
import http.client
import json
import os
import random
import socket
import subprocess
import sys
import tempfile
import time

REAL = sys.argv[1] == "--kvarenad"
EXE = sys.argv[2] if REAL else sys.argv[1]
GGUF = sys.argv[3] if REAL else None
SECONDS = float(sys.argv[4 if REAL else 2]) if len(sys.argv) > (4 if REAL else 2) else 20.0
MODEL = "kvarena-test"
KEY = "fuzz-key-alpha-00000001"
FAMILIES = ("chatml", "qwen3", "llama3", "mistral-v7", "qwen2.5")
OK_STATUS = {200, 400, 401, 404, 405, 413, 415, 429, 503}

TOOLS = [{"type": "function", "function": {
    "name": "get_weather", "description": "weather",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                   "required": ["city"]}}}]
CALL = {"id": "call_1", "type": "function",
        "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}}

SEEDS = [
    ("/v1/chat/completions", {"model": MODEL, "messages": [{"role": "user", "content": "say hi"}],
                              "max_tokens": 8}),
    ("/v1/chat/completions", {"model": MODEL, "stream": True, "stream_options": {"include_usage": True},
                              "messages": [{"role": "system", "content": "be brief"},
                                           {"role": "user", "content": "call get_weather {\"city\": \"Oslo\"}"}],
                              "tools": TOOLS, "tool_choice": "auto", "temperature": 0.5, "top_p": 0.9,
                              "stop": ["\n\n"], "seed": 7, "logprobs": True, "top_logprobs": 2}),
    ("/v1/chat/completions", {"model": MODEL, "messages": [
        {"role": "user", "content": [{"type": "text", "text": "say go"}]},
        {"role": "assistant", "content": None, "tool_calls": [CALL], "reasoning_content": "hm"},
        {"role": "tool", "tool_call_id": "call_1", "content": "18C"}],
        "tools": TOOLS, "tool_choice": {"type": "function", "function": {"name": "get_weather"}},
        "parallel_tool_calls": False, "n": 2, "reasoning_effort": "low",
        "chat_template_kwargs": {"enable_thinking": True}, "thinking_budget_tokens": 4}),
    ("/v1/chat/completions", {"model": MODEL, "messages": [{"role": "user", "content": "say {}"}],
                              "response_format": {"type": "json_schema", "json_schema": {
                                  "name": "x", "strict": True, "schema": {
                                      "type": "object", "properties": {
                                          "a": {"type": "array", "items": {"type": "integer"}, "maxItems": 3},
                                          "b": {"enum": ["x", "y"]}},
                                      "required": ["a"], "additionalProperties": False}}},
                              "logit_bias": {"5": -100}, "max_completion_tokens": 16}),
    ("/v1/chat/completions", {"model": MODEL, "messages": [{"role": "user", "content": "say {}"}],
                              "max_tokens": 24, "response_format": {"type": "json_schema", "json_schema": {
                                  "name": "tree", "schema": {
                                      "$ref": "#/$defs/node", "$defs": {"node": {
                                          "type": "object", "properties": {
                                              "id": {"type": "string", "pattern": "^[a-z]{2,8}$",
                                                     "minLength": 2, "maxLength": 8},
                                              "n": {"type": "number", "minimum": -5, "maximum": 5},
                                              "kids": {"type": "array", "minItems": 0, "maxItems": 2,
                                                       "items": {"$ref": "#/$defs/node"}},
                                              "kind": {"anyOf": [{"const": "a"}, {"type": "null"},
                                                                 {"type": "integer"}]}},
                                          "required": ["id"]}}}}}}),
    ("/v1/chat/completions", {"model": MODEL, "stream": True, "tools": TOOLS, "messages": [
        {"role": "user", "content": "call srv_echo {\"x\": 3}"}]}),
    ("/v1/responses", {"model": MODEL, "input": "call srv_echo {\"x\": 4}", "tools": [
        {"type": "function", "name": "get_weather", "parameters": {"type": "object"}}]}),
    ("/v1/completions", {"model": MODEL, "prompt": "say once", "max_tokens": 4, "echo": True,
                         "logprobs": 1, "n": 2, "stop": "x"}),
    ("/v1/completions", {"model": MODEL, "prompt": ["say a", "say b"], "stream": True}),
    ("/v1/responses", {"model": MODEL, "input": "say hi", "instructions": "short", "store": False}),
    ("/v1/responses", {"model": MODEL, "stream": True, "input": [
        {"role": "user", "content": [{"type": "input_text", "text": "say go"}]},
        {"type": "function_call", "call_id": "c1", "name": "get_weather", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "c1", "output": "18C"}],
        "tools": [{"type": "function", "name": "get_weather", "parameters": {"type": "object"}},
                  {"type": "custom", "name": "apply_patch", "format": {"type": "grammar",
                   "syntax": "lark", "definition": "start: /.+/"}}],
        "reasoning": {"effort": "minimal", "summary": "auto"}, "max_output_tokens": 32,
        "text": {"format": {"type": "json_object"}}, "include": ["reasoning.encrypted_content"]}),
    ("/v1/messages", {"model": MODEL, "max_tokens": 16, "system": [{"type": "text", "text": "sys"}],
                      "messages": [{"role": "user", "content": "say hi"}]}),
    ("/v1/messages", {"model": MODEL, "max_tokens": 16, "stream": True, "messages": [
        {"role": "user", "content": [{"type": "text", "text": "call get_weather {}"}]},
        {"role": "assistant", "content": [{"type": "thinking", "thinking": "t", "signature": ""},
                                          {"type": "tool_use", "id": "tu1", "name": "get_weather",
                                           "input": {"city": "Rome"}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "tu1",
                                      "content": [{"type": "text", "text": "20C"}]}]}],
        "tools": [{"name": "get_weather", "input_schema": {"type": "object"}}],
        "tool_choice": {"type": "tool", "name": "get_weather"},
        "thinking": {"type": "enabled", "budget_tokens": 8}, "stop_sequences": ["zz"]}),
    ("/v1/messages/count_tokens", {"model": MODEL, "messages": [{"role": "user", "content": "x"}],
                                   "tools": [{"name": "t", "input_schema": {"type": "object"}}]}),
    ("/tokenize", {"content": "hello <|im_end|>", "with_pieces": True}),
    ("/detokenize", {"tokens": [1, 2, 3]}),
]

ODD_STRINGS = ["", "\u0000", "\ud7ff\ue000", "<|im_start|>", "</tool_call>", "<think>",
               "[TOOL_CALLS]", "<|python_tag|>", "{\"a\":", "\\", "%s%n", "A" * 70000,
               "é" * 5000, "user", "assistant", "tool", "system", "developer", "function",
               "call_1", "get_weather", "auto", "none", "required", "json_schema", "text"]
KEYS = ["model", "messages", "role", "content", "tools", "tool_choice", "tool_calls",
        "tool_call_id", "name", "arguments", "parameters", "type", "stream", "n", "max_tokens",
        "stop", "response_format", "schema", "input", "output", "call_id", "items", "properties",
        "required", "enum", "anyOf", "$ref", "$defs", "minItems", "maxLength", "pattern",
        "format", "text", "thinking", "budget_tokens", "system", "previous_response_id",
        "logit_bias", "logprobs", "top_logprobs", "seed", "prompt", "echo", "tokens", "kvarena"]


def odd_value(rnd, depth=0):
    k = rnd.randrange(12)
    if k == 0:
        return None
    if k == 1:
        return rnd.choice([True, False])
    if k == 2:
        return rnd.choice([0, -1, 1, 2**31, 2**63 - 1, -2**63, 2**64, 10**40, 7])
    if k == 3:
        return rnd.choice([0.5, -1e308, 1e308, 1e-320, 3.0])
    if k == 4:
        return rnd.choice(ODD_STRINGS)
    if k == 5 and depth < 3:
        return [odd_value(rnd, depth + 1) for _ in range(rnd.randrange(4))]
    if k == 6 and depth < 3:
        return {rnd.choice(KEYS): odd_value(rnd, depth + 1) for _ in range(rnd.randrange(4))}
    if k == 7:
        v = "x"
        for _ in range(rnd.choice([10, 100, 800])):
            v = [v]
        return v
    if k == 8:
        return [{"role": "user", "content": "say x"}] * rnd.choice([1, 50, 300])
    return rnd.choice(KEYS)


def nodes(v, path=()):
    yield path, v
    if len(path) > 40:
        return
    if isinstance(v, dict):
        for k, x in v.items():
            yield from nodes(x, path + (k,))
    elif isinstance(v, list):
        for i, x in enumerate(v):
            yield from nodes(x, path + (i,))


def mutate_tree(rnd, body):
    b = copy.deepcopy(body)
    for _ in range(rnd.randrange(1, 4)):
        all_nodes = list(nodes(b))
        path, v = rnd.choice(all_nodes)
        if not path:
            continue
        parent = b
        for p in path[:-1]:
            parent = parent[p]
        last = path[-1]
        op = rnd.randrange(4)
        if op == 0:
            parent[last] = odd_value(rnd)
        elif op == 1 and isinstance(parent, dict):
            del parent[last]
        elif op == 2 and isinstance(v, (dict, list)):
            if isinstance(v, dict):
                v[rnd.choice(KEYS)] = odd_value(rnd)
            else:
                v.insert(rnd.randrange(len(v) + 1), odd_value(rnd))
        elif op == 3 and isinstance(v, list) and v:
            v.append(copy.deepcopy(rnd.choice(v)))
    return json.dumps(b, ensure_ascii=rnd.random() < 0.5).encode()


def mutate_bytes(rnd, raw):
    b = bytearray(raw)
    op = rnd.randrange(4)
    if op == 0 and b:
        del b[rnd.randrange(len(b)):]
    elif op == 1 and b:
        for _ in range(rnd.randrange(1, 8)):
            b[rnd.randrange(len(b))] = rnd.randrange(256)
    elif op == 2:
        i = rnd.randrange(len(b) + 1)
        b[i:i] = rnd.choice([b"\xff", b"\xc3", b"\xed\xa0\x80", b"\x00", b"\\u0000", b"\\ud800",
                             b"{", b"]", b",", b"\"", b"1e999999"])
    else:
        i = rnd.randrange(len(b) + 1)
        b[i:i] = b[i:i + rnd.randrange(1, 64)] * rnd.randrange(1, 4)
    return bytes(b)


class Server:
    def __init__(self, family):
        self.tmp = tempfile.mkdtemp(prefix="kvd-api-fuzz-")
        pf = os.path.join(self.tmp, "port")
        kf = os.path.join(self.tmp, "keys")
        with open(kf, "w") as f:
            f.write(f"alpha 7 {KEY}\n")
        # its log to a file: a pipe read only at the end fills and
        # blocks the server
        self.log = os.path.join(self.tmp, "log")
        if REAL:
            conf = os.path.join(self.tmp, "conf")
            with socket.socket() as so:
                so.bind(("127.0.0.1", 0))
                port = so.getsockname()[1]
            with open(pf, "w") as f:
                f.write(str(port))
            with open(conf, "w") as f:
                f.write(f"[server]\nlisten = 127.0.0.1:{port}\n"
                        f"[model]\npath = {GGUF}\nid = {MODEL}\nchat_template = {family}\n"
                        "[kv]\nbackend = memfd\ntoolwait_bpf = no\n"
                        f"[tenant.a]\nkey = {KEY}\n")
            cmd = [EXE, "--config", conf]
        else:
            cmd = [EXE, "--port", "0", "--port-file", pf, "--keys", kf,
                   "--chat-template", family, "--model", MODEL]
            cmd += os.environ.get("KVD_API_FUZZ_ARGS", "").split()
        with open(self.log, "wb") as lf:
            self.p = subprocess.Popen(cmd, stdout=lf, stderr=lf)
        for _ in range(1200):
            if os.path.exists(pf) and open(pf).read().strip() and self.healthy():
                return
            if self.p.poll() is not None:
                break
            time.sleep(0.05)
        raise RuntimeError(f"{EXE} did not start: {self.stop()[-2000:]}")

    def send(self, path, body):
        c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)
        c.request("POST", path, body=body, headers={"Content-Type": "application/json",
                                                    "Authorization": "Bearer " + KEY})
        r = c.getresponse()
        data = r.read()
        ctype = r.getheader("Content-Type") or ""
        c.close()
        return r.status, ctype, data

    def healthy(self):
        try:
            self.port = int(open(os.path.join(self.tmp, "port")).read())
            c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=10)
            c.request("GET", "/health")
            ok = c.getresponse().status == 200
            c.close()
            return ok
        except (OSError, ValueError):
            return False

    def stop(self):
        """Its log, less the request lines."""
        self.p.terminate()
        try:
            self.p.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.p.kill()
            self.p.wait()
        with open(self.log, "rb") as f:
            lines = f.read().decode(errors="replace").split("\n")
        return "\n".join(x for x in lines if " info api: " not in x)


def well_formed(status, ctype, data):
    """None when the answer is one the API documents, else why not."""
    if status not in OK_STATUS:
        return f"status {status}"
    if ctype.startswith("text/event-stream"):
        if status != 200:
            return "an event stream with an error status"
        for line in data.decode("utf-8").split("\n"):
            if line.startswith("data: ") and line != "data: [DONE]":
                json.loads(line[6:])
        return None
    j = json.loads(data)
    if status >= 400 and not (isinstance(j, dict) and isinstance(j.get("error"), dict) or
                              (isinstance(j, dict) and j.get("type") == "error")):
        return "an error without an error object"
    return None


def main():
    sys.setrecursionlimit(20000)
    seed = int(os.environ.get("KVD_API_FUZZ_SEED", str(int(time.time()))))
    rnd = random.Random(seed)
    print(f"api_fuzz: seed {seed}, {SECONDS:.0f} s over {len(FAMILIES)} families", flush=True)
    sent = found = 0
    by_status = {}
    per = SECONDS / len(FAMILIES)
    for fam in FAMILIES:
        s = Server(fam)
        end = time.time() + per
        try:
            while time.time() < end and found < 5:
                path, body = rnd.choice(SEEDS)
                raw = mutate_tree(rnd, body)
                if rnd.random() < 0.3:
                    raw = mutate_bytes(rnd, raw)
                if len(raw) > 4 << 20:	# api_suite's oversized_bodies has those
                    continue
                why = None
                try:
                    st, ctype, data = s.send(path, raw)
                    by_status[st] = by_status.get(st, 0) + 1
                    why = well_formed(st, ctype, data)
                except (OSError, http.client.HTTPException) as e:
                    why = f"no answer: {e!r}"
                except (ValueError, UnicodeDecodeError) as e:
                    why = f"a malformed body: {e!r}"
                sent += 1
                if why is None and not s.healthy():
                    why = "the server stopped answering /health"
                if why:
                    found += 1
                    name = f"build/api/fuzz-fail-{found}.bin"
                    os.makedirs("build/api", exist_ok=True)
                    with open(name, "wb") as f:
                        f.write(path.encode() + b"\n" + raw)
                    print(f"FAIL {fam} {path}: {why} (request in {name})", flush=True)
                    if s.p.poll() is not None:
                        print(s.stop()[-4000:], flush=True)
                        s = Server(fam)
        finally:
            err = s.stop()
            if "ERROR: AddressSanitizer" in err or "runtime error:" in err:
                found += 1
                print(f"FAIL {fam}: a sanitizer report\n{err[-4000:]}", flush=True)
    print(f"api_fuzz: {sent} requests, statuses {dict(sorted(by_status.items()))}, "
          f"{found} failed (seed {seed})", flush=True)
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
