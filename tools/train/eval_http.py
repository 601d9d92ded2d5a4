#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""eval_http.py - the agent model's held-out evaluation through kvarenad.

Owns the client side of the evaluation over the OpenAI-compatible HTTP API
(Documentation/api.md): the same held-out conversations as eval.py, sent
as chat completions with the four tools declared (corpus.TOOLS) and the
training system prompt ("You are a helpful assistant."), greedy
(temperature 0). Each tool call the server returns is executed for real
on this side - eval.execute(): calc evaluates, read_file and list_dir read
a scratch directory holding the conversation's files, c_compile_run
compiles with cc and runs - and its result goes back as a `tool` message,
until the model answers. Scoring and the table are eval.py's.

  eval_http.py --kvarenad BIN --model GGUF [--n 200]   starts kvarenad on a
                                free loopback port (memfd backend) and stops it
  eval_http.py --url http://127.0.0.1:8080 --model-id ID   a running server
  eval_http.py --kvarenad BIN --model GGUF --server-tools   kvarenad runs the
                                tools itself, in its sandbox (calc, calc2,
                                c_compile_run and talk conversations only:
                                a session's work directory starts empty, so
                                the file questions' paths are not in it)

With --server-tools the requests declare no tools: kvarenad's [tools]
enable = calc, read_file, list_dir, c_compile_run offers the training set's
declarations in the training order (Documentation/daemon.md), the model's
calls run server-side in the tool sandbox, their results are prefilled and
decoding continues within the one request; what ran is read from the
response's kvarena.tool_runs and scored as the client-side runs are.
"""
import argparse
import http.client
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.parse

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import corpus     # noqa: E402
import eval as ev  # noqa: E402

SYSTEM_TEXT = "You are a helpful assistant."
assert corpus.SYSTEM.startswith(SYSTEM_TEXT + "\n\n# Tools\n")


class Server:
    """A kvarenad child on a free loopback port, or a running one (url)."""

    def __init__(self, binary=None, model=None, url=None, key=None, workdir=None,
                 blocks=1024, extra=""):
        self.p = self.log = None
        self.key = key
        if url:
            u = urllib.parse.urlsplit(url)
            self.host, self.port = u.hostname, u.port or 80
            return
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.host, self.port = "127.0.0.1", s.getsockname()[1]
        conf = os.path.join(workdir, "kvarenad.conf")
        with open(conf, "w") as f:
            f.write("[server]\nlisten = 127.0.0.1:%d\n" % self.port)
            f.write("[model]\npath = %s\nid = agent\n" % os.path.abspath(model))
            f.write("[kv]\nbackend = memfd\ntoolwait_bpf = no\nblocks = %d\n" % blocks + extra)
        self.log = open(os.path.join(workdir, "kvarenad.log"), "w+")
        self.p = subprocess.Popen([binary, "--config", conf], stdout=self.log,
                                  stderr=self.log)
        end = time.time() + 180
        while time.time() < end:
            if self.p.poll() is not None:
                raise RuntimeError("kvarenad exited %d: %s" % (self.p.returncode, self.logtext()))
            try:
                if self.req("GET", "/health")[0] == 200:
                    return
            except OSError:
                pass
            time.sleep(0.2)
        self.close()
        raise RuntimeError("kvarenad did not become healthy in 180 s")

    def logtext(self):
        self.log.flush()
        with open(self.log.name) as f:
            return f.read()[-4000:]

    def req(self, method, path, body=None):
        c = http.client.HTTPConnection(self.host, self.port, timeout=600)
        h = {"Content-Type": "application/json"}
        if self.key:
            h["Authorization"] = "Bearer " + self.key
        c.request(method, path, json.dumps(body) if body is not None else None, h)
        r = c.getresponse()
        data = r.read()
        c.close()
        try:
            return r.status, json.loads(data)
        except ValueError:
            return r.status, data.decode(errors="replace")

    def model_id(self):
        st, r = self.req("GET", "/v1/models")
        if st != 200 or not r.get("data"):
            raise RuntimeError("GET /v1/models: %s %s" % (st, r))
        return r["data"][0]["id"]

    def close(self):
        if self.p:
            self.p.terminate()
            try:
                self.p.wait(60)
            except subprocess.TimeoutExpired:
                self.p.kill()
                self.p.wait()
            self.p = None


def run_one(srv, model, conv, tmp, usage, release=True):
    """The agent loop of one conversation over HTTP; (tool, arguments,
    answer, transcript) as eval.run_one."""
    root = os.path.join(tmp, "fs")
    shutil.rmtree(root, ignore_errors=True)
    os.makedirs(root)
    ev.make_fs(root, conv["expect"])
    msgs = [{"role": "system", "content": SYSTEM_TEXT},
            {"role": "user", "content": conv["messages"][0][1]}]
    calls, values, answer, session = [], [], None, None
    for _ in range(3):     # at most two tool rounds are expected
        st, r = srv.req("POST", "/v1/chat/completions", {
            "model": model, "messages": msgs, "tools": corpus.TOOLS, "temperature": 0,
            "max_tokens": 200})
        if st != 200:
            raise RuntimeError("POST /v1/chat/completions: %d %s" % (st, r))
        session = r.get("kvarena", {}).get("session_id", session)
        for k in ("prompt_tokens", "completion_tokens"):
            usage[k] += r["usage"][k]
        usage["cached_tokens"] += r["usage"].get("prompt_tokens_details", {}).get(
            "cached_tokens", 0)
        msg = r["choices"][0]["message"]
        tcs = msg.get("tool_calls") or []
        if not tcs:
            answer = msg.get("content") or ""
            msgs.append({"role": "assistant", "content": answer})
            break
        echo = {"role": "assistant", "content": msg.get("content"), "tool_calls": tcs}
        msgs.append(echo)
        for tc in tcs:    # the model was trained on one call per turn
            try:
                args = json.loads(tc["function"]["arguments"])
                if not isinstance(args, dict):
                    raise TypeError
                result, value = ev.execute(tc["function"]["name"], args, root, tmp)
                calls.append(tc["function"]["name"])
            except (ValueError, TypeError, KeyError):
                result, value = "error: bad tool call", None
                calls.append(None)
            values.append(value)
            msgs.append({"role": "tool", "tool_call_id": tc["id"], "content": result})
    if session and release:
        srv.req("DELETE", "/v1/sessions/" + session)
    t, g, f = ev.score(conv, calls, values, answer)
    return t, g, f, msgs


SERVER_FAMILIES = ("calc", "calc2", "c_compile_run", "talk")


def run_one_server(srv, model, conv, usage, release=True):
    """One conversation with the tools run by kvarenad: a single request;
    (tool, arguments, answer, transcript) as run_one."""
    msgs = [{"role": "system", "content": SYSTEM_TEXT},
            {"role": "user", "content": conv["messages"][0][1]}]
    st, r = srv.req("POST", "/v1/chat/completions", {
        "model": model, "messages": msgs, "temperature": 0, "max_tokens": 400})
    if st != 200:
        raise RuntimeError("POST /v1/chat/completions: %d %s" % (st, r))
    for k in ("prompt_tokens", "completion_tokens"):
        usage[k] += r["usage"][k]
    usage["cached_tokens"] += r["usage"].get("prompt_tokens_details", {}).get("cached_tokens", 0)
    runs = r.get("kvarena", {}).get("tool_runs") or []
    usage["tool_runs"] += len(runs)
    usage["sandboxed"] += sum(x["name"] in ("calc", "c_compile_run") for x in runs)
    msg = r["choices"][0]["message"]
    calls, values = [], []
    for x in runs:
        try:
            args = json.loads(x["arguments"])
            if not isinstance(args, dict):
                raise TypeError
        except (ValueError, TypeError):
            calls.append(None)
            values.append(None)
            continue
        calls.append(x["name"])
        out = x["output"].rstrip("\n") if x["exit_reason"] == "exit" and not x["exit_code"] \
            else None
        if x["name"] in ("calc",):
            try:
                values.append(int(out))
            except (TypeError, ValueError):
                values.append(None)
        elif x["name"] in ("read_file", "list_dir"):
            values.append(args.get("path") if out is not None else None)
        else:
            values.append(out)
        msgs.append({"role": "tool run", "content": "%s %s -> %s %r" % (
            x["name"], x["arguments"], x["exit_reason"], x["output"][:200])})
    # a call the daemon handed back instead of running (past max_rounds,
    # a tool it does not offer) is a call the evaluation did not see run
    for tc in msg.get("tool_calls") or []:
        calls.append(tc["function"]["name"])
        values.append(None)
    answer = None if msg.get("tool_calls") else (msg.get("content") or "")
    if answer is not None:
        msgs.append({"role": "assistant", "content": answer})
    session = r.get("kvarena", {}).get("session_id")
    if session and release:
        srv.req("DELETE", "/v1/sessions/" + session)
    t, g, f = ev.score(conv, calls, values, answer)
    return t, g, f, msgs


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--kvarenad", help="kvarenad binary to start")
    ap.add_argument("--model", help="GGUF for the started kvarenad")
    ap.add_argument("--url", help="a running kvarenad instead")
    ap.add_argument("--model-id", help="the served model's id (default: GET /v1/models)")
    ap.add_argument("--key", default=os.environ.get("KVARENAD_API_KEY"),
                    help="API key (default: $KVARENAD_API_KEY)")
    ap.add_argument("--kv-blocks", type=int, default=1024,
                    help="the started kvarenad's KV arena, in 16-token blocks (its default 1024)")
    ap.add_argument("--no-prefix-cache", dest="prefix_cache", action="store_false",
                    help="start kvarenad with [kv] prefix_cache = no")
    ap.add_argument("--keep-sessions", dest="release", action="store_false",
                    help="do not DELETE each conversation's session when it ends")
    ap.add_argument("--server-tools", action="store_true",
                    help="kvarenad runs the tools (calc, calc2, c_compile_run, talk conversations)")
    ap.add_argument("--n", type=int, default=200)
    ap.add_argument("--seed", type=int, default=2026)
    ap.add_argument("--show", type=int, default=3, help="print this many failed conversations")
    a = ap.parse_args()
    if not a.url and not (a.kvarenad and a.model):
        ap.error("give --kvarenad and --model, or --url")
    convs = corpus.generate(a.seed, a.n, "eval")
    skipped = 0
    if a.server_tools:
        skipped = sum(c["family"] not in SERVER_FAMILIES for c in convs)
        convs = [c for c in convs if c["family"] in SERVER_FAMILIES]
    table = ev.Table()
    usage = {"prompt_tokens": 0, "completion_tokens": 0, "cached_tokens": 0,
             "tool_runs": 0, "sandboxed": 0}
    shown = 0
    with tempfile.TemporaryDirectory(prefix="kvd-eval-") as tmp:
        extra = "" if a.prefix_cache else "prefix_cache = no\n"
        if a.server_tools and not a.url:
            extra += ("[tools]\nenable = calc, read_file, list_dir, c_compile_run\n"
                      "max_rounds = 3\nworkdir_root = %s\n" % os.path.join(tmp, "tools"))
        srv = Server(a.kvarenad, a.model, a.url, a.key, tmp, a.kv_blocks, extra)
        t0 = time.time()
        try:
            model = a.model_id or srv.model_id()
            for conv in convs:
                if a.server_tools:
                    t, g, f, transcript = run_one_server(srv, model, conv, usage, a.release)
                else:
                    t, g, f, transcript = run_one(srv, model, conv, tmp, usage, a.release)
                table.add(conv["family"], t, g, f)
                if not (t and g and f) and shown < a.show:
                    shown += 1
                    print("---- %s: tool %s, arguments %s, answer %s"
                          % (conv["family"], t, g, f))
                    for m in transcript:
                        print("[%s] %s" % (m["role"], m.get("content") if not m.get("tool_calls")
                                           else json.dumps(m["tool_calls"])))
        finally:
            srv.close()
    dt = time.time() - t0
    if a.server_tools:
        print("server-side tools: %d runs (%d of them spawned in the sandbox); %d file "
              "conversations not asked (their paths are outside a session's work directory)"
              % (usage["tool_runs"], usage["sandboxed"], skipped))
    table.print("kvarenad: %d conversations in %.1f s; prompt tokens %d (%d of them cached), "
                "completion tokens %d" % (len(convs), dt, usage["prompt_tokens"],
                                          usage["cached_tokens"], usage["completion_tokens"]))


if __name__ == "__main__":
    main()
