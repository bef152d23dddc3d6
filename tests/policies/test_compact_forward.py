"""The compact GPT-2 and Llama forward passes compute what ``transformers`` computes.

Each model is built here from a configuration (nothing is downloaded), then the compact pass is
compared with the library's own forward: logits, logits after a cache, the shared-prompt
training scores, and the gradients those scores send to every parameter. Configurations the
compact passes do not implement must fall back to the library.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch

from postlab.policies.compact import (
    COMPACT_FORWARDS,
    compact_forward_for,
    continuation_logits,
    start_logits,
)

transformers = pytest.importorskip("transformers")

VOCAB = 14
#: float32 against float32 with other shapes of matrix products.
TOLERANCE = 2e-5


def _gpt2(**changes: Any) -> Any:
    fields = {"vocab_size": VOCAB, "n_layer": 2, "n_head": 4, "n_embd": 32, "n_positions": 24,
              "resid_pdrop": 0.0, "embd_pdrop": 0.0, "attn_pdrop": 0.0} | changes
    return transformers.GPT2Config(**fields)


def _llama(**changes: Any) -> Any:
    fields = {"vocab_size": VOCAB, "num_hidden_layers": 2, "num_attention_heads": 4,
              "num_key_value_heads": 4, "hidden_size": 32, "intermediate_size": 48,
              "max_position_embeddings": 24, "tie_word_embeddings": False} | changes
    return transformers.LlamaConfig(**fields)


CONFIGS = {
    "gpt2": lambda: _gpt2(),
    "llama": lambda: _llama(),
    "llama-grouped-kv": lambda: _llama(num_key_value_heads=2),
    "llama-biases-and-head-dim": lambda: _llama(attention_bias=True, mlp_bias=True,
                                                head_dim=16),
    "llama-rope-scaling": lambda: _llama(rope_theta=500.0,
                                         rope_scaling={"rope_type": "linear", "factor": 2.0}),
}


def _model(config: Any, seed: int = 0) -> Any:
    config._attn_implementation = "eager"
    torch.manual_seed(seed)
    model = transformers.AutoModelForCausalLM.from_config(config).eval()
    with torch.no_grad():  # biases start at zero; make them count
        for name, parameter in model.named_parameters():
            if name.endswith("bias"):
                parameter.normal_(0, 0.1)
    return model


def _library(model: Any, ids: torch.Tensor) -> torch.Tensor:
    return model(input_ids=ids, use_cache=False).logits


@pytest.fixture(params=list(CONFIGS))
def model(request):
    return _model(CONFIGS[request.param]())


def _forward(model: Any):
    name = compact_forward_for(model)
    assert name is not None
    return COMPACT_FORWARDS[name]


def test_whole_sequence_logits_match_the_library(model):
    ids = torch.randint(0, VOCAB, (5, 11), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        ours, _ = _forward(model).run(model, ids, None)
        theirs = _library(model, ids)
    assert ours.shape == theirs.shape
    assert (ours - theirs).abs().max().item() < TOLERANCE


def test_decoding_through_the_cache_matches_the_library(model):
    ids = torch.randint(0, VOCAB, (6, 9), generator=torch.Generator().manual_seed(2))
    forward = _forward(model)
    with torch.no_grad():
        theirs = _library(model, ids)
        logits, cache = forward.run(model, ids[:, :4], None)
        steps = [logits[:, -1]]
        for position in range(4, 9):
            logits, cache = forward.run(model, ids[:, position:position + 1], cache)
            steps.append(logits[:, -1])
    assert cache[0][0].shape[2] == 9
    ours = torch.stack(steps, dim=1)
    assert (ours - theirs[:, 3:]).abs().max().item() < TOLERANCE


def _grouped(prompts: int, group: int, prompt_len: int, answer_len: int,
             seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    distinct = torch.randint(0, VOCAB, (prompts, prompt_len), generator=generator)
    prompt = distinct.repeat_interleave(group, dim=0)
    answers = torch.randint(0, VOCAB, (prompts * group, answer_len), generator=generator)
    return prompt, answers


@pytest.mark.parametrize("answer_len", [1, 4])
def test_shared_prompt_scores_and_gradients_match_whole_sequences(model, answer_len):
    """Scores of a group read its prompt once; values and every parameter's gradient are
    those of reading each whole sequence through the library."""
    prompts, tokens = _grouped(3, 4, 6, answer_len, seed=3)
    weights = torch.randn(12, answer_len, VOCAB, generator=torch.Generator().manual_seed(4))

    ours = continuation_logits(_forward(model), model, prompts, tokens)
    (ours * weights).sum().backward()
    our_grads = {n: p.grad.clone() for n, p in model.named_parameters()}
    model.zero_grad()

    whole = torch.cat([prompts, tokens[:, :-1]], dim=1)
    theirs = _library(model, whole)[:, prompts.shape[1] - 1:]
    (theirs * weights).sum().backward()
    assert ours.shape == theirs.shape
    assert (ours - theirs).abs().max().item() < TOLERANCE
    for name, parameter in model.named_parameters():
        scale = max(1.0, parameter.grad.abs().max().item())
        assert (our_grads[name] - parameter.grad).abs().max().item() < TOLERANCE * scale, name


def test_prompt_sharing_reads_each_distinct_prompt_once(model, monkeypatch):
    forward = _forward(model)
    batches = []

    def counting(model_, ids, past, ops):
        batches.append(ids.shape[0])
        return forward.run(model_, ids, past, ops)

    counted = type(forward)(supports=forward.supports, run=counting)
    prompts, tokens = _grouped(3, 4, 6, 3, seed=5)
    continuation_logits(counted, model, prompts, tokens)
    assert batches == [3, 12]
    batches.clear()
    with torch.no_grad():
        logits, cache = start_logits(counted, model, prompts)
        plain, _ = forward.run(model, prompts, None)
    assert batches == [3] and cache[0][0].shape[0] == 12
    assert (logits - plain[:, -1]).abs().max().item() < TOLERANCE


def test_distinct_prompts_are_read_in_one_pass(model):
    prompts = torch.arange(12).reshape(3, 4) % VOCAB
    tokens = torch.ones(3, 2, dtype=torch.long)
    ours = continuation_logits(_forward(model), model, prompts, tokens)
    whole = torch.cat([prompts, tokens[:, :-1]], dim=1)
    with torch.no_grad():
        theirs = _library(model, whole)[:, 3:]
    assert (ours.detach() - theirs).abs().max().item() < TOLERANCE


@pytest.mark.parametrize("config", [
    _gpt2(scale_attn_by_inverse_layer_idx=True),
    _gpt2(pruned_heads={0: [1]}),
    _llama(rope_scaling={"rope_type": "dynamic", "factor": 2.0}),
    _gpt2(reorder_and_upcast_attn=True),
    _gpt2(activation_function="relu"),
    _llama(hidden_act="gelu"),
    _llama(pretraining_tp=2),
], ids=["gpt2-layer-scaled", "gpt2-pruned", "llama-dynamic-rope", "gpt2-upcast", "gpt2-relu",
        "llama-gelu", "llama-tp"])
def test_configurations_it_does_not_implement_fall_back_to_the_library(config):
    assert compact_forward_for(_model(config)) is None


def test_other_architectures_fall_back_to_the_library():
    config = transformers.GPTNeoXConfig(vocab_size=VOCAB, num_hidden_layers=1,
                                        num_attention_heads=2, hidden_size=16,
                                        intermediate_size=32)
    assert compact_forward_for(_model(config)) is None


@pytest.mark.parametrize("name", ["gpt2", "llama"])
def test_bf16_autocast_follows_the_library_operation_by_operation(name):
    """In bfloat16 any operation written another way shows (a GELU formula differing only by
    float32 rounding moves logits by ~4e-3), so the bound is tight."""
    model = _model(CONFIGS[name]())
    ids = torch.randint(0, VOCAB, (4, 8), generator=torch.Generator().manual_seed(6))
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        ours, _ = _forward(model).run(model, ids, None)
        theirs = _library(model, ids)
    assert ours.dtype == theirs.dtype == torch.bfloat16
    assert (ours.float() - theirs.float()).abs().max().item() < 1e-3


@pytest.mark.parametrize("name", ["gelu_new", "gelu_pytorch_tanh"])
def test_gpt2_activations_are_the_librarys_bit_for_bit(name):
    """Element-wise operations written the same way give the same bits on any machine."""
    from postlab.policies.compact import GPT2_ACTIVATIONS, LIBRARY_OPS

    x = torch.randn(4096, generator=torch.Generator().manual_seed(8)) * 4
    theirs = transformers.activations.ACT2FN[name]
    assert torch.equal(GPT2_ACTIVATIONS[name](x, LIBRARY_OPS), theirs(x))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        low = x.bfloat16()
        assert torch.equal(GPT2_ACTIVATIONS[name](low, LIBRARY_OPS), theirs(low))


def test_both_gelu_spellings_of_gpt2_match_the_library():
    for activation in ("gelu_new", "gelu_pytorch_tanh"):
        model = _model(_gpt2(activation_function=activation))
        ids = torch.randint(0, VOCAB, (3, 7), generator=torch.Generator().manual_seed(7))
        with torch.no_grad():
            ours, _ = _forward(model).run(model, ids, None)
            assert (ours - _library(model, ids)).abs().max().item() < TOLERANCE


def test_the_llama_padding_row_gets_no_gradient_as_in_the_library():
    model = _model(_llama(pad_token_id=0))
    ids = torch.tensor([[0, 3, 0, 5, 6]])
    ours, _ = _forward(model).run(model, ids, None)
    ours.sum().backward()
    assert model.model.embed_tokens.weight.grad[0].abs().max().item() == 0.0
    assert model.model.embed_tokens.weight.grad[3].abs().max().item() > 0.0


def test_gpt2_positions_past_the_table_are_refused():
    model = _model(_gpt2())
    forward = _forward(model)
    with torch.no_grad():
        _, cache = forward.run(model, torch.zeros(1, 23, dtype=torch.long), None)
        forward.run(model, torch.zeros(1, 1, dtype=torch.long), cache)  # position 24: the last
        with pytest.raises(ValueError, match="exceed the model's n_positions"):
            forward.run(model, torch.zeros(1, 2, dtype=torch.long), cache)


# --- hidden left padding (chat models) ------------------------------------------------------

PAD = 0


def _left_padded(seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Rows of tokens (never PAD) with 0, 2 and 5 PADs in front, and their lengths."""
    generator = torch.Generator().manual_seed(seed)
    width = 10
    lengths = torch.tensor([10, 8, 5])
    rows = torch.randint(1, VOCAB, (3, width), generator=generator)
    for row, length in enumerate(lengths.tolist()):
        rows[row, :width - length] = PAD
    return rows, lengths


def _library_padded(model: Any, ids: torch.Tensor) -> torch.Tensor:
    """The library's own forward with the attention mask and position ids it generates
    left-padded batches with."""
    mask = (ids != PAD).long()
    mask = torch.where(mask.cumsum(1) > 0, 1, 0)
    positions = (mask.cumsum(1) - 1).clamp(min=0)
    return model(input_ids=ids, attention_mask=mask, position_ids=positions,
                 use_cache=False).logits


def test_hidden_padding_matches_the_librarys_mask_and_each_prompt_alone(model):
    ids, lengths = _left_padded(5)
    forward = _forward(model)
    with torch.no_grad():
        from postlab.policies.compact import leading_padding

        starts = leading_padding(ids, PAD)
        assert starts.tolist() == [0, 2, 5]
        ours, _ = forward.run(model, ids, None, starts=starts)
        theirs = _library_padded(model, ids)
        for row, length in enumerate(lengths.tolist()):
            real = slice(ids.shape[1] - length, None)
            assert (ours[row, real] - theirs[row, real]).abs().max().item() < TOLERANCE
            alone, _ = forward.run(model, ids[row:row + 1, real], None)
            assert (ours[row, real] - alone[0]).abs().max().item() < TOLERANCE
        assert torch.isfinite(ours).all()  # padding rows see themselves: no NaN anywhere


def test_hidden_padding_through_the_cache_and_shared_prompts(model):
    prompts, _ = _left_padded(6)
    prompts = prompts.repeat_interleave(2, dim=0)  # groups of two completions a prompt
    answers = torch.randint(1, VOCAB, (6, 4), generator=torch.Generator().manual_seed(7))
    forward = _forward(model)
    with torch.no_grad():
        whole = _library_padded(model, torch.cat([prompts, answers], dim=1))
        expected = whole[:, prompts.shape[1] - 1:-1]
        shared = continuation_logits(forward, model, prompts, answers, PAD)
        assert (shared - expected).abs().max().item() < TOLERANCE
        logits, cache = start_logits(forward, model, prompts, PAD)
        from postlab.policies.compact import leading_padding

        starts = leading_padding(prompts, PAD)
        steps = [logits]
        for position in range(3):
            logits, cache = forward.run(model, answers[:, position:position + 1], cache,
                                        starts=starts)
            steps.append(logits[:, -1])
        assert (torch.stack(steps, 1) - expected).abs().max().item() < TOLERANCE


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_recomputed_gelu_new_has_the_written_out_form_s_bits_and_keeps_only_its_input(dtype):
    """Values and gradients equal bit for bit; autograd keeps the input alone (the written-out
    form keeps four more tensors of its size: tanh's output, 0.5 x, 1 + tanh, x again)."""
    from postlab.policies.compact import gelu_new, recomputed

    def recomputed_gelu_new(x):
        return recomputed(gelu_new, x)

    generator = torch.Generator().manual_seed(5)
    x = (torch.randn(3, 17, 96, generator=generator) * 4).to(dtype)
    upstream = torch.randn(3, 17, 96, generator=generator).to(dtype)
    found = {}
    for name, function in (("plain", gelu_new), ("recomputed", recomputed_gelu_new)):
        leaf = x.clone().requires_grad_()
        kept: list[torch.Tensor] = []

        def pack(tensor, kept=kept):
            kept.append(tensor)
            return tensor

        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            out = function(leaf * 1)  # a non-leaf input, as the MLP's product is
        out.backward(upstream)
        big = {t.untyped_storage().data_ptr() for t in kept if t.numel() == x.numel()}
        found[name] = (out.detach(), leaf.grad, len(big))
    assert torch.equal(found["plain"][0], found["recomputed"][0])
    assert torch.equal(found["plain"][1], found["recomputed"][1])
    assert found["recomputed"][2] == 1 < found["plain"][2]
    with torch.no_grad():  # no gradient wanted: the plain form, nothing kept
        assert torch.equal(recomputed_gelu_new(x), gelu_new(x))


@pytest.mark.parametrize("architecture", ["gpt2", "llama", "llama-lora"])
def test_an_arm_trains_the_same_bits_with_its_mlp_recomputed(architecture, monkeypatch):
    """SFT then RL steps: the weights after training are the same bits whether the MLP's
    element-wise unit (GPT-2's gelu_new, Llama's silu(gate) * up, with LoRA adapters on the
    projections too) keeps its intermediates or recomputes them in the backward pass."""
    import copy

    from plans import SMALL, teaching_plan

    from postlab.engines.train import reinforce, supervised
    from postlab.plan.schema import Plan
    from postlab.policies import build_policy, compact

    policy = {"kind": "transformer", "architecture": architecture.split("-")[0],
              "layers": 2, "heads": 2, "width": 32, "max_positions": 64,
              **({"intermediate": 64} if architecture.startswith("llama") else {})}
    lora = ({"lora": {"rank": 4, "alpha": 8, "dropout": 0.0,
                      "target_modules": ["gate_proj", "up_proj"]}}
            if architecture.endswith("lora") else {})
    plan = Plan.of(teaching_plan() | SMALL | {"policy": policy, "sft_steps": 20,
                                               "rl_steps": 3} | lora)

    def trained() -> dict[str, torch.Tensor]:
        torch.manual_seed(plan.seeds[0])
        model = build_policy(plan)
        supervised(model, plan, plan.seeds[0])
        reinforce(model, model.reference_policy(), plan, plan.seeds[0], plan.arms[0])
        return copy.deepcopy(model.state_dict())

    calls = []
    plain = compact.recomputed
    monkeypatch.setattr(compact, "recomputed", lambda f, *x: (
        calls.append(f) if torch.is_grad_enabled() else None) or plain(f, *x))
    recomputed = trained()
    assert calls  # the updates went through the recomputing unit
    monkeypatch.setattr(compact, "recomputed", lambda f, *x: f(*x))
    kept = trained()
    assert all(torch.equal(recomputed[name], kept[name]) for name in kept)
    torch.manual_seed(plan.seeds[0])
    initial = build_policy(plan).state_dict()
    assert any(not torch.equal(kept[name], initial[name]) for name in kept)  # it trained


@pytest.mark.parametrize("architecture", ["gpt2", "llama"])
def test_decoding_into_a_static_cache_gives_the_same_bits(architecture):
    """Keys written in place into buffers sized once, attention reading the filled prefix:
    every step's logits equal those of the cache concatenated anew, bit for bit; a cache
    asked to hold more than it was sized for says so."""
    from plans import SMALL, teaching_plan

    from postlab.plan.schema import Plan
    from postlab.policies import build_policy
    from postlab.policies.compact import StaticKeyValues

    policy = {"kind": "transformer", "architecture": architecture, "layers": 2, "heads": 2,
              "width": 32, "max_positions": 64,
              **({"intermediate": 64} if architecture == "llama" else {})}
    plan = Plan.of(teaching_plan() | SMALL | {"policy": policy})
    torch.manual_seed(3)
    model = build_policy(plan).eval()
    prompts = model.prompts([(3, 4), (2, 9), (0, 0)])
    steps = torch.randint(0, 10, (3, 9), generator=torch.Generator().manual_seed(4))
    with torch.no_grad():
        _, grown = model.start(prompts)
        _, static = model.start(prompts)
        static = model.reserve(static, steps.shape[1])
        assert isinstance(static[0], StaticKeyValues)
        for column in steps.T:
            theirs, grown = model.advance(column[:, None], grown)
            ours, static = model.advance(column[:, None], static)
            assert torch.equal(ours, theirs)
        with pytest.raises(ValueError, match="capacity"):
            model.advance(steps[:, :1], static)


def test_a_recomputation_runs_under_the_forward_pass_s_autocast():
    """The backward pass runs outside the forward's autocast; the recomputation enters it
    again, so what autocast ran in bfloat16 (a matrix product of float32 inputs) is
    recomputed in bfloat16 and the gradients are the plain call's bit for bit (recomputed
    in float32, they differ)."""
    from postlab.policies.compact import recomputed

    def unit(t: torch.Tensor) -> torch.Tensor:
        return torch.matmul(t, t.transpose(0, 1)) * t[:, :1]

    x = torch.randn(64, 48, generator=torch.Generator().manual_seed(2))
    grads = []
    for way in (unit, lambda t: recomputed(unit, t)):
        leaf = x.clone().requires_grad_()
        with torch.autocast("cpu", dtype=torch.bfloat16):
            out = way(leaf * 1)
        out.float().sum().backward()  # outside the autocast, as training's backward is
        grads.append(leaf.grad)
    assert torch.equal(grads[0], grads[1])


@pytest.mark.parametrize(("architecture", "precision"), [
    ("gpt2", None), ("llama", None), ("llama-lora", None), ("gpt2", "bf16")])
def test_an_arm_trains_the_same_bits_with_gradient_checkpointing(architecture, precision):
    """SFT then RL steps (shared prompts whose cached keys take gradients from the
    completions' blocks, LoRA adapters on a frozen model, bfloat16 autocast): the plan's
    gradient checkpointing recomputes every block in the backward pass and trains the same
    weights, bit for bit."""
    import copy

    from plans import SMALL, teaching_plan

    from postlab.engines.train import reinforce, supervised
    from postlab.plan.schema import Plan
    from postlab.policies import build_policy, compact

    policy = {"kind": "transformer", "architecture": architecture.split("-")[0],
              "layers": 2, "heads": 2, "width": 32, "max_positions": 64,
              **({"intermediate": 64} if architecture.startswith("llama") else {})}
    lora = ({"lora": {"rank": 4, "alpha": 8, "dropout": 0.0,
                      "target_modules": ["q_proj", "gate_proj"]}}
            if architecture.endswith("lora") else {})
    base = (teaching_plan() | SMALL | {"policy": policy, "sft_steps": 20, "rl_steps": 3}
            | lora | ({"precision": precision} if precision else {}))

    def trained(checkpointing: bool) -> dict[str, torch.Tensor]:
        plan = Plan.of(base | {"gradient_checkpointing": checkpointing})
        torch.manual_seed(plan.seeds[0])
        model = build_policy(plan)
        assert model.ops is (compact.CHECKPOINTED_OPS if checkpointing
                             else compact.LIBRARY_OPS)
        supervised(model, plan, plan.seeds[0])
        reinforce(model, model.reference_policy(), plan, plan.seeds[0], plan.arms[0])
        return copy.deepcopy(model.state_dict())

    checkpointed, kept = trained(True), trained(False)
    assert all(torch.equal(checkpointed[name], kept[name]) for name in kept)
    torch.manual_seed(0)
    initial = build_policy(Plan.of(base)).state_dict()
    assert any(not torch.equal(kept[name], initial[name]) for name in kept)  # it trained


@pytest.mark.parametrize("name", ["gpt2", "llama"])
def test_checkpointed_blocks_keep_far_less_for_the_backward_pass(name):
    """What autograd keeps for the backward pass of a 4-block model's shared-prompt scores:
    with checkpointing, each block's input (and the head's), under a third of the whole
    blocks' activations; the gradients are the same bits."""
    from postlab.policies.compact import CHECKPOINTED_OPS, LIBRARY_OPS

    config = _gpt2(n_layer=4) if name == "gpt2" else _llama(num_hidden_layers=4)
    model = _model(config)
    forward = _forward(model)
    prompts = torch.tensor([[1, 2, 3, 4]] * 3 + [[5, 6, 7, 8]] * 3)
    tokens = torch.randint(0, VOCAB, (6, 7), generator=torch.Generator().manual_seed(1))
    kept, grads = {}, {}
    parameters = {p.data_ptr() for p in model.parameters()}
    seen: dict[int, int] = {}

    def pack(tensor: torch.Tensor) -> torch.Tensor:
        storage = tensor.untyped_storage()
        if storage.data_ptr() not in parameters:
            seen[storage.data_ptr()] = storage.nbytes()
        return tensor

    for label, ops in (("whole", LIBRARY_OPS), ("checkpointed", CHECKPOINTED_OPS)):
        seen.clear()
        model.zero_grad()
        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            logits = continuation_logits(forward, model, prompts, tokens, ops=ops)
        kept[label] = sum(seen.values())
        (logits.square().mean()).backward()
        grads[label] = [p.grad.clone() for p in model.parameters()]
    assert kept["checkpointed"] * 3 < kept["whole"]
    assert all(torch.equal(a, b) for a, b in zip(grads["whole"], grads["checkpointed"],
                                                 strict=True))
