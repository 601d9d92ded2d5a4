#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""serve_bench.py - make bench BENCH=serve: kvarenad under agent load.

1. 16 concurrent multi-turn conversations (streamed) against one daemon
   on the 15M model: TTFT and TPOT p50/p99 and generated tokens/s.
2. Resuming a conversation after the client's round trip (a tool result
   appended to a 2k-token history): TTFT with the KV kept in the arena
   against the same daemon with retention and the prefix cache off (what a
   stateless server without a prefix cache does), same run.
3. The same resume over the Responses API by previous_response_id (only
   the new item sent) against Chat Completions resending the history, on
   one daemon: request bytes and TTFT.

Rows (name value unit peer peer_value ratio) go to stdout as "ROW\t...".
usage: serve_bench.py KVARENAD MODEL
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
MODEL_ID = os.path.basename(MODEL).rsplit(".gguf", 1)[0]


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start(*args):
    port = free_port()
    p = subprocess.Popen([EXE, "--model", MODEL, "--listen", f"127.0.0.1:{port}",
                          "--log-level", "warn", "--kv-blocks", "4096"] + list(args),
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    for _ in range(600):
        try:
            c = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
            c.request("GET", "/health")
            if c.getresponse().status == 200:
                return p, port
        except OSError:
            pass
        time.sleep(0.1)
    p.kill()
    raise RuntimeError("kvarenad did not start")


def stream(port, messages, max_tokens):
    """TTFT (s), gaps between tokens (s), content, usage."""
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
    body = {"model": MODEL_ID, "messages": messages, "max_tokens": max_tokens,
            "temperature": 0, "stream": True, "stream_options": {"include_usage": True}}
    t0 = time.monotonic()
    c.request("POST", "/v1/chat/completions", json.dumps(body),
              {"Content-Type": "application/json"})
    r = c.getresponse()
    if r.status != 200:
        raise RuntimeError(f"HTTP {r.status}: {r.read()[:200]}")
    ttft, last, gaps, text, usage = None, None, [], "", None
    for raw in r:
        line = raw.decode().strip()
        if not line.startswith("data: "):
            continue
        if line == "data: [DONE]":
            break
        ch = json.loads(line[6:])
        if ch.get("usage"):
            usage = ch["usage"]
        for choice in ch["choices"]:
            piece = choice["delta"].get("content")
            if piece is None:
                continue
            now = time.monotonic()
            if ttft is None and piece:
                ttft = now - t0
            elif last is not None and piece:
                gaps.append(now - last)
            if piece:
                last = now
            text += piece
    c.close()
    return ttft or (time.monotonic() - t0), gaps, text, usage


def pct(xs, q):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))] if xs else 0.0


def load_test():
    p, port = start()
    ttfts, gaps, tokens = [], [], [0]
    lock = threading.Lock()

    def conv(i):
        msgs = [{"role": "system", "content": "You are a helpful assistant."},
                {"role": "user", "content": f"Conversation {i}: plan the next step."}]
        for turn in range(3):
            ttft, g, text, usage = stream(port, msgs, 32)
            with lock:
                ttfts.append(ttft)
                gaps.extend(g)
                tokens[0] += usage["completion_tokens"] if usage else 0
            msgs += [{"role": "assistant", "content": text},
                     {"role": "user", "content": f"result of step {turn}: ok, continue"}]

    t0 = time.monotonic()
    th = [threading.Thread(target=conv, args=(i,)) for i in range(16)]
    for t in th:
        t.start()
    for t in th:
        t.join()
    wall = time.monotonic() - t0
    p.terminate()
    p.wait()
    print(f"ROW\tserve_16conv_ttft_p50\t{pct(ttfts, .5) * 1e3:.1f}\tms\t-\t-\t-")
    print(f"ROW\tserve_16conv_ttft_p99\t{pct(ttfts, .99) * 1e3:.1f}\tms\t-\t-\t-")
    print(f"ROW\tserve_16conv_tpot_p50\t{pct(gaps, .5) * 1e3:.2f}\tms\t-\t-\t-")
    print(f"ROW\tserve_16conv_tpot_p99\t{pct(gaps, .99) * 1e3:.2f}\tms\t-\t-\t-")
    print(f"ROW\tserve_16conv_tokens_per_s\t{tokens[0] / wall:.1f}\ttok/s\t-\t-\t-", flush=True)


def history(i, chars):
    """Varied build-log text of about `chars` characters."""
    words, n = [], 0
    while n < chars:
        w = f"step {i}.{len(words)} compiled module_{len(words) % 97} with {len(words) * 7 % 1000} warnings;"
        words.append(w)
        n += len(w) + 1
    return " ".join(words)


def chars_for(port, tokens):
    """Characters of history() text that make about `tokens` tokens."""
    msgs = [{"role": "user", "content": history(99, 4000)}]
    _, _, _, usage = stream(port, msgs, 1)
    return int(4000 * tokens / usage["prompt_tokens"])


def resume(retain):
    args = [] if retain else ["--no-retention", "--no-prefix-cache"]
    p, port = start(*args)
    out = []
    chars = chars_for(port, 2000)
    for i in range(5):
        msgs = [{"role": "system", "content": "You are a helpful assistant."},
                {"role": "user", "content": history(i, chars)}]
        _, _, text, usage = stream(port, msgs, 8)
        hist_tokens = usage["prompt_tokens"]
        msgs += [{"role": "assistant", "content": text},
                 {"role": "user", "content": "tool result: build finished, 0 errors"}]
        ttft, _, _, usage2 = stream(port, msgs, 8)
        out.append(ttft)
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
    p, port = start()
    chars = chars_for(port, 2000)
    r_ttft, r_bytes, c_ttft, c_bytes = [], [], [], []
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
        _, _, text, _ = stream(port, msgs, 8)
        msgs += [{"role": "assistant", "content": text},
                 {"role": "user", "content": "tool result: build finished, 0 errors"}]
        body = {"model": MODEL_ID, "messages": msgs, "max_tokens": 8, "temperature": 0,
                "stream": True, "stream_options": {"include_usage": True}}
        t, _, _, _ = stream(port, msgs, 8)
        c_ttft.append(t)
        c_bytes.append(len(json.dumps(body).encode()))
        cached = second["usage"]["input_tokens_details"]["cached_tokens"]
        print(f"# responses resume {i}: {cached} of {second['usage']['input_tokens']} "
              f"input tokens cached", file=sys.stderr)
    p.terminate()
    p.wait()
    rb, cb = statistics.median(r_bytes), statistics.median(c_bytes)
    rt, ct = statistics.median(r_ttft), statistics.median(c_ttft)
    print(f"ROW\tresponses_resume_request_bytes\t{rb:.0f}\tbytes\tchat_resend\t{cb:.0f}\t{cb / rb:.1f}")
    print(f"ROW\tresponses_resume_ttft\t{rt * 1e3:.1f}\tms\tchat_resend\t{ct * 1e3:.1f}\t"
          f"{ct / rt:.2f}", flush=True)


def main():
    load_test()
    kept, n = resume(True)
    recompute, _ = resume(False)
    print(f"ROW\tresume_ttft_2k_vs_recompute\t{kept * 1e3:.1f}\tms\trecompute\t"
          f"{recompute * 1e3:.1f}\t{recompute / kept:.1f}")
    print(f"# history: {n} prompt tokens", file=sys.stderr)
    responses_resume()


if __name__ == "__main__":
    main()
