"""Transformer policies in the ensemble engine: stacked members compute what each policy
computes, train the same bits alone and in company, and give ordinary runs that verify and
reproduce, for models built from a configuration and for a pretrained folder."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from plans import SMALL, rows, typed, write_plan, write_pretrained

from postlab.cli import main
from postlab.engines.ensemble import engine
from postlab.engines.ensemble.nets import MEMBER_OPS, net_for
from postlab.plan.frozen import teaching_plan
from postlab.plan.schema import Plan
from postlab.policies.base import build_policy
from postlab.policies.checkpoint import load_checkpoint
from postlab.policies.pretrained import folder_sha256
from postlab.records.record import load_record

pytest.importorskip("transformers")

GPT2 = {"kind": "transformer", "architecture": "gpt2", "layers": 1, "heads": 2, "width": 16,
        "max_positions": 16}
LLAMA = {"kind": "transformer", "architecture": "llama", "layers": 2, "heads": 2, "width": 16,
         "intermediate": 24, "max_positions": 16}
POLICIES = [pytest.param(GPT2, id="gpt2"), pytest.param(LLAMA, id="llama")]
TINY = {**SMALL, "seeds": [3, 4], "sft_steps": 8, "rl_steps": 2, "arms": ["strict", "substring"]}


@pytest.fixture(autouse=True)
def one_thread():
    """As the engine runs (it refuses plans with more threads): with more, a kernel may split
    one member's product by the size of the whole batch."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def _plan(policy: dict) -> Plan:
    return typed(**TINY, policy=policy)


def _policies(plan: Plan, seeds: list[int]) -> list:
    found = []
    for seed in seeds:
        torch.manual_seed(seed)
        found.append(build_policy(plan))
    return found


@pytest.mark.parametrize("policy", POLICIES)
def test_stacked_members_are_the_policies(policy):
    """Logits of every position, and of cached decoding, equal each member's own policy to
    float32 rounding; a member's slices are its policy's state_dict, tied weights included."""
    plan = _plan(policy)
    models = _policies(plan, [11, 22, 33])
    net = net_for(plan, "cpu")
    params = net.stack([m.state_dict() for m in models])
    tokens = torch.randint(0, 14, (3, 4, 7), generator=torch.Generator().manual_seed(0))
    logits, cache = net.run(params, tokens[..., :5], None)
    more, _ = net.run(params, tokens[..., 5:], cache)
    for member, model in enumerate(models):
        with torch.no_grad():
            own = model(tokens[member])
        assert torch.allclose(logits[member], own[:, :5], atol=1e-5, rtol=1e-4)
        assert torch.allclose(more[member], own[:, 5:], atol=1e-5, rtol=1e-4)
        state = net.unstack(params, member)
        assert state.keys() == model.state_dict().keys()
        assert all(torch.equal(state[k], v) for k, v in model.state_dict().items())
    if policy is GPT2:  # the head is the token embedding: one stacked tensor, two names
        assert "model.lm_head.weight" not in params
        state = net.unstack(params, 0)
        assert torch.equal(state["model.lm_head.weight"], state["model.transformer.wte.weight"])


def _sft(plan: Plan, seeds: list[int], net):
    params = net.stack([m.state_dict() for m in _policies(plan, seeds)])
    tables = engine.Tables(plan, torch.device("cpu"), net.tokenizer)
    seed_tensor = torch.tensor(seeds)
    plans = [plan] * len(seeds)
    losses = engine.supervised(params, net, tables, plan, seed_tensor,
                               engine.shared(plans, "sft_lr"),
                               engine.per_member(plans, "gradient_clip", "cpu"),
                               plan.sft_steps)
    return params, tables, seed_tensor, losses


@pytest.mark.parametrize("policy", POLICIES)
def test_a_transformer_member_trains_the_same_bits_alone_and_in_company(policy):
    """SFT, evaluation and RL of seed 22 alone and among 5 members (other seeds, another
    contract, other numeric settings): every loss, row, statistic and weight is equal."""
    plan = _plan(policy)
    net = net_for(plan, "cpu")
    company = [5, 22, 9, 22, 7]
    params, tables, seeds, losses = _sft(plan, company, net)
    alone, _, one_seed, one_losses = _sft(plan, [22], net)
    assert one_losses[0] == losses[1] == losses[3]
    assert all(torch.equal(alone[k][0], params[k][1]) for k in alone)
    plans = [plan] * len(company)
    in_company = engine.evaluate(params, net, tables, plans, seeds)[1]
    assert engine.evaluate(alone, net, tables, [plan], one_seed)[0] == in_company

    varied = list(plans)
    varied[3] = plan.replace(kl_beta=0.1, clip=0.3, clip_high=0.4, temperature=0.8)
    contracts = ["strict", "strict", "substring", "strict", "exact"]
    history = engine.reinforce(params, {k: v.clone() for k, v in params.items()}, net, tables,
                               varied, seeds, contracts)
    lone = engine.reinforce(alone, {k: v.clone() for k, v in alone.items()}, net, tables,
                            [plan], one_seed, ["strict"])
    assert lone[0] == history[1]
    assert history[3] != history[1]
    assert all(torch.equal(alone[k][0], params[k][1]) for k in alone)
    if policy is LLAMA:  # the padding row of every member's embedding never moved
        pad = tables.tokenizer.pad_id
        start = net.stack([m.state_dict() for m in _policies(plan, company)])
        name = "model.model.embed_tokens.weight"
        assert torch.equal(params[name][:, pad], start[name][:, pad])
        assert not torch.equal(params[name], start[name])


def _odd_policies(family: str, seeds: list[int]) -> list:
    """Policies of odd sizes (so fused kernels have tail elements), GPT-2 with tanh-GELU and
    Llama with a padding row, as a pretrained folder could hold them."""
    from transformers import GPT2Config, GPT2LMHeadModel, LlamaConfig, LlamaForCausalLM

    from postlab.policies.base import CharTokenizer
    from postlab.policies.transformer import TransformerPolicy

    plan = teaching_plan()
    vocab = plan["vocab"]
    common = {"vocab_size": len(vocab), "pad_token_id": vocab.index(plan["pad"])}
    found = []
    for seed in seeds:
        torch.manual_seed(seed)
        if family == "gpt2":
            model = GPT2LMHeadModel(GPT2Config(n_layer=2, n_head=3, n_embd=21, n_positions=16,
                                               activation_function="gelu_pytorch_tanh",
                                               **common))
        else:
            model = LlamaForCausalLM(LlamaConfig(num_hidden_layers=2, num_attention_heads=3,
                                                 num_key_value_heads=3, hidden_size=18,
                                                 intermediate_size=23,
                                                 max_position_embeddings=16, **common))
        model.config._attn_implementation = "eager"
        tokenizer = CharTokenizer(vocab, plan["eos"], plan["pad"])
        found.append(TransformerPolicy(model, tokenizer, vocab, plan["eos"],
                                       lambda pair: f"{pair[0]}+{pair[1]}="))
    return found


@pytest.mark.parametrize("family", ["gpt2", "llama"])
def test_a_member_s_logits_and_gradients_do_not_depend_on_its_company(family):
    """Odd sizes, padding tokens among the inputs and a loss over every position (so the
    padding row would get a gradient): member 2's logits, cached logits and gradients are the
    same bits alone as among 7."""
    from postlab.engines.ensemble.nets import TransformerNet

    models = _odd_policies(family, list(range(40, 47)))
    net = TransformerNet(models[0], torch.device("cpu"))
    pad = models[0].tokenizer.pad_id
    tokens = torch.randint(0, 14, (7, 5, 7), generator=torch.Generator().manual_seed(1))
    tokens[:, :, 3] = pad
    weights = torch.randn(5, 7, 14, generator=torch.Generator().manual_seed(2))

    def computed(members: list) -> tuple:
        params = {k: v.requires_grad_(True)
                  for k, v in net.stack([m.state_dict() for m in members]).items()}
        picked = [models.index(m) for m in members]
        logits, cache = net.run(params, tokens[picked, :, :4], None)
        more, _ = net.run(params, tokens[picked, :, 4:], cache)
        both = torch.cat([logits, more], dim=2)
        (both.log_softmax(-1) * weights).sum().backward()
        return both.detach(), {k: v.grad for k, v in params.items()}

    company, company_grads = computed(models)
    alone, alone_grads = computed([models[2]])
    assert torch.equal(alone[0], company[2])
    for name, grad in alone_grads.items():
        assert torch.equal(grad[0], company_grads[name][2]), name
    assert set(company_grads) == set(alone_grads)
    with torch.no_grad():  # and the logits are the policy's own, to rounding
        own = models[2](tokens[2])
    assert torch.allclose(alone[0], own, atol=1e-5, rtol=1e-4)


def test_member_operations_do_not_depend_on_the_tensor_around_them():
    """The gated SiLU unit and tanh-GELU of a member's slice are the same bits whatever
    follows it, and agree with torch's fused forms to rounding."""
    x = torch.randn(4099, generator=torch.Generator().manual_seed(3)) * 4
    up = torch.randn(4099, generator=torch.Generator().manual_seed(4))
    for op, fused in ((lambda v: MEMBER_OPS.gated(v, up[:len(v)]),
                       lambda v: torch.nn.functional.silu(v) * up[:len(v)]),
                      (MEMBER_OPS.gelu_tanh,
                       lambda v: torch.nn.functional.gelu(v, approximate="tanh"))):
        whole = op(x)
        assert all(torch.equal(op(x[:n]), whole[:n]) for n in range(1, 300))
        assert torch.allclose(whole, fused(x), atol=1e-6, rtol=1e-5)


def test_the_padding_row_gets_no_gradient_in_any_member():
    weight = torch.randn(3, 5, 4, requires_grad=True)  # three members
    ids = torch.tensor([[0, 1, 2, 1], [2, 2, 0, 4], [1, 1, 1, 1]])
    out = torch.vmap(lambda w, i: MEMBER_OPS.embedding(i, w, 2))(weight, ids)
    assert torch.equal(out, torch.stack([weight[m, ids[m]] for m in range(3)]))
    out.square().sum().backward()
    assert torch.equal(weight.grad[:, 2], torch.zeros(3, 4))
    assert weight.grad[1, 0].abs().sum() > 0


# --- end to end ---------------------------------------------------------------------------------

def _verified(capsys, out: Path) -> None:
    capsys.readouterr()
    assert main(["verify", str(out)]) == 0
    assert "VERIFIED" in capsys.readouterr().out


@pytest.mark.slow
def test_a_transformer_ensemble_run_verifies_and_reproduces(tmp_path, capsys):
    path = write_plan(tmp_path / "plan.json", **TINY, policy=GPT2)
    out = tmp_path / "run"
    assert main(["run", "--plan", str(path), "--out-dir", str(out), "--engine", "ensemble",
                 "--quiet"]) == 0
    record = load_record(out / "record.json")
    assert record.engine == "ensemble"
    _verified(capsys, out)
    again = tmp_path / "again"
    assert main(["reproduce", str(out), "--out-dir", str(again), "--quiet"]) == 0
    assert rows(load_record(again / "record.json")) == rows(record)
    # a checkpoint is an ordinary transformer policy's
    run = record.runs[0]
    assert run.checkpoints is not None
    info = run.checkpoints["strict"]
    payload = load_checkpoint(out / info.file, info.sha256, kind="transformer")
    model = build_policy(Plan.of(json.loads(path.read_text())))
    model.load_state_dict(payload["state_dict"])


def _write_pretrained(folder: Path, **config) -> str:
    """A GPT-2 with tanh-GELU whose tokenizer numbers the characters in another order than
    the plan's vocab and holds more tokens than it, and whose output is wider still: the
    engines must read ids from the tokenizer, never from the vocab's order, and widths from
    the model."""
    characters = [*reversed(teaching_plan()["vocab"]), "x", "y", "z"]
    return write_pretrained(folder, characters=characters, extra_outputs=7, n_layer=1,
                            n_embd=16, activation_function="gelu_pytorch_tanh", **config)


@pytest.mark.slow
@pytest.mark.parametrize("engine_name", ["ensemble", "exact"])
def test_a_pretrained_folder_with_its_own_token_ids_trains(tmp_path, capsys, engine_name):
    """Both engines (the exact one's cost estimate and SFT loss once read the plan's or the
    tokenizer's vocabulary size as the model's output width)."""
    folder = tmp_path / "model"
    policy = {"kind": "pretrained", "path": str(folder), "sha256": _write_pretrained(folder)}
    path = write_plan(tmp_path / "plan.json", **(TINY | {"seeds": [3]}), policy=policy)
    out = tmp_path / "run"
    assert main(["run", "--plan", str(path), "--out-dir", str(out), "--engine", engine_name,
                 "--quiet"]) == 0
    _verified(capsys, out)
    record = load_record(out / "record.json")
    texts = {row.text for run in record.runs for stage in run.evaluations.values()
             for split in stage.values() for kind in (split.greedy, split.sampled)
             for row in kind}
    assert texts and all(set(text) <= set("0123456789") for text in texts)


def test_a_configuration_without_a_member_form_is_refused_first(tmp_path, capsys):
    """GPT-2 with attention scaled per layer has no compact forward: one line, nothing
    written."""
    folder = tmp_path / "model"
    digest = _write_pretrained(folder, scale_attn_by_inverse_layer_idx=True)
    policy = {"kind": "pretrained", "path": str(folder), "sha256": digest}
    path = write_plan(tmp_path / "plan.json", **(TINY | {"seeds": [3]}), policy=policy)
    out = tmp_path / "run"
    assert main(["run", "--plan", str(path), "--out-dir", str(out), "--engine", "ensemble",
                 "--quiet"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "the ensemble engine cannot train" in err
    assert "gpt2 configuration" in err and "--engine exact" in err
    assert not out.exists()


def test_a_folder_without_a_configuration_is_refused_in_one_line(tmp_path, capsys):
    folder = tmp_path / "model"
    folder.mkdir()
    (folder / "README").write_text("no model here")
    policy = {"kind": "pretrained", "path": str(folder), "sha256": folder_sha256(folder)}
    path = write_plan(tmp_path / "plan.json", **(TINY | {"seeds": [3]}), policy=policy)
    out = tmp_path / "run"
    assert main(["run", "--plan", str(path), "--out-dir", str(out), "--engine", "ensemble",
                 "--quiet"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err and str(folder) in err
    assert not out.exists()
