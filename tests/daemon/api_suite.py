#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""api_suite.py - kvarenad's HTTP API under bad input and load.

Runs against the scripted test server (spawned here) or, with
KVD_API_URL set, against any running server such as the real kvarenad:

  KVD_API_SERVER   test server binary to spawn (default
                   build/api/tests/kvd-api-testserver); it gets
                   --port 0 --port-file F --keys F --timeout 3 ...
  KVD_API_SERVER_CMD  a shell command starting another server (e.g. the
                   real kvarenad) with {port} and {keys} replaced by a free
                   port and a keys file ("NAME ID KEY..." lines; convert it
                   in a wrapper if the server wants another format); the
                   suite waits for GET /health 200 and may signal it
  KVD_API_URL      http://HOST:PORT of a running server instead
  KVD_API_SCRIPTED=1  the server answers the scripted commands of
                   tests/daemon/scripted_kvd.c (implied for the test server);
                   without it those tests are skipped, as are the ones that
                   need the test server's own flags
  KVD_API_KEY_A, KVD_API_KEY_A2, KVD_API_KEY_B   keys of tenant A (two) and
                   B; KVD_API_TENANT_A / _B their ids; KVD_API_MODEL
  KVD_API_ONLY     comma-separated test names to run

Every test ends by checking that GET /health still answers 200.
"""
import http.client
import json
import os
import re
import resource
import selectors
import signal
import socket
import subprocess
import sys
import tempfile
import time

HOST = "127.0.0.1"
PORT = None
KEY_A = os.environ.get("KVD_API_KEY_A", "alpha-key-000000000001")
KEY_A2 = os.environ.get("KVD_API_KEY_A2", "alpha-key-000000000002")
KEY_B = os.environ.get("KVD_API_KEY_B", "beta-key-0000000000001")
TENANT_A = int(os.environ.get("KVD_API_TENANT_A", "7"))
TENANT_B = int(os.environ.get("KVD_API_TENANT_B", "9"))
MODEL = os.environ.get("KVD_API_MODEL", "kvarena-test")
MODE = ("url" if "KVD_API_URL" in os.environ else
        "cmd" if "KVD_API_SERVER_CMD" in os.environ else "testserver")
SPAWNED = MODE != "url"         # we started it: signals allowed
SCRIPTED = MODE == "testserver" or os.environ.get("KVD_API_SCRIPTED") == "1"
SERVER = None           # subprocess when spawned
TMP = tempfile.mkdtemp(prefix="kvd-api-suite-")
KEYS_FILE = os.path.join(TMP, "keys")
LOG = os.path.join(TMP, "server.log")
CONTEXT = 200000        # the test server's context, bytes


class Fail(Exception):
    pass


def check(cond, what):
    if not cond:
        raise Fail(what)


# ------------------------------------------------------------ plumbing

def write_keys(extra=""):
    with open(KEYS_FILE, "w") as f:
        f.write("# name id keys...\n")
        f.write(f"alpha {TENANT_A} {KEY_A} {KEY_A2}\n")
        f.write(f"beta {TENANT_B} {KEY_B}\n")
        f.write(extra)


def spawn(args, port_file):
    exe = os.environ.get("KVD_API_SERVER", "build/api/tests/kvd-api-testserver")
    log = open(LOG, "ab")
    return subprocess.Popen([exe, "--port", "0", "--port-file", port_file] + args,
                            stdout=subprocess.DEVNULL, stderr=log)


def wait_port(proc, port_file, timeout=30):
    end = time.time() + timeout
    while time.time() < end:
        if proc.poll() is not None:
            return None
        try:
            with open(port_file) as f:
                p = f.read().strip()
            if p:
                return int(p)
        except FileNotFoundError:
            pass
        time.sleep(0.05)
    raise Fail("server did not start")


def start_command():
    """KVD_API_SERVER_CMD: any server, told its port and keys file."""
    global SERVER, PORT
    write_keys()
    with socket.socket() as s:
        s.bind((HOST, 0))
        PORT = s.getsockname()[1]
    cmd = os.environ["KVD_API_SERVER_CMD"].format(port=PORT, keys=KEYS_FILE)
    SERVER = subprocess.Popen("exec " + cmd, shell=True, stdout=subprocess.DEVNULL,
                              stderr=open(LOG, "ab"))
    end = time.time() + 120
    while time.time() < end:
        check(SERVER.poll() is None, f"server exited with {SERVER.returncode}")
        try:
            r, _ = request("GET", "/health", key=None, timeout=5)
            if r.status == 200:
                return
        except OSError:
            pass
        time.sleep(0.2)
    raise Fail("server not healthy after 120 s")


def start_server():
    global SERVER, PORT
    if MODE == "cmd":
        return start_command()
    write_keys()
    pf = os.path.join(TMP, "port")
    SERVER = spawn(["--keys", KEYS_FILE, "--timeout", "60", "--drain", "20",
                    "--context", str(CONTEXT), "--model", MODEL], pf)
    PORT = wait_port(SERVER, pf)
    check(PORT, "server exited at start")


def conn(timeout=30):
    return http.client.HTTPConnection(HOST, PORT, timeout=timeout)


def request(method, path, body=None, key=KEY_A, headers=None, timeout=30):
    c = conn(timeout)
    h = {"Content-Type": "application/json"}
    if key:
        h["Authorization"] = "Bearer " + key
    h.update(headers or {})
    if isinstance(body, (dict, list)):
        body = json.dumps(body)
    if isinstance(body, str):
        body = body.encode()
    c.request(method, path, body=body, headers=h)
    r = c.getresponse()
    data = r.read()
    c.close()
    return r, data


def chat(body, key=KEY_A, timeout=30):
    body = dict(body)
    body.setdefault("model", MODEL)
    r, data = request("POST", "/v1/chat/completions", body, key, timeout=timeout)
    try:
        j = json.loads(data)
    except ValueError:
        j = None
    return r.status, j, r


def user(text):
    return [{"role": "user", "content": text}]


def error_of(j, status, param="-", code="-"):
    check(isinstance(j, dict) and isinstance(j.get("error"), dict),
          f"not an OpenAI error body: {j}")
    e = j["error"]
    for k in ("message", "type", "param", "code"):
        check(k in e, f"error body lacks {k}: {e}")
    check(isinstance(e["message"], str) and e["message"], "empty error message")
    if param != "-":
        check(e["param"] == param, f"param {e['param']!r}, wanted {param!r} ({e['message']})")
    if code != "-":
        check(e["code"] == code, f"code {e['code']!r}, wanted {code!r} ({e['message']})")
    return e


def stream(body, key=KEY_A):
    """POST a streaming request; returns (status, events, raw text, ended
    with [DONE])."""
    body = dict(body, stream=True)
    body.setdefault("model", MODEL)
    c = conn()
    c.request("POST", "/v1/chat/completions", body=json.dumps(body),
              headers={"Authorization": "Bearer " + key,
                       "Content-Type": "application/json"})
    r = c.getresponse()
    if r.status != 200:
        data = r.read()
        c.close()
        return r.status, json.loads(data), data, False
    check(r.getheader("Content-Type", "").startswith("text/event-stream"),
          "stream content type")
    raw = b""
    try:
        raw = r.read()
    except http.client.IncompleteRead as e:
        raw = e.partial
    c.close()
    events, done = [], False
    for block in raw.decode().split("\n\n"):
        if not block.strip() or block.startswith(":"):
            continue
        check(block.startswith("data: "), f"not an SSE data line: {block!r}")
        payload = block[6:]
        check(not done, "data after [DONE]")
        if payload == "[DONE]":
            done = True
            continue
        events.append(json.loads(payload))
    return 200, events, raw, done


def metric(name, key=KEY_A):
    r, data = request("GET", "/metrics", key=key)
    check(r.status == 200, f"/metrics {r.status}")
    total = 0.0
    for line in data.decode().splitlines():
        if line.startswith(name + " ") or line.startswith(name + "{"):
            total += float(line.rsplit(" ", 1)[1])
    return total


def health_ok():
    r, data = request("GET", "/health", key=None)
    check(r.status == 200, f"/health answered {r.status} {data!r}")


def raw_exchange(payload, timeout=30):
    """Send bytes on a fresh socket, return everything the server says."""
    s = socket.create_connection((HOST, PORT), timeout=timeout)
    try:
        s.sendall(payload)
    except (BrokenPipeError, ConnectionResetError):
        pass
    out = b""
    try:
        while True:
            d = s.recv(65536)
            if not d:
                break
            out += d
    except (ConnectionResetError, socket.timeout):
        pass
    s.close()
    return out


def status_of(raw):
    m = re.match(rb"HTTP/1\.[01] (\d+)", raw)
    return int(m.group(1)) if m else None


def body_of(raw):
    head, _, body = raw.partition(b"\r\n\r\n")
    if b"chunked" in head.lower():
        out, rest = b"", body
        while rest:
            size, _, rest = rest.partition(b"\r\n")
            n = int(size, 16)
            if n == 0:
                break
            out, rest = out + rest[:n], rest[n + 2:]
        body = out
    return json.loads(body)


# ------------------------------------------------------------ tests

TESTS = []


def test(scripted=False, spawned=False, testserver=False):
    """scripted: needs the scripted replies; spawned: signals the server we
    started; testserver: starts test servers with their own flags."""
    def wrap(f):
        TESTS.append((f, scripted, spawned, testserver))
        return f
    return wrap


@test()
def routes_and_methods():
    health_ok()
    r, data = request("GET", "/v1/models")
    j = json.loads(data)
    check(r.status == 200 and j["object"] == "list", "models list")
    check(any(m["id"] == MODEL for m in j["data"]), "model listed")
    r, data = request("GET", "/v1/models/" + MODEL)
    check(r.status == 200 and json.loads(data)["id"] == MODEL, "model by id")
    r, data = request("GET", "/v1/models/no-such-model")
    check(r.status == 404, "unknown model id")
    error_of(json.loads(data), 404, code="model_not_found")
    # a path that is not UTF-8 still gets a JSON error
    raw = raw_exchange(b"GET /v1/\xff\xfe%ff HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
    check(status_of(raw) == 404, f"raw path: {raw[:60]!r}")
    error_of(body_of(raw), 404)
    # llama.cpp's server's names without /v1: the same routes, keys and all
    r, data = request("GET", "/models")
    check(r.status == 200 and json.loads(data)["data"][0]["id"] == MODEL, "GET /models")
    r, data = request("GET", "/v1/health", key=None)
    check(r.status == 200 and json.loads(data)["status"] == "ok", "GET /v1/health, no key")
    r, data = request("POST", "/chat/completions", {"model": MODEL, "messages": user("hi")})
    check(r.status == 200 and json.loads(data)["object"] == "chat.completion",
          f"POST /chat/completions: {r.status}")
    r, data = request("POST", "/completions", {"model": MODEL, "prompt": "hi", "max_tokens": 2})
    check(r.status == 200 and json.loads(data)["object"] == "text_completion",
          f"POST /completions: {r.status}")
    r, data = request("POST", "/chat/completions", {"model": MODEL, "messages": user("hi")}, key=None)
    check(r.status == 401, f"POST /chat/completions without a key: {r.status}, wanted 401")
    for method, path, want in (("GET", "/nope", 404), ("POST", "/v1/embeddings", 404),
                               ("POST", "/responses", 404), ("GET", "/chat/completions", 405),
                               ("GET", "/v1/chat/completions", 405),
                               ("DELETE", "/v1/chat/completions", 405),
                               ("POST", "/v1/models", 405), ("PUT", "/health", 405),
                               ("GET", "/v1/sessions/abc", 405)):
        r, data = request(method, path, "{}" if method in ("POST", "PUT") else None)
        check(r.status == want, f"{method} {path}: {r.status}, wanted {want}")
        error_of(json.loads(data), want)
        if want == 405:
            check(r.getheader("Allow"), f"{method} {path}: no Allow header")


@test()
def api_keys():
    for key, hdr in ((None, None), ("wrong-key-00000000000000", None),
                     (KEY_A[:-1], None), (KEY_A + "x", None),
                     (None, {"Authorization": "Basic " + KEY_A}),
                     (None, {"Authorization": "Bearer"})):
        st, j, r = None, None, None
        rr, data = request("POST", "/v1/chat/completions",
                           {"model": MODEL, "messages": user("hi")}, key=key, headers=hdr)
        check(rr.status == 401, f"key {key!r} {hdr}: {rr.status}, wanted 401")
        error_of(json.loads(data), 401, code="invalid_api_key")
        check("Bearer" in (rr.getheader("WWW-Authenticate") or ""), "WWW-Authenticate")
    r, _ = request("GET", "/v1/models", key=None)
    check(r.status == 401, "models without a key")
    r, _ = request("GET", "/metrics", key=None)
    check(r.status == 401, "metrics without a key")
    r, _ = request("GET", "/health", key=None)
    check(r.status == 200, "health is open")
    for key in (KEY_A, KEY_A2, KEY_B):
        st, j, _ = chat({"messages": user("hi")}, key=key)
        check(st == 200, f"valid key: {st} {j}")


@test()
def duplicate_headers():
    """A header a request may carry once, twice: a 400 naming it, whatever
    the two values (two keys, one of them valid; two lengths: the request
    smuggling shape)."""
    body = json.dumps({"model": MODEL, "messages": user("hi")}).encode()
    auth = b"Authorization: Bearer " + KEY_A.encode() + b"\r\n"
    base = b"Host: localhost\r\nContent-Type: application/json\r\n"
    length = b"Content-Length: %d\r\n" % len(body)
    for name, extra in (("Authorization", auth + b"Authorization: Bearer wrong-key-0000000000000\r\n"),
                        ("Authorization", auth + auth),
                        ("x-api-key", auth + b"x-api-key: " + KEY_A.encode() + b"\r\nX-Api-Key: " +
                         KEY_B.encode() + b"\r\n"),
                        ("Content-Length", auth + b"Content-Length: 2\r\n"),
                        ("Host", auth + b"Host: evil.example\r\n"),
                        ("Content-Type", auth + b"Content-Type: text/plain\r\n")):
        raw = raw_exchange(b"POST /v1/chat/completions HTTP/1.1\r\n" + base + length + extra +
                           b"Connection: close\r\n\r\n" + body)
        check(status_of(raw) == 400, f"{name} twice: {raw[:60]!r}")
        if b"\r\n\r\n" in raw and raw.split(b"\r\n\r\n", 1)[1]:
            e = error_of(body_of(raw), 400)
            check(name.lower() in e["message"].lower(), f"the message names {name}: {e['message']}")
    raw = raw_exchange(b"POST /v1/chat/completions HTTP/1.1\r\n" + base + length + auth +
                       b"Connection: close\r\n\r\n" + body)
    check(status_of(raw) == 200, f"each once: {raw[:60]!r}")


@test(scripted=True)
def tenant_per_key():
    for key, tid in ((KEY_A, TENANT_A), (KEY_A2, TENANT_A), (KEY_B, TENANT_B)):
        st, j, _ = chat({"messages": user("whoami")}, key=key)
        check(st == 200, f"whoami: {st}")
        got = j["choices"][0]["message"]["content"]
        check(got == f"tenant={tid}", f"key {key[:6]}...: {got}, wanted tenant={tid}")


VALID = {"model": MODEL, "messages": user("hello")}


def jb(d):
    return json.dumps(d).encode()


BAD = [
    # (body bytes, status, param or "-", code or "-")
    (b"", 400, None, "-"),
    (b"{", 400, None, "-"),
    (b"not json", 400, None, "-"),
    (b"[]", 400, None, "-"),
    (b'{"model": "' + MODEL.encode() + b'", "messages": [{"role": "user", "content": "\xff\xfe"}]}', 400, None, "-"),
    (b'{"model": "' + MODEL.encode() + b'", "messages": [{"role": "user", "content": "\xc3("}]}', 400, None, "-"),
    (b'{"model": "' + MODEL.encode() + b'", "messages": [{"role": "user", "content": "a\\u0000"}]}', 400, None, "-"),
    (jb({"messages": user("x")}), 400, "model", "-"),
    (jb({"model": "gpt-4o", "messages": user("x")}), 404, "model", "model_not_found"),
    (jb({"model": MODEL}), 400, "messages", "-"),
    (jb({"model": MODEL, "messages": "hi"}), 400, "messages", "-"),
    (jb({"model": MODEL, "messages": []}), 400, "messages", "-"),
    (jb({"model": MODEL, "messages": [{"role": "user"}]}), 400, "messages[0].content", "-"),
    (jb({"model": MODEL, "messages": [{"role": "user", "content": 3}]}), 400, "messages[0].content", "-"),
    (jb({"model": MODEL, "messages": [{"role": "wizard", "content": "x"}]}), 400, "messages[0].role", "-"),
    (jb({"model": MODEL, "messages": [{"role": "tool", "content": "x", "tool_call_id": "c"}]}), 400, "messages[0].tool_call_id", "-"),
    (jb(dict(VALID, temperature="hot")), 400, "temperature", "-"),
    (jb(dict(VALID, temperature=5)), 400, "temperature", "-"),
    (jb(dict(VALID, max_tokens=-1)), 400, "max_tokens", "-"),
    (jb(dict(VALID, max_tokens="9")), 400, "max_tokens", "-"),
    (jb(dict(VALID, stream="yes")), 400, "stream", "-"),
    (jb(dict(VALID, stop=["a", "b", "c", "d", "e"])), 400, "stop", "-"),
    (jb(dict(VALID, n=17)), 400, "n", "-"),
    (jb(dict(VALID, logprobs=True, top_logprobs=50)), 400, "top_logprobs", "-"),
    (jb(dict(VALID, tools={"a": 1})), 400, "tools", "-"),
    (jb(dict(VALID, tool_choice="required")), 400, "tool_choice", None),
    (jb(dict(VALID, tool_choice={"type": "function", "function": {"name": "f"}})), 400, "tool_choice.function.name", None),
    (jb(dict(VALID, response_format={"type": "json_schema"})), 400, "response_format.json_schema", None),
    (jb(dict(VALID, maxtokens=5)), 400, "maxtokens", "unknown_parameter"),
    (jb(dict(VALID, stream_options={"include_usage": True})), 400, "stream_options", "-"),
]


@test()
def bad_requests():
    for i, (body, status, param, code) in enumerate(BAD):
        r, data = request("POST", "/v1/chat/completions", body)
        check(r.status == status, f"bad[{i}] {body[:80]!r}: {r.status}, wanted {status}")
        check(r.getheader("Content-Type") == "application/json", "error content type")
        error_of(json.loads(data), status, param, code)
    # truncated JSON: prefixes of a valid body
    full = jb({"model": MODEL, "messages": user("h\u00e9llo"), "max_tokens": 3})
    for k in range(0, len(full), 7):
        r, data = request("POST", "/v1/chat/completions", full[:k])
        check(r.status == 400, f"prefix {k}: {r.status}")
        error_of(json.loads(data), 400)
    r, _ = request("POST", "/v1/chat/completions", full)
    check(r.status == 200, "the full body works")


@test()
def oversized_bodies():
    big = b"x" * (10 * 1024 * 1024)
    hdr = (b"POST /v1/chat/completions HTTP/1.1\r\nHost: localhost\r\nAuthorization: Bearer " +
           KEY_A.encode() + b"\r\nContent-Type: application/json\r\n")
    t0 = time.time()
    raw = raw_exchange(hdr + b"Content-Length: %d\r\n\r\n" % len(big) + big)
    check(status_of(raw) == 413, f"10 MB with Content-Length: {raw[:80]!r}")
    error_of(body_of(raw), 413)
    # chunked, no length: the server stops reading at the cap and closes
    s = socket.create_connection((HOST, PORT), timeout=30)
    s.sendall(hdr + b"Transfer-Encoding: chunked\r\n\r\n")
    sent, closed = 0, False
    chunk = b"%x\r\n" % 65536 + b"y" * 65536 + b"\r\n"
    try:
        while sent < len(big):
            s.sendall(chunk)
            sent += 65536
    except (BrokenPipeError, ConnectionResetError):
        closed = True
    if not closed:
        try:
            s.sendall(b"0\r\n\r\n")
            out = s.recv(4096)
            closed = out == b"" or status_of(out) == 413
        except (BrokenPipeError, ConnectionResetError):
            closed = True
    s.close()
    check(closed, "chunked 10 MB body was accepted")
    check(time.time() - t0 < 60, "oversized bodies took too long")


@test(scripted=True)
def prompt_too_long():
    st, j, _ = chat({"messages": user("z" * (CONTEXT + 10))})
    check(st == 400, f"too long: {st}")
    error_of(j, 400, code="context_length_exceeded")


@test()
def completion_and_stream():
    st, j, r = chat({"messages": user("hello"), "max_tokens": 30})
    check(st == 200, f"completion {st} {j}")
    check(j["object"] == "chat.completion" and j["id"].startswith("chatcmpl-"), "object/id")
    ch = j["choices"][0]
    check(ch["message"]["role"] == "assistant", "role")
    check(ch["finish_reason"] in ("stop", "length"), "finish_reason")
    u = j["usage"]
    check(u["total_tokens"] == u["prompt_tokens"] + u["completion_tokens"], "usage sums")
    check("cached_tokens" in u["prompt_tokens_details"], "cached tokens")
    check(r.getheader("x-request-id") == j["id"], "x-request-id")
    st, ev, raw, done = stream({"messages": user("hello"), "max_tokens": 30,
                                "stream_options": {"include_usage": True}})
    check(st == 200 and done, "stream ends with [DONE]")
    check(ev[0]["choices"][0]["delta"].get("role") == "assistant", "role first")
    check(all(e["object"] == "chat.completion.chunk" for e in ev), "chunk objects")
    check(len({e["id"] for e in ev}) == 1, "one id")
    fin = [e for e in ev if e["choices"] and e["choices"][0]["finish_reason"]]
    check(len(fin) == 1, "one finish chunk")
    check(ev[-1]["choices"] == [] and ev[-1]["usage"]["completion_tokens"] > 0,
          "usage chunk last, with empty choices")
    check(all(e["usage"] is None for e in ev[:-1]), "usage null before the last")
    st, ev, raw, done = stream({"messages": user("hello")})
    check(done and all("usage" not in e for e in ev), "no usage without include_usage")


TOOLS = [{"type": "function", "function": {
    "name": "get_weather", "description": "Current weather",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                   "required": ["city"]}}}]


def canonical_call(name, args):
    return f'<tool_call>\n{{"name": "{name}", "arguments": {args}}}\n</tool_call>'


@test(scripted=True)
def tool_calls():
    args = '{"city": "Paris \\u00e9"}'
    msgs = user("call get_weather " + args)
    st, j, _ = chat({"messages": msgs, "tools": TOOLS})
    check(st == 200, f"{st} {j}")
    m = j["choices"][0]["message"]
    check(j["choices"][0]["finish_reason"] == "tool_calls", "finish tool_calls")
    check(m["content"] is None and len(m["tool_calls"]) == 1, f"message {m}")
    tc = m["tool_calls"][0]
    check(tc["id"].startswith("call_") and tc["type"] == "function", "call id/type")
    check(tc["function"]["name"] == "get_weather", "name")
    check(tc["function"]["arguments"] == args, f"arguments verbatim: {tc['function']['arguments']!r}")
    # streamed: header delta then arguments
    st, ev, raw, done = stream({"messages": msgs, "tools": TOOLS})
    deltas = [d for e in ev if e["choices"] for d in e["choices"][0]["delta"].get("tool_calls", [])]
    check(len(deltas) >= 2, f"tool_call deltas {deltas}")
    check(deltas[0]["id"].startswith("call_") and deltas[0]["function"]["name"] == "get_weather"
          and deltas[0]["type"] == "function", "header delta")
    check("".join(d["function"].get("arguments", "") for d in deltas) == args, "arguments")
    check(all(d["index"] == 0 for d in deltas), "index 0")
    check(ev[-1]["choices"][0]["finish_reason"] == "tool_calls", "stream finish")
    check(not any(e["choices"][0]["delta"].get("content") for e in ev if e["choices"]),
          "no tag text leaked as content")
    # tool_choice none: the text is content
    st, j, _ = chat({"messages": msgs, "tools": TOOLS, "tool_choice": "none"})
    check(j["choices"][0]["message"]["content"] == canonical_call("get_weather", args),
          "tool_choice none keeps text")
    # parallel
    msgs3 = user('calls 3 get_weather {"city": "X"}')
    st, j, _ = chat({"messages": msgs3, "tools": TOOLS})
    check(len(j["choices"][0]["message"]["tool_calls"]) == 3, "three calls")
    check(len({c["id"] for c in j["choices"][0]["message"]["tool_calls"]}) == 3, "distinct ids")
    st, j, _ = chat({"messages": msgs3, "tools": TOOLS, "parallel_tool_calls": False})
    check(len(j["choices"][0]["message"]["tool_calls"]) == 1, "parallel_tool_calls false: one")
    check(j["choices"][0]["finish_reason"] == "tool_calls", "finish")
    st, ev, raw, done = stream({"messages": msgs3, "tools": TOOLS, "parallel_tool_calls": False})
    idx = {d["index"] for e in ev if e["choices"] for d in e["choices"][0]["delta"].get("tool_calls", [])}
    check(idx == {0} and done, "streamed, one call")
    # malformed call text stays content
    bad = '<tool_call>{"name": "get_weather", "arguments": oops}</tool_call>'
    st, j, _ = chat({"messages": user("say " + bad), "tools": TOOLS})
    check(j["choices"][0]["message"]["content"] == bad and
          not j["choices"][0]["message"].get("tool_calls"), "malformed stays content")


@test(scripted=True)
def byte_stable_turns():
    """Turn 2's cached prefix covers turn 1's prompt and its reply: the
    scripted orchestrator counts prompt bytes and matches by bytes."""
    args = '{"city": "Lyon"}'
    msgs = [{"role": "system", "content": "You are terse."}] + user("call get_weather " + args)
    st, j1, _ = chat({"messages": msgs, "tools": TOOLS})
    m = j1["choices"][0]["message"]
    msgs2 = msgs + [{"role": "assistant", "content": m["content"], "tool_calls": m["tool_calls"]},
                    {"role": "tool", "tool_call_id": m["tool_calls"][0]["id"], "content": "18C"}]
    st, j2, _ = chat({"messages": msgs2, "tools": TOOLS})
    check(st == 200, f"turn 2: {st} {j2}")
    gen = len(canonical_call("get_weather", args).encode())
    want = j1["usage"]["prompt_tokens"] + gen
    got = j2["usage"]["prompt_tokens_details"]["cached_tokens"]
    check(got == want, f"turn 2 cached {got}, wanted {want} (turn 1 prompt + its reply)")
    check(j2["choices"][0]["message"]["content"] == "Tool said: 18C", "tool result seen")
    check(j2["kvarena"]["session_id"] == j1["kvarena"]["session_id"], "same session")
    # a content turn, streamed, then the next turn
    msgs3 = msgs2 + [{"role": "assistant", "content": j2["choices"][0]["message"]["content"]}] + \
        user("say caf\u00e9 \u2615 done")
    st, ev, raw, done = stream({"messages": msgs3, "tools": TOOLS,
                                "stream_options": {"include_usage": True}})
    text = "".join(e["choices"][0]["delta"].get("content", "") for e in ev if e["choices"])
    check(text == "caf\u00e9 \u2615 done", f"streamed text {text!r}")
    p3 = ev[-1]["usage"]["prompt_tokens"]
    st, j4, _ = chat({"messages": msgs3 + [{"role": "assistant", "content": text}] + user("hi"),
                      "tools": TOOLS})
    got = j4["usage"]["prompt_tokens_details"]["cached_tokens"]
    check(got == p3 + len(text.encode()), f"turn 4 cached {got}, wanted {p3 + len(text.encode())}")
    # content and two calls in one reply, sent back as the client got them
    gen5 = ("Checking both.\n" + canonical_call("get_weather", '{"city": "A"}') + "\n" +
            canonical_call("get_weather", '{"city":"B"}'))
    msgs5 = msgs3 + [{"role": "assistant", "content": text}] + user("say " + gen5)
    st, j5, _ = chat({"messages": msgs5, "tools": TOOLS})
    m5 = j5["choices"][0]["message"]
    check(m5["content"] == "Checking both." and len(m5["tool_calls"]) == 2, f"turn 5 {m5}")
    msgs6 = msgs5 + [{"role": "assistant", "content": m5["content"], "tool_calls": m5["tool_calls"]}]
    msgs6 += [{"role": "tool", "tool_call_id": c["id"], "content": "ok"} for c in m5["tool_calls"]]
    st, j6, _ = chat({"messages": msgs6, "tools": TOOLS})
    want = j5["usage"]["prompt_tokens"] + len(gen5.encode())
    got = j6["usage"]["prompt_tokens_details"]["cached_tokens"]
    check(got == want, f"turn 6 cached {got}, wanted {want}")


@test(scripted=True)
def limits_stop_logprobs():
    st, j, _ = chat({"messages": user("long 50"), "max_tokens": 5})
    check(j["choices"][0]["finish_reason"] == "length", "max_tokens: length")
    check(j["usage"]["completion_tokens"] == 5, "five tokens")
    st, j, _ = chat({"messages": user("long 50"), "max_completion_tokens": 4})
    check(j["usage"]["completion_tokens"] == 4, "max_completion_tokens")
    st, j, _ = chat({"messages": user("say hello STOP world"), "stop": ["STOP", "zz"]})
    check(j["choices"][0]["message"]["content"] == "hello ", "stop sequence")
    st, j, _ = chat({"messages": user("say abcdef"), "logprobs": True, "top_logprobs": 2})
    lp = j["choices"][0]["logprobs"]["content"]
    check(len(lp) == j["usage"]["completion_tokens"], "one logprob per token")
    check("".join(x["token"] for x in lp) == "abcdef", "tokens")
    check(all(len(x["top_logprobs"]) == 2 and isinstance(x["bytes"], list) for x in lp), "top")
    st, ev, raw, done = stream({"messages": user("say abcdef"), "logprobs": True})
    n = sum(len((e["choices"][0].get("logprobs") or {}).get("content") or [])
            for e in ev if e["choices"])
    check(n == 2, f"streamed logprobs: {n}")


@test(scripted=True)
def errors_from_the_orchestrator():
    st, j, r = chat({"messages": user("busy")})
    check(st == 429 and r.getheader("Retry-After") == "2", f"busy: {st}")
    error_of(j, 429, code="rate_limit_exceeded")
    st, j, _ = chat({"messages": user("fail")})
    check(st == 500, f"fail: {st}")
    error_of(j, 500)
    st, ev, raw, done = stream({"messages": user("fail")})
    check(not done, "no [DONE] after an error")
    check("error" in ev[-1] and ev[-1]["error"]["message"], "error event last")
    check(any(e.get("choices") and e["choices"][0]["delta"].get("content") for e in ev[:-1]),
          "content before the error")


@test()
def session_delete():
    st, j, _ = chat({"messages": user("remember me")})
    sid = j["kvarena"]["session_id"]
    check(sid, "session id")
    r, data = request("DELETE", "/v1/sessions/" + sid, key=KEY_B)
    check(r.status == 404, "another tenant cannot delete it")
    error_of(json.loads(data), 404, code="session_not_found")
    r, data = request("DELETE", "/v1/sessions/" + sid, key=KEY_A)
    check(r.status == 200 and json.loads(data)["deleted"] is True, f"delete {r.status}")
    r, _ = request("DELETE", "/v1/sessions/" + sid, key=KEY_A)
    check(r.status == 404, "deleted twice")


def wait_metric(name, above, timeout=20):
    end = time.time() + timeout
    while time.time() < end:
        v = metric(name)
        if v > above:
            return v
        time.sleep(0.2)
    raise Fail(f"{name} stayed at {above}")


@test(scripted=True)
def client_disconnects():
    before = metric("kvd_scripted_jobs_cancelled_total")
    body = json.dumps({"model": MODEL, "messages": user("hold"), "stream": True}).encode()
    s = socket.create_connection((HOST, PORT), timeout=10)
    s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: localhost\r\nAuthorization: Bearer " +
              KEY_A.encode() + b"\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n"
              % len(body) + body)
    got = s.recv(4096)
    check(b"200" in got.split(b"\r\n")[0], "stream started")
    s.close()
    wait_metric("kvd_scripted_jobs_cancelled_total", before)
    # non-streaming: the handler waits for DONE and must notice the hang-up
    before = metric("kvd_scripted_jobs_cancelled_total")
    body = json.dumps({"model": MODEL, "messages": user("hold")}).encode()
    s = socket.create_connection((HOST, PORT), timeout=10)
    s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nAuthorization: Bearer " +
              KEY_A.encode() + b"\r\nContent-Length: %d\r\n\r\n" % len(body) + body)
    time.sleep(0.3)
    s.close()
    wait_metric("kvd_scripted_jobs_cancelled_total", before)
    # non-streaming, tokens arriving steadily (every 50 ms for 50 s): the
    # hang-up is still noticed
    before = metric("kvd_scripted_jobs_cancelled_total")
    body = json.dumps({"model": MODEL, "messages": user("slow 50 " + "x" * 3000)}).encode()
    s = socket.create_connection((HOST, PORT), timeout=10)
    s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nAuthorization: Bearer " +
              KEY_A.encode() + b"\r\nContent-Length: %d\r\n\r\n" % len(body) + body)
    time.sleep(0.5)
    s.close()
    wait_metric("kvd_scripted_jobs_cancelled_total", before, timeout=20)
    check(metric("kvarenad_http_client_disconnects_total") >= 3, "disconnects counted")


def server_threads():
    """The spawned server's thread count (/proc/PID/status)."""
    try:
        with open(f"/proc/{SERVER.pid}/status") as f:
            for line in f:
                if line.startswith("Threads:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


@test()
def thousand_connections():
    n = 1000
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < n + 200:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, n + 1024), hard))
    socks = []
    sel = selectors.DefaultSelector()
    try:
        for i in range(n):
            # from 8 loopback addresses: one address may hold 256 at most
            # (max_connections_per_ip); 127/8 is all loopback
            src = (f"127.0.0.{1 + i % 8}", 0) if HOST == "127.0.0.1" else None
            s = socket.create_connection((HOST, PORT), timeout=60, source_address=src)
            socks.append(s)
        # scripted: each reply takes over 1 s (its second token comes 1 s
        # after the first), so answering all within the 240 s below needs
        # them served concurrently (one at a time would take 1000 s)
        for i, s in enumerate(socks):
            text = f"slow 1000 n{i}" if SCRIPTED else f"say n{i}"
            body = json.dumps({"model": MODEL, "messages": user(text),
                               "max_tokens": 10}).encode()
            s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nConnection: close\r\n"
                      b"Authorization: Bearer " + KEY_A.encode() +
                      b"\r\nContent-Length: %d\r\n\r\n" % len(body) + body)
            s.setblocking(False)
            sel.register(s, selectors.EVENT_READ, [i, b""])
        left, end = n, time.time() + 240
        results = {}
        threads = 0
        while left and time.time() < end:
            if SERVER:
                # no thread per connection: a few event loops hold them all
                threads = max(threads, server_threads())
            for k, _ in sel.select(timeout=5):
                try:
                    d = k.fileobj.recv(65536)
                except (BlockingIOError, InterruptedError):
                    continue
                except ConnectionResetError:
                    d = b""
                if d:
                    k.data[1] += d
                    continue
                sel.unregister(k.fileobj)
                results[k.data[0]] = k.data[1]
                left -= 1
        check(left == 0, f"{left} of {n} connections unanswered")
        check(not SERVER or threads < 32, f"the server ran {threads} threads for {n} requests")
        ok = sum(1 for raw in results.values() if status_of(raw) == 200)
        if ok != n:
            bad = [raw[:120] for raw in results.values() if status_of(raw) != 200]
            print(f"     e.g. {bad[:3]}; no answer at all: {sum(1 for b in bad if not b)}")
        check(ok == n, f"only {ok} of {n} answered 200")
        if SCRIPTED:
            for i in (0, n // 2, n - 1):
                got = body_of(results[i])["choices"][0]["message"]["content"]
                check(got == f"n{i}", f"connection {i} got {got!r}")
    finally:
        for s in socks:
            s.close()


@test()
def slow_clients():
    """Slowloris: clients that trickle their headers, or send nothing, hold a
    connection each but never the server."""
    slow = []
    for i in range(60):
        s = socket.create_connection((HOST, PORT), timeout=30)
        s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n")
        slow.append(s)
    idle = [socket.create_connection((HOST, PORT), timeout=30) for i in range(20)]
    for rnd in range(3):
        for s in slow:
            s.sendall(b"X-Slow: 1\r\n")
        t = time.time()
        health_ok()
        st, j, _ = chat({"messages": user("hello")}, timeout=20)
        check(st == 200, "served while slow clients hang on")
        check(time.time() - t < 15, "slow clients delayed others")
        time.sleep(0.5)
    for s in slow + idle:
        s.close()


@test(testserver=True)
def idle_timeout():
    """A connection that sends nothing, or stops in the middle of its body,
    is closed after the connection timeout (2 s on this server)."""
    pf = os.path.join(TMP, "port-idle")
    p = spawn(["--timeout", "2"], pf)
    port = wait_port(p, pf)
    check(port, "server with a 2 s timeout did not start")
    try:
        idle = socket.create_connection((HOST, port), timeout=60)
        stall = socket.create_connection((HOST, port), timeout=60)
        stall.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n"
                      b"Content-Length: 100\r\n\r\n{\"model\"")
        t0 = time.time()
        for s, what in ((idle, "idle"), (stall, "stalled body")):
            try:
                d = s.recv(4096)
            except (ConnectionResetError, socket.timeout):
                d = b""
            check(time.time() - t0 < 60, f"{what} connection not closed")
            check(d == b"" or status_of(d) in (400, 408, 413), f"{what}: {d[:60]!r}")
            s.close()
        c = http.client.HTTPConnection(HOST, port, timeout=30)
        c.request("GET", "/health")
        check(c.getresponse().status == 200, "still serving")
        c.close()
    finally:
        p.send_signal(signal.SIGTERM)
        check(p.wait(30) == 0, "exit status")


@test()
def metrics_text():
    r, data = request("GET", "/metrics")
    check(r.status == 200, "metrics")
    check(r.getheader("Content-Type").startswith("text/plain; version=0.0.4"), "content type")
    text = data.decode()
    check('kvarenad_http_requests_total{route="chat_completions",code="200"}' in text, "200s")
    check('code="401"' in text and 'code="400"' in text, "4xx counted")
    for line in text.splitlines():
        check(line.startswith("#") or re.match(r'^[a-zA-Z_:][a-zA-Z0-9_:]*(\{[^}]*\})? [0-9.eE+-]+$', line),
              f"bad exposition line {line!r}")


def http_on(port, src, path="/health", key=None, timeout=10):
    """One request on a new connection from source address src: its status,
    or None when the server closed the connection without an answer."""
    s = socket.create_connection((HOST, port), timeout=timeout, source_address=(src, 0))
    try:
        auth = b"Authorization: Bearer " + key.encode() + b"\r\n" if key else b""
        s.sendall(b"GET " + path.encode() + b" HTTP/1.1\r\nHost: localhost\r\n" + auth +
                  b"Connection: close\r\n\r\n")
        got = b""
        while True:
            d = s.recv(65536)
            if not d:
                break
            got += d
    except (ConnectionResetError, BrokenPipeError):
        got = b""
    finally:
        s.close()
    return status_of(got) if got else None


def hold_on(port, src):
    """A kept-alive connection from src, once the server has answered on it."""
    s = socket.create_connection((HOST, port), timeout=10, source_address=(src, 0))
    s.sendall(b"GET /health HTTP/1.1\r\nHost: localhost\r\n\r\n")
    got = b""
    while b"\r\n\r\n" not in got or not got.endswith(b"}"):
        d = s.recv(65536)
        check(d, f"connection from {src} closed before its answer")
        got += d
    check(status_of(got) == 200, f"held connection from {src}: {got[:60]!r}")
    return s


@test(testserver=True)
def connection_limits():
    """One client (address) cannot take every connection: past
    max_connections_per_ip its new connections are closed at accept while
    another address is still served; past max_connections everyone's are;
    a closed connection frees its place."""
    pf = os.path.join(TMP, "port-limits")
    p = spawn(["--max-conn-per-ip", "4", "--max-conn", "7"], pf)
    port = wait_port(p, pf)
    check(port, "server did not start")
    held = []
    try:
        held = [hold_on(port, "127.0.0.1") for _ in range(4)]
        check(http_on(port, "127.0.0.1") is None,
              "a fifth connection from 127.0.0.1 was answered (per-address limit 4)")
        check(http_on(port, "127.0.0.2") == 200, "another address is not served")
        held += [hold_on(port, "127.0.0.2") for _ in range(3)]
        check(http_on(port, "127.0.0.3") is None,
              "an eighth connection was answered (limit 7 in all)")
        held.pop().close()      # one of 127.0.0.2's
        end, st = time.time() + 10, None
        while time.time() < end and st != 200:
            st = http_on(port, "127.0.0.3")
            time.sleep(0.1)
        check(st == 200, "a closed connection did not free its place")
        held.pop(0).close()     # one of 127.0.0.1's
        end, st = time.time() + 10, None
        while time.time() < end and st != 200:
            st = http_on(port, "127.0.0.1")
            time.sleep(0.1)
        check(st == 200, "127.0.0.1 not served again below its limit")
    finally:
        for s in held:
            s.close()
        p.send_signal(signal.SIGTERM)
        check(p.wait(30) == 0, "exit status")


@test(testserver=True)
def metrics_per_tenant():
    """/metrics: a tenant's key reads its own per-tenant series and no other
    tenant's; the metrics key reads every tenant's; it is no API key."""
    mkey = "metrics-key-0000000000001"
    pf = os.path.join(TMP, "port-metrics")
    p = spawn(["--keys", KEYS_FILE, "--metrics-key", mkey], pf)
    port = wait_port(p, pf)
    check(port, "server did not start")

    def get(key, path="/metrics"):
        c = http.client.HTTPConnection(HOST, port, timeout=30)
        c.request("GET", path, headers={"Authorization": "Bearer " + key} if key else {})
        r = c.getresponse()
        data = r.read().decode(errors="replace")
        c.close()
        return r.status, data

    try:
        for key, text in ((KEY_A, "alpha asks"), (KEY_B, "beta asks"), (KEY_B, "and again")):
            c = http.client.HTTPConnection(HOST, port, timeout=30)
            c.request("POST", "/v1/chat/completions",
                      json.dumps({"model": MODEL, "messages": user(text)}),
                      {"Authorization": "Bearer " + key, "Content-Type": "application/json"})
            r = c.getresponse()
            r.read()
            c.close()
            check(r.status == 200, f"completion {r.status}")
        a_line = 'kvarenad_tenant_requests_total{tenant="alpha"} 1'
        b_line = 'kvarenad_tenant_requests_total{tenant="beta"} 2'
        end = time.time() + 10      # counted when the connection's request ends
        while time.time() < end and b_line not in get(mkey)[1]:
            time.sleep(0.05)
        st, text = get(KEY_A)
        check(st == 200 and a_line in text and 'tenant="beta"' not in text,
              f"tenant alpha's view: its own series only ({st})")
        check("kvarenad_http_requests_total" in text, "alpha still sees the server's totals")
        st, text = get(KEY_B)
        check(st == 200 and b_line in text and 'tenant="alpha"' not in text,
              "tenant beta's view: its own series only")
        st, text = get(mkey)
        check(st == 200 and a_line in text and b_line in text and
              'kvarenad_tenant_prompt_tokens_total{tenant="beta"}' in text,
              "the metrics key reads every tenant's series")
        st, _ = get(None)
        check(st == 401, f"/metrics without a key: {st}")
        st, _ = get(mkey, "/v1/models")
        check(st == 401, f"the metrics key is no API key: {st}")
        st, _ = get("metrics-key-0000000000002")
        check(st == 401, f"a wrong metrics key: {st}")
    finally:
        p.send_signal(signal.SIGTERM)
        check(p.wait(30) == 0, "exit status")


@test(testserver=True)
def readiness_and_reload():
    SERVER.send_signal(signal.SIGUSR1)
    end = time.time() + 10
    while time.time() < end:
        r, data = request("GET", "/health", key=None)
        if r.status == 503:
            break
        time.sleep(0.1)
    check(r.status == 503 and json.loads(data)["status"] == "unavailable", "not ready: 503")
    SERVER.send_signal(signal.SIGUSR1)
    time.sleep(0.2)
    health_ok()
    # SIGHUP: beta's key replaced by gamma's
    gamma = "gamma-key-000000000003"
    with open(KEYS_FILE, "w") as f:
        f.write(f"alpha {TENANT_A} {KEY_A} {KEY_A2}\ngamma 11 {gamma}\n")
    SERVER.send_signal(signal.SIGHUP)
    end = time.time() + 10
    while time.time() < end:
        r, _ = request("GET", "/v1/models", key=gamma)
        if r.status == 200:
            break
        time.sleep(0.1)
    check(r.status == 200, "new key works after SIGHUP")
    r, _ = request("GET", "/v1/models", key=KEY_B)
    check(r.status == 401, "removed key refused after SIGHUP")
    st, j, _ = chat({"messages": user("whoami")}, key=gamma)
    check(j["choices"][0]["message"]["content"] == "tenant=11", "new tenant id")
    # an invalid table is refused and the old one kept
    with open(KEYS_FILE, "w") as f:
        f.write("alpha 7 short\n")
    SERVER.send_signal(signal.SIGHUP)
    time.sleep(0.5)
    r, _ = request("GET", "/v1/models", key=gamma)
    check(r.status == 200, "invalid reload kept the old keys")
    write_keys()
    SERVER.send_signal(signal.SIGHUP)
    end = time.time() + 10
    while time.time() < end:
        r, _ = request("GET", "/v1/models", key=KEY_B)
        if r.status == 200:
            break
        time.sleep(0.1)
    check(r.status == 200, "keys restored")


@test(testserver=True)
def listen_policy():
    pf = os.path.join(TMP, "port2")
    for args, want_up in ((["--listen", "0.0.0.0"], False),
                          (["--listen", "::"], False),
                          (["--listen", "0.0.0.0", "--allow-remote"], True),
                          (["--listen", "0.0.0.0", "--keys", KEYS_FILE], True),
                          (["--listen", "::1"], True),
                          (["--listen", "localhost"], False)):
        if os.path.exists(pf):
            os.unlink(pf)
        p = spawn(args, pf)
        port = wait_port(p, pf)
        if want_up:
            check(port, f"{args}: did not start")
            p.send_signal(signal.SIGTERM)
            check(p.wait(30) == 0, f"{args}: exit status")
        else:
            check(port is None and p.wait(30) != 0, f"{args}: started")
    with open(LOG, "rb") as f:
        log = f.read().decode(errors="replace")
    check("refusing to listen on 0.0.0.0 without API keys" in log, "refusal logged")
    check("WITHOUT API keys and beyond loopback" in log, "allow_remote warning logged")


@test(testserver=True)
def drain_timeout():
    """A stream that would never end is cut when the drain time is up; the
    server still exits cleanly (its job cancelled, nothing leaked)."""
    pf = os.path.join(TMP, "port-drain")
    p = spawn(["--drain", "1"], pf)
    port = wait_port(p, pf)
    check(port, "server did not start")
    body = json.dumps({"model": MODEL, "messages": user("hold"), "stream": True}).encode()
    s = socket.create_connection((HOST, port), timeout=30)
    s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n"
              b"Content-Length: %d\r\n\r\n" % len(body) + body)
    check(b" 200 " in s.recv(4096).split(b"\r\n")[0], "stream started")
    t0 = time.time()
    p.send_signal(signal.SIGTERM)
    try:
        rc = p.wait(60)
    except subprocess.TimeoutExpired:
        p.kill()
        raise Fail("server hung in drain")
    rest = b""
    try:
        while True:
            d = s.recv(4096)
            if not d:
                break
            rest += d
    except (ConnectionResetError, socket.timeout):
        pass
    s.close()
    check(rc == 0, f"exit status {rc}")
    check(b"[DONE]" not in rest, "a cut stream must not claim to be complete")
    check(time.time() - t0 < 30, "drain took too long")


@test(spawned=True)
def drain_on_sigterm():
    """SIGTERM: new connections are refused, the stream in flight ends
    normally, the server exits 0 (and ASan finds no leak)."""
    prompt = "slow 150 abcdefghijklmnopqr" if SCRIPTED else "Write a long story."
    body = json.dumps({"model": MODEL, "messages": user(prompt), "max_tokens": 64,
                       "stream": True}).encode()
    s = socket.create_connection((HOST, PORT), timeout=30)
    s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nAuthorization: Bearer " +
              KEY_A.encode() + b"\r\nContent-Length: %d\r\n\r\n" % len(body) + body)
    got = s.recv(4096)
    check(b" 200 " in got.split(b"\r\n")[0], "stream started")
    SERVER.send_signal(signal.SIGTERM)
    refused = False
    end = time.time() + 10
    while time.time() < end and not refused:
        try:
            c = socket.create_connection((HOST, PORT), timeout=2)
            c.close()
            time.sleep(0.05)
        except OSError:
            refused = True
    check(refused, "still accepting after SIGTERM")
    while True:
        d = s.recv(4096)
        if not d:
            break
        got += d
    s.close()
    check(b"data: [DONE]" in got, "the stream in flight finished")
    text = "".join(json.loads(line[6:])["choices"][0]["delta"].get("content", "")
                   for line in got.decode(errors="replace").split("\n")
                   if line.startswith("data: {") and '"choices":[{' in line)
    check(text == "abcdefghijklmnopqr" or not SCRIPTED, f"stream text {text!r}")
    check(SERVER.wait(60) == 0, f"exit status {SERVER.returncode} (ASan leak?)")


def main():
    only = set(filter(None, os.environ.get("KVD_API_ONLY", "").split(",")))
    global PORT
    if SPAWNED:
        start_server()
    else:
        m = re.match(r"https?://([^:/]+):(\d+)", os.environ["KVD_API_URL"])
        global HOST
        HOST, PORT = m.group(1), int(m.group(2))
    failed = 0
    t_all = time.time()
    for f, need_script, need_spawn, need_testserver in TESTS:
        name = f.__name__
        if only and name not in only:
            continue
        if ((need_script and not SCRIPTED) or (need_spawn and not SPAWNED) or
                (need_testserver and MODE != "testserver")):
            print(f"skip {name}")
            continue
        t0 = time.time()
        try:
            f()
            if name != "drain_on_sigterm":
                health_ok()
            print(f"ok   {name} ({time.time() - t0:.1f}s)", flush=True)
        except Exception as e:  # noqa: BLE001 - report and go on
            failed += 1
            print(f"FAIL {name}: {type(e).__name__}: {e}", flush=True)
            if SERVER and SERVER.poll() is not None:
                print(f"server exited with {SERVER.returncode}")
                break
    if SERVER and SERVER.poll() is None:
        SERVER.send_signal(signal.SIGTERM)
        try:
            if SERVER.wait(60) != 0:
                failed += 1
                print(f"FAIL server exit status {SERVER.returncode}")
        except subprocess.TimeoutExpired:
            SERVER.kill()
            failed += 1
            print("FAIL server did not stop")
    if failed and os.path.exists(LOG):
        with open(LOG, "rb") as f:
            tail = f.read()[-6000:].decode(errors="replace")
        print("--- server log tail\n" + tail)
    print(f"api_suite: {failed} failed, {time.time() - t_all:.0f}s")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
