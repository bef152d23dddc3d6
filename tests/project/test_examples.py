"""Every plan in examples/ is valid, trains (its first seed), verifies, and its report renders."""

from pathlib import Path

import pytest
from plans import check_example

from postlab.plan.frozen import derive_plan, load_plan, parse_plan, plan_bytes
from postlab.runs.orchestration import RunOptions, run_plan

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = sorted((ROOT / "examples").glob("*.json"))


def test_there_is_an_example_per_option():
    names = {p.stem for p in EXAMPLES}
    for needed in ("loss-seq-mean-token-mean", "loss-constant-normaliser", "advantage-mean-only",
                   "advantage-leave-one-out", "advantage-group-mean-batch-std", "kl-k1",
                   "kl-k3", "kl-none", "clip-higher", "policy-gspo", "policy-cispo",
                   "policy-sapo", "control-format", "control-random", "dynamic-sampling",
                   "arms-pipelines",
                   "task-multi-digit-addition", "task-multiplication", "transformer-gpt2",
                   "transformer-llama"):
        assert needed in names
    readme = (EXAMPLES[0].parent / "README.md").read_text()
    for name in names:
        assert f"{name}.json" in readme


#: Trained elsewhere, once, with checks of their own that include these (check_example).
TRAINED_ELSEWHERE = {"hypotheses": "tests/analysis/test_hypotheses.py"}
#: Each example trains its first seed only (its own option on its own plan, half the time):
#: seeds train the same code independently of each other, and several seeds through training,
#: verify and every report form are shown by the teaching plan, the bundled run and the
#: hypotheses example.


@pytest.mark.parametrize("path", [p for p in EXAMPLES if p.stem not in TRAINED_ELSEWHERE],
                         ids=[p.stem for p in EXAMPLES if p.stem not in TRAINED_ELSEWHERE])
def test_example_runs_and_reports(path, tmp_path, capsys):
    plan = load_plan(path)
    assert plan.data["parent"]["changes"]
    raw = plan_bytes(derive_plan(plan, [f"seeds=[{plan.data['seeds'][0]}]"], "2026-12-02"))
    plan = parse_plan(raw, f"{path.name}, first seed")
    out = tmp_path / "run"
    run_plan(plan, raw, RunOptions(out_dir=out, workers=1))
    data = check_example(plan.data, out, capsys)
    if path.stem.startswith("transformer-"):
        _learns(data["outcomes"])
    if path.stem.startswith("policy-"):  # each policy loss's example reproduces bit for bit
        from postlab.api.training import reproduce

        assert reproduce(out, tmp_path / "again", workers=1).comparison.identical


def test_examples_trained_elsewhere_are_checked_there():
    for name, where in TRAINED_ELSEWHERE.items():
        assert (EXAMPLES[0].parent / f"{name}.json") in EXAMPLES
        assert "check_example(" in (ROOT / where).read_text()


def _learns(outcomes):
    """A transformer example: held-out greedy success after SFT is far above chance
    (two-digit sums: about 1 in 200 for a uniform guess of the right length), and the report
    shows it. (That transformer runs reproduce bit for bit is shown on smaller plans of both
    families, in tests/policies/test_transformer_policies.py, where it costs seconds, not a
    second training of these.)"""
    after_sft = next(o for o in outcomes if (o["stage"], o["split"], o["decoding"], o["metric"])
                     == ("initial", "test", "greedy", "strict_rate"))
    assert min(after_sft["value"]["per_seed"]) > 0.5


REAL = sorted(p for p in (ROOT / "examples" / "real").glob("*.json")
              if not p.name.endswith(".draft.json"))


def test_the_real_model_examples_are_valid_and_pin_the_shipped_file():
    """The SmolLM2 examples: valid plans whose GGUF is the file the package ships, the
    baseline asking the LoRA example's questions in its words (so the run's starting stage
    and the baseline are the same model on the same questions)."""
    pytest.importorskip("gguf")
    pytest.importorskip("reasoning_gym")
    from postlab.policies.pretrained import gguf_file

    assert sorted(p.stem for p in REAL) == ["smollm2-baseline", "smollm2-lora",
                                            "smollm2-lora-gpu"]
    plans = {p.stem: load_plan(p).model for p in REAL}
    for plan in plans.values():
        assert gguf_file(plan).name == "SmolLM2-135M-Instruct.Q4_1.gguf"
        assert plan.sft_steps == 0 and plan.lora is not None
    baseline, lora = plans["smollm2-baseline"].data(), plans["smollm2-lora"].data()
    for key in ("reasoning_gym", "split", "policy", "seeds", "temperature", "max_new_tokens",
                "threads"):
        assert baseline[key] == lora[key], key
    assert [arm.contract for arm in plans["smollm2-lora"].arms] == ["rg-final", "rg-substring"]
    readme = (ROOT / "examples" / "README.md").read_text()
    assert all(f"real/{p.name}" in readme for p in REAL)
