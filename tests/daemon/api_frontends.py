#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""api_frontends.py - the front ends beside Chat Completions, over the
scripted orchestrator (kvd-api-testserver, tests/daemon/scripted_kvd.c: the
reply is chosen by the last user message, "say TEXT", "call NAME ARGS";
tokens are bytes, cached_tokens the longest byte prefix shared with an
earlier prompt + reply of the tenant). Checks the wire shapes exactly and
that every front end renders a conversation byte-stably across turns:

- /v1/completions: text, echo, stop, n, logprobs, stream, usage; suffix,
  best_of, token-id prompts and echo with logprobs refused;
- /v1/chat/completions with n > 1 (JSON and stream);
- /v1/messages (Anthropic): text, tool_use, a tool_result round trip whose
  cache_read_input_tokens covers the first turn, the event stream in order,
  stop_sequences, count_tokens, x-api-key, Anthropic's error shape and
  refusals (thinking, images, server tools);
- /v1/responses: text, function calls, a previous_response_id round trip
  whose cached_tokens covers the first turn (only the new items sent),
  GET / DELETE / input_items, tenant scoping, store false, retention
  bounds, the typed event stream with consecutive sequence numbers,
  custom tools (Codex's), refusals;
- cross-site requests: Content-Type, Origin (and CORS when configured,
  preflight included), Host (DNS rebinding);
- a family that thinks (qwen3, --chat-template): every API's "no
  reasoning" and reasoning_content sent back reach the rendering.

usage: api_frontends.py KVD-API-TESTSERVER
"""
import http.client
import json
import os
import subprocess
import sys
import tempfile
import time

EXE = sys.argv[1]
MODEL = "kvarena-test"
KEY_A = "frontends-key-a-0000001"
KEY_B = "frontends-key-b-0000002"
passed = failed = 0


def check(cond, what):
    global passed, failed
    if cond:
        passed += 1
        print(f"ok   {what}", flush=True)
    else:
        failed += 1
        print(f"FAIL {what}", flush=True)


class Server:
    def __init__(self, *args, keys=True):
        self.tmp = tempfile.mkdtemp(prefix="kvd-api-fe-")
        pf = os.path.join(self.tmp, "port")
        cmd = [EXE, "--port", "0", "--port-file", pf] + list(args)
        if keys:
            kf = os.path.join(self.tmp, "keys")
            with open(kf, "w") as f:
                f.write(f"alpha 7 {KEY_A}\nbeta 9 {KEY_B}\n")
            cmd += ["--keys", kf]
        self.p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL)
        for _ in range(400):
            if os.path.exists(pf) and open(pf).read().strip():
                break
            time.sleep(0.05)
        self.port = int(open(pf).read())

    def req(self, method, path, body=None, key=KEY_A, headers=None, raw=False, xkey=False):
        c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)
        h = {"Content-Type": "application/json"}
        if key and not xkey:
            h["Authorization"] = f"Bearer {key}"
        if key and xkey:
            h["x-api-key"] = key
        h.update(headers or {})
        data = body if isinstance(body, (bytes, str)) or body is None else json.dumps(body)
        c.request(method, path, data, h)
        r = c.getresponse()
        if raw:
            return r.status, r, c
        out = r.read()
        c.close()
        try:
            return r.status, json.loads(out), r
        except ValueError:
            return r.status, out.decode(errors="replace"), r

    def events(self, path, body, key=KEY_A):
        """An SSE stream as (event name or None, parsed data) pairs."""
        st, r, c = self.req("POST", path, body, key=key, raw=True)
        out, name = [], None
        for raw in r:
            line = raw.decode().rstrip("\r\n")
            if line.startswith("event: "):
                name = line[7:]
            elif line.startswith("data: "):
                d = line[6:]
                out.append((name, d if d == "[DONE]" else json.loads(d)))
                name = None
        c.close()
        return st, out

    def stop(self):
        self.p.terminate()
        self.p.wait(30)


def user(text):
    return [{"role": "user", "content": text}]


# ---------------------------------------------------------------- /v1/completions

def test_completions(s):
    st, r, _ = s.req("POST", "/v1/completions", {"model": MODEL, "prompt": "say Hello there"})
    ch = r["choices"][0] if st == 200 else {}
    check(st == 200 and r["object"] == "text_completion" and ch.get("text") == "Hello there"
          and ch.get("finish_reason") == "stop" and ch.get("logprobs") is None
          and r["usage"]["prompt_tokens"] == len("say Hello there")
          and r["system_fingerprint"] == "fp_scripted",
          f"/v1/completions: the prompt as is, the continuation ({ch.get('text')!r})")
    st, r, _ = s.req("POST", "/v1/completions", {"model": MODEL, "prompt": ["say Hi"], "echo": True,
                                                 "n": 3, "stop": ["i"]})
    texts = [c["text"] for c in r["choices"]] if st == 200 else []
    check(st == 200 and texts == ["say HiH"] * 3 and
          [c["index"] for c in r["choices"]] == [0, 1, 2],
          f"echo, n 3, stop 'i': {texts}")
    st, r, _ = s.req("POST", "/v1/completions", {"model": MODEL, "prompt": "say abc", "logprobs": 2})
    lp = r["choices"][0]["logprobs"] if st == 200 else {}
    check(st == 200 and "".join(lp.get("tokens", [])) == "abc" and
          len(lp["token_logprobs"]) == len(lp["tokens"]) == len(lp["top_logprobs"]) and
          lp["text_offset"][0] == 0, f"logprobs 2: tokens {lp.get('tokens')}, offsets {lp.get('text_offset')}")
    st, ev = s.events("/v1/completions", {"model": MODEL, "prompt": "say streamed text", "stream": True,
                                          "stream_options": {"include_usage": True}})
    text = "".join(d["choices"][0]["text"] for _, d in ev if d != "[DONE]" and d["choices"])
    fins = [d["choices"][0]["finish_reason"] for _, d in ev if d != "[DONE]" and d["choices"]
            and d["choices"][0]["finish_reason"]]
    usage = [d["usage"] for _, d in ev if d != "[DONE]" and d.get("usage")]
    check(st == 200 and text == "streamed text" and fins == ["stop"] and usage and
          ev[-1][1] == "[DONE]", "stream: chunks, one finish, a usage chunk, [DONE]")
    for body, param in (({"suffix": "x"}, "suffix"), ({"best_of": 2}, "best_of"),
                        ({"prompt": [1, 2, 3]}, "prompt"), ({"prompt": ["a", "b"]}, "prompt"),
                        ({"echo": True, "logprobs": 1}, "echo"), ({"max_tokens": 0}, "max_tokens"),
                        ({"bogus": 1}, "bogus")):
        b = {"model": MODEL, "prompt": "say x"}
        b.update(body)
        st, r, _ = s.req("POST", "/v1/completions", b)
        check(st == 400 and r["error"]["param"] == param, f"/v1/completions {body}: 400 naming {param}")


def test_chat_n(s):
    st, r, _ = s.req("POST", "/v1/chat/completions", {"model": MODEL, "messages": user("say Twice"),
                                                      "n": 2, "seed": 3})
    ch = r.get("choices", []) if st == 200 else []
    check(st == 200 and [c["index"] for c in ch] == [0, 1] and
          all(c["message"]["content"] == "Twice" for c in ch) and
          r["usage"]["completion_tokens"] > 0 and r["usage"]["completion_tokens"] % 2 == 0 and
          len(set(r["kvarena"]["session_ids"])) == 2,
          "chat n 2: two choices, usage summed, a session each")
    st1, r1, _ = s.req("POST", "/v1/chat/completions", {"model": MODEL, "messages": user("say Twice"),
                                                        "seed": 3})
    check(st == 200 and st1 == 200 and r["usage"]["prompt_tokens"] == r1["usage"]["prompt_tokens"],
          "chat n 2: the prompt counted once in usage, as for n 1")
    st, ev = s.events("/v1/chat/completions", {"model": MODEL, "messages": user("say Both streamed"),
                                               "n": 2, "stream": True})
    text = {0: "", 1: ""}
    fins = []
    for _, d in ev:
        if d == "[DONE]":
            continue
        for c in d["choices"]:
            text[c["index"]] += c["delta"].get("content") or ""
            if c["finish_reason"]:
                fins.append(c["index"])
    check(st == 200 and text == {0: "Both streamed", 1: "Both streamed"} and sorted(fins) == [0, 1],
          "chat n 2 streamed: each choice's chunks and finish by index")


# ---------------------------------------------------------------- /v1/messages

TOOLS_A = [{"name": "get_weather", "description": "Weather in a city",
            "input_schema": {"type": "object", "properties": {"city": {"type": "string"}},
                             "required": ["city"]}}]


def test_messages(s):
    b = {"model": MODEL, "max_tokens": 64, "system": [{"type": "text", "text": "Be brief."}],
         "messages": [{"role": "user", "content": [{"type": "text", "text": "say Hi there"}]}]}
    st, r, h = s.req("POST", "/v1/messages", b, xkey=True)
    check(st == 200 and r["type"] == "message" and r["role"] == "assistant" and
          r["content"] == [{"type": "text", "text": "Hi there"}] and r["stop_reason"] == "end_turn"
          and r["stop_sequence"] is None and r["id"].startswith("msg_") and
          set(r["usage"]) >= {"input_tokens", "output_tokens", "cache_read_input_tokens"}
          and h.getheader("request-id"),
          f"/v1/messages with x-api-key: {r.get('content') if st == 200 else r}")
    # a tool_use, then its result
    b = {"model": MODEL, "max_tokens": 64, "tools": TOOLS_A,
         "messages": user('call get_weather {"city": "Paris"}')}
    st, r1, _ = s.req("POST", "/v1/messages", b)
    tu = [c for c in r1.get("content", []) if c["type"] == "tool_use"] if st == 200 else []
    check(st == 200 and r1["stop_reason"] == "tool_use" and len(tu) == 1 and
          tu[0]["name"] == "get_weather" and tu[0]["input"] == {"city": "Paris"} and
          tu[0]["id"].startswith("toolu_"), f"tool_use: {tu}")
    if tu:
        b2 = dict(b, messages=b["messages"] + [
            {"role": "assistant", "content": r1["content"]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": tu[0]["id"],
                                          "content": "18C and sunny"}]}])
        st, r2, _ = s.req("POST", "/v1/messages", b2)
        u1, u2 = r1["usage"], r2["usage"]
        first = u1["input_tokens"] + u1["cache_read_input_tokens"] + u1["output_tokens"]
        check(st == 200 and r2["content"][0]["text"] == "Tool said: 18C and sunny" and
              u2["cache_read_input_tokens"] >= first,
              f"tool_result round trip: the reply read it; cache_read_input_tokens "
              f"{u2['cache_read_input_tokens'] if st == 200 else '-'} >= turn 1's {first} (byte-stable)")
    # a call written in another spacing than the template's: the reply
    # comes back rendered as generated (turn_cache.c), the KV still reused
    bc = dict(b, messages=user('call get_weather {"city":"Oslo","unit" :  "C"}'))
    st, r1, _ = s.req("POST", "/v1/messages", bc)
    tu = [c for c in r1.get("content", []) if c["type"] == "tool_use"] if st == 200 else []
    if tu:
        b3 = dict(bc, messages=bc["messages"] + [
            {"role": "assistant", "content": r1["content"]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": tu[0]["id"],
                                          "content": "-3C"}]}])
        st, r3, _ = s.req("POST", "/v1/messages", b3)
        # scripted tokens: a prompt's are bytes, a reply's up to 3 bytes each
        u1 = r1["usage"]
        first = u1["input_tokens"] + u1["cache_read_input_tokens"] + len(
            '<tool_call>\n{"name": "get_weather", "arguments": {"city":"Oslo","unit" :  "C"}}\n</tool_call>')
        check(st == 200 and r3["usage"]["cache_read_input_tokens"] >= first,
              f"a non-canonical call comes back as generated: cache_read_input_tokens "
              f"{r3['usage']['cache_read_input_tokens'] if st == 200 else '-'} >= {first}")
        # an edited turn renders from what the client sent
        edited = [dict(c, input={"city": "Bergen"}) if c["type"] == "tool_use" else c
                  for c in r1["content"]]
        st, r4, _ = s.req("POST", "/v1/messages", dict(b3, messages=bc["messages"] + [
            {"role": "assistant", "content": edited}, b3["messages"][-1]]))
        check(st == 200 and r4["usage"]["cache_read_input_tokens"] <
              r3["usage"]["cache_read_input_tokens"] - 16,
              "an edited call renders from the client's message (the cache is not used)")
    # stream: the event sequence
    st, ev = s.events("/v1/messages", dict(b, stream=True))
    names = [n for n, _ in ev]
    seq = [n for n in names if n != "ping"]
    deltas = "".join(d["delta"].get("partial_json", "") for n, d in ev if n == "content_block_delta")
    md = [d for n, d in ev if n == "message_delta"]
    check(st == 200 and seq == ["message_start", "content_block_start"] +
          ["content_block_delta"] * (len(seq) - 5) + ["content_block_stop", "message_delta",
                                                       "message_stop"] and "ping" in names and
          json.loads(deltas) == {"city": "Paris"} and md[0]["delta"]["stop_reason"] == "tool_use"
          and md[0]["usage"]["output_tokens"] > 0,
          f"stream: {names[:3]} ... {names[-3:]}, input_json_delta pieces make the input")
    st, ev = s.events("/v1/messages", {"model": MODEL, "max_tokens": 64, "stream": True,
                                       "messages": user("say one two three"), "stop_sequences": ["two"]})
    text = "".join(d["delta"].get("text", "") for n, d in ev if n == "content_block_delta")
    md = [d for n, d in ev if n == "message_delta"]
    check(st == 200 and text == "one " and md and md[0]["delta"]["stop_reason"] == "stop_sequence"
          and md[0]["delta"]["stop_sequence"] == "two", f"stop_sequences: {text!r}, {md[0]['delta'] if md else None}")
    st, r, _ = s.req("POST", "/v1/messages", {"model": MODEL, "max_tokens": 3, "messages": user("say abcdefghij")})
    check(st == 200 and r["stop_reason"] == "max_tokens", "max_tokens reached: stop_reason max_tokens")
    # count_tokens = the prompt a request would have
    cb = {"model": MODEL, "messages": user("say count me"), "tools": TOOLS_A}
    st, c, _ = s.req("POST", "/v1/messages/count_tokens", cb)
    st2, r, _ = s.req("POST", "/v1/messages", dict(cb, max_tokens=8), key=KEY_B)
    check(st == 200 and st2 == 200 and c["input_tokens"] ==
          r["usage"]["input_tokens"] + r["usage"]["cache_read_input_tokens"],
          f"count_tokens: {c} = the request's input")
    # errors in Anthropic's shape
    st, r, _ = s.req("POST", "/v1/messages", {"model": MODEL, "messages": user("say x")})
    check(st == 400 and r.get("type") == "error" and r["error"]["type"] == "invalid_request_error"
          and "max_tokens" in r["error"]["message"], f"max_tokens missing: {r}")
    st, r, _ = s.req("POST", "/v1/messages", {"model": MODEL, "max_tokens": 8, "messages": user("x")},
                     key="wrong-key-0000000000", xkey=True)
    check(st == 401 and r["error"]["type"] == "authentication_error", "a wrong x-api-key: 401 authentication_error")
    # what Claude Code sends: adaptive thinking, effort, clearing thinking,
    # a system message among the messages (last), deferred tools
    bb = {"model": MODEL, "max_tokens": 16, "thinking": {"type": "adaptive", "display": "omitted"},
          "output_config": {"effort": "high"},
          "context_management": {"edits": [{"type": "clear_thinking_20251015", "keep": "all"}]},
          "tools": TOOLS_A + [{"name": "Later", "description": "d", "defer_loading": True,
                               "input_schema": {"type": "object"}}],
          "messages": user("say ok") + [{"role": "system", "content": [{"type": "text", "text": "Be terse."}]}]}
    st, r, _ = s.req("POST", "/v1/messages", bb)
    st2, c, _ = s.req("POST", "/v1/messages/count_tokens", dict(bb, tools=TOOLS_A))
    check(st == 200 and st2 == 200 and
          c["input_tokens"] == r["usage"]["input_tokens"] + r["usage"]["cache_read_input_tokens"],
          "what Claude Code sends: adaptive thinking, effort, clear_thinking edits, a trailing "
          "system message; a deferred tool is not in the prompt")
    for extra, what in (({"thinking": {"type": "enabled", "budget_tokens": 0}}, "thinking"),
                        ({"context_management": {"edits": [{"type": "clear_tool_uses_20250919"}]}},
                         "context_management"),
                        ({"tools": [{"type": "web_search_20250305", "name": "web_search"}]}, "tools.0"),
                        ({"tools": [{"name": "t", "input_schema": {"type": "integer"}}]},
                         "tools.0.input_schema: Invalid schema for function 't'"),
                        ({"messages": [{"role": "user", "content": [{"type": "image", "source": {}}]}]},
                         "messages.0.content.0"),
                        ({"messages": [{"role": "user", "content": [
                            {"type": "tool_result", "tool_use_id": "nope", "content": "x"}]}]},
                         "messages.0.content.0"),
                        # a key the block needs, missing (found by api_fuzz.py: a
                        # NULL read, the server's death under UBSan)
                        ({"messages": user("say x") + [{"role": "assistant", "content": [
                            {"type": "thinking", "signature": ""}]}] + user("say y")},
                         "Missing required parameter: 'messages.1.content.0'")):
        bb = {"model": MODEL, "max_tokens": 8, "messages": user("say x")}
        bb.update(extra)
        st, r, _ = s.req("POST", "/v1/messages", bb)
        check(st == 400 and r.get("type") == "error" and what in r["error"]["message"],
              f"refused: {what}: {r['error']['message'] if st == 400 else st}")


# ---------------------------------------------------------------- /v1/responses

TOOLS_R = [{"type": "function", "name": "get_weather", "description": "Weather in a city",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                           "required": ["city"]}}]


def test_responses(s):
    st, r, _ = s.req("POST", "/v1/responses", {"model": MODEL, "input": "say Hello"})
    out = r.get("output", []) if st == 200 else []
    check(st == 200 and r["object"] == "response" and r["status"] == "completed" and
          len(out) == 1 and out[0]["type"] == "message" and
          out[0]["content"][0] == {"type": "output_text", "text": "Hello", "annotations": [],
                                   "logprobs": []} and
          "cached_tokens" in r["usage"]["input_tokens_details"] and r["store"] is True,
          f"/v1/responses: one message item ({out[0]['content'][0]['text'] if out else r})")
    rid = r.get("id")
    st, g, _ = s.req("GET", f"/v1/responses/{rid}")
    check(st == 200 and g == r, "GET /v1/responses/{id}: the same object")
    st, g, _ = s.req("GET", f"/v1/responses/{rid}", key=KEY_B)
    check(st == 404, "another tenant's response: 404")
    st, items, _ = s.req("GET", f"/v1/responses/{rid}/input_items")
    check(st == 200 and items["object"] == "list" and len(items["data"]) == 1 and
          items["data"][0]["role"] == "user" and items["data"][0]["id"].startswith("msg_"),
          "input_items: the input, with an id")
    # paging the input: limit and after as the list endpoints take them
    st, r, _ = s.req("POST", "/v1/responses", {"model": MODEL, "input": [
        {"role": "user", "content": "say a"}, {"role": "assistant", "content": "a"},
        {"role": "user", "content": "say b"}]})
    pid = r.get("id")
    st, p1, _ = s.req("GET", f"/v1/responses/{pid}/input_items?order=asc&limit=2")
    ids = [i["id"] for i in p1.get("data", [])] if st == 200 else []
    st2, p2, _ = s.req("GET", f"/v1/responses/{pid}/input_items?order=asc&limit=2&after={ids[-1] if ids else 'x'}")
    check(st == 200 and len(ids) == 2 and p1["has_more"] and p1["last_id"] == ids[-1] and
          st2 == 200 and len(p2["data"]) == 1 and not p2["has_more"] and
          p2["data"][0]["content"][0]["text"] == "say b", "input_items: two pages, limit and after")
    for q, param in (("limit=1e3", "limit"), ("limit=abc", "limit"), ("limit=0", "limit"),
                     ("limit=101", "limit"), ("limit=2x", "limit"), ("order=up", "order"),
                     ("after=msg_nothere", "after")):
        st, e, _ = s.req("GET", f"/v1/responses/{pid}/input_items?{q}")
        check(st == 400 and e["error"]["param"] == param,
              f"input_items?{q}: a 400 naming {param} ({st}, {e.get('error', {}).get('message')})")
    # a function call, then only its output by previous_response_id
    b = {"model": MODEL, "instructions": "Be brief.", "tools": TOOLS_R,
         "input": [{"role": "user", "content": 'call get_weather {"city": "Paris"}'}]}
    st, r1, _ = s.req("POST", "/v1/responses", b)
    fc = [o for o in r1.get("output", []) if o["type"] == "function_call"] if st == 200 else []
    check(st == 200 and len(fc) == 1 and fc[0]["name"] == "get_weather" and
          json.loads(fc[0]["arguments"]) == {"city": "Paris"} and fc[0]["call_id"].startswith("call_")
          and fc[0]["id"].startswith("fc_"), f"function_call item: {fc}")
    if fc:
        b2 = {"model": MODEL, "instructions": "Be brief.", "tools": TOOLS_R,
              "previous_response_id": r1["id"],
              "input": [{"type": "function_call_output", "call_id": fc[0]["call_id"], "output": "18C"}]}
        st, r2, _ = s.req("POST", "/v1/responses", b2)
        u1, u2 = r1["usage"], r2["usage"]
        first = u1["input_tokens"] + u1["output_tokens"]
        check(st == 200 and r2["output"][0]["content"][0]["text"] == "Tool said: 18C" and
              r2["previous_response_id"] == r1["id"] and
              u2["input_tokens_details"]["cached_tokens"] >= first,
              f"previous_response_id: only the tool output sent; cached_tokens "
              f"{u2['input_tokens_details']['cached_tokens'] if st == 200 else '-'} >= turn 1's {first}")
        # a third turn over the chain
        st, r3, _ = s.req("POST", "/v1/responses", {"model": MODEL, "instructions": "Be brief.",
                                                    "tools": TOOLS_R, "previous_response_id": r2["id"],
                                                    "input": "say Thanks"})
        check(st == 200 and r3["usage"]["input_tokens_details"]["cached_tokens"] >=
              r2["usage"]["input_tokens"] + r2["usage"]["output_tokens"],
              "a third turn continues the chain: everything before it cached")
        st, _, _ = s.req("DELETE", f"/v1/responses/{r1['id']}")
        st2, g, _ = s.req("GET", f"/v1/responses/{r1['id']}")
        st3, e, _ = s.req("POST", "/v1/responses", dict(b2, previous_response_id=r3["id"],
                                                        input="say x"))
        check(st == 200 and st2 == 404 and st3 == 400 and
              e["error"]["param"] == "previous_response_id" and r1["id"] in e["error"]["message"],
              "DELETE: gone; a chain through it is a 400 naming the missing response")
    # the typed event stream
    st, ev = s.events("/v1/responses", dict(b, stream=True))
    types = [d["type"] for _, d in ev]
    seqs = [d["sequence_number"] for _, d in ev]
    argd = "".join(d["delta"] for _, d in ev if d["type"] == "response.function_call_arguments.delta")
    check(st == 200 and all(n == d["type"] for n, d in ev) and seqs == list(range(len(ev))) and
          types[:2] == ["response.created", "response.in_progress"] and
          types[-1] == "response.completed" and "response.output_item.added" in types and
          "response.function_call_arguments.done" in types and json.loads(argd) == {"city": "Paris"},
          f"stream: {types[:3]} ... {types[-2:]}, sequence numbers 0..{len(ev) - 1}")
    st, ev = s.events("/v1/responses", {"model": MODEL, "input": "say streamed words", "stream": True})
    types = [d["type"] for _, d in ev]
    text = "".join(d["delta"] for _, d in ev if d["type"] == "response.output_text.delta")
    done = [d for _, d in ev if d["type"] == "response.completed"]
    check(st == 200 and types[:4] == ["response.created", "response.in_progress",
                                      "response.output_item.added", "response.content_part.added"]
          and types[-4:] == ["response.output_text.done", "response.content_part.done",
                             "response.output_item.done", "response.completed"] and
          text == "streamed words" and done and
          done[0]["response"]["output"][0]["content"][0]["text"] == text,
          "stream of text: item and part added, deltas, done events, completed with the output")
    st, r, _ = s.req("POST", "/v1/responses", {"model": MODEL, "input": "say long enough", "max_output_tokens": 2})
    check(st == 200 and r["status"] == "incomplete" and
          r["incomplete_details"] == {"reason": "max_output_tokens"}, "max_output_tokens: incomplete")
    # store false
    st, r, _ = s.req("POST", "/v1/responses", {"model": MODEL, "input": "say x", "store": False})
    st2, _, _ = s.req("GET", f"/v1/responses/{r['id']}")
    st3, e, _ = s.req("POST", "/v1/responses", {"model": MODEL, "input": "say y",
                                                "previous_response_id": r["id"]})
    check(st == 200 and st2 == 404 and st3 == 400, "store false: nothing kept, no continuation")
    # custom tools (Codex's freeform ones)
    ct = [{"type": "custom", "name": "apply_patch", "description": "Apply a patch",
           "format": {"type": "grammar", "syntax": "lark", "definition": "start: /.+/"}}]
    st, r, _ = s.req("POST", "/v1/responses", {"model": MODEL, "tools": ct,
                                               "input": 'call apply_patch {"input": "*** Begin Patch"}'})
    o = r["output"][0] if st == 200 and r["output"] else {}
    check(o.get("type") == "custom_tool_call" and o.get("input") == "*** Begin Patch" and
          o.get("name") == "apply_patch", f"a custom tool's call: {o}")
    if o:
        st, r2, _ = s.req("POST", "/v1/responses", {"model": MODEL, "tools": ct, "previous_response_id": r["id"],
                                                    "input": [{"type": "custom_tool_call_output",
                                                               "call_id": o["call_id"], "output": "Done!"}]})
        check(st == 200 and r2["output"][0]["content"][0]["text"] == "Tool said: Done!" and
              r2["usage"]["input_tokens_details"]["cached_tokens"] >=
              r["usage"]["input_tokens"] + r["usage"]["output_tokens"],
              "its output round trip by previous_response_id, byte-stable")
    st, r, _ = s.req("POST", "/v1/responses", {"model": MODEL, "input": "say x", "tools": [
        {"type": "web_search", "external_web_access": False},
        {"type": "namespace", "name": "multi_agent_v1", "tools": []}] + TOOLS_R,
        "reasoning": {"summary": "auto"}, "client_metadata": {"x": "y"}})
    check(st == 200 and r["kvarena"].get("tools_not_offered") ==
          [{"type": "web_search"}, {"type": "namespace", "name": "multi_agent_v1"}],
          "what Codex sends: hosted tools not offered (kvarena.tools_not_offered), "
          "reasoning.summary auto, client_metadata")
    for extra, param in (({"background": True}, "background"),
                         ({"reasoning": {"summary": "detailed"}}, "reasoning.summary"),
                         ({"reasoning": {"effort": "high"}}, "reasoning.effort"),
                         ({"truncation": "auto"}, "truncation"),
                         ({"input": [{"type": "input_image", "image_url": "x"}]}, "input[0]"),
                         ({"input": [{"role": "user", "content": [{"type": "input_image"}]}]}, "input[0]"),
                         ({"include": ["file_search_call.results"]}, "include"),
                         ({"previous_response_id": "resp_nope"}, "previous_response_id"),
                         # no output (api_fuzz.py: a NULL read)
                         ({"input": [{"type": "function_call", "call_id": "c1", "name": "get_weather",
                                      "arguments": "{}"},
                                     {"type": "function_call_output", "call_id": "c1"}]}, "input[1]"),
                         ({"tools": [{"type": "function", "name": "t", "parameters": {"type": "integer"}}],
                           "tool_choice": {"type": "function", "name": "t"}}, "tools[0].parameters"),
                         ({"bogus": 1}, "bogus")):
        bb = {"model": MODEL, "input": "say x"}
        bb.update(extra)
        st, r, _ = s.req("POST", "/v1/responses", bb)
        check(st == 400 and r["error"]["param"] == param,
              f"/v1/responses {extra}: 400 naming {param}")


def test_retention():
    s = Server("--responses-max", "3")
    try:
        ids = []
        for i in range(4):
            st, r, _ = s.req("POST", "/v1/responses", {"model": MODEL, "input": f"say {i}"})
            ids.append(r["id"])
        sts = [s.req("GET", f"/v1/responses/{i}")[0] for i in ids]
        st, r, _ = s.req("POST", "/v1/responses", {"model": MODEL, "input": "say x"}, key=KEY_B)
        st2, _, _ = s.req("GET", f"/v1/responses/{ids[1]}")
        check(sts == [404, 200, 200, 200] and st == 200 and st2 == 200,
              f"at most 3 per tenant: the oldest goes ({sts}); another tenant's do not count")
        # SIGHUP without tenant beta: its responses go with it
        with open(os.path.join(s.tmp, "keys"), "w") as f:
            f.write(f"alpha 7 {KEY_A}\nbeta2 11 {KEY_B}\n")
        s.p.send_signal(1)
        time.sleep(0.5)
        st, _, _ = s.req("GET", f"/v1/responses/{r['id']}", key=KEY_B)
        st2, _, _ = s.req("GET", f"/v1/responses/{ids[3]}")
        check(st == 404 and st2 == 200, "a tenant removed on reload loses its responses; "
              "the same key as another tenant sees none of them")
    finally:
        s.stop()


# ---------------------------------------------------------------- browsers

def test_cross_site(s):
    b = {"model": MODEL, "messages": user("say hi")}
    st, r, _ = s.req("POST", "/v1/chat/completions", json.dumps(b), headers={"Content-Type": "text/plain"})
    check(st == 415 and r["error"]["code"] == "unsupported_media_type",
          "text/plain body (a page's simple request): 415")
    st, r, _ = s.req("POST", "/v1/chat/completions", json.dumps(b),
                     headers={"Content-Type": "application/x-www-form-urlencoded"})
    check(st == 415, "form-encoded body: 415")
    st, r, _ = s.req("POST", "/v1/chat/completions", b,
                     headers={"Content-Type": "application/json; charset=utf-8"})
    check(st == 200, "application/json; charset=utf-8: 200")
    st, r, h = s.req("POST", "/v1/chat/completions", b, headers={"Origin": "http://evil.example"})
    check(st == 403 and r["error"]["code"] == "cross_site_refused" and
          not h.getheader("Access-Control-Allow-Origin"), "a foreign Origin: 403, no CORS header")
    st, r, _ = s.req("OPTIONS", "/v1/chat/completions", None,
                     headers={"Origin": "http://evil.example", "Access-Control-Request-Method": "POST"})
    check(st == 403, "its preflight: 403")
    st, r, _ = s.req("POST", "/v1/chat/completions", b,
                     headers={"Origin": f"http://127.0.0.1:{s.port}"})
    check(st == 200, "this server's own origin: 200")
    st, r, _ = s.req("GET", "/health", None, headers={"Host": "evil.example"})
    check(st == 403, "Host evil.example (DNS rebinding): 403")
    st, r, _ = s.req("POST", "/v1/chat/completions", b, headers={"Host": f"attacker.test:{s.port}"})
    check(st == 403, "Host attacker.test on a completion: 403")
    for host in (f"localhost:{s.port}", f"127.0.0.1:{s.port}", "localhost"):
        st, _, _ = s.req("GET", "/health", None, headers={"Host": host})
        check(st == 200, f"Host {host}: 200")


def test_cors():
    s = Server("--cors", "https://app.example", "--host", "kvarena.internal")
    try:
        b = {"model": MODEL, "messages": user("say hi")}
        st, r, h = s.req("POST", "/v1/chat/completions", b, headers={"Origin": "https://app.example"})
        check(st == 200 and h.getheader("Access-Control-Allow-Origin") == "https://app.example" and
              h.getheader("Vary") == "Origin", "a configured origin: 200 with Access-Control-Allow-Origin")
        st, _, h = s.req("OPTIONS", "/v1/chat/completions", None,
                         headers={"Origin": "https://app.example", "Access-Control-Request-Method": "POST",
                                  "Access-Control-Request-Headers": "authorization,content-type"})
        check(st == 204 and "POST" in (h.getheader("Access-Control-Allow-Methods") or "") and
              "Authorization" in (h.getheader("Access-Control-Allow-Headers") or ""),
              "its preflight: 204 with methods and headers")
        st, _, _ = s.req("POST", "/v1/chat/completions", b, headers={"Origin": "https://other.example"})
        check(st == 403, "another origin: still 403")
        st, _, _ = s.req("GET", "/health", None, headers={"Host": "kvarena.internal:8000"})
        check(st == 200, "a configured Host name: 200")
    finally:
        s.stop()


# ---------------------------------------------------------------- thinking

def test_thinking():
    """A family that thinks (qwen3): every API's "no reasoning" opens the
    reply after an empty think block (19 more prompt bytes, as Qwen 3's
    template writes with enable_thinking false); reasoning_content sent
    back is written where the template writes it; chatml ignores both."""
    off = len("<think>\n\n</think>\n\n")
    for fam in ("qwen3", "chatml"):
        s = Server("--chat-template", fam)
        try:
            want = off if fam == "qwen3" else 0

            def chat(**kw):
                st, r, _ = s.req("POST", "/v1/chat/completions",
                                 dict({"model": MODEL, "messages": user("say hi"), "max_tokens": 4}, **kw))
                return r["usage"]["prompt_tokens"] if st == 200 else (st, r)

            def msgs(**kw):
                st, r, _ = s.req("POST", "/v1/messages",
                                 dict({"model": MODEL, "messages": user("say hi"), "max_tokens": 4}, **kw))
                u = r["usage"]
                return u["input_tokens"] + u["cache_read_input_tokens"]

            def resp(**kw):
                st, r, _ = s.req("POST", "/v1/responses",
                                 dict({"model": MODEL, "input": "say hi", "store": False}, **kw))
                return r["usage"]["input_tokens"]

            base = chat()
            got = (chat(chat_template_kwargs={"enable_thinking": False}) - base,
                   chat(reasoning_effort="none") - base,
                   chat(reasoning_effort="minimal") - base,
                   chat(chat_template_kwargs={"enable_thinking": True}) - base,
                   msgs(thinking={"type": "disabled"}) - msgs(),
                   msgs(thinking={"type": "adaptive"}) - msgs(),
                   resp(reasoning={"effort": "none"}) - resp(),
                   resp(reasoning={"effort": "minimal"}) - resp(),
                   msgs(thinking={"type": "enabled", "budget_tokens": 4}) - msgs())
            check(got == (want, want, want, 0, want, 0, want, want, 0),
                  f"{fam}: thinking off by chat_template_kwargs, reasoning_effort none and minimal, "
                  f"Anthropic's thinking disabled, reasoning.effort none and minimal: +{want} prompt "
                  f"bytes each; on by enable_thinking, adaptive and enabled (got {got})")
            # an effort above minimal is a think budget: thinking stays
            # on where the family thinks; refused where it does not
            for kw, param in (({"reasoning_effort": "high"}, "reasoning_effort"),
                              ({"reasoning_effort": "xhigh"}, "reasoning_effort")):
                got = chat(**kw)
                got = got - base if isinstance(got, int) else got
                check(got == 0 if fam == "qwen3" else
                      (got[0] == 400 and got[1]["error"]["param"] == param),
                      f"{fam}: {kw}: {'thinking on' if fam == 'qwen3' else '400 naming ' + param} ({got})")
            st, r, _ = s.req("POST", "/v1/responses", {"model": MODEL, "input": "say hi", "store": False,
                                                       "reasoning": {"effort": "low"}})
            check(st == 200 if fam == "qwen3" else
                  (st == 400 and r["error"]["param"] == "reasoning.effort"),
                  f"{fam}: responses reasoning.effort low: {st}")
            # a tool round's reasoning, sent back
            call = {"id": "call_1", "type": "function",
                    "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}}
            conv = user("say go") + [{"role": "assistant", "content": "", "tool_calls": [call]},
                                     {"role": "tool", "tool_call_id": "call_1", "content": "18C"}]
            tools = [{"type": "function", "function": {"name": "get_weather"}}]
            a = chat(messages=conv, tools=tools)
            conv[1]["reasoning_content"] = "Need it."
            b = chat(messages=conv, tools=tools)
            want_r = len("<think>\nNeed it.\n</think>\n\n") if fam == "qwen3" else 0
            check(b - a == want_r, f"{fam}: reasoning_content of a tool round written back "
                  f"(+{b - a} bytes, want {want_r})")
            for kw, param in (({"chat_template_kwargs": {"add_generation_prompt": False}},
                               "chat_template_kwargs"),
                              ({"chat_template_kwargs": {"enable_thinking": "no"}},
                               "chat_template_kwargs.enable_thinking"),
                              ({"chat_template_kwargs": []}, "chat_template_kwargs")):
                st, r = chat(**kw)
                check(st == 400 and r["error"]["param"] == param, f"{fam}: {kw}: 400 naming {param}")
            conv[1]["reasoning_content"] = 7
            st, r = chat(messages=conv, tools=tools)
            check(st == 400 and r["error"]["param"] == "messages[1].reasoning_content",
                  f"{fam}: reasoning_content not a string: 400")
        finally:
            s.stop()


THINK = "<think>\nLet me see.\n</think>\n\n"
CALL = "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>"


def test_reasoning():
    """A family that thinks (qwen3): the reasoning its reply opens with
    comes apart from the content on every API (reasoning_content on
    messages and deltas, a reasoning item and its events, a thinking
    block and thinking_delta events), stays in the content with
    reasoning_format none and for a family that does not think (chatml),
    and a tool round's reasoning sent back (reasoning_content, the stored
    reasoning item, the thinking block) renders where it was generated:
    the next prompt continues the previous prompt and reply byte for byte."""
    say = "say " + THINK + "Hello there."
    tools = [{"type": "function", "function": {"name": "get_weather",
                                               "parameters": {"type": "object"}}}]
    for fam in ("qwen3", "chatml"):
        s = Server("--chat-template", fam)
        q3 = fam == "qwen3"
        try:
            st, r, _ = s.req("POST", "/v1/chat/completions", {"model": MODEL, "messages": user(say)})
            m = r["choices"][0]["message"] if st == 200 else {}
            want = ("Hello there.", "Let me see.") if q3 else (THINK + "Hello there.", None)
            check((m.get("content"), m.get("reasoning_content")) == want,
                  f"{fam}: chat: content and reasoning_content {want} (got {m})")
            rt = r["usage"].get("completion_tokens_details", {}).get("reasoning_tokens")
            check((rt is not None and rt > 0) if q3 else rt is None,
                  f"{fam}: chat: usage.completion_tokens_details.reasoning_tokens {rt}")
            # an earlier turn's reasoning: qwen3's template drops it once a
            # user message follows (the prompt is as long as without it)
            hist = [{"role": "user", "content": "say a"},
                    {"role": "assistant", "content": "Hi.", "reasoning_content": "Long thoughts."},
                    {"role": "user", "content": "say b"}]
            st, r1, _ = s.req("POST", "/v1/chat/completions", {"model": MODEL, "messages": hist})
            hist[1].pop("reasoning_content")
            st2, r2, _ = s.req("POST", "/v1/chat/completions", {"model": MODEL, "messages": hist})
            check(st == st2 == 200 and
                  r1["usage"]["prompt_tokens"] == r2["usage"]["prompt_tokens"],
                  f"{fam}: an earlier turn's reasoning_content is not written back after a later "
                  f"user message ({r1['usage']['prompt_tokens']} vs {r2['usage']['prompt_tokens']} bytes)")
            st, ev = s.events("/v1/chat/completions", {"model": MODEL, "messages": user(say),
                                                      "stream": True,
                                                      "stream_options": {"include_usage": True}})
            us = [e[1]["usage"] for e in ev if e[1] != "[DONE]" and e[1].get("usage")]
            check(len(us) == 1 and (us[0].get("completion_tokens_details", {}).get("reasoning_tokens", 0) > 0) == q3,
                  f"{fam}: chat stream: the usage chunk's reasoning_tokens ({us})")
            ds = [e[1]["choices"][0]["delta"] for e in ev if e[1] != "[DONE]" and e[1]["choices"]]
            rc = "".join(d.get("reasoning_content", "") for d in ds)
            ct = "".join(d.get("content") or "" for d in ds)
            first_c = next((i for i, d in enumerate(ds) if d.get("content")), len(ds))
            last_r = max((i for i, d in enumerate(ds) if "reasoning_content" in d), default=-1)
            check((ct, rc or None) == want and last_r < first_c,
                  f"{fam}: chat stream: reasoning_content deltas, then content ({rc!r}, {ct!r})")
            if q3:
                # llama.cpp's reasoning budget: the think block closed
                # after 3 tokens, the reply goes on; 0: no thinking
                st, r, _ = s.req("POST", "/v1/chat/completions", {"model": MODEL, "messages": user(say),
                                                                 "thinking_budget_tokens": 3})
                m = r["choices"][0]["message"] if st == 200 else {}
                check((m.get("reasoning_content"), m.get("content")) == ("Let me ", "Hello there.") and
                      r["usage"]["completion_tokens"] == 9,
                      f"qwen3: thinking_budget_tokens 3: the think block closed, the reply goes on ({m})")
                st, r0, _ = s.req("POST", "/v1/chat/completions", {"model": MODEL, "messages": user(say),
                                                                  "reasoning_budget_tokens": 0})
                st2, r1, _ = s.req("POST", "/v1/chat/completions", {"model": MODEL, "messages": user(say)})
                check(r0["usage"]["prompt_tokens"] - r1["usage"]["prompt_tokens"] == len("<think>\n\n</think>\n\n"),
                      "qwen3: reasoning_budget_tokens 0: thinking off (the empty think block)")
                st, r, _ = s.req("POST", "/v1/chat/completions", {"model": MODEL, "messages": user(say),
                                                                 "thinking_budget_tokens": 3,
                                                                 "reasoning_budget_tokens": 4})
                check(st == 400 and r["error"]["param"] == "reasoning_budget_tokens",
                      "qwen3: both budget names, different values: 400")
                # reasoning_effort low: 1024 tokens of thinking, then
                # the block is closed (an explicit budget wins)
                long_think = "<think>\n" + "a " * 2000 + "\n</think>\n\n"
                st, r, _ = s.req("POST", "/v1/chat/completions",
                                 {"model": MODEL, "messages": user("say " + long_think + "Done."),
                                  "reasoning_effort": "low"})
                m = r["choices"][0]["message"] if st == 200 else {}
                rt = r["usage"]["completion_tokens_details"]["reasoning_tokens"] if st == 200 else 0
                check(m.get("content") == "Done." and 1024 <= rt <= 1026 and
                      m.get("reasoning_content", "").count("a") < 2000,
                      f"qwen3: reasoning_effort low: the think block closed at 1024 tokens ({st}, "
                      f"{rt} reasoning tokens, content {m.get('content')!r})")
                st, r, _ = s.req("POST", "/v1/chat/completions", {"model": MODEL, "messages": user(say),
                                                                 "reasoning_effort": "low",
                                                                 "thinking_budget_tokens": 3})
                m = r["choices"][0]["message"] if st == 200 else {}
                check(m.get("reasoning_content") == "Let me ",
                      f"qwen3: reasoning_effort low with thinking_budget_tokens 3: the explicit budget ({m})")
                st, r, _ = s.req("POST", "/v1/chat/completions", {"model": MODEL, "messages": user(say),
                                                                 "thinking_budget_tokens": 3,
                                                                 "reasoning_format": "none"})
                m = r["choices"][0]["message"] if st == 200 else {}
                check(m.get("content") == "<think>\nLet me \n</think>\n\nHello there.",
                      f"qwen3: the budget with reasoning_format none: the closed block in the content ({m})")
            if q3:
                st, r, _ = s.req("POST", "/v1/chat/completions", {"model": MODEL, "messages": user(say),
                                                                 "reasoning_format": "none"})
                m = r["choices"][0]["message"] if st == 200 else {}
                check(m.get("content") == THINK + "Hello there." and "reasoning_content" not in m,
                      f"qwen3: reasoning_format none keeps the reasoning in the content ({m})")
                st, r, _ = s.req("POST", "/v1/chat/completions", {"model": MODEL, "messages": user(say),
                                                                 "reasoning_format": "deepseek-legacy"})
                check(st == 400 and r["error"]["param"] == "reasoning_format",
                      "qwen3: reasoning_format deepseek-legacy: 400 naming it")

            # Responses: a reasoning item before the message, and its events
            st, r, _ = s.req("POST", "/v1/responses", {"model": MODEL, "input": say, "store": False})
            types = [o["type"] for o in r["output"]] if st == 200 else []
            rs = r["output"][0]["content"][0]["text"] if q3 and types[:1] == ["reasoning"] else None
            check(types == (["reasoning", "message"] if q3 else ["message"]) and
                  (not q3 or (rs == "Let me see." and
                              r["usage"]["output_tokens_details"]["reasoning_tokens"] > 0)),
                  f"{fam}: responses: output {types}, reasoning {rs!r}")
            st, ev = s.events("/v1/responses", {"model": MODEL, "input": say, "store": False,
                                                "stream": True})
            names = [e[0] for e in ev]
            if q3:
                want_ev = ["response.output_item.added", "response.content_part.added",
                           "response.reasoning_text.delta", "response.reasoning_text.done",
                           "response.content_part.done", "response.output_item.done",
                           "response.output_item.added"]
                seen = [n for i, n in enumerate(names) if n != names[i - 1] or
                        not n.endswith(".delta")][2:9]
                deltas = "".join(e[1]["delta"] for e in ev if e[0] == "response.reasoning_text.delta")
                done = [e[1] for e in ev if e[0] == "response.output_item.done"][0]["item"]
                check(seen == want_ev and deltas == "Let me see." and done["type"] == "reasoning" and
                      done["content"] == [{"type": "reasoning_text", "text": "Let me see."}],
                      f"qwen3: responses stream: the reasoning item's events in order ({seen})")
            else:
                check("response.reasoning_text.delta" not in names,
                      "chatml: responses stream: no reasoning events")

            # Messages: a thinking block first
            st, r, _ = s.req("POST", "/v1/messages", {"model": MODEL, "max_tokens": 100,
                                                      "messages": user(say)})
            blocks = [b["type"] for b in r["content"]] if st == 200 else []
            check(blocks == (["thinking", "text"] if q3 else ["text"]) and
                  (not q3 or r["content"][0] == {"type": "thinking", "thinking": "Let me see.",
                                                 "signature": ""}),
                  f"{fam}: messages: blocks {blocks}")
            st, ev = s.events("/v1/messages", {"model": MODEL, "max_tokens": 100, "stream": True,
                                               "messages": user(say)})
            deltas = [e[1]["delta"]["type"] for e in ev if e[0] == "content_block_delta"]
            th = "".join(e[1]["delta"].get("thinking", "") for e in ev if e[0] == "content_block_delta")
            starts = [e[1]["content_block"]["type"] for e in ev if e[0] == "content_block_start"]
            if q3:
                check(starts == ["thinking", "text"] and th == "Let me see." and
                      deltas.index("signature_delta") < deltas.index("text_delta") and
                      "signature_delta" == deltas[deltas.index("text_delta") - 1],
                      f"qwen3: messages stream: thinking_delta events, signature_delta, then text ({starts})")
                st, r, _ = s.req("POST", "/v1/messages", {"model": MODEL, "max_tokens": 100,
                                 "messages": user(say), "thinking": {"type": "adaptive",
                                                                     "display": "omitted"}})
                check(st == 200 and r["content"][0] == {"type": "thinking", "thinking": "",
                                                        "signature": ""},
                      "qwen3: thinking display omitted: a thinking block without its text")
                # the budget: the think block closed after 3 of its
                # tokens, the reply continued past it; usage counts both
                for stream in (False, True):
                    b = {"model": MODEL, "max_tokens": 100, "messages": user(say),
                         "thinking": {"type": "enabled", "budget_tokens": 3}, "stream": stream}
                    if stream:
                        st, ev = s.events("/v1/messages", b)
                        th = "".join(e[1]["delta"].get("thinking", "") for e in ev
                                     if e[0] == "content_block_delta")
                        tx = "".join(e[1]["delta"].get("text", "") for e in ev
                                     if e[0] == "content_block_delta")
                        out = [e[1]["usage"]["output_tokens"] for e in ev if e[0] == "message_delta"]
                    else:
                        st, r, _ = s.req("POST", "/v1/messages", b)
                        th = r["content"][0].get("thinking") if st == 200 else None
                        tx = r["content"][1].get("text") if st == 200 else None
                        out = [r["usage"]["output_tokens"]] if st == 200 else []
                    # tokens of at most 3 bytes: "<th" "ink" ">\nL" "et " "me " cut,
                    # then "Hel" "lo " "the" "re."
                    check(st == 200 and th == "Let me " and tx == "Hello there." and out == [9],
                          f"qwen3: thinking budget_tokens 3 (stream {stream}): the think block "
                          f"closed after 3 tokens, the reply goes on ({th!r}, {tx!r}, output {out})")
                for th_, what in (({"type": "enabled", "budget_tokens": 0}, "not positive"),
                                  ({"type": "enabled"}, "missing"),
                                  ({"type": "adaptive", "display": "full"}, "display")):
                    st, r, _ = s.req("POST", "/v1/messages", {"model": MODEL, "max_tokens": 100,
                                                              "messages": user(say), "thinking": th_})
                    check(st == 400 and "thinking" in r["error"]["message"],
                          f"qwen3: thinking {th_}: 400 ({what}): {r}")
            else:
                check(starts == ["text"], f"chatml: messages stream: text only ({starts})")

            # a tool round's reasoning sent back renders as it was generated
            reply = THINK + CALL
            conv = user("say " + reply)
            st, r, _ = s.req("POST", "/v1/chat/completions", {"model": MODEL, "messages": conv,
                                                             "tools": tools})
            m = r["choices"][0]["message"]
            p1 = r["usage"]["prompt_tokens"]
            conv = conv + [m, {"role": "tool", "tool_call_id": m["tool_calls"][0]["id"],
                               "content": "18C"}]
            st, r, _ = s.req("POST", "/v1/chat/completions", {"model": MODEL, "messages": conv,
                                                             "tools": tools})
            got = r["usage"]["prompt_tokens_details"]["cached_tokens"] if st == 200 else -1
            check(st == 200 and got >= p1 + len(reply),
                  f"{fam}: chat: the tool round sent back (reasoning_content {m.get('reasoning_content')!r}) "
                  f"continues the prompt and reply byte for byte ({got} cached, want {p1 + len(reply)})")
            st, r, _ = s.req("POST", "/v1/responses", {"model": MODEL, "input": "say " + reply,
                                                       "tools": [dict(tools[0]["function"], type="function")]})
            p1 = r["usage"]["input_tokens"]
            call = [o for o in r["output"] if o["type"] == "function_call"][0]
            st, r, _ = s.req("POST", "/v1/responses", {"model": MODEL, "previous_response_id": r["id"],
                             "input": [{"type": "function_call_output", "call_id": call["call_id"],
                                        "output": "18C"}],
                             "tools": [dict(tools[0]["function"], type="function")]})
            got = r["usage"]["input_tokens_details"]["cached_tokens"] if st == 200 else -1
            check(st == 200 and got >= p1 + len(reply),
                  f"{fam}: responses: previous_response_id with a reasoning item continues the prompt "
                  f"and reply byte for byte ({got} cached, want {p1 + len(reply)})")
            atools = [{"name": "get_weather", "input_schema": {"type": "object"}}]
            conv = user("say " + reply)
            st, r, _ = s.req("POST", "/v1/messages", {"model": MODEL, "max_tokens": 200,
                                                      "messages": conv, "tools": atools})
            u = r["usage"]
            p1 = u["input_tokens"] + u["cache_read_input_tokens"]
            tu = [b for b in r["content"] if b["type"] == "tool_use"][0]
            conv = conv + [{"role": "assistant", "content": r["content"]},
                           {"role": "user", "content": [{"type": "tool_result", "tool_use_id": tu["id"],
                                                         "content": "18C"}]}]
            st, r, _ = s.req("POST", "/v1/messages", {"model": MODEL, "max_tokens": 200,
                                                      "messages": conv, "tools": atools})
            got = r["usage"]["cache_read_input_tokens"] if st == 200 else -1
            check(st == 200 and got >= p1 + len(reply),
                  f"{fam}: messages: the thinking block sent back continues the prompt and reply "
                  f"byte for byte ({got} cached, want {p1 + len(reply)})")
        finally:
            s.stop()


def main():
    s = Server()
    try:
        for t in (test_completions, test_chat_n, test_messages, test_responses, test_cross_site):
            try:
                t(s)
            except Exception as e:  # a crash is a failure, the rest still runs
                check(False, f"{t.__name__}: {type(e).__name__}: {e}")
        check(s.p.poll() is None, "the server is still up")
    finally:
        s.stop()
    for t in (test_retention, test_cors, test_thinking, test_reasoning):
        try:
            t()
        except Exception as e:
            check(False, f"{t.__name__}: {type(e).__name__}: {e}")
    print(f"{passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
