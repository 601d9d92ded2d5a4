#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""serve_bench.py - make bench BENCH=serve: kvarenad under agent load, side
by side with llama.cpp's llama-server, same model, same machine, same run.

1. C = 16 and 64 concurrent multi-turn agent conversations (streamed),
   every one starting with the same system prompt (an agent's tool
   descriptions, ~300 tokens), then TURNS turns: the user's task, then
   tool results as the next messages; each reply is OUT tokens (ignore_eos,
   greedy: both servers generate exactly that many). Against kvarenad at
   its defaults and llama-server as its documentation recommends for
   multi-turn chat (-t CPUs -np C --cache-reuse 256 --metrics, the chatml
   template), both given the same KV memory (tokens). Each server gets a
   warm-up burst with another system prompt first (a fresh llama-server
   stalls on its first parallel burst). Reported per C: TTFT p50/p99,
   TPOT p50/p99 (per request), output tokens/s over the whole run, the
   fraction of prompt tokens reused (usage cached_tokens; llama-server's
   timings cache_n), kvarenad's sched_step_p99_us.
2. Resuming a conversation after the client's round trip (a tool result
   appended to a 2k-token history): TTFT with the KV kept in the arena
   against the same daemon with retention and the prefix cache off.
3. The same resume over the Responses API by previous_response_id (only
   the new item sent) against Chat Completions resending the history, on
   one daemon: request bytes and TTFT.

Rows (name value unit peer peer_value ratio; ratio = value / peer) go to
stdout as "ROW\t...". Goals (issue 34): serve_tps_C ratio >= 1.5 and
serve_ttft_p99_C ratio <= 1.0 at C = 16 and 64.

usage: serve_bench.py KVARENAD MODEL [LLAMA_SERVER]
       SERVE_BENCH_CONC="16 64" SERVE_BENCH_TURNS=4 SERVE_BENCH_OUT=32
"""
import http.client
import json
import os
import socket
import statistics
import subprocess
import sys
import threading
import time

EXE, MODEL = sys.argv[1:3]
LLAMA = sys.argv[3] if len(sys.argv) > 3 and sys.argv[3] else None
MODEL_ID = os.path.basename(MODEL).rsplit(".gguf", 1)[0]
CONC = [int(x) for x in os.environ.get("SERVE_BENCH_CONC", "16 64").split()]
TURNS = int(os.environ.get("SERVE_BENCH_TURNS", "4"))
OUT = int(os.environ.get("SERVE_BENCH_OUT", "32"))
# tokens of KV per conversation, both servers: a whole conversation must
# fit llama-server's slot (its -c is split among -np slots; the system
# prompt alone is about 1000 tokens of this model's vocabulary, and the
# fourth turn's prompt about 1700 with the replies and tool results: the
# model's whole 2048-token context, or llama-server refuses turn 3 or 4)
CTX_PER_CONV = int(os.environ.get("SERVE_BENCH_CTX", "2048"))
# the resumed history: about 2k tokens, inside the model's 2048 with the
# reply, the tool result and the next reply
HIST_TOKENS = 1800
CPUS = len(os.sched_getaffinity(0))

SYSTEM = ("You are a coding agent working in a repository. You have these tools: "
          "read_file(path) returns a file's text; write_file(path, content) "
          "writes one; list_dir(path) lists a directory; run_tests(target) runs "
          "the test suite of a target and returns its log; grep(pattern, path) "
          "searches the tree; git_diff() shows the working tree's changes. "
          "Work step by step: read before you write, run the tests after every "
          "change, and report what you changed and why. Keep answers short; "
          "call one tool at a time and wait for its result. ") * 3
WARM_SYSTEM = "You are a helpful assistant warming up the server. " * 8


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_ready(p, port, what):
    for _ in range(1800):
        if p.poll() is not None:
            raise RuntimeError(f"{what} exited {p.returncode}")
        try:
            c = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
            c.request("GET", "/health")
            if c.getresponse().status == 200:
                return
        except OSError:
            pass
        time.sleep(0.1)
    p.kill()
    raise RuntimeError(f"{what} did not start")


def start_kvarenad(conc, *extra):
    port = free_port()
    blocks = conc * CTX_PER_CONV // 16
    p = subprocess.Popen([EXE, "--model", MODEL, "--listen", f"127.0.0.1:{port}",
                          "--log-level", "warn", "--kv-blocks", str(max(blocks, 1024))]
                         + list(extra), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wait_ready(p, port, "kvarenad")
    return p, port


def start_llama(conc):
    port = free_port()
    p = subprocess.Popen([LLAMA, "-m", MODEL, "--host", "127.0.0.1", "--port", str(port),
                          "-t", str(CPUS), "-np", str(conc), "-c", str(conc * CTX_PER_CONV),
                          "--cache-reuse", "256", "--metrics", "--chat-template", "chatml",
                          "--no-webui"],
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wait_ready(p, port, "llama-server")
    return p, port


def stream(port, messages, max_tokens, ignore_eos=True):
    """TTFT (s), TPOT (s, this request's mean), completion tokens, content,
    prompt tokens, cached prompt tokens."""
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=900)
    body = {"model": MODEL_ID, "messages": messages, "max_tokens": max_tokens,
            "temperature": 0, "stream": True, "stream_options": {"include_usage": True},
            "ignore_eos": ignore_eos}
    t0 = time.monotonic()
    c.request("POST", "/v1/chat/completions", json.dumps(body),
              {"Content-Type": "application/json"})
    r = c.getresponse()
    if r.status != 200:
        raise RuntimeError(f"HTTP {r.status}: {r.read()[:300]}")
    first, last, text, usage, timings, pieces = None, None, "", None, None, 0
    for raw in r:
        line = raw.decode(errors="replace").strip()
        if not line.startswith("data: "):
            continue
        if line == "data: [DONE]":
            break
        ch = json.loads(line[6:])
        if ch.get("usage"):
            usage = ch["usage"]
        if ch.get("timings"):
            timings = ch["timings"]
        for choice in ch.get("choices", []):
            piece = choice.get("delta", {}).get("content")
            if piece:
                now = time.monotonic()
                if first is None:
                    first = now
                last = now
                pieces += 1
                text += piece
    c.close()
    end = time.monotonic()
    n = usage["completion_tokens"] if usage else pieces
    prompt = usage["prompt_tokens"] if usage else 0
    cached = 0
    if usage and usage.get("prompt_tokens_details"):
        cached = usage["prompt_tokens_details"].get("cached_tokens", 0) or 0
    elif timings:
        cached = timings.get("cache_n", 0) or 0
        prompt = prompt or (cached + timings.get("prompt_n", 0))
    ttft = (first or end) - t0
    tpot = ((last or end) - (first or end)) / (n - 1) if n > 1 else 0.0
    return ttft, tpot, n, text, prompt, cached


def pct(xs, q):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))] if xs else 0.0


def conversations(port, conc, system, turns, out):
    res = {"ttft": [], "tpot": [], "tokens": 0, "prompt": 0, "cached": 0, "errors": 0}
    lock = threading.Lock()

    def conv(i):
        msgs = [{"role": "system", "content": system},
                {"role": "user", "content": f"Task {i}: the test target t{i % 7} fails; "
                                            f"find out why and fix it."}]
        for turn in range(turns):
            try:
                ttft, tpot, n, text, prompt, cached = stream(port, msgs, out)
            except Exception as e:      # counted, reported; the run goes on
                with lock:
                    res["errors"] += 1
                print(f"# conversation {i} turn {turn}: {e}", file=sys.stderr)
                return
            with lock:
                res["ttft"].append(ttft)
                res["tpot"].append(tpot)
                res["tokens"] += n
                res["prompt"] += prompt
                res["cached"] += cached
            msgs += [{"role": "assistant", "content": text},
                     {"role": "user", "content": f"Tool result (run_tests t{i % 7}, step "
                                                 f"{turn}): 3 passed, 1 failed: "
                                                 f"test_{i}_{turn} expected {i * 7 + turn}"}]

    t0 = time.monotonic()
    th = [threading.Thread(target=conv, args=(i,)) for i in range(conc)]
    for t in th:
        t.start()
    for t in th:
        t.join()
    res["wall"] = time.monotonic() - t0
    return res


def metric(port, name):
    try:
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        c.request("GET", "/metrics")
        for line in c.getresponse().read().decode().splitlines():
            if line.startswith(name + " "):
                return float(line.split()[1])
    except OSError:
        pass
    return None


def run_one(start, conc):
    p, port = start(conc)
    try:
        conversations(port, conc, WARM_SYSTEM, 1, 4)     # warm-up burst
        res = conversations(port, conc, SYSTEM, TURNS, OUT)
        res["step_p99"] = metric(port, "kvarenad_sched_step_p99_us")
    finally:
        p.terminate()
        try:
            p.wait(60)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()
    return res


def row(name, value, unit, peer="-", peer_value=None, ratio=None):
    pv = "-" if peer_value is None else f"{peer_value:.3f}"
    rt = "-" if ratio is None else f"{ratio:.3f}"
    print(f"ROW\t{name}\t{value:.3f}\t{unit}\t{peer}\t{pv}\t{rt}", flush=True)


def load_test():
    for conc in CONC:
        k = run_one(start_kvarenad, conc)
        lp = run_one(start_llama, conc) if LLAMA else None
        tps = k["tokens"] / k["wall"]
        reuse = k["cached"] / k["prompt"] if k["prompt"] else 0.0
        print(f"# C={conc}: kvarenad {k['tokens']} tokens in {k['wall']:.1f} s, "
              f"{len(k['ttft'])} turns, {k['errors']} errors" +
              (f"; llama-server {lp['tokens']} tokens in {lp['wall']:.1f} s, "
               f"{len(lp['ttft'])} turns, {lp['errors']} errors" if lp else ""),
              file=sys.stderr)
        if lp:
            ltps = lp["tokens"] / lp["wall"]
            lreuse = lp["cached"] / lp["prompt"] if lp["prompt"] else 0.0
            row(f"serve_tps_{conc}_vs_llama_server", tps, "tok/s", "llama-server", ltps,
                tps / ltps if ltps else None)
            for q, tag in ((0.5, "p50"), (0.99, "p99")):
                a, b = pct(k["ttft"], q) * 1e3, pct(lp["ttft"], q) * 1e3
                row(f"serve_ttft_{tag}_{conc}_vs_llama_server", a, "ms", "llama-server", b,
                    a / b if b else None)
            for q, tag in ((0.5, "p50"), (0.99, "p99")):
                a, b = pct(k["tpot"], q) * 1e3, pct(lp["tpot"], q) * 1e3
                row(f"serve_tpot_{tag}_{conc}_vs_llama_server", a, "ms", "llama-server", b,
                    a / b if b else None)
            row(f"serve_prompt_reuse_{conc}_vs_llama_server", reuse, "fraction",
                "llama-server", lreuse, reuse / lreuse if lreuse else None)
        else:
            row(f"serve_tps_{conc}", tps, "tok/s")
            for q, tag in ((0.5, "p50"), (0.99, "p99")):
                row(f"serve_ttft_{tag}_{conc}", pct(k["ttft"], q) * 1e3, "ms")
                row(f"serve_tpot_{tag}_{conc}", pct(k["tpot"], q) * 1e3, "ms")
            row(f"serve_prompt_reuse_{conc}", reuse, "fraction")
        if k["step_p99"] is not None:
            row(f"serve_sched_step_p99_us_{conc}", k["step_p99"], "us")


def history(i, chars):
    """Varied build-log text of about `chars` characters."""
    words, n = [], 0
    while n < chars:
        w = f"step {i}.{len(words)} compiled module_{len(words) % 97} with {len(words) * 7 % 1000} warnings;"
        words.append(w)
        n += len(w) + 1
    return " ".join(words)


def history_chars(port, tokens):
    """Characters of history() that make about `tokens` prompt tokens."""
    _, _, _, _, n, _ = stream(port, [{"role": "user", "content": history(99, 2000)}], 1)
    return int(2000 * tokens / n)


def resume(retain):
    args = [] if retain else ["--no-retention", "--no-prefix-cache"]
    p, port = start_kvarenad(4, *args)
    out = []
    try:
        chars = history_chars(port, HIST_TOKENS)
        for i in range(5):
            msgs = [{"role": "system", "content": "You are a helpful assistant."},
                    {"role": "user", "content": history(i, chars)}]
            _, _, _, text, hist_tokens, _ = stream(port, msgs, 8)
            msgs += [{"role": "assistant", "content": text},
                     {"role": "user", "content": "tool result: build finished, 0 errors"}]
            ttft, _, _, _, _, _ = stream(port, msgs, 8)
            out.append(ttft)
    finally:
        p.terminate()
        p.wait()
    return statistics.median(out), hist_tokens


def stream_responses(port, body):
    """/v1/responses streamed: TTFT (s, the first output text delta) and the
    final response object; the request's bytes."""
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
    data = json.dumps(dict(body, stream=True)).encode()
    t0 = time.monotonic()
    c.request("POST", "/v1/responses", data, {"Content-Type": "application/json"})
    r = c.getresponse()
    if r.status != 200:
        raise RuntimeError(f"HTTP {r.status}: {r.read()[:200]}")
    ttft, final = None, None
    for raw in r:
        line = raw.decode().strip()
        if not line.startswith("data: "):
            continue
        ev = json.loads(line[6:])
        if ev["type"] == "response.output_text.delta" and ttft is None:
            ttft = time.monotonic() - t0
        elif ev["type"] in ("response.completed", "response.incomplete"):
            final = ev["response"]
            break
    c.close()
    return ttft or (time.monotonic() - t0), final, len(data)


def responses_resume():
    """The multi-turn agent workload's resume, both ways on one daemon: the
    Responses API sending only the new item (previous_response_id: the
    stored conversation, its KV kept) against Chat Completions resending
    the whole history. Request bytes and TTFT, medians of 5."""
    p, port = start_kvarenad(4)
    r_ttft, r_bytes, c_ttft, c_bytes = [], [], [], []
    try:
        chars = history_chars(port, HIST_TOKENS)
        for i in range(5):
            sys_text = "You are a helpful assistant."
            hist = history(100 + i, chars)
            # Responses: turn 1, then only the tool result
            _, first, _ = stream_responses(port, {"model": MODEL_ID, "instructions": sys_text,
                                                  "input": hist, "max_output_tokens": 8,
                                                  "temperature": 0})
            t, second, n = stream_responses(port, {"model": MODEL_ID, "instructions": sys_text,
                                                   "previous_response_id": first["id"],
                                                   "input": "tool result: build finished, 0 errors",
                                                   "max_output_tokens": 8, "temperature": 0})
            r_ttft.append(t)
            r_bytes.append(n)
            # Chat Completions: turn 1, then the whole history again
            msgs = [{"role": "system", "content": sys_text},
                    {"role": "user", "content": history(200 + i, chars)}]
            _, _, _, text, _, _ = stream(port, msgs, 8, ignore_eos=False)
            msgs += [{"role": "assistant", "content": text},
                     {"role": "user", "content": "tool result: build finished, 0 errors"}]
            body = {"model": MODEL_ID, "messages": msgs, "max_tokens": 8, "temperature": 0,
                    "stream": True, "stream_options": {"include_usage": True}}
            t, _, _, _, _, _ = stream(port, msgs, 8, ignore_eos=False)
            c_ttft.append(t)
            c_bytes.append(len(json.dumps(body).encode()))
            cached = second["usage"]["input_tokens_details"]["cached_tokens"]
            print(f"# responses resume {i}: {cached} of {second['usage']['input_tokens']} "
                  f"input tokens cached", file=sys.stderr)
    finally:
        p.terminate()
        p.wait()
    rb, cb = statistics.median(r_bytes), statistics.median(c_bytes)
    rt, ct = statistics.median(r_ttft), statistics.median(c_ttft)
    print(f"ROW\tresponses_resume_request_bytes\t{rb:.0f}\tbytes\tchat_resend\t{cb:.0f}\t{cb / rb:.1f}")
    print(f"ROW\tresponses_resume_ttft\t{rt * 1e3:.1f}\tms\tchat_resend\t{ct * 1e3:.1f}\t"
          f"{ct / rt:.2f}", flush=True)


def main():
    if not LLAMA:
        print("# no llama-server: kvarenad's figures alone "
              "(tools/bench/daemon/fetch-llama-server.sh builds the peer)", file=sys.stderr)
    load_test()
    kept, n = resume(True)
    recompute, _ = resume(False)
    print(f"ROW\tresume_ttft_2k_vs_recompute\t{kept * 1e3:.1f}\tms\trecompute\t"
          f"{recompute * 1e3:.1f}\t{recompute / kept:.1f}")
    print(f"# history: {n} prompt tokens", file=sys.stderr)
    responses_resume()


if __name__ == "__main__":
    main()
