"""Decoding tokens/s with the KV cache concatenated anew at every token (the baseline) and
written in place into buffers sized once (postlab's static cache), side by side in one
invocation, on the GPT-2 124M shape (or Llama at SmolLM2-135M's) from random weights.

    python bench/bench_kv_cache.py [--architecture gpt2|llama] [--batch 8] [--prompt 20]
                                   [--new 128] [--threads 2] [--repeats 3]

Both ways run the same compact forward on the same token columns (teacher-forced, so both
read the same sequence) and every step's logits are compared bit for bit; the ratio is the
baseline's seconds over the static cache's (median of ``repeats``).
"""

from __future__ import annotations

import argparse
import platform
import statistics
import time

import torch


def _model(architecture: str) -> torch.nn.Module:
    from transformers import GPT2Config, GPT2LMHeadModel, LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    if architecture == "gpt2":  # the 124M shape over the benchmarks' 8,192-token BPE
        return GPT2LMHeadModel(GPT2Config(n_layer=12, n_head=12, n_embd=768,
                                          vocab_size=8192, n_positions=512)).eval()
    return LlamaForCausalLM(LlamaConfig(  # SmolLM2-135M's shape
        num_hidden_layers=30, num_attention_heads=9, num_key_value_heads=3, hidden_size=576,
        intermediate_size=1536, vocab_size=49152, max_position_embeddings=2048,
        tie_word_embeddings=True)).eval()


def _decode(run: object, model: torch.nn.Module, prompts: torch.Tensor,
            columns: torch.Tensor, static: bool) -> tuple[float, list[torch.Tensor]]:
    from postlab.policies.compact import StaticKeyValues

    with torch.no_grad():
        _, cache = run(model, prompts, None)
        if static:
            cache = StaticKeyValues(cache, columns.shape[0])
        logits = []
        start = time.perf_counter()
        for column in columns:
            out, cache = run(model, column[:, None], cache)
            logits.append(out[:, -1])
        return time.perf_counter() - start, logits


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--architecture", choices=("gpt2", "llama"), default="gpt2")
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--prompt", type=int, default=20)
    parser.add_argument("--new", type=int, default=128)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    from postlab.policies.compact import COMPACT_FORWARDS

    torch.set_num_threads(args.threads)
    model = _model(args.architecture)
    run = COMPACT_FORWARDS[args.architecture].run
    generator = torch.Generator().manual_seed(1)
    vocab = model.config.vocab_size
    prompts = torch.randint(0, vocab, (args.batch, args.prompt), generator=generator)
    columns = torch.randint(0, vocab, (args.new, args.batch), generator=generator)
    print(f"machine: {platform.processor() or platform.machine()}, torch {torch.__version__}, "
          f"{args.threads} thread(s); {args.architecture}, "
          f"{sum(p.numel() for p in model.parameters()):,} parameters, batch {args.batch}, "
          f"prompt {args.prompt}, {args.new} new tokens, median of {args.repeats}")
    seconds: dict[str, list[float]] = {"concatenated": [], "static": []}
    same = True
    for _ in range(args.repeats):  # interleaved, so drift in the machine hits both alike
        grown, theirs = _decode(run, model, prompts, columns, static=False)
        held, ours = _decode(run, model, prompts, columns, static=True)
        seconds["concatenated"].append(grown)
        seconds["static"].append(held)
        same &= all(torch.equal(a, b) for a, b in zip(ours, theirs, strict=True))
    tokens = args.batch * args.new
    for way, found in seconds.items():
        print(f"  {way:13s} {tokens / statistics.median(found):8.1f} tokens/s "
              f"(median {statistics.median(found):.2f} s)")
    ratio = statistics.median(seconds["concatenated"]) / statistics.median(seconds["static"])
    print(f"  static cache: x{ratio:.2f} the concatenated cache's tokens/s; "
          f"same logits bit for bit: {'yes' if same else 'NO'}")


if __name__ == "__main__":
    main()
