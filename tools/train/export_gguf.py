#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""export_gguf.py - writes a trained checkpoint as GGUF files the engine runs.

Owns the mapping from the PyTorch module to GGUF's llama layout: tensor
names, metadata keys, the tokenizer.ggml.* vocabulary (model "llama":
SentencePiece-style, see tokenizer.py) and the chat template.

  export_gguf.py CKPT OUTPREFIX
writes OUTPREFIX-f32.gguf, OUTPREFIX-f16.gguf and OUTPREFIX-q8_0.gguf
(Q8_0: every matrix, token embedding included; norms stay F32).
"""
import os
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import corpus                     # noqa: E402
import gguf_io as G               # noqa: E402

# ChatML with Hermes tool calls, as corpus.render() writes it (tools in the
# order given, each json-encoded on one line, role "tool" for results).
CHAT_TEMPLATE = (
    "{%- if messages[0].role == 'system' %}{%- set sys = messages[0].content %}"
    "{%- set rest = messages[1:] %}{%- else %}{%- set sys = 'You are a helpful assistant.' %}"
    "{%- set rest = messages %}{%- endif %}"
    "<|im_start|>system\n{{ sys }}"
    "{%- if tools %}\n\n# Tools\n\nYou may call one or more functions to assist with the user query."
    "\n\nYou are provided with function signatures within <tools></tools> XML tags:\n<tools>"
    "{%- for t in tools %}\n{{ t | tojson }}{%- endfor %}\n</tools>\n\n"
    "For each function call, return a json object with function name and arguments within "
    "<tool_call></tool_call> XML tags:\n<tool_call>\n"
    "{\"name\": <function-name>, \"arguments\": <args-json-object>}\n</tool_call>{%- endif %}"
    "<|im_end|>\n"
    "{%- for m in rest %}<|im_start|>{{ m.role }}\n"
    "{%- if m.role == 'assistant' and m.tool_calls %}{%- for c in m.tool_calls %}"
    "<tool_call>\n{\"name\": {{ c.function.name | tojson }}, \"arguments\": "
    "{{ c.function.arguments | tojson }}}\n</tool_call>{%- endfor %}"
    "{%- elif m.role == 'tool' %}<tool_response>\n{{ m.content }}\n</tool_response>"
    "{%- else %}{{ m.content }}{%- endif %}<|im_end|>\n{%- endfor %}"
    "{%- if add_generation_prompt %}<|im_start|>assistant\n{%- endif %}")

FILE_TYPE = {G.GGML_F32: 0, G.GGML_F16: 1, G.GGML_Q8_0: 7}


def export(ck, path, wtype):
    c = ck["cfg"]
    st = {k: v.float().numpy() for k, v in ck["state"].items()}
    w = G.Writer()
    A = "llama"
    w.add("general.architecture", G.GGUF_STR, A)
    n = sum(v.size for v in st.values())
    w.add("general.name", G.GGUF_STR, "kvarena-agent-%.1fm" % (n / 1e6))
    w.add("general.alignment", G.GGUF_U32, G.ALIGN)
    w.add("general.file_type", G.GGUF_U32, FILE_TYPE[wtype])
    w.add(A + ".context_length", G.GGUF_U32, c["ctx"])
    w.add(A + ".embedding_length", G.GGUF_U32, c["dim"])
    w.add(A + ".block_count", G.GGUF_U32, c["n_layers"])
    w.add(A + ".feed_forward_length", G.GGUF_U32, c["ffn"])
    w.add(A + ".attention.head_count", G.GGUF_U32, c["n_heads"])
    w.add(A + ".attention.head_count_kv", G.GGUF_U32, c["n_kv_heads"])
    w.add(A + ".rope.dimension_count", G.GGUF_U32, c.get("rope_dims") or c["head_dim"])
    w.add(A + ".rope.freq_base", G.GGUF_F32, c["rope_base"])
    w.add(A + ".attention.layer_norm_rms_epsilon", G.GGUF_F32, c["eps"])
    w.add(A + ".vocab_size", G.GGUF_U32, c["vocab"])
    w.add("tokenizer.ggml.model", G.GGUF_STR, "llama")
    w.add("tokenizer.ggml.tokens", G.GGUF_ARR, ck["tokens"], G.GGUF_STR)
    w.add("tokenizer.ggml.scores", G.GGUF_ARR, ck["scores"], G.GGUF_F32)
    w.add("tokenizer.ggml.token_type", G.GGUF_ARR, ck["types"], G.GGUF_I32)
    w.add("tokenizer.ggml.unknown_token_id", G.GGUF_U32, 0)
    w.add("tokenizer.ggml.eos_token_id", G.GGUF_U32, ck["tokens"].index(corpus.IM_END))
    w.add("tokenizer.ggml.add_bos_token", G.GGUF_BOOL, False)
    w.add("tokenizer.ggml.add_eos_token", G.GGUF_BOOL, False)
    w.add("tokenizer.chat_template", G.GGUF_STR, CHAT_TEMPLATE)
    mat = wtype
    w.tensor("token_embd.weight", st["embed.weight"], mat)
    for i in range(c["n_layers"]):
        p = "layers.%d." % i
        b = "blk.%d." % i
        w.tensor(b + "attn_norm.weight", st[p + "attn_norm.weight"], G.GGML_F32)
        w.tensor(b + "attn_q.weight", st[p + "wq.weight"], mat)
        w.tensor(b + "attn_k.weight", st[p + "wk.weight"], mat)
        w.tensor(b + "attn_v.weight", st[p + "wv.weight"], mat)
        w.tensor(b + "attn_output.weight", st[p + "wo.weight"], mat)
        w.tensor(b + "ffn_norm.weight", st[p + "ffn_norm.weight"], G.GGML_F32)
        w.tensor(b + "ffn_gate.weight", st[p + "gate.weight"], mat)
        w.tensor(b + "ffn_up.weight", st[p + "up.weight"], mat)
        w.tensor(b + "ffn_down.weight", st[p + "down.weight"], mat)
    w.tensor("output_norm.weight", st["norm.weight"], G.GGML_F32)
    w.write(path)


def main():
    if len(sys.argv) != 3:
        sys.exit("usage: export_gguf.py CKPT OUTPREFIX")
    ck = torch.load(sys.argv[1])
    for name, t in (("f32", G.GGML_F32), ("f16", G.GGML_F16), ("q8_0", G.GGML_Q8_0)):
        path = "%s-%s.gguf" % (sys.argv[2], name)
        export(ck, path, t)
        print("wrote %s (%d bytes)" % (path, os.path.getsize(path)))


if __name__ == "__main__":
    main()
