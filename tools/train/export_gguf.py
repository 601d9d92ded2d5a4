#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""export_gguf.py - writes a trained checkpoint as GGUF files the engine runs.

Owns the mapping from the PyTorch module to GGUF's llama layout: tensor
names, metadata keys, the tokenizer.ggml.* vocabulary (model "llama":
SentencePiece-style, see tokenizer.py) and the chat template.

  export_gguf.py CKPT OUTPREFIX
writes OUTPREFIX-f32.gguf, OUTPREFIX-f16.gguf and OUTPREFIX-q8_0.gguf
(Q8_0: every matrix, token embedding included; norms stay F32).
  export_gguf.py --meta GGUF...
rewrites the chat template and tokenizer flags (meta_entries) of files
already exported, their weights byte for byte as they were.
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import corpus                     # noqa: E402
import gguf_io as G               # noqa: E402

SP = "\u2581"

# ChatML with Hermes tool calls, rendering byte for byte what kvarenad
# renders for this model (daemon/chat/chatml.c) and what training saw
# (corpus.render: the system turn carries the tool block, tools in the
# order given, one json-encoded per line, role "tool" for results), under
# llama.cpp's Jinja engine and under transformers' (trim_blocks and
# lstrip_blocks): every newline that follows a tag is written by an
# expression ({{ '\\n' }}), where trim_blocks cannot eat it, and no "{%-"
# follows text that ends in whitespace to keep. No default system prompt
# (kvarenad adds none); call arguments verbatim when they are a string
# (OpenAI's), as JSON otherwise.
CHAT_TEMPLATE = (
    "{%- if tools %}<|im_start|>system{{ '\\n' }}"
    "{%- if messages[0].role == 'system' %}{{ messages[0].content + '\\n\\n' }}{%- endif %}"
    "# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
    "You are provided with function signatures within <tools></tools> XML tags:\n<tools>"
    "{%- for t in tools %}{{ '\\n' }}{{ t | tojson }}{%- endfor %}{{ '\\n' }}</tools>\n\n"
    "For each function call, return a json object with function name and arguments within "
    "<tool_call></tool_call> XML tags:\n<tool_call>\n"
    "{\"name\": <function-name>, \"arguments\": <args-json-object>}\n</tool_call><|im_end|>{{ '\\n' }}"
    "{%- endif %}"
    "{%- for m in messages %}"
    "{%- if not (loop.first and tools and m.role == 'system') %}"
    "<|im_start|>{{ m.role }}{{ '\\n' }}"
    "{%- if m.role == 'tool' %}<tool_response>{{ '\\n' }}{{ m.content }}{{ '\\n' }}</tool_response>"
    "{%- else %}{%- if m.content %}{{ m.content }}{%- endif %}"
    "{%- if m.role == 'assistant' and m.tool_calls %}{%- for c in m.tool_calls %}"
    "{%- if not loop.first or m.content %}{{ '\\n' }}{%- endif %}"
    "<tool_call>{{ '\\n' }}{\"name\": \"{{ c.function.name }}\", \"arguments\": "
    "{% if c.function.arguments is string %}{{ c.function.arguments }}"
    "{%- else %}{{ c.function.arguments | tojson }}{%- endif %}"
    "}{{ '\\n' }}</tool_call>{%- endfor %}{%- endif %}{%- endif %}"
    "<|im_end|>{{ '\\n' }}"
    "{%- endif %}{%- endfor %}"
    "{%- if add_generation_prompt %}<|im_start|>assistant{{ '\\n' }}{%- endif %}")


# What llama.cpp and every GGUF consumer need to tokenize as training did
# (train.py: the lone dummy-prefix token "\u2581" first, then the
# conversation with no dummy prefix anywhere, markers included):
# that first token declared as BOS (added where add_special is, as
# llama-server and kvarenad add it to a prompt), and no SentencePiece
# dummy-prefix space (llama.cpp otherwise puts one after every special
# token). `export_gguf.py --meta FILE...` rewrites these in shipped files,
# their tensors untouched.
def meta_entries(tokens):
    return [("tokenizer.ggml.bos_token_id", G.GGUF_U32, tokens.index(SP)),
            ("tokenizer.ggml.add_bos_token", G.GGUF_BOOL, True),
            ("tokenizer.ggml.add_space_prefix", G.GGUF_BOOL, False),
            ("tokenizer.chat_template", G.GGUF_STR, CHAT_TEMPLATE)]


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
    w.add("tokenizer.ggml.add_eos_token", G.GGUF_BOOL, False)
    for e in meta_entries(ck["tokens"]):
        w.add(*e)
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
    if len(sys.argv) >= 3 and sys.argv[1] == "--meta":
        for path in sys.argv[2:]:
            G.set_meta(path, path + ".tmp",
                       meta_entries(G.Reader(path).kv["tokenizer.ggml.tokens"]))
            os.replace(path + ".tmp", path)
            print("rewrote the metadata of %s" % path)
        return
    if len(sys.argv) != 3:
        sys.exit("usage: export_gguf.py CKPT OUTPREFIX | --meta GGUF...")
    import torch
    ck = torch.load(sys.argv[1])
    for name, t in (("f32", G.GGML_F32), ("f16", G.GGML_F16), ("q8_0", G.GGML_Q8_0)):
        path = "%s-%s.gguf" % (sys.argv[2], name)
        export(ck, path, t)
        print("wrote %s (%d bytes)" % (path, os.path.getsize(path)))


if __name__ == "__main__":
    main()
