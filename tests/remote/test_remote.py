#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""test_remote.py - kvarenad on two "hosts": network namespaces A and B
joined by a veth pair (tests/remote/run-remote.sh makes them and runs this
inside A), each side its own kvarenad with its own arena, UCX over TCP on
the veth.

  1. one host (A alone): the reference greedy replies;
  2. prefill on B, decode on A: the same replies, the second turn of a
     conversation too (B fetches the first turn's KV from A's arena); the
     KV event stream, read by a real ZeroMQ subscriber, matches A's prefix
     cache (live blocks = kvarenad_kv_blocks_cached, every chain's parent
     stored before it); the routers' metric names are served;
  3. decode on B, prefill on A: the same replies;
  4. failures, with B's transfer stalled half-way (kvarenad-hooks,
     KVR_TEST_STALL_MS): B killed; the link between the hosts cut and
     restored; A's lease running out first. Each time the request
     completes with the reference reply, A holds no block beyond its
     prefix cache, B gives back every block it held, and B rejoins;
  5. refusals: a host with the wrong key, a host with another model.

Environment (from run-remote.sh): NS_A NS_B IF_A IF_B ADDR_A ADDR_B.
Arguments: KVARENAD KVARENAD_HOOKS MODEL OTHER_MODEL SUBSCRIBER
"""
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

KVD, HOOKS, MODEL, OTHER, SUBSCRIBER = sys.argv[1:6]
E = os.environ
TMP = tempfile.mkdtemp(prefix="kvr-remote-")
KEY = os.path.join(TMP, "key")
BADKEY = os.path.join(TMP, "badkey")
PORT_HTTP = 18080
PORT_JOIN = 17070
EVENTS = "tcp://127.0.0.1:15557"
procs = []
fails = 0


def check(cond, what):
    global fails
    print(("ok   " if cond else "FAIL ") + what, flush=True)
    if not cond:
        fails += 1


def write_key(path, seed):
    with open(path, "w") as f:
        f.write(seed * 4 + "\n")
    os.chmod(path, 0o600)


class Proc:
    def __init__(self, name, argv, ns=None, env=None):
        self.name = name
        self.log = os.path.join(TMP, name + ".log")
        full = (["ip", "netns", "exec", ns] if ns else []) + argv
        self.p = subprocess.Popen(full, stdout=open(self.log, "w"), stderr=subprocess.STDOUT,
                                  env=dict(E, **(env or {})))
        procs.append(self)

    def text(self):
        with open(self.log, errors="replace") as f:
            return f.read()

    def wait_log(self, pattern, timeout=30):
        end = time.time() + timeout
        while time.time() < end:
            if re.search(pattern, self.text()):
                return True
            if self.p.poll() is not None:
                return bool(re.search(pattern, self.text()))
            time.sleep(0.1)
        return False

    def stop(self, sig=signal.SIGTERM):
        if self.p.poll() is None:
            self.p.send_signal(sig)
            try:
                self.p.wait(20)
            except subprocess.TimeoutExpired:
                self.p.kill()
                self.p.wait()


def http(path, body=None, timeout=120):
    req = urllib.request.Request("http://127.0.0.1:%d%s" % (PORT_HTTP, path),
                                 data=json.dumps(body).encode() if body else None,
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def metrics():
    _, t = http("/metrics")
    out = {}
    for line in t.splitlines():
        if line and not line.startswith("#"):
            k, _, v = line.rpartition(" ")
            out[k] = float(v)
    return out


def start_a(local_prefill=1, local_decode=1, remote_prefill=0, remote_decode=0, extra=""):
    ini = os.path.join(TMP, "a.ini")
    with open(ini, "w") as f:
        f.write("""[server]
listen = 127.0.0.1:%d
[model]
path = %s
id = m
[kv]
backend = memfd
blocks = 128
[workers]
prefill = %d
decode = %d
[remote]
listen = %s:%d
secret_file = %s
prefill = %d
decode = %d
ucx_tls = tcp
ucx_devices = %s
heartbeat_ms = 300
timeout_ms = 1500
[events]
endpoint = %s
%s
""" % (PORT_HTTP, MODEL, local_prefill, local_decode, E["ADDR_A"], PORT_JOIN, KEY,
           remote_prefill, remote_decode, E["IF_A"], EVENTS, extra))
    a = Proc("a", [KVD, "--config", ini])
    ok = a.wait_log(r"serving on http", 60)
    check(ok, "A serves")
    return a


def start_b(name, binary=None, role="any", key=KEY, model=MODEL, env=None, extra=()):
    return Proc(name, [binary or KVD, "--worker-of", "%s:%d" % (E["ADDR_A"], PORT_JOIN),
                       "--model", model, "--secret-file", key, "--backend", "memfd",
                       "--role", role, "--ucx-tls", "tcp", "--ucx-devices", E["IF_B"],
                       "--retry-ms", "200"] + list(extra), ns=E["NS_B"], env=env)


def chat(messages, max_tokens=24):
    st, t = http("/v1/chat/completions", {"model": "m", "messages": messages,
                                           "max_tokens": max_tokens, "temperature": 0})
    if st != 200:
        return None, t
    d = json.loads(t)
    return d["choices"][0]["message"]["content"], d["usage"]


PROMPTS = [
    "hello there, how are you today? tell me a story about a cat",
    "What is the capital of France? Answer in one word, then explain the history.",
]
# one long prompt per failure case: a case must prefill its own (the prefix
# cache would serve the others' blocks)
LONGS = [" ".join("%s%d and some more text" % (w, i) for i in range(16))
         for w in ("word", "item", "thing")]


def conversation():
    """Two turns: the second repeats the first and its reply."""
    m = [{"role": "system", "content": "You are a helpful assistant."},
         {"role": "user", "content": "Count the legs of a spider, please."}]
    r1, _ = chat(m)
    m = m + [{"role": "assistant", "content": r1 or ""},
             {"role": "user", "content": "And of two spiders? Explain it step by step."}]
    r2, u2 = chat(m)
    return [r1, r2], u2


def sampled():
    """Sampling state that travels with every step (seeded), and a
    grammar-constrained reply."""
    st, t = http("/v1/chat/completions", {
        "model": "m", "messages": [{"role": "user", "content": "Name three colours."}],
        "max_tokens": 24, "temperature": 0.9, "seed": 7, "top_k": 8,
        "frequency_penalty": 0.7, "logit_bias": {"5": 3}})
    a = json.loads(t)["choices"][0]["message"]["content"] if st == 200 else "HTTP %d" % st
    st, t = http("/v1/chat/completions", {
        "model": "m", "messages": [{"role": "user", "content": "Give me a JSON object."}],
        "max_tokens": 24, "temperature": 0, "response_format": {"type": "json_object"}})
    b = json.loads(t)["choices"][0]["message"]["content"] if st == 200 else "HTTP %d" % st
    return [a, b]


def replies():
    out = [chat([{"role": "user", "content": p}])[0] for p in PROMPTS]
    conv, usage2 = conversation()
    return out + conv + sampled(), usage2


def stop_all():
    for p in procs:		# A first: B sees it go
        p.stop()
    procs.clear()


def blocks_settle(want_equal=("kvarenad_kv_blocks_used", "kvarenad_kv_blocks_cached")):
    """A's used blocks come down to its prefix cache's once jobs end."""
    m = {}
    for _ in range(50):
        m = metrics()
        if m.get(want_equal[0]) == m.get(want_equal[1]):
            return True, m
        time.sleep(0.1)
    return False, m


# ---------------------------------------------------------------------------
write_key(KEY, "0123456789abcdef")
write_key(BADKEY, "fedcba9876543210")
try:
    # 1. the reference: one host
    print("== 1. one host", flush=True)
    a = start_a()
    ref, _ = replies()
    ref_long = [chat([{"role": "user", "content": p}], 8)[0] for p in LONGS]
    check(all(r is not None for r in ref + ref_long), "reference replies: %r" %
          (ref + ref_long))
    stop_all()

    # 2. prefill on B, decode on A; events and metrics
    print("== 2. prefill on B, decode on A", flush=True)
    a = start_a(local_prefill=0, remote_prefill=1)
    sub = subprocess.Popen(["/usr/bin/python3", SUBSCRIBER, EVENTS, "--topic", "kv@"],
                           stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    check(sub.stdout.readline().strip() == "ready", "subscriber ready")
    b = start_b("b2", role="prefill")
    check(a.wait_log(r"joined as prefill worker") and
          a.wait_log(r"prefill worker \d+ ready: .*backend cpu@" + re.escape(E["ADDR_B"])),
          "B joined A as its prefill worker")
    got, usage2 = replies()
    check(got == ref, "prefill on B: the same greedy replies as one host (%d)" % len(got))
    check(usage2["prompt_tokens_details"]["cached_tokens"] > 0,
          "the second turn reused the first's KV (fetched from A by B)")
    m = metrics()
    check(m.get('kvarenad_workers_up{stage="prefill"}') == 1, "one prefill worker up")
    for name in ('vllm:num_requests_waiting{model_name="m"}',
                 'vllm:num_requests_running{model_name="m"}',
                 'vllm:kv_cache_usage_perc{model_name="m"}',
                 'dynamo_component_kvstats_active_blocks{dp_rank="0"}',
                 'dynamo_component_kvstats_total_blocks{dp_rank="0"}',
                 'dynamo_component_kvstats_gpu_cache_usage_percent{dp_rank="0"}'):
        check(name in m, "metric " + name)
    check(0 <= m.get('vllm:kv_cache_usage_perc{model_name="m"}', -1) <= 1 and
          m.get('dynamo_component_kvstats_total_blocks{dp_rank="0"}') ==
          m.get("kvarenad_kv_blocks_total"), "usage in [0, 1], totals agree")
    # the event stream against A's cache: lines read by a thread (a
    # buffered pipe and select() do not mix)
    lines = []
    reader = threading.Thread(target=lambda: lines.extend(iter(sub.stdout.readline, "")),
                              daemon=True)
    reader.start()
    live, stored_ever, bad = set(), set(), []
    deadline = time.time() + 10
    batches = done = 0
    while time.time() < deadline:
        while done < len(lines):
            bt = json.loads(lines[done])
            done += 1
            if "error" in bt:
                bad.append(bt["error"])
                continue
            batches += 1
            for ev in bt["events"]:
                if ev["type"] == "BlockStored":
                    if ev["parent"] is not None and ev["parent"] not in stored_ever:
                        bad.append("parent %s not stored before" % ev["parent"])
                    if ev["block_size"] != 16:
                        bad.append("block size %d" % ev["block_size"])
                    for h in ev["block_hashes"]:
                        live.add(h)
                        stored_ever.add(h)
                elif ev["type"] == "BlockRemoved":
                    for h in ev["block_hashes"]:
                        if h not in live:
                            bad.append("removed %s never stored" % h)
                        live.discard(h)
                else:
                    live.clear()
        if len(live) == metrics().get("kvarenad_kv_blocks_cached"):
            break
        time.sleep(0.2)
    check(not bad, "events decode and chain (%s)" % "; ".join(bad[:3]))
    check(batches > 0 and len(live) == metrics().get("kvarenad_kv_blocks_cached"),
          "live blocks from the events (%d) = A's prefix cache (%s)" %
          (len(live), metrics().get("kvarenad_kv_blocks_cached")))
    sub.stdin.close()
    sub.wait(10)
    stop_all()
    check(re.search(r"session over after [1-9]\d* steps", b.text()) is not None,
          "B served the steps and saw A go")

    # 3. decode on B, prefill on A
    print("== 3. decode on B, prefill on A", flush=True)
    a = start_a(local_decode=0, remote_decode=1)
    b = start_b("b3", role="decode")
    check(a.wait_log(r"joined as decode worker"), "B joined as the decode worker")
    time.sleep(0.5)
    got, _ = replies()
    check(got == ref, "decode on B: the same greedy replies as one host")
    stop_all()
    mm = re.search(r"session over after (\d+) steps", b.text())
    check(mm is not None and int(mm.group(1)) >= 20, "B ran the decode steps (%s)" %
          (mm.group(1) if mm else "none"))

    # 4. failures mid-transfer
    print("== 4. failures, B's transfer stalled half-way", flush=True)
    stall = {"KVR_TEST_STALL_MS": "4000"}
    a = start_a(local_prefill=0, remote_prefill=1,
                extra="[kv]\nretention = no\n[remote]\njoin_grace_s = 60\n")

    def long_request(out, which):
        out.append(chat([{"role": "user", "content": LONGS[which]}], 8))

    # a. B killed
    b = start_b("b4a", binary=HOOKS, role="prefill", env=stall)
    check(a.wait_log(r"joined as prefill worker"), "B joined")
    res = []
    t = threading.Thread(target=long_request, args=(res, 0))
    t.start()
    check(b.wait_log(r"test: positions .* landed, stalling"), "B stalls mid-transfer")
    b.stop(signal.SIGKILL)
    b2 = start_b("b4a2", role="prefill")
    t.join(90)
    check(res and res[0][0] == ref_long[0], "B killed mid-transfer: the step ran again on the "
          "host that rejoined, same reply")
    ok, m = blocks_settle()
    check(ok, "A: no blocks leaked (used %s = cached %s)" %
          (m.get("kvarenad_kv_blocks_used"), m.get("kvarenad_kv_blocks_cached")))
    check(m.get("kvarenad_worker_restarts_total", 0) >= 1, "A restarted the link")
    b2.stop()

    # b. the link cut, then restored
    b = start_b("b4b", binary=HOOKS, role="prefill", env=stall)
    check(a.wait_log(r"joined as prefill worker.*\n(.*\n)*.*joined as prefill worker", 30),
          "a new B joined")
    time.sleep(0.5)
    res = []
    t = threading.Thread(target=long_request, args=(res, 1))
    t.start()
    check(b.wait_log(r"test: positions .* landed, stalling"), "B stalls mid-transfer")
    subprocess.run(["ip", "-n", E["NS_A"], "link", "del", E["IF_A"]], check=True)
    check(b.wait_log(r"session over .* 0 blocks held", 20), "B gave back every block it held")
    time.sleep(1)
    subprocess.run(["ip", "-n", E["NS_A"], "link", "add", E["IF_A"], "type", "veth", "peer",
                    "name", E["IF_B"]], check=True)
    for cmd in (["ip", "-n", E["NS_A"], "link", "set", E["IF_B"], "netns", E["NS_B"]],
                ["ip", "-n", E["NS_A"], "addr", "add", E["ADDR_A"] + "/24", "dev", E["IF_A"]],
                ["ip", "-n", E["NS_B"], "addr", "add", E["ADDR_B"] + "/24", "dev", E["IF_B"]],
                ["ip", "-n", E["NS_A"], "link", "set", E["IF_A"], "up"],
                ["ip", "-n", E["NS_B"], "link", "set", E["IF_B"], "up"]):
        subprocess.run(cmd, check=True)
    t.join(90)
    check(res and res[0][0] == ref_long[1], "link cut mid-transfer: B rejoined, same reply")
    check(len(re.findall(r"joined .* as a prefill worker", b.text())) >= 2,
          "the same B process rejoined")
    ok, m = blocks_settle()
    check(ok, "A: no blocks leaked after the cut")
    b.stop()
    stop_all()

    # c. A's lease runs out while B stalls
    a = start_a(local_prefill=0, remote_prefill=1,
                extra="[kv]\nretention = no\n[workers]\nlease_ms = 1500\n"
                      "lease_per_token_ms = 0\n[remote]\njoin_grace_s = 60\n")
    b = start_b("b4c", binary=HOOKS, role="prefill", env=stall)
    check(a.wait_log(r"joined as prefill worker"), "B joined")
    res = []
    t = threading.Thread(target=long_request, args=(res, 2))
    t.start()
    t.join(90)
    m = metrics()
    check(m.get("kvarenad_lease_expiries_total", 0) >= 1,
          "A's lease expired, the link was killed before any block was freed")
    check(res and res[0][0] == ref_long[2], "the step ran again after the host rejoined, "
          "same reply")
    check(re.search(r"returning KV to the orchestrator failed", b.text()) is not None,
          "B's late transfer found no link: nothing landed after the lease")
    ok, m = blocks_settle()
    check(ok, "A: no blocks leaked after the lease")
    stop_all()

    # 5. refusals
    print("== 5. refusals", flush=True)
    a = start_a(local_prefill=1, remote_prefill=1)
    bad = start_b("b5a", key=BADKEY, extra=["--once"])
    bad.p.wait(30)
    check(bad.p.returncode == 2, "a host with the wrong key gives up (exit %s)" %
          bad.p.returncode)
    check(a.wait_log(r"TLS handshake with .* failed"), "A refused it at the handshake")
    other = start_b("b5b", model=OTHER)
    other.p.wait(30)
    check(other.p.returncode == 2 and "model file differs" in other.text(),
          "a host with another model is refused and says why")
    check(http("/v1/models")[0] == 200, "A serves on")
    stop_all()
finally:
    stop_all()
    subprocess.run(["rm", "-rf", TMP])

print("test_remote: %s (%d failures)" % ("PASS" if not fails else "FAIL", fails))
sys.exit(1 if fails else 0)
