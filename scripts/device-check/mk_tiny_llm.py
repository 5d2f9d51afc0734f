"""A tiny random llama GGUF with SmolLM2's tokenizer and chat template (device check fixture)."""

import sys

import numpy as np
from gguf import GGUFReader, GGUFValueType, GGUFWriter

src, dst = sys.argv[1], sys.argv[2]
r = GGUFReader(src)
w = GGUFWriter(dst, "llama")
n_embd, n_head, n_layer, n_ff = 64, 4, 2, 128
for name, field in r.fields.items():
    if not (name.startswith("tokenizer.")):
        continue
    t = field.types[0]
    if t == GGUFValueType.ARRAY:
        sub = field.types[-1]
        if sub == GGUFValueType.STRING:
            vals = [bytes(field.parts[i]).decode("utf-8", "replace") for i in field.data]
        else:
            vals = [field.parts[i].tolist()[0] for i in field.data]
        w.add_array(name, vals)
    elif t == GGUFValueType.STRING:
        w.add_string(name, bytes(field.parts[field.data[0]]).decode("utf-8"))
    else:
        val = field.parts[field.data[0]].tolist()[0]
        {
            GGUFValueType.UINT32: w.add_uint32,
            GGUFValueType.INT32: w.add_int32,
            GGUFValueType.BOOL: w.add_bool,
            GGUFValueType.FLOAT32: w.add_float32,
            GGUFValueType.UINT64: w.add_uint64,
        }[t](name, val)
vocab = len(r.fields["tokenizer.ggml.tokens"].data)
w.add_context_length(2048)
w.add_embedding_length(n_embd)
w.add_block_count(n_layer)
w.add_feed_forward_length(n_ff)
w.add_head_count(n_head)
w.add_head_count_kv(2)
w.add_rope_freq_base(10000.0)
w.add_layer_norm_rms_eps(1e-5)
w.add_rope_dimension_count(n_embd // n_head)
w.add_file_type(1)
rng = np.random.default_rng(0)


def f16(*s):
    return (rng.standard_normal(s) * 0.02).astype(np.float16)


def ones(n):
    return np.ones(n, dtype=np.float32)


w.add_tensor("token_embd.weight", f16(vocab, n_embd))
w.add_tensor("output_norm.weight", ones(n_embd))
kv = 2 * (n_embd // n_head)
for i in range(n_layer):
    p = f"blk.{i}."
    w.add_tensor(p + "attn_norm.weight", ones(n_embd))
    w.add_tensor(p + "attn_q.weight", f16(n_embd, n_embd))
    w.add_tensor(p + "attn_k.weight", f16(kv, n_embd))
    w.add_tensor(p + "attn_v.weight", f16(kv, n_embd))
    w.add_tensor(p + "attn_output.weight", f16(n_embd, n_embd))
    w.add_tensor(p + "ffn_norm.weight", ones(n_embd))
    w.add_tensor(p + "ffn_gate.weight", f16(n_ff, n_embd))
    w.add_tensor(p + "ffn_up.weight", f16(n_ff, n_embd))
    w.add_tensor(p + "ffn_down.weight", f16(n_embd, n_ff))
w.write_header_to_file()
w.write_kv_data_to_file()
w.write_tensors_to_file()
w.close()
print(dst, vocab)
