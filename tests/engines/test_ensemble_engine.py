"""The ensemble engine's parts: counter-based draws, the stacked GRU, per-member clipping and
Adam, tensor contracts, and the property everything rests on: a member trains the same bits
alone or among others."""

from __future__ import annotations

import random

import pytest
import torch

from postlab import counter
from postlab.engines.ensemble import engine, stacked
from postlab.engines.ensemble.nets import net_for
from postlab.engines.ensemble.optim import clip_per_member
from postlab.engines.ensemble.scoring import TENSOR_CONTRACTS
from postlab.plan.frozen import teaching_plan_loaded
from postlab.plan.schema import Plan
from postlab.policies.base import build_policy
from postlab.tasks.contracts import CONTRACTS


@pytest.fixture(autouse=True)
def one_thread():
    """Members' bits are independent of their company on one thread, which is how the engine
    runs (a worker per core, one thread each; it refuses plans of more): with two, a batched
    product over a transposed operand (a weight's gradient) splits its members between the
    threads differently from one member alone on some CPUs (seen on an Intel Xeon with
    AVX-512 under the AVX2 pin, and on an AMD EPYC, Zen 3), so the test calls the engine's
    pieces as a worker would (``train_parts`` sets the thread count itself)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def plan() -> Plan:
    return teaching_plan_loaded().model


def _states(plan: Plan, seeds: list[int]) -> list[dict]:
    states = []
    for seed in seeds:
        torch.manual_seed(seed)
        states.append(build_policy(plan).state_dict())
    return states


# --- counter-based draws ------------------------------------------------------------------------

def test_mulmod_matches_python_integers():
    rng = random.Random(0)
    values = [rng.getrandbits(32) for _ in range(5000)] + [0, 1, 0xFFFFFFFF]
    x = torch.tensor(values)
    for constant in (0x7FEB352D, 0x846CA68B, 0xFFFFFFFF):
        got = counter._mulmod32(x, constant).tolist()
        assert got == [(v * constant) & 0xFFFFFFFF for v in values]


def test_mix32_is_a_bijection_on_a_block():
    block = torch.arange(1 << 16) * 65537  # distinct 32-bit inputs
    assert torch.unique(counter.mix32(block & counter.MASK32)).numel() == 1 << 16


def test_draws_are_uniform_and_keyed():
    seeds = torch.tensor([[0], [1], [2 ** 62]])
    draws = counter.uniform(seeds, counter.ROLLOUT, 5, torch.arange(60_000)[None, :])
    assert float(draws.min()) > 0 and float(draws.max()) < 1
    counts = torch.histc(draws.flatten(), 50, 0, 1)
    expected = draws.numel() / 50
    chi2 = float((((counts - expected) ** 2) / expected).sum())
    assert chi2 < 100  # 49 degrees of freedom: p < 1e-5 above this
    # every part of the key changes the draws; the same key gives the same draw
    base = counter.uniform(torch.tensor(7), 1, 2, torch.tensor(3))
    for other in (counter.uniform(torch.tensor(8), 1, 2, torch.tensor(3)),
                  counter.uniform(torch.tensor(7), 4, 2, torch.tensor(3)),
                  counter.uniform(torch.tensor(7), 1, 9, torch.tensor(3)),
                  counter.uniform(torch.tensor(7), 1, 2, torch.tensor(4))):
        assert not torch.equal(base, other)
    assert torch.equal(base, counter.uniform(torch.tensor(7), 1, 2, torch.tensor(3)))
    # neighbouring seeds' streams are uncorrelated
    a, b = draws[0], draws[1]
    correlation = float(((a - a.mean()) * (b - b.mean())).mean() / (a.std() * b.std()))
    assert abs(correlation) < 0.02


def test_integers_cover_their_range_evenly():
    values = counter.integers(torch.tensor([[3]]), counter.SFT_BATCH, 0,
                              torch.arange(63_000)[None, :], 63)
    counts = torch.bincount(values.flatten(), minlength=63).float()
    assert int(values.min()) == 0 and int(values.max()) == 62
    assert float(((counts - 1000) ** 2 / 1000).sum()) < 120  # 62 degrees of freedom


# --- the stacked GRU ------------------------------------------------------------------------------

def test_stacked_forward_is_the_char_gru(plan):
    seeds = [11, 22, 33]
    states = _states(plan, seeds)
    params, allowed = stacked.stack(states)
    tokens = torch.randint(0, 10, (3, 5, 9), generator=torch.Generator().manual_seed(0))
    got = stacked.forward(params, allowed, tokens)
    for member, seed in enumerate(seeds):
        torch.manual_seed(seed)
        model = build_policy(plan)
        assert torch.allclose(got[member], model(tokens[member]), atol=1e-6, rtol=1e-5)
        restored = stacked.unstack(params, allowed, member)
        assert all(torch.equal(restored[k], v) for k, v in model.state_dict().items())


def test_clipping_is_torch_s_per_member():
    torch.manual_seed(0)
    shapes = {"w": (4, 3), "b": (3,)}
    grads = [{k: torch.randn(s) * (10 ** m) for k, s in shapes.items()} for m in range(3)]
    params = {k: torch.zeros(3, *s, requires_grad=True) for k, s in shapes.items()}
    for k in shapes:
        params[k].grad = torch.stack([g[k] for g in grads])
    norms = clip_per_member(params, torch.tensor([1.0, 1.0, 100.0]))
    for member, grad in enumerate(grads):
        lone = [torch.zeros(s, requires_grad=True) for s in shapes.values()]
        for p, k in zip(lone, shapes, strict=True):
            p.grad = grad[k].clone()
        norm = torch.nn.utils.clip_grad_norm_(lone, [1.0, 1.0, 100.0][member])
        assert torch.allclose(norms[member], norm, rtol=1e-6)
        for p, k in zip(lone, shapes, strict=True):
            assert torch.allclose(params[k].grad[member], p.grad, rtol=1e-6, atol=1e-7)


def test_adam_over_stacked_members_is_a_lone_adam_bit_for_bit():
    """The ensemble's optimizer is torch's Adam over the stacked tensors: with the same
    gradients, each member's slices are exactly a lone model's weights after every step
    (odd sizes, so members straddle vector-width boundaries)."""
    torch.manual_seed(0)
    shapes = {"w": (5, 3), "b": (17,)}
    members = 7
    lone = [{k: torch.randn(s, requires_grad=True) for k, s in shapes.items()}
            for _ in range(members)]
    params = {k: torch.stack([p[k].detach() for p in lone]).requires_grad_(True)
              for k in shapes}
    optimisers = [torch.optim.Adam(list(p.values()), lr=0.003) for p in lone]
    stacked_adam = engine.optimizer_for(params, 0.003)
    for step in range(6):
        grads = [{k: torch.randn(s) * 3 for k, s in shapes.items()} for _ in range(members)]
        for p, opt, grad in zip(lone, optimisers, grads, strict=True):
            for k in shapes:
                p[k].grad = grad[k].clone()
            opt.step()
        for k in shapes:
            params[k].grad = torch.stack([g[k] for g in grads])
        stacked_adam.step()
        for member in range(members):
            for k in shapes:
                assert torch.equal(params[k][member], lone[member][k]), (step, member, k)


def test_members_of_one_batch_share_their_learning_rates(plan):
    """torch's Adam takes one learning rate per group: versions differing in one train as
    separate batches, and a batch mixing them is refused rather than trained wrongly."""
    from postlab.engines.ensemble.task import batch_key

    assert batch_key(plan) != batch_key(plan.replace(rl_lr=0.002))
    assert batch_key(plan) == batch_key(plan.replace(kl_beta=0.1, clip=0.3))
    with pytest.raises(ValueError, match="must share rl_lr"):
        engine.shared([plan, plan.replace(rl_lr=0.002)], "rl_lr")


# --- tensor contracts -----------------------------------------------------------------------------

def test_tensor_contracts_accept_what_the_contracts_accept(plan):
    """Every registered tensor form against the contract's own function, on random token
    strings (digits, EOS, other characters) for every operand pair."""
    tables = engine.Tables(plan, torch.device("cpu"))
    tokenizer = tables.tokenizer
    rng = random.Random(1)
    alphabet = [tokenizer.index[c] for c in "0123456789"] * 3 + [tokenizer.eos_id,
                                                                   tokenizer.index["+"]]
    pairs = tables.train
    count = 4000
    width = 6
    index = torch.tensor([[rng.randrange(len(pairs)) for _ in range(count)]])
    tokens = torch.tensor([[[rng.choice(alphabet) for _ in range(width)]
                            for _ in range(count)]])
    # answers that are right, with leading zeros, or the right digits inside others
    for i in range(0, count, 4):
        digits = [tokenizer.index[c] for c in f"{sum(pairs[int(index[0, i])])}"]
        lead = [tokenizer.index["0"]] * rng.randrange(3)
        junk = [tokenizer.index[str(rng.randrange(10))] for _ in range(rng.randrange(2))]
        seq = (junk + lead + digits + [tokenizer.eos_id] + [tokenizer.pad_id] * width)[:width]
        tokens[0, i] = torch.tensor(seq)
    emitted = []
    for row in tokens[0].tolist():  # what decoding would have emitted: up to the first EOS
        ends = row.index(tokenizer.eos_id) + 1 if tokenizer.eos_id in row else width
        emitted.append([t < ends for t in range(width)])
    mask = torch.tensor([emitted])
    answers = engine.answers_of(tables, tokens, mask, "train", index)
    asked = [pairs[i] for i in index[0].tolist()]
    rows = engine.rows_of(tables, tokens, mask, asked, 0)
    assert engine.all_rows(tables, tokens, mask, [asked]) == [rows]  # the keyed shortcut
    assert set(TENSOR_CONTRACTS.names()) >= {"strict", "substring", "exact"}
    for name in TENSOR_CONTRACTS.names():
        got = TENSOR_CONTRACTS[name](answers)[0].tolist()
        want = [bool(CONTRACTS[name]((a, b), text, done, a + b)) for a, b, text, done in rows]
        assert got == want, name
        assert 0 < sum(want) < count, name  # both outcomes occur


# --- members alone and in company -----------------------------------------------------------------

def _sft(plan, seeds_list, steps):
    states = _states(plan, seeds_list)
    net = net_for(plan, "cpu")
    params = net.stack(states)
    tables = engine.Tables(plan, torch.device("cpu"))
    seeds = torch.tensor(seeds_list)
    plans = [plan] * len(seeds_list)
    losses = engine.supervised(params, net, tables, plan, seeds,
                               engine.shared(plans, "sft_lr"),
                               engine.per_member(plans, "gradient_clip", "cpu"), steps)
    return params, net, tables, seeds, losses


@pytest.mark.parametrize(("loss", "other"), [
    ("ppo-clip", {}), ("sapo", {"sapo_tau_pos": 2.0, "sapo_tau_neg": 0.5})])
def test_a_member_trains_the_same_bits_alone_and_in_company(plan, loss, other):
    """SFT, evaluation and RL of seed 22 alone, and among 7 members (three of them RL under
    another contract and one with other numeric settings, SAPO's temperatures among them):
    every loss, row, statistic and weight is equal."""
    plan = plan.replace(sft_steps=12, rl_steps=4, policy_loss=loss)
    company_seeds = [5, 22, 9, 22, 22, 7, 1]
    params, net, tables, seeds, losses = _sft(plan, company_seeds, 12)
    alone, _, _, one_seed, one_losses = _sft(plan, [22], 12)
    assert one_losses[0] == losses[1] == losses[4]
    assert all(torch.equal(alone[k][0], params[k][1]) for k in alone)
    plans = [plan] * 7
    evaluated = engine.evaluate(params, net, tables, plans, seeds)
    assert engine.evaluate(alone, net, tables, [plan], one_seed)[0] == evaluated[1]

    varied = list(plans)
    varied[3] = plan.replace(kl_beta=0.1, clip=0.3, clip_high=0.4, temperature=0.8, **other)
    contracts = ["strict", "strict", "substring", "strict", "substring", "exact", "substring"]
    reference = {k: v.clone() for k, v in params.items()}
    history = engine.reinforce(params, reference, net, tables, varied, seeds, contracts)
    lone_reference = {k: v.clone() for k, v in alone.items()}
    lone = engine.reinforce(alone, lone_reference, net, tables, [plan], one_seed,
                            ["strict"])
    assert lone[0] == history[1]
    assert all(torch.equal(alone[k][0], params[k][1]) for k in alone)
    # the same seed under other settings, or under another contract, learns differently
    assert history[3] != history[1] and history[4] != history[1]


def test_the_gate_sigmoid_has_torch_s_gradient_where_exp_overflows():
    x = torch.tensor([-120.0, -89.0, -3.0, 0.0, 5.0, 100.0], requires_grad=True)
    stacked.sigmoid(x).sum().backward()
    reference = x.detach().clone().requires_grad_(True)
    torch.sigmoid(reference).sum().backward()
    assert torch.isfinite(x.grad).all()
    assert torch.allclose(x.grad, reference.grad, atol=1e-7)
    # and under torch.vmap (the transformer members' SiLU), with the same gradient
    rows = x.detach().reshape(2, 3).clone().requires_grad_(True)
    torch.vmap(stacked.sigmoid)(rows).sum().backward()
    assert torch.equal(rows.grad.flatten(), x.grad)


def test_seeds_that_share_low_words_draw_differently():
    """Two 62-bit seeds whose first lane collided on every stream before the state had two
    lanes."""
    index = torch.arange(1000)
    for stream in (counter.SFT_BATCH, counter.ROLLOUT):
        a = counter.uniform(torch.tensor(5), stream, 3, index)
        b = counter.uniform(torch.tensor(8312481940), stream, 3, index)
        assert not torch.equal(a, b)


#: Small transformers of both families, for the tests that check each policy kind.
TRANSFORMER_POLICIES = {
    "gpt2": {"kind": "transformer", "architecture": "gpt2", "layers": 1, "heads": 2,
             "width": 16, "max_positions": 16},
    "llama": {"kind": "transformer", "architecture": "llama", "layers": 2, "heads": 2,
              "width": 16, "intermediate": 24, "max_positions": 16},
}


@pytest.mark.parametrize("policy", ["gru", "gpt2", "llama"])
@pytest.mark.parametrize(("reduction", "kl", "advantage", "loss"), [
    ("token-mean", "exact", "group-std", "ppo-clip"),
    ("seq-mean-token-mean", "k3", "group-mean-batch-std", "gspo"),
    ("constant-normaliser", "k1", "leave-one-out", "cispo"),
    ("seq-mean-token-mean", "exact", "mean-only", "sapo"),
])
def test_one_rl_step_is_the_exact_engine_s_math(plan, monkeypatch, reduction, kl, advantage,
                                                loss, policy):
    """The ensemble's rollouts of one step, fed through the exact engine's own update (its
    sequence log-probabilities, rl.objective and the registered options, torch's Adam and
    clipping, on the policy itself with the same weights): losses, gradient norms and
    statistics agree to float32 rounding, with clip_high and a temperature, for every policy
    loss, the GRU and both transformer families."""
    import copy

    from torch import nn

    from postlab.engines.options import policy_settings
    from postlab.engines.train import sequence_log_dist
    from postlab.rl import objective
    from postlab.rl.algorithms import ADVANTAGES, KL_ESTIMATORS, POLICY_LOSSES, REDUCTIONS
    from postlab.tasks.contracts import score
    from postlab.tasks.rows import Row

    changes = dict(rl_steps=1, updates_per_rollout=2, clip_high=0.28, temperature=0.9,
                   kl_beta=0.5, loss_reduction=reduction, kl=kl, advantage=advantage,
                   policy_loss=loss)
    if policy != "gru":
        pytest.importorskip("transformers")
        changes["policy"] = TRANSFORMER_POLICIES[policy]
    plan = plan.replace(**changes)
    torch.manual_seed(7)
    model = build_policy(plan)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.3 * torch.randn_like(p))  # a policy that answers variously
    reference = copy.deepcopy(model)
    with torch.no_grad():
        for p in reference.parameters():
            p.add_(0.1 * torch.randn_like(p))
    net = net_for(plan, "cpu")
    params = net.stack([model.state_dict()])
    ref_params = net.stack([reference.state_dict()])
    tables = engine.Tables(plan, torch.device("cpu"), net.tokenizer)
    seen = {}
    decode = engine.decode

    def spy(*args, **kwargs):
        seen["out"] = decode(*args, **kwargs)
        return seen["out"]

    monkeypatch.setattr(engine, "decode", spy)
    history = engine.reinforce(params, ref_params, net, tables, [plan],
                               torch.tensor([5]), ["substring"])[0][0]
    tokens, mask = seen["out"][0][0], seen["out"][1][0]
    rows = history["rows"]
    rewards = torch.tensor([score(Row.of(r), "substring", sum) for r in rows],
                           dtype=torch.float32)
    assert int((rewards.reshape(-1, 8).std(-1) > 0).sum()) > 0  # some groups teach
    advantages = ADVANTAGES[advantage].fn(rewards.reshape(-1, 8)).flatten()
    optimiser = torch.optim.Adam(model.parameters(), lr=plan.rl_lr)
    prompts = model.prompts([(r[0], r[1]) for r in rows])
    with torch.no_grad():
        ref_log = sequence_log_dist(reference, prompts, tokens)
    old = None
    for update in range(2):
        log_dist = sequence_log_dist(model, prompts, tokens)
        logp = objective.token_log_probs(log_dist, tokens)
        old = logp.detach() if old is None else old
        surrogate = POLICY_LOSSES[loss].fn(logp, old, advantages, mask, policy_settings(plan))
        kl_values = KL_ESTIMATORS[kl].fn(log_dist, ref_log, tokens)
        value = REDUCTIONS[reduction].fn(objective.per_token_loss(surrogate.gain, kl_values,
                                                                  plan.kl_beta),
                                         mask, plan.max_new_tokens)
        optimiser.zero_grad()
        value.backward()
        norm = nn.utils.clip_grad_norm_(model.parameters(), plan.gradient_clip)
        optimiser.step()
        got = history["updates"][update]
        assert got["loss"] == pytest.approx(value.item(), rel=1e-4, abs=1e-6)
        assert got["gradient_norm_before_clip"] == pytest.approx(norm.item(), rel=1e-4)
        assert got["kl"] == pytest.approx(objective.masked_mean(kl_values, mask).item(), rel=1e-4,
                                          abs=1e-7)
        want = objective.masked_mean(surrogate.outside, mask).item()
        assert got["ratio_outside_clip"] == pytest.approx(want, abs=1e-6)
