#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""ttft.py - make bench BENCH=remote, its serving half (run inside network
namespace A by run-remote-bench.sh): the time until the first DECODED token
of a long prompt (prefill, then one decode step: a 2-token completion)
with decode on this host, against decode on the remote host B (the
session's whole KV fetched from A's arena by UCX first). Prefix cache and
retention off: every run prefills from scratch.

Also reads B's per-step log (--log-level debug): the first decode step's
KV fetch time against its compute time, i.e. the most that starting decode
layer by layer while later layers are still in flight could save.

Prints ROW lines: remote_ttft_vs_local, remote_first_decode_fetch_ms.
Arguments: KVARENAD MODEL TOKENS REPEATS KEY  (env: ADDR_A IF_A NS_B IF_B)
"""
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request

KVD, MODEL, TOKENS, REPEATS, KEY = sys.argv[1], sys.argv[2], int(sys.argv[3]), \
    int(sys.argv[4]), sys.argv[5]
E = os.environ
TMP = tempfile.mkdtemp(prefix="kvr-ttft-")
PORT = 18181
BLOCKS = TOKENS // 16 + 128


def http(body, timeout=900):
    req = urllib.request.Request("http://127.0.0.1:%d/v1/chat/completions" % PORT,
                                 data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=timeout) as r:
        return json.loads(r.read())


def wait_log(path, pattern, proc, timeout=300):
    end = time.time() + timeout
    while time.time() < end and proc.poll() is None:
        with open(path, errors="replace") as f:
            if re.search(pattern, f.read()):
                return True
        time.sleep(0.2)
    with open(path, errors="replace") as f:
        sys.stderr.write(f.read()[-2000:])
    return False


def start_a(remote):
    ini = os.path.join(TMP, "a.ini")
    with open(ini, "w") as f:
        f.write("""[server]
listen = 127.0.0.1:%d
[model]
path = %s
id = m
[kv]
backend = auto
blocks = %d
prefix_cache = no
retention = no
[workers]
prefill = 1
decode = %d
lease_per_token_ms = 500
[remote]
listen = %s:17171
secret_file = %s
decode = %d
ucx_tls = tcp
ucx_devices = %s
""" % (PORT, MODEL, BLOCKS, 0 if remote else 1, E["ADDR_A"], KEY, 1 if remote else 0,
           E["IF_A"]))
    log = os.path.join(TMP, "a.log")
    p = subprocess.Popen([KVD, "--config", ini], stdout=open(log, "w"), stderr=subprocess.STDOUT)
    if not wait_log(log, r"serving on http", p):
        sys.exit("ttft: A did not start")
    b = None
    if remote:
        blog = os.path.join(TMP, "b.log")
        b = subprocess.Popen(["ip", "netns", "exec", E["NS_B"], KVD, "--worker-of",
                              "%s:17171" % E["ADDR_A"], "--model", MODEL, "--secret-file", KEY,
                              "--backend", "auto", "--kv-blocks", str(BLOCKS), "--role", "decode",
                              "--ucx-tls", "tcp", "--ucx-devices", E["IF_B"],
                              "--log-level", "debug"],
                             stdout=open(blog, "w"), stderr=subprocess.STDOUT)
        if not wait_log(log, r"decode worker \d+ ready", b):
            sys.exit("ttft: B did not join")
    return p, b


def stop(p, b):
    for q in (p, b):
        if q and q.poll() is None:
            q.terminate()
            q.wait(30)


def prompt(i, words):
    return " ".join("r%dw%d" % (i, k) for k in range(words))


def measure(remote, words):
    p, b = start_a(remote)
    times, ntok = [], 0
    try:
        http({"model": "m", "messages": [{"role": "user", "content": "warm up"}],
              "max_tokens": 2, "temperature": 0})
        for i in range(REPEATS):
            t0 = time.time()
            d = http({"model": "m", "messages": [{"role": "user",
                                                  "content": prompt(i, words)}],
                      "max_tokens": 2, "temperature": 0})
            times.append((time.time() - t0) * 1000)
            ntok = d["usage"]["prompt_tokens"]
    finally:
        stop(p, b)
    return statistics.median(times), ntok


# words for ~TOKENS prompt tokens, measured once
p, b = start_a(False)
d = http({"model": "m", "messages": [{"role": "user", "content": prompt(99, 40)}],
          "max_tokens": 1, "temperature": 0})
stop(p, b)
per_word = d["usage"]["prompt_tokens"] / 40
words = max(1, int((TOKENS - 16) / per_word))

local_ms, n = measure(False, words)
remote_ms, _ = measure(True, words)
kv_mib = n * 32 * 2 * 8 * 128 * 2 / (1 << 20)
print("ttft: %d-token prompt (%.0f MiB of KV): first decoded token %.0f ms on one host, "
      "%.0f ms with decode on the remote host" % (n, kv_mib, local_ms, remote_ms), flush=True)
print("ROW\tremote_ttft_vs_local\t%.1f\tms\tlocal_%dtok\t%.1f\t%.3f" %
      (remote_ms, n, local_ms, remote_ms / local_ms))

with open(os.path.join(TMP, "b.log"), errors="replace") as f:
    steps = re.findall(r"\(decode, 1 seqs\): fetched (\d+) KiB in ([\d.]+) ms, "
                       r"computed in ([\d.]+) ms", f.read())
# the measured requests' first decode steps (not the warm-up's): those
# that fetched the whole prompt's KV
firsts = [s for s in steps if int(s[0]) * 1024 >= 0.9 * n * 32 * 2 * 8 * 128 * 2]
if firsts:
    fetch = statistics.median(float(s[1]) for s in firsts)
    comp = statistics.median(float(s[2]) for s in firsts)
    print("ttft: first decode step on B: fetched %s KiB in %.1f ms, computed in %.1f ms: "
          "layer-wise overlap would save at most %.1f%% of it" %
          (firsts[0][0], fetch, comp, 100 * min(fetch, comp) / (fetch + comp)), flush=True)
    print("ROW\tremote_first_decode_fetch_ms\t%.1f\tms\tdecode_compute_ms\t%.1f\t%.3f" %
          (fetch, comp, min(fetch, comp) / (fetch + comp)))
subprocess.run(["rm", "-rf", TMP])
