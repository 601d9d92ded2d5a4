#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""api_server_tools.py - the HTTP layer's side of server-side tools, over
the scripted orchestrator (kvd-api-testserver --server-tools, which declares
one tool, srv_echo, and answers "srv ARGS" with a call to it, then a
TOOL_RUN event when the request offered it, then "Done."; "srvmix ARGS"
mixes it with a client call). Checks: the declaration is appended to the
prompt (not with tool_choice none, not over a client tool of the same
name); a call the orchestrator ran is not a tool call for the client and is
reported in kvarena.tool_runs (non-streaming) or a kvarena.tool_run chunk
(streaming); calls it did not run reach the client as tool_calls, in order.

usage: api_server_tools.py KVD-API-TESTSERVER
"""
import http.client
import json
import os
import subprocess
import sys
import tempfile
import time

EXE = sys.argv[1]
passed = failed = 0


def check(cond, what):
    global passed, failed
    if cond:
        passed += 1
        print(f"ok   {what}", flush=True)
    else:
        failed += 1
        print(f"FAIL {what}", flush=True)


def post(port, body, stream=False):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    c.request("POST", "/v1/chat/completions", json.dumps(body),
              {"Content-Type": "application/json"})
    r = c.getresponse()
    if stream:
        chunks = []
        for raw in r:
            line = raw.decode().strip()
            if line == "data: [DONE]":
                chunks.append("[DONE]")
                break
            if line.startswith("data: "):
                chunks.append(json.loads(line[6:]))
        c.close()
        return r.status, chunks
    data = json.loads(r.read())
    c.close()
    return r.status, data


def body(msg, **kw):
    b = {"model": "kvarena-test", "messages": [{"role": "user", "content": msg}]}
    b.update(kw)
    return b


def main():
    tmp = tempfile.mkdtemp(prefix="kvd-api-stools-")
    pf = os.path.join(tmp, "port")
    p = subprocess.Popen([EXE, "--port", "0", "--port-file", pf, "--server-tools"],
                         stdout=subprocess.DEVNULL)
    try:
        for _ in range(200):
            if os.path.exists(pf) and open(pf).read().strip():
                break
            time.sleep(0.05)
        port = int(open(pf).read())
        st, plain = post(port, body("say hi", tool_choice="none"))
        st2, offered = post(port, body("say hi"))
        check(st == 200 and st2 == 200 and offered["usage"]["prompt_tokens"] >
              plain["usage"]["prompt_tokens"] + 100,
              "the server's declaration is in the prompt, not with tool_choice none "
              f"({offered['usage']['prompt_tokens']} vs {plain['usage']['prompt_tokens']} bytes)")

        st, r = post(port, body('srv {"x": 1}'))
        msg = r["choices"][0]["message"]
        runs = r["kvarena"].get("tool_runs")
        check(st == 200 and "tool_calls" not in msg and msg["content"] == "Done." and
              r["choices"][0]["finish_reason"] == "stop",
              "a call the orchestrator ran is not the client's: content 'Done.', finish stop")
        check(runs and len(runs) == 1 and runs[0]["name"] == "srv_echo" and
              runs[0]["arguments"] == '{"x": 1}' and runs[0]["output"] == 'echo: {"x": 1}' and
              runs[0]["exit_reason"] == "exit" and runs[0]["exit_code"] == 0 and
              runs[0]["round"] == 1, f"kvarena.tool_runs reports it: {runs}")

        st, ch = post(port, body('srv {"x": 2}', stream=True), stream=True)
        objs = [c for c in ch if c != "[DONE]"]
        calls = [c for c in objs for d in c["choices"] if d["delta"].get("tool_calls")]
        trun = [c["kvarena"]["tool_run"] for c in objs if "tool_run" in c.get("kvarena", {})]
        text = "".join(d["delta"].get("content") or "" for c in objs for d in c["choices"])
        fin = [d["finish_reason"] for c in objs for d in c["choices"] if d["finish_reason"]]
        check(st == 200 and ch[-1] == "[DONE]" and not calls and text == "Done." and
              fin == ["stop"], "streaming: no tool-call chunk for it, then 'Done.', finish stop")
        check(len(trun) == 1 and trun[0]["output"] == 'echo: {"x": 2}',
              "streaming: one chunk with kvarena.tool_run")

        st, r = post(port, body('srvmix {"x": 3}'))
        tc = r["choices"][0]["message"].get("tool_calls") or []
        check(st == 200 and [c["function"]["name"] for c in tc] == ["srv_echo", "calc"] and
              r["choices"][0]["finish_reason"] == "tool_calls" and
              r["kvarena"].get("tool_runs") == [],
              "mixed with a client call: both calls go to the client, in order, none ran")
        st, ch = post(port, body('srvmix {"x": 4}', stream=True), stream=True)
        heads = [d["delta"]["tool_calls"][0] for c in ch if c != "[DONE]"
                 for d in c["choices"] if d["delta"].get("tool_calls") and
                 "id" in d["delta"]["tool_calls"][0]]
        args = "".join(d["delta"]["tool_calls"][0]["function"].get("arguments", "")
                       for c in ch if c != "[DONE]" for d in c["choices"]
                       if d["delta"].get("tool_calls") and
                       d["delta"]["tool_calls"][0]["index"] == 0)
        check([(h["index"], h["function"]["name"]) for h in heads] ==
              [(0, "srv_echo"), (1, "calc")] and args == '{"x": 4}',
              "streaming, mixed: the held call is released first with its arguments")

        mine = [{"type": "function", "function": {"name": "srv_echo", "parameters": {}}}]
        st, r = post(port, body('srv {"x": 5}', tools=mine))
        tc = r["choices"][0]["message"].get("tool_calls") or []
        check(st == 200 and len(tc) == 1 and tc[0]["function"]["name"] == "srv_echo" and
              "tool_runs" not in r["kvarena"],
              "a client tool named srv_echo stays the client's: its call is returned")
        st, r = post(port, body('srv {"x": 6}', parallel_tool_calls=False))
        check(st == 200 and r["choices"][0]["message"]["content"] == "Done." and
              len(r["kvarena"]["tool_runs"]) == 1,
              "parallel_tool_calls false does not cut a server-side round")
    finally:
        p.terminate()
        p.wait(30)
    print(f"{passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
