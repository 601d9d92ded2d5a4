#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""kvreplay - replay agent sessions against an OpenAI-compatible server.

A real HTTP client (Python's standard library only) that turns request
traces into multi-turn agent sessions with tool calls between turns and
replays them at controlled concurrency, then reports what the server's KV
policy did to them. Documentation/replay.md describes the formats, the
tool-wait model and its sources, and every field of the report.

  kvreplay.py convert --mooncake TRACE.jsonl [options] > sessions.jsonl
  kvreplay.py synth --sessions 1000 [options] > sessions.jsonl
  kvreplay.py run --url http://127.0.0.1:8080 --sessions sessions.jsonl \\
                  --label toolwait --out DIR [--tool-mode client|server]
  kvreplay.py report --out DIR [LABEL ...]       (table, TSV, gnuplot PNGs)
  kvreplay.py plan --sessions S.jsonl [--ample DIR/ample.json]
                  (a run's time limit; the eviction benchmark's arena)
  kvreplay.py bound --run DIR/ample.json --arena BLOCKS
                  (the evictions recency and the best offline ranking need)

Sessions file (JSONL, one session per line; `convert` writes it, operators
may write their own):

  {"session": "s0001", "arrival_ms": 0, "prefix": [0, 1],
   "turns": [{"input": 300, "output": 40, "tool": "compile", "tool_ms": 2100},
             {"input": 120, "output": 60, "tool": "read", "tool_ms": 80},
             {"input": 200, "output": 80}]}

`prefix`: shared blocks of the first prompt (equal ids, equal text: the
server may share their KV); `input`: new tokens of the turn (the first
turn's user text beyond the prefix, then each tool's result); `output`:
tokens the model generates (forced: see replay.md); a turn with `tool`
ends in a call to that tool, which takes `tool_ms` (drawn from the
tool-wait model when absent); the last turn has none.
"""
import argparse
import bisect
import http.client
import json
import math
import os
import random
import shutil
import subprocess
import sys
import threading
import time
import urllib.parse
import zlib

# ---- the tool-wait model ----------------------------------------------------

# name, weight, median seconds, sigma (of ln seconds), result tokens.
# Calibrated so that the waits match the coding-agent trace cited in
# ../shared/RUNTIME.md ("86% of an agent's consecutive requests arrived
# within 1 s of the previous response, 95% within 10 s"): with this mix,
# P(wait < 1 s) = 0.862 and P(wait < 10 s) = 0.959 (replay.md shows the
# arithmetic). Quick file reads, medium compiles, slow test runs.
DEFAULT_MIX = [
    ("read", 0.85, 0.10, 0.8, 200),
    ("compile", 0.10, 2.0, 0.6, 100),
    ("test", 0.05, 20.0, 0.8, 300),
]


def parse_mix(spec):
    """name:weight:median_s:sigma[:result_tokens],..."""
    mix = []
    for part in spec.split(","):
        f = part.strip().split(":")
        if len(f) not in (4, 5):
            raise ValueError("tool mix entry %r: name:weight:median_s:sigma[:tokens]" % part)
        mix.append((f[0], float(f[1]), float(f[2]), float(f[3]),
                    int(f[4]) if len(f) == 5 else 150))
    if not mix or any(w <= 0 or m <= 0 or s < 0 for _, w, m, s, _ in mix):
        raise ValueError("tool mix: positive weights and medians, sigma >= 0")
    return mix


def lognormal_cdf(x, median, sigma):
    if sigma == 0:
        return 1.0 if x >= median else 0.0
    return 0.5 * (1 + math.erf((math.log(x) - math.log(median)) / (sigma * math.sqrt(2))))


def mix_cdf(mix, x):
    tot = sum(w for _, w, _, _, _ in mix)
    return sum(w * lognormal_cdf(x, m, s) for _, w, m, s, _ in mix) / tot


class ToolModel:
    def __init__(self, mix, seed, scale=1.0):
        self.mix = mix
        self.rng = random.Random(seed)
        self.scale = scale
        self.cum = []
        acc = 0.0
        for _, w, _, _, _ in mix:
            acc += w
            self.cum.append(acc)

    def draw(self):
        r = self.rng.random() * self.cum[-1]
        i = bisect.bisect_right(self.cum, r)
        name, _, med, sig, toks = self.mix[min(i, len(self.mix) - 1)]
        secs = med * math.exp(sig * self.rng.gauss(0, 1))
        return name, max(1, int(secs * 1000 * self.scale)), toks

    def ms_of(self, name):
        for n, _, med, sig, _ in self.mix:
            if n == name:
                return max(1, int(med * math.exp(sig * self.rng.gauss(0, 1)) * 1000 * self.scale))
        raise ValueError("unknown tool class %r" % name)


# ---- convert: Mooncake traces -> agent sessions --------------------------------

def mooncake_sessions(path, args):
    """Mooncake requests grouped into conversations: a request continues the
    conversation of the earlier request it shares the longest prefix of at
    least two hash blocks with (block 0 is the system prompt every request
    has); otherwise it starts one. Token counts scaled by --scale-tokens."""
    reqs = [json.loads(line) for line in open(path) if line.strip()]
    pref, conv_of, convs = {}, [], []
    for i, r in enumerate(reqs):
        h = r["hash_ids"]
        parent = None
        for k in range(len(h), 1, -1):
            t = tuple(h[:k])
            if t in pref:
                parent = pref[t]
                break
        if parent is None:
            conv_of.append(len(convs))
            convs.append([i])
        else:
            conv_of.append(conv_of[parent])
            convs[conv_of[parent]].append(i)
        for k in range(2, len(h) + 1):
            pref[tuple(h[:k])] = i
    model = ToolModel(parse_mix(args.tool_mix) if args.tool_mix else DEFAULT_MIX, args.seed,
                      args.tool_scale)
    pick = random.Random(args.seed + 1)
    if args.multi_turn_only:
        convs = [c for c in convs if len(c) > 1]
    if args.sessions and args.sessions < len(convs):
        convs = sorted(pick.sample(convs, args.sessions), key=lambda c: c[0])
    sc = args.scale_tokens
    out = []
    t0 = reqs[convs[0][0]]["timestamp"] if convs else 0
    for n, c in enumerate(convs):
        first = reqs[c[0]]
        shared = first["hash_ids"][:args.prefix_blocks]
        prefix_tokens = int(len(shared) * 512 * sc)
        turns = []
        used = prefix_tokens
        for k, i in enumerate(c):
            r = reqs[i]
            if k == 0:
                new = r["input_length"] * sc - prefix_tokens
            else:
                p = reqs[c[k - 1]]
                new = (r["input_length"] - p["input_length"] - p["output_length"]) * sc
            turns.append({"input": max(args.min_input, int(new)),
                          "output": max(4, int(r["output_length"] * sc))})
        # an agent session: at least --min-turns model calls, tool rounds
        # between them (their results are the next turns' inputs)
        while len(turns) < args.min_turns:
            turns.append({"input": 0, "output": max(4, int(turns[-1]["output"]))})
        for k in range(len(turns) - 1):
            name, ms, toks = model.draw()
            turns[k]["tool"] = name
            turns[k]["tool_ms"] = ms
            if turns[k + 1]["input"] <= 0:
                turns[k + 1]["input"] = max(args.min_input, int(toks * max(sc, 0.05) * 8))
        # bound each session by the model's context: a turn ending in a
        # tool call decodes up to the replayer's call budget (--call-tokens,
        # as run's --min-call-tokens), not its trace output
        def ctx_of(t):
            return t["input"] + (max(t["output"], args.call_tokens) if "tool" in t
                                 else t["output"])
        total = prefix_tokens + sum(ctx_of(t) for t in turns)
        if total > args.max_context and args.trim_first:
            # the first prompt gives way first (down to a quarter of the
            # bound), so that the session keeps its tool rounds
            keep = max(args.min_input, args.max_context // 4,
                       turns[0]["input"] - (total - args.max_context))
            if keep < turns[0]["input"]:
                total -= turns[0]["input"] - keep
                turns[0]["input"] = keep
        while total > args.max_context and len(turns) > 1:
            last = turns.pop()
            total -= ctx_of(last)
            total -= ctx_of(turns[-1])
            turns[-1].pop("tool", None)
            turns[-1].pop("tool_ms", None)
            total += ctx_of(turns[-1])
        if total > args.max_context:
            cut = total - args.max_context
            turns[0]["input"] = max(args.min_input, turns[0]["input"] - cut)
        used += sum(ctx_of(t) for t in turns)
        out.append({"session": "s%05d" % n,
                    "arrival_ms": int((first["timestamp"] - t0) * args.time_scale),
                    "prefix": shared, "turns": turns})
    return out


def cmd_convert(args):
    sessions = mooncake_sessions(args.mooncake, args)
    for s in sessions:
        print(json.dumps(s, separators=(",", ":")))
    mix = parse_mix(args.tool_mix) if args.tool_mix else DEFAULT_MIX
    calls = [t for s in sessions for t in s["turns"] if "tool" in t]
    sc = args.scale_tokens
    ctx = [int(len(s["prefix"]) * 512 * sc) + sum(
        t["input"] + (max(t["output"], args.call_tokens) if "tool" in t else t["output"])
        for t in s["turns"]) for s in sessions]
    sys.stderr.write("convert: %d sessions, %d turns, %d tool calls; contexts up to %d tokens "
                     "(mean %d; chat markup not counted); model P(wait<1s)=%.3f "
                     "P(wait<10s)=%.3f\n" % (len(sessions), sum(len(s["turns"]) for s in sessions),
                                              len(calls), max(ctx or [0]),
                                              sum(ctx) / len(ctx) if ctx else 0,
                                              mix_cdf(mix, 1.0), mix_cdf(mix, 10.0)))


# ---- synth: agent sessions of a given shape --------------------------------------

def cmd_synth(args):
    """Sessions of one shape (BENCH=agents1000): a shared system prompt,
    a first user turn, then tool rounds with small results and short
    replies, arrivals spread uniformly over --ramp-s; seeded."""
    mix = parse_mix(args.tool_mix) if args.tool_mix else DEFAULT_MIX
    model = ToolModel(mix, args.seed, args.tool_scale)
    rng = random.Random(args.seed + 1)
    arrivals = sorted(rng.random() * args.ramp_s * 1000 for _ in range(args.sessions))
    for n, t0 in enumerate(arrivals):
        turns = []
        for k in range(args.turns):
            turns.append({"input": args.first_input if k == 0 else args.tool_input,
                          "output": args.output if k + 1 == args.turns else args.call_output})
            if k + 1 < args.turns:
                name, ms, _ = model.draw()
                turns[k]["tool"] = name
                turns[k]["tool_ms"] = ms
        print(json.dumps({"session": "a%05d" % n, "arrival_ms": int(t0),
                          "prefix": list(range(args.prefix_blocks)), "turns": turns},
                         separators=(",", ":")))
    ctx = (args.prefix_blocks * 512 * args.scale_tokens + args.first_input +
           (args.turns - 1) * (args.tool_input + args.call_output) + args.output)
    sys.stderr.write("synth: %d sessions of %d turns, about %d tokens of context each "
                     "(%d shared); model P(wait<1s)=%.3f P(wait<10s)=%.3f\n" % (
                         args.sessions, args.turns, ctx, args.prefix_blocks * 512 * args.scale_tokens,
                         mix_cdf(mix, 1.0), mix_cdf(mix, 10.0)))


# ---- text of a given length -----------------------------------------------------

WORDS = ("alpha beta gamma delta epsilon zeta theta kappa lambda sigma omega build test "
         "file line error warning module function return value pointer buffer memory "
         "thread lock queue socket packet header block cache arena session token tool "
         "result output input parser compile link run pass fail check assert merge").split()


class Texter:
    """Deterministic text of about n tokens; tokens per word calibrated once
    against the server's /tokenize (1.3 when it has none)."""

    def __init__(self, url):
        self.tpw = 1.3
        sample = self.words(random.Random(1), 400)
        try:
            n = len(post_json(url, "/tokenize", {"content": sample})["tokens"])
            if n > 0:
                self.tpw = n / 400.0
        except Exception:
            pass

    def words(self, rng, n):
        return " ".join(rng.choice(WORDS) for _ in range(n))

    def text(self, seed, tokens):
        rng = random.Random(seed)
        return self.words(rng, max(1, int(tokens / self.tpw)))


# ---- HTTP ------------------------------------------------------------------------

def conn_for(url, timeout=600):
    u = urllib.parse.urlparse(url)
    return http.client.HTTPConnection(u.hostname, u.port or 80, timeout=timeout)


def post_json(url, path, body, timeout=60):
    c = conn_for(url, timeout)
    try:
        c.request("POST", path, json.dumps(body), {"Content-Type": "application/json"})
        r = c.getresponse()
        data = r.read()
        if r.status != 200:
            raise RuntimeError("%s: HTTP %d %s" % (path, r.status, data[:200]))
        return json.loads(data)
    finally:
        c.close()


def get_text(url, path, timeout=30):
    c = conn_for(url, timeout)
    try:
        c.request("GET", path)
        r = c.getresponse()
        return r.read().decode()
    finally:
        c.close()


def parse_metrics(txt):
    m = {}
    for line in txt.splitlines():
        if not line or line[0] == "#":
            continue
        k, _, v = line.rpartition(" ")
        try:
            m[k] = float(v)
        except ValueError:
            pass
    return m


def stream_chat(url, body, timeout=600):
    """One streamed chat completion: (first-token time, end time, message,
    usage, finish_reason, error); the message's "session" is the server's
    session id where it says one (kvarena's finish chunk), its "rounds" the
    tool rounds the server ran itself (kvarena's tool_run chunks: each
    round's content and runs, in order; the message's content is what came
    after the last). timeout: the longest silence on the connection (a
    request queued behind many others' prefills says nothing until its
    first token)."""
    c = conn_for(url, timeout)
    t_first = None
    content, calls, usage, finish, err, sess = [], {}, {}, None, None, None
    first_ms = None
    kv = {}
    rounds = []
    try:
        c.request("POST", "/v1/chat/completions", json.dumps(body),
                  {"Content-Type": "application/json"})
        r = c.getresponse()
        if r.status != 200:
            err = "HTTP %d %s" % (r.status, r.read()[:300].decode(errors="replace"))
            return None, time.monotonic(), None, {}, None, err
        while True:
            line = r.readline()
            if not line:
                break
            line = line.strip()
            if not line.startswith(b"data:"):
                continue
            data = line[5:].strip()
            if data == b"[DONE]":
                break
            ev = json.loads(data)
            if ev.get("usage"):
                usage = ev["usage"]
            if isinstance(ev.get("kvarena"), dict) and ev["kvarena"].get("session_id"):
                sess = ev["kvarena"]["session_id"]
            if isinstance(ev.get("kvarena"), dict) and \
                    isinstance(ev["kvarena"].get("timings"), dict):
                # the server's first token (its TTFT): a call turn's
                # first byte reaches the client when the model opens the
                # call's tag (a call forced by name is announced then;
                # before 2026-12-06, once its name and "arguments" were
                # decoded)
                first_ms = ev["kvarena"]["timings"].get("prompt_ms")
                # this turn's KV came back from the server's disk tier
                kv = ev["kvarena"].get("kv") or {}
            run = ev.get("kvarena", {}).get("tool_run") if isinstance(ev.get("kvarena"),
                                                                       dict) else None
            if isinstance(run, dict):
                # the content so far was this round's, before its calls
                if not rounds or rounds[-1]["round"] != run.get("round"):
                    rounds.append({"round": run.get("round"), "content": "".join(content),
                                   "runs": []})
                    content = []
                rounds[-1]["runs"].append(run)
            for ch in ev.get("choices", []):
                d = ch.get("delta", {})
                if (d.get("content") or d.get("tool_calls")) and t_first is None:
                    t_first = time.monotonic()
                if d.get("content"):
                    content.append(d["content"])
                for tc in d.get("tool_calls", []) or []:
                    e = calls.setdefault(tc.get("index", 0), {"id": "", "name": "", "args": ""})
                    e["id"] = tc.get("id") or e["id"]
                    fn = tc.get("function", {})
                    e["name"] += fn.get("name") or ""
                    e["args"] += fn.get("arguments") or ""
                if ch.get("finish_reason"):
                    finish = ch["finish_reason"]
    except Exception as e:  # noqa: BLE001 - a failed request is a result
        err = "%s: %s" % (type(e).__name__, e)
    finally:
        c.close()
    msg = {"role": "assistant", "content": "".join(content) or None, "session": sess,
           "first_ms": first_ms, "kv": kv,
           "rounds": rounds}
    if calls:
        msg["tool_calls"] = [{"id": v["id"], "type": "function",
                              "function": {"name": v["name"], "arguments": v["args"]}}
                             for _, v in sorted(calls.items())]
    return t_first, time.monotonic(), msg, usage, finish, err


# ---- run ----------------------------------------------------------------------------

class Runner:
    def __init__(self, args, sessions):
        self.args = args
        self.sessions = sessions
        self.url = args.url
        self.timeout = args.request_timeout
        self.texter = Texter(args.url)
        classes = sorted({t["tool"] for s in sessions for t in s["turns"] if "tool" in t})
        self.tools = [{"type": "function", "function": {
            "name": c, "description": "the agent's %s tool" % c,
            "parameters": {"type": "object", "properties": {},
                           "additionalProperties": False}}} for c in classes]
        self.results = []
        self.lock = threading.Lock()
        self.slots = threading.Semaphore(args.concurrency)
        self.timeline = []
        self.done = threading.Event()
        self.t0 = None

    def system_text(self, prefix):
        # equal hash ids, equal text: the server's prefix cache shares them
        bt = int(512 * self.args.scale_tokens) if self.args.scale_tokens else 32
        return "\n".join(self.texter.text(1000003 * (h + 1), bt) for h in prefix) or "agent"

    def session(self, s):
        a = self.args
        sid = "%s-%s" % (a.run_id, s["session"])
        msgs = [{"role": "system", "content": "You are an agent.\n" + self.system_text(s["prefix"])},
                {"role": "user", "content": self.texter.text(zlib.crc32(sid.encode()),
                                                             s["turns"][0]["input"])}]
        res = {"session": s["session"], "start": time.monotonic() - self.t0, "requests": [],
               "errors": 0}
        server_sess = None
        for k, t in enumerate(s["turns"]):
            tool = t.get("tool")
            body = {"model": a.model, "messages": msgs, "stream": True,
                    "stream_options": {"include_usage": True},
                    "max_tokens": t["output"], "temperature": 0,
                    "prompt_cache_key": sid}
            reply_file = None
            if a.tool_mode == "client" and tool:
                # a real decode of a call to the tool: the grammar makes it a
                # call, close_in_budget closes it within max_tokens
                body["tools"] = self.tools
                body["tool_choice"] = {"type": "function", "function": {"name": tool}}
                body["max_tokens"] = max(t["output"], a.min_call_tokens)
                body["kvarena"] = {"close_in_budget": True}
                # greedy decoding can circle in the grammar's whitespace; a
                # seeded temperature-1 walk closes the call (replay.md)
                body["temperature"] = 1.0
                body["seed"] = zlib.crc32(("%s/%d" % (sid, k)).encode())
            else:
                body["ignore_eos"] = True
                if self.tools and a.tool_mode == "client":
                    body["tools"] = self.tools
                    body["tool_choice"] = "none"
                if a.tool_mode == "server" and tool:
                    # the server runs the tool: a sandboxed process of the
                    # modelled duration (the hooks build takes the reply)
                    reply_file = os.path.join(a.reply_dir, sid + ".reply")
                    with open(reply_file + ".tmp", "w") as f:
                        f.write('<tool_call>\n{"name": "sh", "arguments": {"command": '
                                '"sleep %.3f; echo %s done"}}\n</tool_call>'
                                % (t["tool_ms"] / 1000.0, tool))
                    os.rename(reply_file + ".tmp", reply_file)
            t_send = time.monotonic()
            t_first, t_end, msg, usage, finish, err = stream_chat(self.url, body, self.timeout)
            rounds = []
            first_ms = None
            kv = {}
            if msg is not None:
                server_sess = msg.pop("session", None) or server_sess
                first_ms = msg.pop("first_ms", None)
                kv = msg.pop("kv", {})
                rounds = msg.pop("rounds", [])
            rq = {"turn": k, "send": t_send - self.t0, "ttft": (t_first - t_send) if t_first else None,
                  "total": t_end - t_send, "completion_tokens": usage.get("completion_tokens", 0),
                  "prompt_tokens": usage.get("prompt_tokens", 0),
                  "cached_tokens": (usage.get("prompt_tokens_details") or {}).get("cached_tokens", 0),
                  "finish": finish, "tool": tool, "tool_ms": t.get("tool_ms"), "error": err,
                  "server_ttft": first_ms / 1000.0 if first_ms is not None else None,
                  "restored_tokens": kv.get("restored_n", 0),
                  "restore_stall_ms": kv.get("restore_stall_ms", 0)}
            res["requests"].append(rq)
            if err or msg is None:
                res["errors"] += 1
                break
            if reply_file and os.path.exists(reply_file):
                os.unlink(reply_file)
            if a.tool_mode == "client" and tool:
                msgs.append(msg)
                calls = msg.get("tool_calls") or []
                if not calls:
                    rq["error"] = "no tool call (finish %s)" % finish
                    res["errors"] += 1
                    # the model did not call: the tool runs anyway (the session
                    # structure is the trace's), its result as a user turn
                    time.sleep(t["tool_ms"] / 1000.0)
                    msgs.append({"role": "user", "content": self.tool_output(sid, k, s)})
                    continue
                time.sleep(t["tool_ms"] / 1000.0)
                for c in calls:
                    msgs.append({"role": "tool", "tool_call_id": c["id"],
                                 "content": self.tool_output(sid, k, s)})
            else:
                # the server's own tool rounds, sent back as an agent
                # harness keeps its history: the call, its result, then
                # the reply, so the next turn continues this conversation
                # (sent without them, each turn started a conversation of
                # its own and left the last one idle)
                for rd in rounds:
                    ids = ["call_%s_%d_%s_%s" % (sid, k, rd["round"], run.get("index", i))
                           for i, run in enumerate(rd["runs"])]
                    msgs.append({"role": "assistant", "content": rd["content"] or None,
                                 "tool_calls": [{"id": cid, "type": "function", "function": {
                                     "name": run.get("name", ""),
                                     "arguments": run.get("arguments", "{}")}}
                                     for cid, run in zip(ids, rd["runs"])]})
                    for cid, run in zip(ids, rd["runs"]):
                        msgs.append({"role": "tool", "tool_call_id": cid,
                                     "content": run.get("output", "")})
                msgs.append({"role": "assistant", "content": msg.get("content") or ""})
                if k + 1 < len(s["turns"]):
                    msgs.append({"role": "user", "content": self.tool_output(sid, k, s)})
        res["end"] = time.monotonic() - self.t0
        if a.close and server_sess:
            # the agent is done: its KV released now, as a harness closing
            # the session would (not kept until the retention deadline)
            try:
                c = conn_for(self.url, 30)
                c.request("DELETE", "/v1/sessions/" + urllib.parse.quote(server_sess))
                c.getresponse().read()
                c.close()
            except Exception:  # noqa: BLE001 - a server without the extension
                pass
        res["completion_s"] = res["end"] - res["start"]
        with self.lock:
            self.results.append(res)

    def tool_output(self, sid, k, s):
        return self.texter.text(zlib.crc32(("%s/%d" % (sid, k)).encode()), s["turns"][k + 1]["input"])

    def run_one(self, s):
        try:
            self.session(s)
        finally:
            self.slots.release()

    def proc(self, m):
        """The server process's memory, threads and fds (--pid: a server on
        this machine), as proc_* entries of the timeline."""
        pid = self.args.pid
        try:
            for line in open("/proc/%d/status" % pid):
                k, _, v = line.partition(":")
                if k in ("VmRSS", "RssAnon", "RssFile", "RssShmem", "Threads"):
                    f = v.split()
                    m["proc_" + k] = float(f[0]) * (1024 if len(f) > 1 else 1)
            m["proc_fds"] = float(len(os.listdir("/proc/%d/fd" % pid)))
        except OSError:
            pass

    def sample(self):
        while not self.done.wait(self.args.sample_s):
            try:
                m = parse_metrics(get_text(self.url, "/metrics"))
            except Exception:
                continue
            if self.args.pid:
                self.proc(m)
            m["t"] = time.monotonic() - self.t0
            self.timeline.append(m)

    def run(self):
        a = self.args
        m0 = parse_metrics(get_text(self.url, "/metrics"))
        self.t0 = time.monotonic()
        sampler = threading.Thread(target=self.sample, daemon=True)
        sampler.start()
        threads = []
        for s in sorted(self.sessions, key=lambda x: x["arrival_ms"]):
            delay = s["arrival_ms"] / 1000.0 - (time.monotonic() - self.t0)
            if delay > 0:
                time.sleep(delay)
            self.slots.acquire()
            th = threading.Thread(target=self.run_one, args=(s,), daemon=True)
            th.start()
            threads.append(th)
        for th in threads:
            th.join()
        self.done.set()
        sampler.join()
        m1 = parse_metrics(get_text(self.url, "/metrics"))
        wall = time.monotonic() - self.t0
        delta = {k: m1[k] - m0.get(k, 0) for k in m1 if k.endswith("_total") or
                 "_total{" in k or k.endswith("_sum") or k.endswith("_count")}
        return {"label": a.label, "tool_mode": a.tool_mode, "url": a.url, "wall_s": wall,
                "concurrency": a.concurrency, "sessions": sorted(self.results,
                                                                 key=lambda r: r["session"]),
                "metrics_delta": delta, "metrics_end": m1, "timeline": self.timeline}


def cmd_run(args):
    sessions = [json.loads(line) for line in open(args.sessions) if line.strip()]
    for s in sessions:
        if not s.get("turns"):
            raise SystemExit("session %s: no turns" % s.get("session"))
        for t in s["turns"][:-1]:
            if "tool" in t and "tool_ms" not in t:
                t["tool_ms"] = ToolModel(DEFAULT_MIX, args.seed).ms_of(t["tool"])
    if args.tool_mode == "server" and not args.reply_dir:
        raise SystemExit("--tool-mode server needs --reply-dir (the daemon's "
                         "KVD_TEST_REPLY_DIR)")
    if not args.model:
        args.model = json.loads(get_text(args.url, "/v1/models"))["data"][0]["id"]
    r = Runner(args, sessions).run()
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, args.label + ".json"), "w") as f:
        json.dump(r, f)
    errs = sum(s["errors"] for s in r["sessions"])
    print("run %s: %d sessions in %.1f s, %d request errors" % (args.label, len(r["sessions"]),
                                                                 r["wall_s"], errs))
    return 1 if errs and args.strict else 0


# ---- report -----------------------------------------------------------------------

def pct(v, p):
    if not v:
        return float("nan")
    v = sorted(v)
    return v[min(len(v) - 1, int(math.ceil(p / 100.0 * len(v))) - 1)]


def mean(v):
    return sum(v) / len(v) if v else float("nan")


def server_load(timeline):
    """How loaded the server was (its /metrics samples): the share of the
    samples in which a request was running (the model busy) and in which
    one waited in the queue (the model saturated: a request that must
    wait for another's compute)."""
    tl = [m for m in timeline if "kvarenad_requests_running" in m]
    if not tl:
        return {"busy": float("nan"), "queued": float("nan")}
    busy = sum(1 for m in tl if m["kvarenad_requests_running"] > 0)
    queued = sum(1 for m in tl if m.get("kvarenad_queue_depth", 0) > 0)
    return {"busy": busy / float(len(tl)), "queued": queued / float(len(tl))}


def summarize(r):
    d = r["metrics_delta"]
    load = server_load(r.get("timeline", []))
    comp = [s["completion_s"] for s in r["sessions"] if not s["errors"]]
    reqs = [q for s in r["sessions"] for q in s["requests"] if not q["error"]]
    ttft = [q["ttft"] * 1000 for q in reqs if q["ttft"] is not None]
    tpot = [(q["total"] - q["ttft"]) * 1000 / (q["completion_tokens"] - 1) for q in reqs
            if q["ttft"] is not None and q["completion_tokens"] > 1]
    returns = d.get("kvarenad_tool_waits_total", 0)
    computed = d.get("kvarenad_prompt_tokens_total", 0) - d.get("kvarenad_prompt_cached_tokens_total", 0)
    stalls = d.get("kvarenad_tier_restore_stalls_total", 0)
    return {
        "label": r["label"], "mode": r["tool_mode"], "sessions": len(r["sessions"]),
        "errors": sum(s["errors"] for s in r["sessions"]),
        "evictions": d.get("kvarenad_evictions_total", 0),
        "misses": d.get("kvarenad_kv_misses_total", 0),
        # evictions that made a prefetch's room (in "evictions" too), KV
        # out of the arena because its retention ended, running requests
        # preempted for room: replay.md, "What counts as an eviction"
        "ev_prefetch": d.get("kvarenad_evictions_prefetch_total", 0),
        "expired": d.get("kvarenad_kv_expired_total", 0),
        "preempted": d.get("kvarenad_preemptions_total", 0),
        "spilled_mb": d.get("kvarenad_tier_spill_bytes_total", 0) / 1e6,
        "restored_mb": d.get("kvarenad_tier_restore_bytes_total", 0) / 1e6,
        "stalls": stalls, "stall_pct": 100.0 * stalls / returns if returns else 0.0,
        # KV lost and computed again: evicted or expired (the tier's
        # count), and preempted requests' KV
        "recomputed": d.get("kvarenad_tier_recomputed_tokens_total", 0)
        + d.get("kvarenad_preempt_recomputed_tokens_total", 0),
        "comp_mean": mean(comp), "comp_p50": pct(comp, 50), "comp_p99": pct(comp, 99),
        "ttft_p50": pct(ttft, 50), "ttft_p99": pct(ttft, 99),
        "tpot_p50": pct(tpot, 50), "tpot_p99": pct(tpot, 99),
        "idle_gbs": d.get("kvarenad_kv_idle_byte_seconds_total", 0) / 1e9,
        "tool_returns": returns,
        # this run's compute speed: prefill time per prompt token computed
        # (a loaded machine shows here, whatever the policy)
        "pf_us": 1000.0 * d.get("kvarenad_prefill_ms_sum", 0) / computed if computed else 0.0,
        # the load the policies ran at (replay.md, "Load")
        "busy_pct": 100.0 * load["busy"], "queued_pct": 100.0 * load["queued"],
    }


COLS = [("label", "%-10s"), ("mode", "%-6s"), ("sessions", "%5d"), ("errors", "%4d"),
        ("evictions", "%7d"), ("ev_prefetch", "%5d"), ("expired", "%5d"),
        ("preempted", "%5d"), ("misses", "%5d"), ("spilled_mb", "%8.1f"), ("restored_mb", "%8.1f"),
        ("stalls", "%5d"), ("stall_pct", "%6.1f"), ("recomputed", "%8d"),
        ("comp_mean", "%7.2f"), ("comp_p50", "%7.2f"), ("comp_p99", "%7.2f"),
        ("ttft_p50", "%7.1f"), ("ttft_p99", "%7.1f"), ("tpot_p50", "%6.1f"),
        ("tpot_p99", "%6.1f"), ("idle_gbs", "%8.2f"), ("pf_us", "%6.0f"),
        ("busy_pct", "%5.1f"), ("queued_pct", "%5.1f")]
HEAD = ("policy mode sess err evict ev_pf expir preem miss spillMB restMB stall stall% recomp comp_s p50_s p99_s "
        "ttft50 ttft99 tpot50 tpot99 idleGB*s pf_us busy% queue%")


STALL_CAUSES = ("early", "no_room", "no_slack", "no_prefetch", "taken_again", "reading")


def stall_causes(r):
    """A run's restore stalls by cause (tier.md, "Why a stall happened") and
    their mean length."""
    d = r["metrics_delta"]
    row = {c: int(d.get('kvarenad_tier_restore_stall_causes_total{cause="%s"}' % c, 0))
           for c in STALL_CAUSES}
    n = d.get("kvarenad_tier_restore_stall_ms_count", 0)
    row["ms_mean"] = d.get("kvarenad_tier_restore_stall_ms_sum", 0) / n if n else 0.0
    return row


def fmt_row(s):
    out = []
    for k, f in COLS:
        v = s[k]
        if "d" in f:
            v = int(v)
        out.append(f % v)
    return " ".join(out)


def gnuplot(script):
    if not shutil.which("gnuplot"):
        sys.stderr.write("report: gnuplot not found: no plots\n")
        return False
    p = subprocess.run(["gnuplot"], input=script.encode(), capture_output=True)
    if p.returncode:
        sys.stderr.write("report: gnuplot: %s\n" % p.stderr.decode()[:500])
    return p.returncode == 0


def plots(out, runs):
    # completion-time CDF per policy
    files = []
    for r in runs:
        comp = sorted(s["completion_s"] for s in r["sessions"] if not s["errors"])
        fn = os.path.join(out, "cdf-%s.dat" % r["label"])
        with open(fn, "w") as f:
            for i, v in enumerate(comp):
                f.write("%.4f %.4f\n" % (v, (i + 1) / len(comp)))
        files.append((fn, r["label"]))
    cdf_png = os.path.join(out, "completion-cdf.png")
    gnuplot("set terminal png size 900,600\nset output '%s'\n"
            "set title 'Session completion time, CDF per policy'\n"
            "set xlabel 'seconds'\nset ylabel 'fraction of sessions'\nset key bottom right\n"
            "set grid\nplot %s\n" % (cdf_png, ", ".join(
                "'%s' using 1:2 with steps lw 2 title '%s'" % (fn, lab) for fn, lab in files)))
    # KV occupancy by tier over time: arena bytes held, disk bytes
    occ_png = os.path.join(out, "occupancy.png")
    parts, n = [], len(runs)
    for r in runs:
        fn = os.path.join(out, "occ-%s.dat" % r["label"])
        with open(fn, "w") as f:
            for m in r["timeline"]:
                bb = m.get("kvarenad_kv_block_bytes", 0)
                used = m.get("kvarenad_kv_blocks_used", 0) * bb / 1e6
                arena = m.get("kvarenad_kv_blocks_conversations", 0) * bb / 1e6
                cached = used - arena
                disk = m.get("kvarenad_tier_disk_bytes", 0) / 1e6
                f.write("%.2f %.3f %.3f %.3f %d %d %d\n" % (
                    m["t"], arena, disk, cached, m.get('kvarenad_kv_sessions{tier="arena"}', 0),
                    m.get('kvarenad_kv_sessions{tier="disk"}', 0),
                    m.get('kvarenad_kv_sessions{tier="none"}', 0)))
        parts.append((fn, r["label"]))
    script = ("set terminal png size 1000,%d\nset output '%s'\nset multiplot layout %d,1 "
              "title 'KV occupancy by tier over time'\n" % (300 * max(n, 1), occ_png, max(n, 1)))
    for fn, lab in parts:
        script += ("set title '%s'\nset xlabel 'seconds'\nset ylabel 'MB'\nset grid\n"
                   "set key outside right top\nplot '%s' using 1:2 with lines lw 2 title "
                   "'arena: conversations', '%s' using 1:4 with lines lw 1 title 'arena: "
                   "prefix cache only', '%s' using 1:3 with lines lw 2 title 'disk: spill files'\n"
                   % (lab, fn, fn, fn))
    script += "unset multiplot\n"
    gnuplot(script)
    return [p for p in (cdf_png, occ_png) if os.path.exists(p)]


def cmd_report(args):
    labels = args.labels or sorted(f[:-5] for f in os.listdir(args.out) if f.endswith(".json"))
    runs = [json.load(open(os.path.join(args.out, lab + ".json"))) for lab in labels]
    rows = [summarize(r) for r in runs]
    lines = [HEAD] + [fmt_row(s) for s in rows]
    txt = "\n".join(lines)
    print(txt)
    with open(os.path.join(args.out, "report.txt"), "w") as f:
        f.write(txt + "\n")
    with open(os.path.join(args.out, "report.tsv"), "w") as f:
        f.write("\t".join(k for k, _ in COLS) + "\n")
        for s in rows:
            f.write("\t".join(str(s[k]) for k, _ in COLS) + "\n")
    # what the stalls were, where a run had any (the tier's runs)
    causes = [(s["label"], stall_causes(r)) for s, r in zip(rows, runs) if s["stalls"]]
    if causes:
        st = ["policy     " + " ".join(STALL_CAUSES) + "  mean_ms"]
        st += ["%-10s %s %8.1f" % (lab, " ".join("%*d" % (len(k), c[k]) for k in STALL_CAUSES),
                                    c["ms_mean"]) for lab, c in causes]
        print("restore stalls by cause:\n" + "\n".join(st))
        with open(os.path.join(args.out, "stalls.txt"), "w") as f:
            f.write("\n".join(st) + "\n")
    by = {s["label"]: s for s in rows}
    if "ample" in by:
        # the bound: an arena that never fills evicts nothing, so its mean
        # completion is the best any policy can reach on these sessions
        a = by["ample"]["comp_mean"]
        print("bound: ample (no eviction) %.2f s mean completion: the most any policy can "
              "be faster than" % a)
        for s in rows:
            if s["label"] != "ample" and a > 0:
                print("  %-10s (%.2f s) is %.2fx" % (s["label"], s["comp_mean"],
                                                     s["comp_mean"] / a))
    pngs = plots(args.out, runs)
    for p in pngs:
        print("plot: %s" % p)
    return 0


# ---- a benchmark's arena and time limit ---------------------------------------------

def arena_rule(timeline):
    """The eviction benchmark's arena, from the samples of a run that never
    evicted (replay.md, "Sizing the arena"): at each moment, the KV of the
    conversations not waiting on a tool (running, or queued with their KV:
    needed now, by any policy) plus half the KV of those waiting on one
    (what a policy chooses among); the median over the samples in which
    conversations held KV."""
    need, run, wait, held_max = [], [], [], 0
    for m in timeline:
        held = m.get("kvarenad_kv_blocks_conversations", 0)
        if held <= 0:
            continue
        if "kvarenad_kv_blocks_tool_wait" not in m:
            raise ValueError("the server reports no kvarenad_kv_blocks_tool_wait")
        tw = min(m["kvarenad_kv_blocks_tool_wait"], held)
        run.append(held - tw)
        wait.append(tw)
        need.append(held - tw / 2.0)
        held_max = max(held_max, held)
    if not need:
        raise ValueError("no sample in which conversations held KV")
    return {"arena": int(math.ceil(pct(need, 50))), "working_set": int(held_max),
            "running_p50": pct(run, 50), "waiting_p50": pct(wait, 50),
            "waiting_share": sum(wait) / float(sum(run) + sum(wait))}


def run_timeout(sessions, ample_wall=0.0, floor_s=1200.0):
    """A replay's time limit from its workload, not a constant: its last
    session's arrival and own tool time (what no policy shortens) twice,
    plus floor_s for the compute; once a run that never evicts has
    finished, at least four times its wall (lru took 2.4 times ample's in
    a trial, past the 1200 s the limit was)."""
    own = max(s.get("arrival_ms", 0) / 1000.0 +
              sum(t.get("tool_ms", 0) for t in s["turns"]) / 1000.0 for s in sessions)
    t = floor_s + 2 * own
    if ample_wall > 0:
        t = max(t, 4 * ample_wall)
    return int(math.ceil(t))


def cmd_plan(args):
    with open(args.sessions) as f:
        sessions = [json.loads(line) for line in f if line.strip()]
    if not sessions:
        raise SystemExit("plan: no sessions in %s" % args.sessions)
    wall = 0.0
    if args.ample:
        with open(args.ample) as f:
            r = json.load(f)
        wall = r["wall_s"]
        try:
            a = arena_rule(r["timeline"])
        except ValueError as e:
            raise SystemExit("plan: %s: %s" % (args.ample, e))
        print("arena %d working_set %d running_p50 %.0f waiting_p50 %.0f waiting_share %.3f"
              % (a["arena"], a["working_set"], a["running_p50"], a["waiting_p50"],
                 a["waiting_share"]))
    print("timeout_s %d" % run_timeout(sessions, wall, args.floor_s))
    return 0


# ---- the evictions any ranking needs (offline, on one run's timing) ------------------

def block_tokens_of(run, default=16):
    """The server's tokens a block, from its vLLM-style cache_config_info."""
    for key in run.get("metrics_end", {}):
        if key.startswith("vllm:cache_config_info"):
            i = key.find('block_size="')
            if i >= 0:
                return int(key[i + 12:key.index('"', i + 12)])
    return default


def kv_turns(run, bt):
    """A run's sessions as the KV their turns need: per session a list of
    (start, end, blocks held after the turn, next turn's start or None,
    blocks of its prompt alone, the tool its wait is for or None), and
    the blocks of the prompt every session shares (what first turns found
    cached), which an arena holds once (both sizes are beyond it)."""
    shared = max([s["requests"][0].get("cached_tokens", 0) for s in run["sessions"]
                  if s["requests"]] + [0]) // bt
    out = []
    for s in run["sessions"]:
        reqs = [r for r in s["requests"] if not r.get("error")]
        turns = []
        for k, r in enumerate(reqs):
            held = -(-(r["prompt_tokens"] + r["completion_tokens"]) // bt) - shared
            prompt = -(-r["prompt_tokens"] // bt) - shared
            turns.append((r["send"], r["send"] + r["total"], max(held, 0),
                          reqs[k + 1]["send"] if k + 1 < len(reqs) else None, max(prompt, 0),
                          r.get("tool")))
        out.append(turns)
    return out, shared


def class_means(sessions):
    """Each tool's mean wait in these sessions (end of a turn to the next's
    start): what a predictor that had learnt the classes would expect."""
    by = {}
    for turns in sessions:
        for t in turns:
            if t[3] is not None:
                by.setdefault(t[5], []).append(t[3] - t[1])
    return {c: sum(w) / len(w) for c, w in by.items()}


def evict_sim(sessions, cap, rank, wm=None):
    """Replays the sessions' turns at their recorded times against an arena
    of cap blocks. A turn holds its conversation's KV from its start to its
    end (its whole size from the start); between turns the KV waits on a
    tool and may be evicted; a session's last turn frees it. Room a turn
    lacks is made by evicting waiting KV in the order rank gives: "lru"
    (waiting longest first), "far" (Belady: the KV used again last first,
    knowing every return), "far_size" (the wait left times the blocks: the
    kernel's toolwait score with perfect predictions), "class" (the
    kernel's toolwait score with each wait predicted at its tool's mean
    in these sessions, class_means: a predictor that has learnt the
    classes but not the single wait). wm = (low, high):
    after a turn ends with fewer than low blocks free, evict up to high,
    as the kernel's watermarks do. Counts evictions, returns that found
    their KV gone (misses), and turns the arena could not hold beside the
    running ones (over: no ranking could make room)."""
    ev = []
    for i, turns in enumerate(sessions):
        for k, (t0, t1, size, nxt, _, _) in enumerate(turns):
            ev.append((t0, 1, i, k, size, nxt))
            ev.append((t1, 0, i, k, size, nxt))
    ev.sort(key=lambda e: (e[0], e[1], e[2]))
    n = len(sessions)
    held, res, pin = [0] * n, [False] * n, [False] * n
    last, nextu, pred = [0.0] * n, [0.0] * n, [0.0] * n
    means = class_means(sessions) if rank == "class" else {}
    st = {"evictions": 0, "misses": 0, "over": 0, "peak": 0}
    free = cap

    def score(i, now):
        if rank == "lru":
            return now - last[i]
        if rank == "far":
            return nextu[i]
        if rank == "class":  # kvc_candidate's: the wait left, else its length so far
            el = now - last[i]
            return (pred[i] - el if pred[i] > el else el) * held[i]
        return (nextu[i] - now) * held[i]

    def make_room(want, now, me):
        nonlocal free
        while free < want:
            cand = [i for i in range(n) if res[i] and not pin[i] and i != me]
            if not cand:
                return False
            v = max(cand, key=lambda i: (score(i, now), -i))
            res[v] = False
            free += held[v]
            held[v] = 0
            st["evictions"] += 1
        return True

    for t, start, i, k, size, nxt in ev:
        if start:
            if k and not res[i]:
                st["misses"] += 1
            need = size - held[i]
            pin[i] = True
            if not make_room(need, t, i):
                st["over"] += 1
            free -= need
            held[i], res[i] = size, True
            st["peak"] = max(st["peak"], cap - free)
        else:
            pin[i], last[i], nextu[i] = False, t, nxt
            if nxt is None:
                free += held[i]
                held[i], res[i] = 0, False
                continue
            pred[i] = means.get(sessions[i][k][5], 0.0)
            if wm and free < wm[0]:
                make_room(wm[1], t, -1)
    return st


def stall_floor(sessions, room):
    """Tool returns whose conversation's KV could not be in an arena of
    `room` blocks at that moment, beside the turns running then (each
    counted at its prompt's blocks alone, the least it holds while it
    runs, so that this is a floor), however it were ranked, prefetched or
    read: its turn waits for room under any policy, and a disk tier counts
    that wait a restore stall (a recency policy without one counts
    nothing). Returns (those, all returns)."""
    ev = []
    for turns in sessions:
        for k, (t0, t1, _, _, prompt, _) in enumerate(turns):
            ev.append((t1, 0, -prompt))
            if k:
                ev.append((t0, 1, turns[k - 1][2]))
            ev.append((t0, 2, prompt))
    ev.sort(key=lambda e: (e[0], e[1]))
    running = forced = returns = 0
    for _, kind, v in ev:
        if kind == 1:
            returns += 1
            forced += running + v > room
        else:
            running += v
    return forced, returns


def eviction_bound(run, arena, fractions=(0.5, 0.6, 0.67, 0.75, 0.8, 0.9)):
    """On one run's timing (ample's: no policy's delays in it), the
    evictions of recency against the best offline ranking (the fewest of
    "far" and "far_size", which know every return in advance, "class",
    which knows each tool's mean wait, and lru itself: with KV of unequal
    sizes none is optimal for certain, and the exact optimum is a hard
    problem, so this is the best ranking tried) in an arena of `arena`
    blocks, with no watermarks for any, so that only the ranking differs; lru with the benchmark's
    watermarks (1/16, 1/8) besides; and the same ratio at fractions of the
    working set (the most the run's live conversations held at once, the
    shared prompt once)."""
    bt = block_tokens_of(run)
    sessions, shared = kv_turns(run, bt)

    def at(cap):
        room = max(cap - shared, 0)
        floor, returns = stall_floor(sessions, room)
        lru = evict_sim(sessions, room, "lru")
        cls = evict_sim(sessions, room, "class")
        best = min([evict_sim(sessions, room, r) for r in ("far", "far_size")] + [cls, lru],
                   key=lambda x: x["evictions"])
        return {"arena": cap, "lru": lru["evictions"], "oracle": best["evictions"],
                "class": cls["evictions"],
                "over": lru["over"], "stall_floor": floor, "returns": returns,
                "ratio": lru["evictions"] / float(best["evictions"]) if best["evictions"]
                else float("inf") if lru["evictions"] else 1.0}

    ws = evict_sim(sessions, 1 << 40, "lru")["peak"] + shared
    b = at(arena)
    b["lru_wm"] = evict_sim(sessions, max(arena - shared, 0), "lru",
                            (arena // 16, arena // 8))["evictions"]
    b.update(block_tokens=bt, shared=shared, working_set=ws,
             curve=[dict(at(int(round(f * ws))), fraction=f) for f in fractions])
    return b


def cmd_bound(args):
    with open(args.run) as f:
        run = json.load(f)
    b = eviction_bound(run, args.arena)
    print("%s: working set %d blocks (%d tokens a block, %d shared by every session, once)"
          % (run.get("label", args.run), b["working_set"], b["block_tokens"], b["shared"]))
    print("arena %d blocks: lru %d evictions (%d with watermarks), the best offline ranking %d:"
          " %.2fx (the toolwait score with each tool's mean wait known: %d); turns the arena"
          " could not hold beside the running ones: %d; tool returns whose KV had no room"
          " beside them: %d of %d (%.1f%%, the floor of restore stalls)"
          % (b["arena"], b["lru"], b["lru_wm"], b["oracle"], b["ratio"], b["class"], b["over"],
             b["stall_floor"], b["returns"], 100.0 * b["stall_floor"] / max(b["returns"], 1)))
    for c in b["curve"]:
        print("  %.2f of the working set (%4d blocks): lru %3d, best %3d: %.2fx (class means %d);"
              " stall floor %d" % (c["fraction"], c["arena"], c["lru"], c["oracle"], c["ratio"],
                                   c["class"], c["stall_floor"]))
    return 0


# ---- main ---------------------------------------------------------------------------

def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    c = sub.add_parser("convert", help="Mooncake trace -> sessions JSONL")
    c.add_argument("--mooncake", required=True)
    c.add_argument("--sessions", type=int, default=0, help="sample this many (seeded)")
    c.add_argument("--multi-turn-only", action="store_true")
    c.add_argument("--scale-tokens", type=float, default=1 / 16.0)
    c.add_argument("--time-scale", type=float, default=1 / 60.0,
                   help="arrival times multiplied by this")
    c.add_argument("--tool-scale", type=float, default=1.0, help="tool durations x this")
    c.add_argument("--tool-mix", default="", help="name:weight:median_s:sigma[:tokens],...")
    c.add_argument("--min-turns", type=int, default=3)
    c.add_argument("--min-input", type=int, default=16)
    c.add_argument("--prefix-blocks", type=int, default=1,
                   help="hash blocks that form the shared system prompt")
    c.add_argument("--max-context", type=int, default=1800)
    c.add_argument("--call-tokens", type=int, default=0,
                   help="a tool call's decode budget, counted against --max-context")
    c.add_argument("--trim-first", action="store_true",
                   help="over --max-context: shorten the first prompt (to a quarter of it "
                   "at least) before dropping last turns")
    c.add_argument("--seed", type=int, default=39)
    y = sub.add_parser("synth", help="sessions of one shape (many agents) -> JSONL")
    y.add_argument("--sessions", type=int, default=1000)
    y.add_argument("--turns", type=int, default=4, help="model calls per session")
    y.add_argument("--prefix-blocks", type=int, default=1,
                   help="shared system prompt, in blocks of 512 x --scale-tokens")
    y.add_argument("--first-input", type=int, default=1500,
                   help="tokens of the first user turn beyond the shared prompt")
    y.add_argument("--tool-input", type=int, default=32, help="tokens of each tool result")
    y.add_argument("--call-output", type=int, default=16,
                   help="output of a turn ending in a tool call")
    y.add_argument("--output", type=int, default=8, help="output of the last turn")
    y.add_argument("--ramp-s", type=float, default=60.0, help="arrivals uniform over this")
    y.add_argument("--scale-tokens", type=float, default=1.0)
    y.add_argument("--tool-scale", type=float, default=1.0, help="tool durations x this")
    y.add_argument("--tool-mix", default="", help="name:weight:median_s:sigma[:tokens],...")
    y.add_argument("--seed", type=int, default=39)
    r = sub.add_parser("run", help="replay sessions against a server")
    r.add_argument("--url", required=True)
    r.add_argument("--sessions", required=True)
    r.add_argument("--label", required=True)
    r.add_argument("--out", required=True)
    r.add_argument("--model", default="")
    r.add_argument("--concurrency", type=int, default=64)
    r.add_argument("--request-timeout", type=float, default=600,
                   help="seconds a request may go without a byte before it counts as failed")
    r.add_argument("--tool-mode", choices=("client", "server"), default="client")
    r.add_argument("--reply-dir", default="")
    r.add_argument("--min-call-tokens", type=int, default=128)
    r.add_argument("--scale-tokens", type=float, default=1 / 16.0,
                   help="as convert's: the size of a prefix block")
    r.add_argument("--sample-s", type=float, default=0.5)
    r.add_argument("--run-id", default="r%d" % (int(time.time()) % 100000))
    r.add_argument("--seed", type=int, default=39)
    r.add_argument("--strict", action="store_true", help="exit 1 on any request error")
    r.add_argument("--close", action="store_true",
                   help="DELETE /v1/sessions/ID (kvarena's extension) when a session ends")
    r.add_argument("--pid", type=int, default=0,
                   help="the server's process (this machine): its memory, threads and "
                   "fds sampled with /metrics")
    n = sub.add_parser("plan", help="a benchmark's run time limit, and its arena from an "
                       "ample run's samples")
    n.add_argument("--sessions", required=True)
    n.add_argument("--ample", default="", help="the JSON of a run that never evicted")
    n.add_argument("--floor-s", type=float, default=1200.0)
    b = sub.add_parser("bound", help="the evictions recency and the best offline ranking "
                       "need on one run's timing")
    b.add_argument("--run", required=True, help="a run's JSON (ample's: no eviction in it)")
    b.add_argument("--arena", type=int, required=True, help="the arena, in blocks")
    p = sub.add_parser("report", help="table and plots of runs")
    p.add_argument("--out", required=True)
    p.add_argument("labels", nargs="*")
    args = ap.parse_args()
    return {"convert": cmd_convert, "synth": cmd_synth, "run": cmd_run,
            "plan": cmd_plan, "bound": cmd_bound, "report": cmd_report}[args.cmd](args) or 0


if __name__ == "__main__":
    sys.exit(main())
