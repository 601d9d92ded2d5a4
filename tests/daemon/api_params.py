# SPDX-License-Identifier: MIT
"""api_params.py - every parameter each front end documents, walked on the
real kvarenad (imported by test_serve.py, which runs it with its random
model): each one either changes what comes back in a way a check here
sees, is refused with a 400 naming it, or - the few whose value cannot
change a reply (cache hints, labels) - is accepted, leaves the reply as it
was, and its row in Documentation/api.md says "no effect on the reply" and
why. Never accepted and ignored without saying so.

The parameters walked are the ones Documentation/api.md's tables list for
/v1/chat/completions, /v1/completions, /v1/responses and /v1/messages
(the first column's names): a documented parameter without a probe here,
or a probe of an undocumented one, fails the walk.
"""
import json
import re
import time

DOC = "Documentation/api.md"
SECTIONS = {
    "chat": "## `POST /v1/chat/completions`",
    "completions": "## `POST /v1/completions`",
    "responses": "## `POST /v1/responses`",
    "messages": "## `POST /v1/messages`",
}
PATHS = {"chat": "/v1/chat/completions", "completions": "/v1/completions",
         "responses": "/v1/responses", "messages": "/v1/messages"}
USER = "hello world, tell me more"
TOOL = {"name": "calc", "description": "Evaluate an arithmetic expression.",
        "parameters": {"type": "object", "properties": {"expression": {"type": "string"}},
                       "required": ["expression"]}}


def doc_params():
    """{front end: {name: its table row's text}} from api.md: the names in
    the first column of the section's first table whose first header is
    "field"."""
    text = open(DOC).read()
    out = {}
    for fe, head in SECTIONS.items():
        sec = text[text.index(head) + len(head):]
        sec = sec[:sec.index("\n## ")]
        lines = sec.splitlines()
        start = next(i for i, l in enumerate(lines) if l.startswith("| field |"))
        params = {}
        for row in lines[start + 2:]:
            if not row.startswith("| "):
                break
            for name in re.findall(r"`([a-z_][a-z_.]*)`", row.split("|")[1]):
                params[name] = row
        out[fe] = params
    return out


# ---------------------------------------------------------------- requests

def base(fe, max_tokens=24):
    if fe == "chat":
        return {"model": "test", "messages": [{"role": "user", "content": USER}],
                "temperature": 0, "max_tokens": max_tokens}
    if fe == "completions":
        return {"model": "test", "prompt": USER, "temperature": 0, "max_tokens": max_tokens}
    if fe == "responses":
        return {"model": "test", "input": USER, "temperature": 0, "max_output_tokens": max_tokens}
    return {"model": "test", "messages": [{"role": "user", "content": USER}],
            "temperature": 0, "max_tokens": max_tokens}


def sse(resp):
    """[(event name or None, data object, its data's bytes)] of an SSE
    response."""
    raw = resp.read()
    out = []
    for block in raw.split(b"\n\n"):
        name, data, size = None, None, 0
        for line in block.split(b"\n"):
            if line.startswith(b"event: "):
                name = line[7:].decode()
            elif line.startswith(b"data: ") and line[6:] != b"[DONE]":
                data, size = json.loads(line[6:]), len(line) - 6
        if data is not None:
            out.append((name, data, size))
    return out


class Reply:
    """What a request gave: status, body (JSON or the SSE events), text,
    calls, finish, usage (prompt, cached, completion)."""

    def __init__(self, fe, st, body):
        self.fe, self.st, self.body = fe, st, body
        self.text, self.calls, self.finish, self.usage = "", [], None, None
        if st != 200 or not isinstance(body, dict):
            return
        if fe == "chat":
            c = body["choices"][0]
            self.text = c["message"].get("content") or ""
            self.calls = [(t["function"]["name"], t["function"]["arguments"])
                          for t in c["message"].get("tool_calls") or []]
            self.finish = c["finish_reason"]
            u = body["usage"]
            self.usage = (u["prompt_tokens"], u["prompt_tokens_details"]["cached_tokens"],
                          u["completion_tokens"])
        elif fe == "completions":
            c = body["choices"][0]
            self.text, self.finish = c["text"], c["finish_reason"]
            u = body["usage"]
            self.usage = (u["prompt_tokens"], u["prompt_tokens_details"]["cached_tokens"],
                          u["completion_tokens"])
        elif fe == "responses":
            for it in body["output"]:
                if it["type"] == "message":
                    self.text += "".join(p.get("text", "") for p in it["content"])
                elif it["type"] == "function_call":
                    self.calls.append((it["name"], it["arguments"]))
            self.finish = body["status"]
            u = body["usage"]
            self.usage = (u["input_tokens"], u["input_tokens_details"]["cached_tokens"],
                          u["output_tokens"])
        else:
            for b in body["content"]:
                if b["type"] == "text":
                    self.text += b["text"]
                elif b["type"] == "tool_use":
                    self.calls.append((b["name"], json.dumps(b["input"])))
            self.finish = body["stop_reason"]
            u = body["usage"]
            self.usage = (u["input_tokens"] + u["cache_read_input_tokens"],
                          u["cache_read_input_tokens"], u["output_tokens"])

    def refused(self, name):
        """A 400 (404 for the model) naming the parameter."""
        if self.st not in (400, 404) or not isinstance(self.body, dict):
            return False
        e = self.body.get("error") or {}
        top = name.split(".")[0]
        return (e.get("param") or "").split(".")[0].split("[")[0] == top or \
            top in (e.get("message") or "")


def ask(d, fe, extra=None, drop=(), max_tokens=24):
    b = base(fe, max_tokens)
    for k in drop:
        b.pop(k, None)
    b.update(extra or {})
    for k in [k for k, v in b.items() if v is None]:
        del b[k]        # None: not sent
    if b.get("stream"):
        st, r = d.req("POST", PATHS[fe], b, stream=True)
        if st != 200:
            return Reply(fe, st, json.loads(r.read() or b"{}"))
        return Reply(fe, 200, sse(r))
    st, body, _ = d.req("POST", PATHS[fe], b)
    return Reply(fe, st, body)


# ---------------------------------------------------------------- probes
#
# A probe is (kind, extra body, check): kind "changes" (check(reply, base,
# d) must hold, the reply differing from the plain one in what it says),
# "refused" (a 400 naming the parameter), "same" (200 and the text and
# calls of the plain reply; the doc row says "no effect on the reply").

def differs(r, b, d=None):
    return r.st == 200 and (r.text, r.calls) != (b.text, b.calls)


def equal(r, b, d=None):
    return r.st == 200 and (r.text, r.calls) == (b.text, b.calls)


def cut_at(n, fin):
    return lambda r, b, d: r.st == 200 and r.usage and r.usage[2] == n and r.finish in fin


def logged(value):
    """The request log line names the end user (written as the request
    ends: a moment after the answer)."""
    def chk(r, b, d):
        for _ in range(40):
            if f"end_user={value}" in d.logtext():
                return r.st == 200
            time.sleep(0.05)
        return False
    return chk


def is_json_obj(text):
    try:
        return isinstance(json.loads(text), dict)
    except ValueError:
        return False


def sampling(fe):
    """temperature, top_p, seed, top_k, min_p, the penalties, logit_bias,
    ignore_eos: the same checks on every API (Anthropic's temperature is
    0..1; OpenAI's penalties are chat's and completions')."""
    t_hot = 1.0 if fe == "messages" else 2.0
    hot = {"temperature": t_hot, "seed": 3}
    p = {
        "temperature": [("changes", hot, differs)],
        "top_p": [("changes", dict(hot, top_p=1e-6), equal)],
        "top_k": [("changes", dict(hot, top_k=1), equal)],
        "min_p": [("changes", dict(hot, min_p=1.0), equal)],
        "seed": [("changes", {"temperature": 1, "seed": 1}, "seed")],
        "repetition_penalty": [("changes", {"repetition_penalty": 2, "_tokens": 48}, differs)],
        "repeat_penalty": [("changes", {"repeat_penalty": 2, "_tokens": 48}, differs)],
        "logit_bias": [("changes", {"logit_bias": {"65": 100}},
                        lambda r, b, d: r.st == 200 and len(set(r.text)) == 1 and r.text != b.text)],
        "ignore_eos": [("changes", "EOS", lambda r, b, d: r.st == 200 and r.text == ""),
                       ("changes", "EOS+ignore", lambda r, b, d: r.st == 200 and r.text == b.text)],
    }
    if fe in ("chat", "completions"):
        p["frequency_penalty"] = [("changes", {"frequency_penalty": 2, "_tokens": 48}, differs)]
        p["presence_penalty"] = [("changes", {"presence_penalty": 2, "_tokens": 48}, differs)]
    return p


# a tool whose calls are short (a boolean): the random model finishes one
# and then chooses between another and the end
FLIP = {"name": "flip", "description": "Flip a switch.",
        "parameters": {"type": "object", "properties": {"on": {"type": "boolean"}},
                       "required": ["on"], "additionalProperties": False}}


def chat_probes():
    tools = [{"type": "function", "function": FLIP}]
    p = sampling("chat")
    p.update({
        "model": [("refused", {"model": "no-such-model"}, None)],
        "messages": [("changes", {"messages": [{"role": "user", "content": "other words"}]}, differs)],
        "tools": [("changes", {"tools": tools, "tool_choice": "required", "_tokens": 100, "kvarena": {"close_in_budget": True}},
                   lambda r, b, d: r.finish == "tool_calls" and r.calls and r.calls[0][0] == "flip")],
        "tool_choice": [("changes", {"tools": tools, "tool_choice": {"type": "function", "function": {"name": "flip"}},
                                     "_tokens": 100, "kvarena": {"close_in_budget": True}},
                         lambda r, b, d: r.calls and r.calls[0][0] == "flip"),
                        ("changes", {"tools": tools, "tool_choice": "none"},
                         lambda r, b, d: r.st == 200 and not r.calls)],
        "parallel_tool_calls": [("changes", "PARALLEL", None)],
        "stream": [("changes", "STREAM", None)],
        "stream_options": [("changes", {"stream": True, "stream_options": {"include_usage": True}},
                            lambda r, b, d: any(e[1].get("usage") for e in r.body)),
                           ("changes", "OBFUSCATION", None)],
        "max_completion_tokens": [("changes", {"max_completion_tokens": 3, "max_tokens": None},
                                   cut_at(3, ("length",)))],
        "max_tokens": [("changes", {"max_tokens": 3}, cut_at(3, ("length",)))],
        "stop": [("changes", "STOP", None)],
        "logprobs": [("changes", {"logprobs": True},
                      lambda r, b, d: r.body["choices"][0]["logprobs"]["content"])],
        "top_logprobs": [("changes", {"logprobs": True, "top_logprobs": 3},
                          lambda r, b, d: all(len(t["top_logprobs"]) == 3 for t in
                                              r.body["choices"][0]["logprobs"]["content"]))],
        "n": [("changes", {"n": 2}, lambda r, b, d: len(r.body["choices"]) == 2)],
        "user": [("same", {"user": "walker"}, equal)],
        "prompt_cache_key": [("same", {"prompt_cache_key": "walker-cache"}, equal)],
        "response_format": [("changes", {"response_format": {"type": "json_object"}, "max_tokens": 48,
                                         "kvarena": {"close_in_budget": True}},
                             lambda r, b, d: is_json_obj(r.text))],
        "kvarena": [("changes", "BUDGET", None)],
        "metadata": [("same", {"metadata": {"team": "walk"}}, equal)],
        "store": [("same", {"store": False}, equal), ("refused", {"store": True}, None)],
        "service_tier": [("same", {"service_tier": "auto"}, equal),
                         ("refused", {"service_tier": "flex"}, None)],
        "reasoning_effort": [("same", {"reasoning_effort": "none"}, equal),
                             ("refused", {"reasoning_effort": "high"}, None)],
        "verbosity": [("same", {"verbosity": "medium"}, equal),
                      ("refused", {"verbosity": "low"}, None)],
        "safety_identifier": [("changes", {"safety_identifier": "walker-7"}, logged("walker-7"))],
        "prompt_cache_retention": [("same", {"prompt_cache_retention": "in_memory"}, equal),
                                   ("refused", {"prompt_cache_retention": "24h"}, None)],
        # a family that thinks (qwen3) answers at once with it false:
        # api_frontends.py's --chat-template qwen3 run; this model's
        # family has no thinking switch
        "thinking_budget_tokens": [("same", {"thinking_budget_tokens": 8}, equal),
                                   ("refused", {"thinking_budget_tokens": -2}, None)],
        "reasoning_budget_tokens": [("same", {"reasoning_budget_tokens": 8}, equal),
                                    ("refused", {"reasoning_budget_tokens": "many"}, None)],
        "reasoning_format": [("same", {"reasoning_format": "none"}, equal),
                             ("refused", {"reasoning_format": "deepseek-legacy"}, None)],
        "chat_template_kwargs": [("same", {"chat_template_kwargs": {"enable_thinking": False}}, equal),
                                 ("refused", {"chat_template_kwargs": {"add_generation_prompt": False}},
                                  None)],
        "modalities": [("same", {"modalities": ["text"]}, equal),
                       ("refused", {"modalities": ["text", "audio"]}, None)],
        "audio": [("refused", {"audio": {"voice": "alloy", "format": "wav"}}, None)],
        "prediction": [("refused", {"prediction": {"type": "content", "content": "x"}}, None)],
        "web_search_options": [("refused", {"web_search_options": {}}, None)],
        "functions": [("refused", {"functions": [TOOL]}, None)],
        "function_call": [("refused", {"function_call": "auto"}, None)],
    })
    return p


def completions_probes():
    p = sampling("completions")
    p.update({
        "model": [("refused", {"model": "no-such-model"}, None)],
        "prompt": [("changes", {"prompt": "other words"}, differs),
                   ("refused", {"prompt": ["a", "b"]}, None)],
        "max_tokens": [("changes", {"max_tokens": 3}, cut_at(3, ("length",)))],
        "n": [("changes", {"n": 2}, lambda r, b, d: len(r.body["choices"]) == 2)],
        "stream": [("changes", "STREAM", None)],
        "stream_options": [("changes", {"stream": True, "stream_options": {"include_usage": True}},
                            lambda r, b, d: any(e[1].get("usage") for e in r.body)),
                           ("changes", "OBFUSCATION", None)],
        "logprobs": [("changes", {"logprobs": 2},
                      lambda r, b, d: all(1 <= len(t) <= 2 for t in r.body["choices"][0]["logprobs"]["top_logprobs"])
                      and len(r.body["choices"][0]["logprobs"]["token_logprobs"]) == r.usage[2])],
        "echo": [("changes", {"echo": True}, lambda r, b, d: r.text == USER + b.text)],
        "stop": [("changes", "STOP", None)],
        "user": [("same", {"user": "walker"}, equal)],
        "suffix": [("refused", {"suffix": "tail"}, None)],
        "best_of": [("same", {"best_of": 1}, equal), ("refused", {"best_of": 2}, None)],
        "kvarena": [("refused", {"kvarena": {"close_in_budget": True}}, None)],
    })
    return p


def responses_probes():
    fn = dict(FLIP, type="function")
    p = sampling("responses")
    p.update({
        "model": [("refused", {"model": "no-such-model"}, None)],
        "input": [("changes", {"input": "other words"}, differs),
                  ("refused", {"input": [{"type": "input_image", "image_url": "x"}]}, None)],
        "instructions": [("changes", {"instructions": "Be terse."}, differs)],
        "tools": [("changes", {"tools": [fn], "tool_choice": "required", "_tokens": 100, "kvarena": {"close_in_budget": True}},
                   lambda r, b, d: r.calls and r.calls[0][0] == "flip"),
                  ("changes", {"tools": [{"type": "web_search"}]},
                   lambda r, b, d: r.body["kvarena"]["tools_not_offered"] == [{"type": "web_search"}]
                   and equal(r, b))],
        "tool_choice": [("changes", {"tools": [fn], "tool_choice": {"type": "function", "name": "flip"},
                                     "_tokens": 100, "kvarena": {"close_in_budget": True}},
                         lambda r, b, d: r.calls and r.calls[0][0] == "flip")],
        "parallel_tool_calls": [("changes", "PARALLEL", None)],
        "max_output_tokens": [("changes", {"max_output_tokens": 3}, cut_at(3, ("incomplete",)))],
        "top_logprobs": [("changes", {"top_logprobs": 2, "include": ["message.output_text.logprobs"]},
                          lambda r, b, d: all(len(t["top_logprobs"]) == 2 for it in r.body["output"]
                                              for part in it.get("content", [])
                                              for t in part.get("logprobs", [])))],
        "include": [("changes", {"include": ["message.output_text.logprobs"]},
                     lambda r, b, d: any(part.get("logprobs") for it in r.body["output"]
                                         for part in it.get("content", []))),
                    ("same", {"include": ["reasoning.encrypted_content"]}, equal),
                    ("refused", {"include": ["file_search_call.results"]}, None)],
        "text": [("changes", {"text": {"format": {"type": "json_object"}}, "max_output_tokens": 48,
                              "kvarena": {"close_in_budget": True}},
                  lambda r, b, d: is_json_obj(r.text)),
                 ("same", {"text": {"verbosity": "medium"}}, equal),
                 ("refused", {"text": {"verbosity": "high"}}, None)],
        "stream": [("changes", "STREAM", None)],
        "stream_options": [("changes", "OBFUSCATION", None)],
        "store": [("changes", {"store": False},
                   lambda r, b, d: r.st == 200 and d.req("GET", "/v1/responses/" + r.body["id"])[0] == 404)],
        "previous_response_id": [("changes", "PREVIOUS", None)],
        "reasoning": [("same", {"reasoning": {"effort": "minimal", "summary": "auto"}}, equal),
                      ("refused", {"reasoning": {"effort": "high"}}, None),
                      ("refused", {"reasoning": {"summary": "detailed"}}, None)],
        "truncation": [("same", {"truncation": "disabled"}, equal),
                       ("refused", {"truncation": "auto"}, None)],
        "metadata": [("changes", {"metadata": {"team": "walk"}},
                      lambda r, b, d: r.body["metadata"] == {"team": "walk"})],
        "user": [("changes", {"user": "walker"}, lambda r, b, d: r.body["user"] == "walker"
                  and equal(r, b))],
        "prompt_cache_key": [("same", {"prompt_cache_key": "walker-cache"}, equal)],
        "safety_identifier": [("changes", {"safety_identifier": "walker-8"}, logged("walker-8"))],
        "service_tier": [("same", {"service_tier": "default"}, equal),
                         ("refused", {"service_tier": "priority"}, None)],
        "prompt_cache_retention": [("same", {"prompt_cache_retention": "in_memory"}, equal),
                                   ("refused", {"prompt_cache_retention": "24h"}, None)],
        "client_metadata": [("same", {"client_metadata": {"x-codex-turn": "1"}}, equal)],
        "background": [("refused", {"background": True}, None)],
        "prompt": [("refused", {"prompt": {"id": "pmpt_1"}}, None)],
        "conversation": [("refused", {"conversation": "conv_1"}, None)],
        "max_tool_calls": [("refused", {"max_tool_calls": 2}, None)],
        "kvarena": [("changes", "BUDGET", None)],
    })
    return p


def messages_probes():
    tool = {"name": "flip", "description": FLIP["description"], "input_schema": FLIP["parameters"]}
    p = sampling("messages")
    p.update({
        "model": [("refused", {"model": "no-such-model"}, None)],
        "max_tokens": [("changes", {"max_tokens": 3}, cut_at(3, ("max_tokens",))),
                       ("refused", "NO_MAX_TOKENS", None)],
        "messages": [("changes", {"messages": [{"role": "user", "content": "other words"}]}, differs)],
        "system": [("changes", {"system": "Be terse."}, differs)],
        "tools": [("changes", {"tools": [tool], "tool_choice": {"type": "any"}, "_tokens": 100, "kvarena": {"close_in_budget": True}},
                   lambda r, b, d: r.finish == "tool_use" and r.calls[0][0] == "flip"),
                  ("refused", {"tools": [{"type": "web_search_20250305", "name": "web_search"}]}, None)],
        "tool_choice": [("changes", {"tools": [tool], "tool_choice": {"type": "tool", "name": "flip"},
                                     "_tokens": 100, "kvarena": {"close_in_budget": True}},
                         lambda r, b, d: r.calls and r.calls[0][0] == "flip"),
                        ("changes", {"tools": [tool], "tool_choice": {"type": "none"}},
                         lambda r, b, d: r.st == 200 and not r.calls),
                        ("changes", "PARALLEL", None)],
        "stop_sequences": [("changes", "STOP", None)],
        "stream": [("changes", "STREAM", None)],
        "metadata": [("changes", {"metadata": {"user_id": "walker-9"}}, logged("walker-9")),
                     ("refused", {"metadata": {"other": 1}}, None)],
        "thinking": [("same", {"thinking": {"type": "disabled"}}, equal),
                     ("same", {"thinking": {"type": "adaptive"}}, equal),
                     ("same", {"thinking": {"type": "enabled", "budget_tokens": 8}}, equal),
                     ("refused", {"thinking": {"type": "enabled", "budget_tokens": 0}}, None)],
        "service_tier": [("same", {"service_tier": "auto"}, equal),
                         ("refused", {"service_tier": "priority"}, None)],
        "container": [("refused", {"container": "c_1"}, None)],
        "mcp_servers": [("refused", {"mcp_servers": [{"type": "url", "url": "http://x", "name": "x"}]},
                         None)],
        "context_management": [("same", {"context_management": {"edits": [
                                    {"type": "clear_thinking_20251015", "keep": "all"}]}}, equal),
                                ("refused", {"context_management": {"edits": [
                                    {"type": "clear_tool_uses_20250919"}]}}, None)],
        "output_config": [("changes", {"output_config": {"format": {"type": "json_schema", "schema": {
                               "type": "object", "properties": {"a": {"type": "integer"}},
                               "required": ["a"]}}}, "max_tokens": 48,
                               "kvarena": {"close_in_budget": True}},
                           lambda r, b, d: is_json_obj(r.text)),
                          ("same", {"output_config": {"effort": "high"}}, equal)],
        "kvarena": [("changes", "BUDGET", None)],
    })
    return p


PROBES = {"chat": chat_probes, "completions": completions_probes,
          "responses": responses_probes, "messages": messages_probes}


# ---------------------------------------------------------------- special cases

def eos_id(model):
    import struct
    with open(model, "rb") as f:
        data = f.read(1 << 20)
    key = b"tokenizer.ggml.eos_token_id"
    i = data.index(key) + len(key)
    typ, val = struct.unpack("<II", data[i:i + 8])
    return val


def special(d, fe, what, b, model):
    """Probes that need more than one request. True when they hold."""
    tools_of = {"chat": [{"type": "function", "function": FLIP}],
                "responses": [dict(FLIP, type="function")],
                "messages": [{"name": "flip", "description": "x", "input_schema": FLIP["parameters"]}]}
    if what == "PARALLEL":
        # greedy, the random model writes two short calls in 200 tokens;
        # without parallel calls, one
        req = {"chat": {"tool_choice": "required"}, "responses": {"tool_choice": "required"},
               "messages": {"tool_choice": {"type": "any"}}}[fe]
        ex = dict(req, tools=tools_of[fe], kvarena={"close_in_budget": True})
        r = ask(d, fe, ex, max_tokens=200)
        if fe == "messages":
            ex["tool_choice"] = dict(ex["tool_choice"], disable_parallel_tool_use=True)
        else:
            ex["parallel_tool_calls"] = False
        one = ask(d, fe, ex, max_tokens=200)
        return len(r.calls) >= 2 and one.st == 200 and one.calls == r.calls[:1]
    if what == "STOP":
        # a stop sequence taken from the plain reply (where it first
        # occurs) ends the reply just before it
        for k in range(1, len(b.text) - 3):
            stop = b.text[k:k + 3]
            if b.text.find(stop) == k and stop.strip() and "\ufffd" not in stop:
                key = "stop_sequences" if fe == "messages" else "stop"
                r = ask(d, fe, {key: [stop]})
                return (r.st == 200 and r.text == b.text[:k] and
                        r.finish == ("stop_sequence" if fe == "messages" else "stop"))
        return False
    if what == "STREAM":
        r = ask(d, fe, {"stream": True})
        if r.st != 200:
            return False
        text = ""
        for name, ev, _ in r.body:
            if fe == "chat":
                text += "".join(c["delta"].get("content") or "" for c in ev.get("choices", []))
            elif fe == "completions":
                text += "".join(c.get("text") or "" for c in ev.get("choices", []))
            elif fe == "responses" and name == "response.output_text.delta":
                text += ev["delta"]
            elif fe == "messages" and name == "content_block_delta":
                text += ev["delta"].get("text", "")
        return text == b.text and len(r.body) > 1
    if what == "OBFUSCATION":
        r = ask(d, fe, {"stream": True, "stream_options": {"include_obfuscation": True}})
        plain = ask(d, fe, {"stream": True})
        sizes = [size for name, ev, size in r.body if "obfuscation" in ev]
        return (r.st == 200 and sizes and all(n % 64 == 0 for n in sizes)
                and not any("obfuscation" in ev for _, ev, _ in plain.body))
    if what == "PREVIOUS":
        r1 = ask(d, fe, {"input": "first turn"})
        r2 = ask(d, fe, {"input": "second turn", "previous_response_id": r1.body.get("id")})
        alone = ask(d, fe, {"input": "second turn"})
        return (r2.st == 200 and r2.usage[1] >= r1.usage[0] and
                r2.usage[0] > alone.usage[0])
    if what == "BUDGET":
        # structured decoding near max_tokens: steered to close in budget
        # (kvarena.close_in_budget) or cut (default)
        fmt = {"chat": {"response_format": {"type": "json_object"}},
               "responses": {"text": {"format": {"type": "json_object"}}},
               "messages": {"output_config": {"format": {"type": "json_schema", "schema": {
                   "type": "object", "properties": {"a": {"type": "string"}}, "required": ["a"]}}}}}[fe]
        closed = cut = 0
        for seed in (1, 2, 3):
            for steer in (True, False):
                ex = dict(fmt, temperature=0.9, seed=seed, kvarena={"close_in_budget": steer})
                r = ask(d, fe, ex, max_tokens=24)
                closed += steer and is_json_obj(r.text)
                cut += (not steer) and not is_json_obj(r.text)
        return closed == 3 and cut >= 1
    return False


def run_probe(d, fe, name, kind, extra, chk, base_reply, model):
    """True when the probe holds, with a line saying what was seen."""
    if isinstance(extra, str):
        if extra == "NO_MAX_TOKENS":
            r = ask(d, fe, drop=("max_tokens",))
            return r.refused(name), f"{r.st}"
        if extra in ("EOS", "EOS+ignore"):
            ex = {"logit_bias": {str(eos_id(model)): 100}}
            if extra == "EOS+ignore":
                ex["ignore_eos"] = True
            r = ask(d, fe, ex)
            return bool(chk(r, base_reply, d)), f"{r.st} {r.text!r} {r.finish}"
        ok = special(d, fe, extra, base_reply, model)
        return ok, extra.lower()
    if callable(extra):
        extra = extra(base_reply)
    extra = dict(extra)
    tokens = extra.pop("_tokens", None)
    b = base_reply if tokens is None else ask(d, fe, max_tokens=tokens)
    if chk == "seed":
        r1 = ask(d, fe, extra, max_tokens=tokens or 24)
        r2 = ask(d, fe, extra, max_tokens=tokens or 24)
        r3 = ask(d, fe, dict(extra, seed=extra["seed"] + 1), max_tokens=tokens or 24)
        return (r1.st == 200 and (r1.text, r1.calls) == (r2.text, r2.calls) and
                (r1.text, r1.calls) != (r3.text, r3.calls)), f"{r1.text!r} / {r3.text!r}"
    r = ask(d, fe, extra, max_tokens=tokens or 24)
    if kind == "refused":
        return r.refused(name), f"{r.st} {json.dumps(r.body)[:160]}"
    try:
        ok = bool(chk(r, b, d))
    except (KeyError, TypeError, IndexError, AttributeError) as ex:
        ok = False
        return ok, f"{r.st} {type(ex).__name__}: {ex} {json.dumps(r.body)[:160]}"
    return ok, f"{r.st} {r.text!r} {r.calls} {r.finish}"


def walk(d, check, model):
    docs = doc_params()
    for fe in ("chat", "completions", "responses", "messages"):
        probes = PROBES[fe]()
        documented = docs[fe]
        check(set(documented) == set(probes),
              f"{fe}: every documented parameter has a probe and every probe is documented "
              f"(no probe: {sorted(set(documented) - set(probes))}; "
              f"undocumented: {sorted(set(probes) - set(documented))})")
        base_reply = ask(d, fe)
        check(base_reply.st == 200, f"{fe}: the plain request ({base_reply.st})")
        failed = []
        for name in sorted(probes):
            for kind, extra, chk in probes[name]:
                ok, seen = run_probe(d, fe, name, kind, extra, chk, base_reply, model)
                if kind == "same":
                    row = documented.get(name, "")
                    if "no effect on the reply" not in row:
                        ok, seen = False, "its row in api.md does not say 'no effect on the reply'"
                if not ok:
                    failed.append(f"{name} ({kind}): {seen}")
        n = sum(len(v) for v in probes.values())
        check(not failed, f"{fe}: {len(probes)} parameters, {n} probes, each honoured "
              f"(changes the reply), refused naming it, or documented without effect"
              + ("".join(f"\n       {f}" for f in failed)))
