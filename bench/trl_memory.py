"""Where postlab's peak memory goes during RL steps, measured on the tensors themselves.

Used by ``bench_trl.py`` (a separate child run, so the timed runs carry no hooks). Every
figure is read from live tensors at two moments of an RL step after the first (when the
optimizer's state exists):

* **update**: just before the backward pass of each update, when the forward pass has made
  everything the backward reads. Autograd's saved tensors are counted through
  ``torch.autograd.graph.saved_tensors_hooks`` (each storage once, the parameters' own
  storages left out), split into the full-vocabulary ones (logits, log-probabilities, the
  exact KL's and the entropy's terms: last dimension the vocabulary) and the rest (the
  activations the network keeps for its backward pass); the reference's log-probabilities
  are the tensor the update reads. The gradients, made by the backward pass and dropped
  after the optimizer's step, are read at that step and shown on a line of their own.
* **decoding**: after the rollout's last token, with the KV cache (the keys and values
  the policy's ``advance`` returned last) and the rollout's token rows.

Weights, the reference model, gradients and optimizer state are summed over their
tensors' storages. "Runtime" is the process's resident set before the policy was built
(interpreter, torch, the plan and its tokenizer); what the resident peak holds beyond the
sum of the parts is the allocator's (freed memory it has not returned) and the library's.

The hooks only look: each returns the tensor it was given, so the run computes the same bits.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import torch


def resident() -> int:
    """Bytes of this process's resident set now (Linux ``/proc``)."""
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    return 0


def tensors_in(value: Any) -> Iterator[torch.Tensor]:
    """Every tensor in nested lists, tuples and a library cache's layers."""
    if isinstance(value, torch.Tensor):
        yield value
    elif isinstance(value, (list, tuple)):
        for item in value:
            yield from tensors_in(item)
    elif hasattr(value, "buffers") and isinstance(value.buffers, list):  # a static cache
        yield from tensors_in(value.buffers)
    elif hasattr(value, "layers"):  # a transformers Cache
        for layer in value.layers:
            yield from tensors_in([getattr(layer, "keys", None), getattr(layer, "values", None)])


def storage_bytes(tensors: Iterable[torch.Tensor]) -> int:
    """Bytes of the distinct storages under ``tensors`` (a view counts once)."""
    seen: dict[int, int] = {}
    for tensor in tensors:
        if tensor is None:
            continue
        storage = tensor.untyped_storage()
        seen[storage.data_ptr()] = storage.nbytes()
    return sum(seen.values())


class MemoryProbe:
    """Collects the measurements above while ``reinforce`` runs (see :meth:`patched`)."""

    def __init__(self, policy: Any, reference: Any, vocab: int, runtime: int,
                 device: str = "cpu") -> None:
        self.policy, self.reference, self.vocab = policy, reference, vocab
        # on a GPU the parts live in its memory: "now" is the allocator's count there, and
        # the process's own runtime (interpreter, libraries) is not in it
        self.runtime = 0 if device == "cuda" else runtime
        self.now = torch.cuda.memory_allocated if device == "cuda" else resident
        self.parameter_storages = {p.untyped_storage().data_ptr()
                                   for model in (policy, reference)
                                   for p in model.parameters()}
        self.saved: dict[int, tuple[int, bool]] = {}  # storage -> (bytes, full vocabulary)
        self.optimizer: Any = None
        self.reference_dist: torch.Tensor | None = None
        self.cache_bytes = 0
        self.steps = 0
        self.update: dict[str, int] | None = None
        self.decoding: dict[str, int] | None = None
        self.peak_resident = 0
        self.gradients_at_step: int | None = None

    # -- what autograd keeps ----------------------------------------------------------------

    def _pack(self, tensor: torch.Tensor) -> torch.Tensor:
        storage = tensor.untyped_storage()
        pointer = storage.data_ptr()
        if pointer not in self.parameter_storages:
            wide = tensor.dim() > 0 and tensor.shape[-1] == self.vocab
            self.saved[pointer] = (storage.nbytes(), wide or self.saved.get(pointer,
                                                                             (0, False))[1])
        return tensor

    # -- the parts -------------------------------------------------------------------------

    def _held(self) -> dict[str, int]:
        """What lives at any moment of a step: the models, gradients, optimizer state."""
        weights = storage_bytes(self.policy.parameters())
        separate = [p for p in self.reference.parameters()
                    if p.untyped_storage().data_ptr()
                    not in {q.untyped_storage().data_ptr() for q in self.policy.parameters()}]
        state = []
        if self.optimizer is not None:  # postlab's CPU Adam, or torch.optim's on a GPU
            entries = (list(self.optimizer.state.values())
                       if isinstance(self.optimizer, torch.optim.Optimizer)
                       else getattr(self.optimizer, "_state", []))
            for entry in entries:
                values = entry.values() if isinstance(entry, dict) else entry or []
                state += [t for t in values if isinstance(t, torch.Tensor) and t.dim() > 0]
        return {"runtime": self.runtime, "weights": weights,
                "reference model": storage_bytes(separate),
                "gradients": storage_bytes(p.grad for p in self.policy.parameters()),
                "optimizer state": storage_bytes(state)}

    def before_backward(self) -> None:
        if self.steps < 1 or self.update is not None:
            return
        wide = sum(size for size, full in self.saved.values() if full)
        rest = sum(size for size, full in self.saved.values() if not full)
        reference = (storage_bytes([self.reference_dist])
                     if self.reference_dist is not None else 0)
        self.update = {**self._held(), "activations kept for backward": rest,
                       "logits and full-vocabulary terms (kept for backward)": wide,
                       "reference log-probabilities": reference,
                       "resident now": self.now()}

    def after_decoding(self, tokens: torch.Tensor, mask: torch.Tensor) -> None:
        if self.steps < 1 or self.decoding is not None:
            return
        self.decoding = {**self._held(), "KV cache": self.cache_bytes,
                         "rollout rows": storage_bytes([tokens, mask]),
                         "resident now": self.now()}

    # -- wiring ------------------------------------------------------------------------------

    @contextlib.contextmanager
    def patched(self) -> Iterator[Callable[[int, list], None]]:
        """postlab's engine with the probe's hooks on; yields the per-step hook."""
        from postlab.engines import steps, train

        probe = self
        original_step, original_generate = steps.gradient_step, train.generate
        original_reference, original_adam = train.reference_log_dist, train.adam_for
        original_advance = type(self.policy).advance

        def gradient_step(loss: torch.Tensor, *args: Any, **kwargs: Any) -> Any:
            probe.before_backward()
            result = original_step(loss, *args, **kwargs)
            probe.saved.clear()  # the backward pass freed what autograd kept
            return result

        def generate(*args: Any, **kwargs: Any) -> Any:
            probe.cache_bytes = 0
            tokens, mask = original_generate(*args, **kwargs)
            probe.after_decoding(tokens, mask)
            return tokens, mask

        def reference_log_dist(*args: Any, **kwargs: Any) -> torch.Tensor:
            probe.reference_dist = original_reference(*args, **kwargs)
            return probe.reference_dist

        def adam_for(*args: Any, **kwargs: Any) -> Any:
            optimizer = probe.optimizer = original_adam(*args, **kwargs)
            step = optimizer.step

            def stepped() -> None:  # the gradients, live from the backward pass to here
                if probe.steps >= 1 and probe.gradients_at_step is None:
                    probe.gradients_at_step = storage_bytes(
                        p.grad for p in probe.policy.parameters())
                step()

            optimizer.step = stepped
            return optimizer

        def advance(policy: Any, *args: Any, **kwargs: Any) -> Any:
            logits, cache = original_advance(policy, *args, **kwargs)
            if policy is probe.policy:
                probe.cache_bytes = storage_bytes(tensors_in(cache))
            return logits, cache

        def hook(step: int, rows: list) -> None:
            probe.steps = step

        steps.gradient_step, train.generate = gradient_step, generate
        train.reference_log_dist, train.adam_for = reference_log_dist, adam_for
        type(self.policy).advance = advance
        try:
            with torch.autograd.graph.saved_tensors_hooks(self._pack, lambda t: t):
                yield hook
        finally:
            steps.gradient_step, train.generate = original_step, original_generate
            train.reference_log_dist, train.adam_for = original_reference, original_adam
            type(self.policy).advance = original_advance

    def result(self, peak: int) -> dict[str, Any]:
        return {"update": self.update, "decoding": self.decoding, "peak": peak,
                "gradients at the step": self.gradients_at_step}


def print_breakdown(found: dict[str, Any], trl_peak: int | None) -> None:
    """The two moments side by side, in MiB, and what the resident peak holds beyond them."""
    update, decoding, peak = found["update"], found["decoding"], found["peak"]
    names = list(dict.fromkeys([*update, *decoding]))
    names.remove("resident now")
    print("where postlab's memory goes (MiB, measured on live tensors in a separate run; "
          "step 2):")
    print(f"  {'part':56s} {'at an update':>13s} {'at decoding':>12s}")
    for name in names:
        cells = [f"{part[name] / 2**20:13.1f}" if name in part else f"{'':>13s}"
                 for part in (update, decoding)]
        print(f"  {name:56s} {cells[0]} {cells[1][1:]}")
    for label, part in (("sum of the parts", None),
                        ("resident set then (allocated, on a GPU)", "resident now")):
        values = [sum(v for k, v in p.items() if k != "resident now") if part is None
                  else p[part] for p in (update, decoding)]
        print(f"  {label:56s} {values[0] / 2**20:13.0f} {values[1] / 2**20:12.0f}")
    if found.get("gradients at the step") is not None:  # live through backward and the step
        print(f"  at the optimizer's step, the gradients: "
              f"{found['gradients at the step'] / 2**20:.1f} MiB (dropped after it)")
    print(f"  resident peak of the run: {peak / 2**20:.0f} MiB"
          + (f" (TRL's: {trl_peak / 2**20:.0f} MiB)" if trl_peak is not None else ""))
