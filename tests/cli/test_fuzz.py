"""A seeded fuzz corpus: damaged records, summaries, plans, ``--set`` values and checkpoints.

Each case damages a copy of one small real run, then runs the command line in-process and
checks the promise: exit 2 with one line on stderr (``verify`` may instead fail a check with
exit 1), no traceback, no hang, nothing written or changed in the case's folder, and no code
from a checkpoint run. The corpus is drawn from a fixed seed, so a case id names the same
damage on every run; a case that fails names what still breaks the promise.

Only harmless mutations are left out (a random draw that makes one is drawn again):

* the damaged bytes parse to exactly the original value (say, a space turned into a tab):
  no reader can tell;
* only provenance changed, to values that a record from another machine or implementation
  legitimately carries (the python, torch, platform and postlab_version strings, the source
  hashes, a positive wall time or worker count): verify warns about those by design.

``report`` reads only part of a record; after a random change that keeps the record
well-formed, it may exit 0 if its output is byte-identical to the undamaged run's, since then
the change is in a part it does not read and no number it prints is wrong. ``verify`` runs on
every record mutation and must catch each one.
"""

from __future__ import annotations

import contextlib
import copy
import hashlib
import io
import json
import math
import os
import pickle
import random
import re
import shutil
import signal
import stat
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import torch
from plans import SMALL, write_plan
from recordfiles import inline_record, read_record

from postlab.cli import main
from postlab.errors import UserError
from postlab.plan.frozen import load_plan
from postlab.policies.checkpoint import load_checkpoint
from postlab.runs.orchestration import RunOptions, run_plan

SEED = 20261020
#: A command still running after this long counts as hung.
HANG_SECONDS = 20
#: How many random cases of each kind; together with the fixed cases, about a minute.
RANDOM = {"record": {"truncate": 10, "flip": 30, "digit": 15, "swap": 40, "delete": 25,
                     "add": 15, "duplicate": 10},
          "summary": {"truncate": 4, "flip": 10, "digit": 6, "swap": 8, "delete": 6, "add": 4,
                      "duplicate": 3},
          "plan": {"truncate": 6, "flip": 12, "digit": 6, "swap": 12, "delete": 6, "add": 6,
                   "duplicate": 4},
          "set": 40, "checkpoint": 24}
RECORD_COMMANDS = ("report", "report-json", "verify")
PLAN_COMMANDS = ("plan-check", "freeze", "report", "verify")
PLACEHOLDER = "fuzz-placeholder-7f3a"
DEEP_ARRAY = b"[" * 100_000 + b"]" * 100_000
DEEP_OBJECT = b'{"a": ' * 100_000 + b"1" + b"}" * 100_000
#: Top-level record fields whose plausible changes are legitimate provenance (see above).
PROVENANCE = {"python", "torch", "platform", "postlab_version", "source_sha256",
              "wall_seconds", "workers"}
#: Maps whose set of keys legitimately varies (source files of another version): adding or
#: deleting an entry there is provenance, so random additions and deletions stay out.
VARYING = ("source_sha256",)


class _Hang(BaseException):
    """Raised by the alarm; a BaseException so that no ``except Exception`` swallows it."""


# --- the base run, trained once ---------------------------------------------------------------

@dataclass(frozen=True)
class Base:
    run: Path
    outputs: dict[str, str]  # stdout of each command on the undamaged run


def _quiet_main(argv: list[str]) -> tuple[int, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(argv)
    return code, out.getvalue()


@pytest.fixture(scope="session")
def base(tmp_path_factory: pytest.TempPathFactory) -> Base:
    folder = tmp_path_factory.mktemp("fuzz-base")
    plan = write_plan(folder / "plan.json", **SMALL)
    run = folder / "run"
    run_plan(load_plan(plan), plan.read_bytes(), RunOptions(out_dir=run, workers=1))
    # The wall time is the one part of a run that differs between runs on one machine; fixing
    # it keeps byte offsets, and so every random byte-level case, the same from run to run.
    # The record is rewritten in the one-document layout (seeds inline, as earlier versions
    # wrote it), so the cases below reach every JSON value of a seed; damaged chunk files are
    # tests/records/test_chunks.py's.
    record = inline_record(read_record(run))
    shutil.rmtree(run / "rows")
    (run / "record.json").write_bytes(_dump(record | {"wall_seconds": 1.25}))
    # Without the kept fingerprint, every edit below must be caught by the checks of its own
    # part, not merely by the fingerprint file disagreeing (tests/test_verify.py covers that).
    (run / "fingerprint.txt").unlink()
    outputs = {}
    for command in RECORD_COMMANDS:
        code, outputs[command] = _quiet_main(_argv(command, run, folder, ["clip=0.3"]))
        assert code == 0, outputs[command]
    return Base(run=run, outputs=outputs)


# --- a case: damage, commands, expectations ---------------------------------------------------

@dataclass
class Ctx:
    """One case's folder and what its damage decided."""

    root: Path
    rng: random.Random
    settings: list[str] = field(default_factory=lambda: ["clip=0.3"])
    commands: tuple[str, ...] = ()
    report_may_match: bool = False  # a well-formed change: report may print the same output
    load: tuple[Path, str | None] | None = None  # a checkpoint to load directly
    load_must_fail: bool = True
    note: str = ""  # what a random mutation did, for the failure message

    @property
    def run(self) -> Path:
        return self.root / "run"

    @property
    def marker(self) -> Path:
        return self.root / "pwned"

    def path(self, name: str) -> Path:
        return self.run / name

    def read(self, name: str) -> Any:
        return json.loads(self.path(name).read_bytes())

    def write(self, name: str, data: bytes) -> None:
        target = self.path(name)
        if target.exists() or target.is_symlink():
            target.unlink()
        target.write_bytes(data)


@dataclass(frozen=True)
class Case:
    name: str
    damage: Callable[[Ctx], None]
    commands: tuple[str, ...]


def _argv(command: str, run: Path, root: Path, settings: list[str]) -> list[str]:
    plan = run / "plan.json"
    if command == "report":
        return ["report", str(run)]
    if command == "report-json":
        return ["report", str(run), "--format", "json"]
    if command == "verify":
        return ["verify", str(run)]
    if command == "plan-check":
        return ["plan", "check", str(plan)]
    if command == "run":
        return ["run", "--plan", str(plan), "--out-dir", str(root / "out"), "--workers", "1",
                "--quiet"]
    assert command == "freeze", command
    sets = [part for setting in settings for part in ("--set", setting)]
    return ["freeze", str(root / "new.json"), "--from", str(plan), *sets]


def _snapshot(root: Path) -> dict[str, tuple[int, int, int]]:
    """Every name under ``root`` with its type, size and mtime; links and FIFOs not followed."""
    result = {}
    for folder, dirs, files in os.walk(root):
        for name in dirs + files:
            info = (Path(folder) / name).lstat()
            result[os.path.relpath(Path(folder) / name, root)] = (
                stat.S_IFMT(info.st_mode), info.st_size, info.st_mtime_ns)
    return result


def _alarmed(call: Callable[[], Any], what: str) -> Any:
    """Run ``call``; a hang becomes a test failure instead of a stuck suite."""
    def hung(signum: int, frame: Any) -> None:
        raise _Hang

    previous = signal.signal(signal.SIGALRM, hung)
    signal.setitimer(signal.ITIMER_REAL, HANG_SECONDS)
    try:
        return call()
    except _Hang:
        pytest.fail(f"{what}: still running after {HANG_SECONDS} s (hung)")
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def _check_exit(command: str, code: int, out: str, err: str, ctx: Ctx, base: Base) -> None:
    last = " | ".join((err or out).strip().splitlines()[-3:])
    assert "Traceback" not in err and "Traceback" not in out, f"{command}: traceback: {last}"
    if command == "plan-check" and code == 2 and not err.startswith("postlab: "):
        # plan check lists every schema problem, one line each, then their count.
        plan = ctx.run / "plan.json"
        lines = err.splitlines()
        assert all(line.startswith(f"{plan}: ") for line in lines), err
        assert lines[-1] == f"{plan}: {len(lines) - 1} problems", err
        return
    if code == 2:
        one_line = err.startswith("postlab: ") and err.count("\n") == 1 and err.endswith("\n")
        assert one_line, f"{command}: exit 2 but not one line: {err!r:.300}"
        return
    if command == "verify" and code == 1:
        assert err == "" and "NOT VERIFIED" in out, (err, out[-300:])
        return
    report = command.startswith("report")
    if code == 0 and ctx.report_may_match and report and base.outputs[command] == out:
        return  # the change is in a part this report does not read
    expected = "1 or 2" if command == "verify" else "2"
    lines = (err or out).strip().splitlines()
    last = lines[-1] if lines else ""
    shown = "printed its output" if command.startswith("report") and code == 0 else last
    raise AssertionError(f"{command}: exit {code}, expected {expected}: {shown[:200]}")


def _load_directly(ctx: Ctx) -> None:
    assert ctx.load is not None
    path, sha = ctx.load
    try:
        payload = _alarmed(lambda: load_checkpoint(path, sha), "load_checkpoint")
    except UserError as exc:
        assert "\n" not in str(exc), str(exc)
        return
    assert not ctx.load_must_fail, "load_checkpoint accepted a damaged checkpoint"
    for name, tensor in payload["state_dict"].items():
        assert isinstance(tensor, torch.Tensor) and bool(torch.isfinite(tensor).all()), name


CASES: list[Case] = []


def _slug(value: Any) -> str:
    return re.sub(r"[^A-Za-z0-9.-]+", "_", json.dumps(value)).strip("_") or "empty"


def case(name: str, commands: tuple[str, ...]) -> Callable:
    def register(damage: Callable[[Ctx], None]) -> Callable[[Ctx], None]:
        CASES.append(Case(name, damage, commands))
        return damage
    return register


# --- editing JSON files at the byte level -------------------------------------------------------

def _dump(value: Any, indent: int | None = None) -> bytes:
    return (json.dumps(value, ensure_ascii=False, indent=indent) + "\n").encode()


def _layout(name: str) -> int | None:
    return None if name == "record.json" else 2


def _get(value: Any, path: list) -> Any:
    for key in path:
        value = value[key]
    return value


def _inject(ctx: Ctx, name: str, path: list, raw: bytes) -> None:
    """Replace the value at ``path`` in file ``name`` with the raw bytes ``raw``."""
    value = copy.deepcopy(ctx.read(name))
    if path:
        _get(value, path[:-1])[path[-1]] = PLACEHOLDER
    else:
        value = PLACEHOLDER
    data = _dump(value, _layout(name))
    assert data.count(f'"{PLACEHOLDER}"'.encode()) == 1
    ctx.write(name, data.replace(f'"{PLACEHOLDER}"'.encode(), raw))


def _inject_key(ctx: Ctx, name: str, path: list, raw_key: bytes, raw_value: bytes) -> None:
    """Add a member with raw key and value bytes to the object at ``path``."""
    value = copy.deepcopy(ctx.read(name))
    _get(value, path)[PLACEHOLDER] = PLACEHOLDER + "v"
    data = _dump(value, _layout(name))
    member = f'"{PLACEHOLDER}": "{PLACEHOLDER}v"'.encode()
    assert data.count(member) == 1
    ctx.write(name, data.replace(member, raw_key + b": " + raw_value))


def _duplicate(ctx: Ctx, name: str, path: list, key: str, raw_value: bytes) -> None:
    """Give the object at ``path`` its key ``key`` a second time."""
    _inject_key(ctx, name, path, json.dumps(key).encode(), raw_value)


def _edit(ctx: Ctx, name: str, change: Callable[[Any], Any]) -> None:
    """Change the parsed file in place (what ``change`` returns is ignored) and write it."""
    value = ctx.read(name)
    change(value)
    ctx.write(name, _dump(value, _layout(name)))


def _set(path: list, new: Any) -> Callable[[Any], None]:
    def change(value: Any) -> None:
        _get(value, path[:-1])[path[-1]] = new
    return change


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


# --- fixed cases: records ----------------------------------------------------------------------

ROW_TEXT = ["runs", 0, "evaluations", "initial", "test", "greedy", 0, 2]
SPLIT = ["runs", 0, "evaluations", "initial", "test"]

for _name, _path, _raw in [
    ("record-deep-array", ["runs", 0, "sft_loss"], DEEP_ARRAY),
    ("record-deep-object", ["runs", 0, "digests"], DEEP_OBJECT),
    ("record-surrogate-escape-in-string", ROW_TEXT, b'"\\ud800"'),
    ("record-surrogate-bytes-in-string", ROW_TEXT, b'"\xed\xa0\x80"'),
    ("record-seed-10e400", ["runs", 0, "seed"], str(10**400).encode()),
    ("record-seed-2e64", ["runs", 0, "seed"], str(2**64).encode()),
    ("record-seed-2e63-minus-1", ["runs", 0, "seed"], str(2**63 - 1).encode()),
    ("record-seed-negative", ["runs", 0, "seed"], b"-1"),
    ("record-zero-variance-10e400", ["runs", 0, "training", "strict", 0,
                                     "zero_variance_groups"], str(10**400).encode()),
    ("record-compute-10e400", ["runs", 0, "compute", "initial", "completions"],
     str(10**400).encode()),
    ("record-parameters-10e400", ["parameters"], str(10**400).encode()),
    ("record-wall-seconds-1e400", ["wall_seconds"], b"1e400"),
    ("record-split-is-a-number", SPLIT, b"5"),
    ("record-greedy-is-a-number", [*SPLIT, "greedy"], b"5"),
    ("record-sampled-is-a-number", [*SPLIT, "sampled"], b"7"),
    ("record-row-is-a-number", [*SPLIT, "greedy", 0], b"3"),
    ("record-row-text-is-a-number", ROW_TEXT, b"3"),
    ("record-nul-in-checkpoint-name", ["runs", 0, "checkpoints", "initial", "file"],
     b'"seed-3-initial\\u0000.pt"'),
    ("record-whole-file-deep", [], DEEP_ARRAY),
]:
    case(_name, RECORD_COMMANDS)(lambda ctx, p=_path, r=_raw: _inject(ctx, "record.json", p, r))

for _name, _path, _key in [
    ("record-surrogate-escape-in-key", ["runs", 0], b'"\\udc00seed"'),
    ("record-surrogate-bytes-in-key", [], b'"\xed\xb0\x80"'),
]:
    case(_name, RECORD_COMMANDS)(
        lambda ctx, p=_path, k=_key: _inject_key(ctx, "record.json", p, k, b"1"))

for _name, _path, _key in [("record-duplicate-top-key", [], "threads"),
                           ("record-duplicate-seed", ["runs", 0], "seed")]:
    case(_name, RECORD_COMMANDS)(
        lambda ctx, p=_path, k=_key: _duplicate(ctx, "record.json", p, k, b"1"))

#: Every object of a record with a fixed set of fields, and a map of stages, arms or splits.
UNKNOWN_KEY_PLACES = {
    "top": [], "run": ["runs", 0], "split": SPLIT, "stage": ["runs", 0, "evaluations", "initial"],
    "evaluations": ["runs", 0, "evaluations"], "training": ["runs", 0, "training"],
    "step": ["runs", 0, "training", "strict", 0],
    "update": ["runs", 0, "training", "strict", 0, "updates", 0],
    "checkpoints": ["runs", 0, "checkpoints"],
    "checkpoint": ["runs", 0, "checkpoints", "initial"],
    "compute": ["runs", 0, "compute", "strict"], "digests": ["runs", 0, "digests"],
    "source": ["source_sha256"],
}


def _add_unknown(record: dict, path: list) -> None:
    """An unknown key whose value looks like its neighbours', so that only the name is wrong."""
    target = _get(record, path)
    target["fuzz_unknown"] = copy.deepcopy(next(iter(target.values())))


for _place, _path in UNKNOWN_KEY_PLACES.items():
    case(f"record-unknown-key-{_place}", RECORD_COMMANDS)(
        lambda ctx, p=_path: _edit(ctx, "record.json", lambda r: _add_unknown(r, p)))

IMPOSSIBLE = [("threads", 0), ("threads", -1), ("threads", "one"), ("threads", 100_000),
              ("workers", 0), ("workers", -2), ("workers", 1.5), ("parameters", -1),
              ("parameters", 0), ("parameters", "many"), ("parameters", 7),
              ("device", "tpu"), ("device", 5), ("dtype", "float16"), ("dtype", ""),
              ("wall_seconds", -1.0), ("wall_seconds", "fast"), ("wall_seconds", True),
              ("plan_sha256", "abc"), ("python", None), ("torch", ["2.13"]),
              ("source_sha256", [])]
#: Well-typed values that no run of this plan records: only verify, which checks provenance
#: against the plan, must fail; a report, which does not read them, may print as before.
UNTRUE = {("parameters", 7)}


def _impossible(ctx: Ctx, key: str, value: Any) -> None:
    ctx.report_may_match = any(key == k and value == v for k, v in UNTRUE)
    _edit(ctx, "record.json", _set([key], value))


for _key, _value in IMPOSSIBLE:
    case(f"record-impossible-{_key}-{_slug(_value)}", RECORD_COMMANDS)(
        lambda ctx, k=_key, v=_value: _impossible(ctx, k, v))


def _drop_checkpoint_entry(ctx: Ctx, then: str) -> None:
    ctx.report_may_match = True  # reports do not read checkpoints; verify must fail
    entry = ctx.read("record.json")["runs"][0]["checkpoints"]["strict"]
    _edit(ctx, "record.json", lambda r: r["runs"][0]["checkpoints"].pop("strict"))
    if then == "deleted":
        ctx.path(entry["file"]).unlink()
    elif then == "garbage":
        ctx.write(entry["file"], b"not a checkpoint\n")


for _then in ("kept", "deleted", "garbage"):
    case(f"record-checkpoint-entry-removed-file-{_then}", RECORD_COMMANDS)(
        lambda ctx, t=_then: _drop_checkpoint_entry(ctx, t))


def _special(ctx: Ctx, name: str, kind: str) -> None:
    target = ctx.path(name)
    if target.exists():
        target.unlink()
    if kind == "fifo":
        os.mkfifo(target)
    elif kind == "directory":
        target.mkdir()
    elif kind == "loop":
        target.symlink_to(ctx.run / f"{name}.loop")
        (ctx.run / f"{name}.loop").symlink_to(target)


for _kind in ("fifo", "directory", "loop", "deleted"):
    case(f"record-file-{_kind}", RECORD_COMMANDS)(
        lambda ctx, k=_kind: _special(ctx, "record.json", k))


# --- fixed cases: summary.json (only verify reads it) ------------------------------------------

for _kind in ("deleted", "directory", "fifo", "loop"):
    case(f"summary-{_kind}", ("verify",))(lambda ctx, k=_kind: _special(ctx, "summary.json", k))


def _retype_first(ctx: Ctx, old: Callable[[Any], bool], new: Callable[[Any], Any]) -> None:
    """Give the first summary metric for which ``old`` holds the same number in a new type."""
    def change(summary: list) -> None:
        for entry in summary:
            for split in entry.values():
                for decoded in split.values() if isinstance(split, dict) else ():
                    for key, value in decoded.items():
                        if old(value):
                            decoded[key] = new(value)
                            return
        raise AssertionError("no such value in the summary")
    _edit(ctx, "summary.json", change)


for _name, _old, _new in [
    ("summary-int-to-float", lambda v: type(v) is int and v > 1, float),
    ("summary-one-to-true", lambda v: type(v) is int and v == 1, lambda v: True),
    ("summary-zero-to-minus-zero", lambda v: type(v) is float and v == 0, lambda v: -0.0),
]:
    case(_name, ("verify",))(lambda ctx, o=_old, n=_new: _retype_first(ctx, o, n))

for _name, _raw in [("summary-deep-array", DEEP_ARRAY), ("summary-deep-object", DEEP_OBJECT),
                    ("summary-surrogate-escape", b'"\\ud800"'),
                    ("summary-surrogate-bytes", b'"\xed\xa0\x80"'),
                    ("summary-10e400", str(10**400).encode())]:
    case(_name, ("verify",))(
        lambda ctx, r=_raw: _inject(ctx, "summary.json", [0, "train", "greedy", "n"], r))
case("summary-duplicate-key", ("verify",))(
    lambda ctx: _duplicate(ctx, "summary.json", [0], "seed", b"3"))


# --- fixed cases: plans ------------------------------------------------------------------------

for _name, _path, _raw in [
    ("plan-deep-array", ["split", "train"], DEEP_ARRAY),
    ("plan-deep-object", ["rewards"], DEEP_OBJECT),
    ("plan-surrogate-escape-in-string", ["selection"], b'"\\ud800 fixed"'),
    ("plan-surrogate-bytes-in-string", ["selection"], b'"\xed\xa0\x80"'),
    ("plan-seed-10e400", ["seeds", 0], str(10**400).encode()),
    ("plan-seed-2e64", ["seeds", 0], str(2**64).encode()),
    ("plan-clip-nan", ["clip"], b"NaN"),
    ("plan-temperature-5e-324", ["temperature"], b"5e-324"),
]:
    case(_name, (*PLAN_COMMANDS, "run"))(
        lambda ctx, p=_path, r=_raw: _inject(ctx, "plan.json", p, r))
case("plan-surrogate-escape-in-key", PLAN_COMMANDS)(
    lambda ctx: _inject_key(ctx, "plan.json", ["rewards"], b'"\\udfff"', b'"x"'))
case("plan-surrogate-bytes-in-key", PLAN_COMMANDS)(
    lambda ctx: _inject_key(ctx, "plan.json", [], b'"\xed\xbf\xbf"', b'"x"'))
case("plan-duplicate-key", PLAN_COMMANDS)(
    lambda ctx: _duplicate(ctx, "plan.json", [], "clip", b"0.25"))
for _kind in ("fifo", "directory", "loop"):
    case(f"plan-file-{_kind}", PLAN_COMMANDS)(lambda ctx, k=_kind: _special(ctx, "plan.json", k))


# --- fixed cases: --set values -----------------------------------------------------------------

SET_CASES = {
    "deep-array": ["split=" + DEEP_ARRAY.decode()],
    "deep-array-unclosed": ["seeds=" + "[" * 100_000],
    "deep-object": ["rewards=" + DEEP_OBJECT.decode()],
    "5000-digits": ["seeds=[" + "7" * 5000 + "]"],
    "5000-digits-bare": ["embedding=" + "7" * 5000],
    "10e400": [f"seeds=[{10**400}]"],
    "2e64": [f"seeds=[{2**64}]"],
    "duplicate-keys": ['rewards={"strict": "a", "strict": "b"}'],
    "duplicate-keys-nested": ['dynamic_sampling={"max_extra_groups": 1, '
                              '"max_extra_groups": 2}'],
    "nan": ["clip=NaN"], "infinity": ["gradient_clip=Infinity"], "nan-in-list": ["seeds=[NaN]"],
    "1e400": ["sft_lr=1e400"],
    "surrogate-escape": ['selection="\\ud800"'],
    "surrogate-from-argv-bytes": ["selection=fixed \udcff"],
    "surrogate-in-key": ["\udcffclip=0.3"],
    "temperature-5e-324": ["temperature=5e-324"],
    "given-twice": ["clip=0.3", "clip=0.4"],
    "newline-in-key": ["cl\nip=0.3"],
}
for _name, _settings in SET_CASES.items():
    case(f"set-{_name}", ("freeze",))(
        lambda ctx, s=_settings: setattr(ctx, "settings", list(s)))


# --- fixed cases: checkpoints (verify and a direct load) ---------------------------------------

class _Exploit:
    """Unpickling this would create the marker file: proof that checkpoint code ran."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple:
        return (open, (str(self.marker), "w"))


def _weights(original: bytes, change: Callable[[dict], Any], path: Path) -> None:
    payload = torch.load(io.BytesIO(original), weights_only=True)
    change(payload["state_dict"])
    torch.save(payload, path)


def _loop(path: Path) -> None:
    path.symlink_to(path.with_suffix(".loop"))
    path.with_suffix(".loop").symlink_to(path)


#: name: (make the file from the original bytes, record the new sha256)
CHECKPOINT_CASES: dict[str, tuple[Callable[[Ctx, Path, bytes], Any], bool]] = {
    "nan-weights": (lambda ctx, p, b: _weights(
        b, lambda sd: sd["head.weight"].view(-1)[3].fill_(math.nan), p), True),
    "inf-weights": (lambda ctx, p, b: _weights(
        b, lambda sd: sd["embed.weight"].fill_(math.inf), p), True),
    # Finite, so it loads, but its logits overflow to inf: verify must fail the re-evaluation.
    "huge-finite-weights": (lambda ctx, p, b: (
        _weights(b, lambda sd: sd["head.weight"].fill_(3e38), p),
        setattr(ctx, "load_must_fail", False)), True),
    "non-tensor-entry": (lambda ctx, p, b: _weights(
        b, lambda sd: sd.update({"head.bias": [0.0] * 14}), p), True),
    "pickle-that-runs-code": (lambda ctx, p, b: p.write_bytes(
        pickle.dumps({"state_dict": _Exploit(ctx.marker)})), True),
    "torch-save-that-runs-code": (lambda ctx, p, b: torch.save(
        {"state_dict": {"head.weight": _Exploit(ctx.marker)}}, p), True),
    "truncated": (lambda ctx, p, b: p.write_bytes(b[:len(b) // 3]), True),
    "garbage": (lambda ctx, p, b: p.write_bytes(b"\x80\x04garbage" * 100), True),
    "empty": (lambda ctx, p, b: p.write_bytes(b""), True),
    "fifo": (lambda ctx, p, b: os.mkfifo(p), False),
    "directory": (lambda ctx, p, b: p.mkdir(), False),
    "loop": (lambda ctx, p, b: _loop(p), False),
    "deleted": (lambda ctx, p, b: None, False),
    "changed-without-new-sha": (lambda ctx, p, b: _weights(
        b, lambda sd: sd["head.bias"].add_(0.5), p), False),
}


def _checkpoint_case(ctx: Ctx, make: Callable[[Ctx, Path, bytes], Any], update_sha: bool) -> None:
    """Replace seed 3's strict checkpoint; with ``update_sha`` the record names its new
    sha256, so that only the contents are wrong."""
    path = ctx.path("seed-3-strict.pt")
    original = path.read_bytes()
    path.unlink()
    make(ctx, path, original)
    if update_sha and path.is_file():
        _edit(ctx, "record.json", _set(["runs", 0, "checkpoints", "strict", "sha256"],
                                       _sha(path)))
    ctx.load = (path, ctx.read("record.json")["runs"][0]["checkpoints"]["strict"]["sha256"])


for _name, (_make, _update) in CHECKPOINT_CASES.items():
    case(f"checkpoint-{_name}", ("verify", "load"))(
        lambda ctx, m=_make, u=_update: _checkpoint_case(ctx, m, u))


# --- random cases ------------------------------------------------------------------------------

def _kind_of(value: Any) -> str:
    return "null" if value is None else type(value).__name__


#: One value of each JSON type; a swap picks one of another type.
SWAPS = [None, True, 7, 2.5, "fuzz", [1], {"k": 1}]


def _random_path(value: Any, rng: random.Random, want: type | None = None,
                 stop: float = 0.3, avoid: tuple[str, ...] = ()) -> list:
    """A path found by random descent, stopping at each step with probability ``stop`` and
    mostly stepping into containers, so that deep parts are reached as often as the top.

    Without ``want`` it ends anywhere below the root; with it, at a non-empty container of
    that type on the way down (the root included). Keys in ``avoid`` are not entered.
    """
    candidates, path, node = [], [], value
    while True:
        if (path if want is None else isinstance(node, want) and node):
            candidates.append(list(path))
            if rng.random() < stop:
                break
        if not isinstance(node, dict | list) or not node:
            break
        keys = ([k for k in node if k not in avoid] if isinstance(node, dict)
                else list(range(len(node))))
        inner = [k for k in keys if isinstance(node[k], dict | list) and node[k]]
        if not keys:
            break
        key = rng.choice(inner if inner and rng.random() < 0.75 else keys)
        path.append(key)
        node = node[key]
    return candidates[-1] if candidates else []


def _where(path: list) -> str:
    return "".join(f"[{k}]" if isinstance(k, int) else f".{k}" for k in path) or "."


def _plain(raw: bytes) -> Any:
    """An independent strict-enough reading, to tell harmless damage from real damage."""
    def unique(pairs: list) -> dict:
        keys = [k for k, _ in pairs]
        if len(set(keys)) != len(keys):
            raise ValueError("duplicate")
        return dict(pairs)

    def refuse(name: str) -> None:
        raise ValueError(name)

    try:
        return json.loads(raw.decode("utf-8"), object_pairs_hook=unique,
                          parse_constant=refuse)
    except (ValueError, RecursionError):
        return PLACEHOLDER


def _same_shape(a: Any, b: Any) -> bool:
    if _kind_of(a) != _kind_of(b):
        return False
    if isinstance(a, dict):
        return list(a) == list(b) and all(_same_shape(a[k], b[k]) for k in a)
    if isinstance(a, list):
        return len(a) == len(b) and all(_same_shape(x, y) for x, y in zip(a, b, strict=True))
    return True


def _plausible_provenance(old: Any, new: Any) -> bool:
    """Only provenance differs, to values a record made elsewhere could carry."""
    if not isinstance(new, dict) or list(old) != list(new):
        return False
    changed = [k for k in old if old[k] != new[k]]
    if not changed or any(k not in PROVENANCE for k in changed):
        return False
    for key in changed:
        value = new[key]
        if key == "wall_seconds" and not (_kind_of(value) == "float" and value > 0):
            return False
        if key == "workers" and not (_kind_of(value) == "int" and value >= 1):
            return False
        if key in ("python", "torch", "platform", "postlab_version") and not (
                isinstance(value, str) and value.isprintable() and value):
            return False
        if key == "source_sha256" and not (isinstance(value, dict) and all(
                isinstance(k, str) and isinstance(v, str) for k, v in value.items())):
            return False
    return True


def _flip(ctx: Ctx, name: str, digits: bool = False) -> None:
    """Set one to three random bytes to random values (with ``digits``, digits to other
    digits, which mostly keeps the file well-formed); draw again when harmless."""
    original = ctx.path(name).read_bytes()
    before = json.loads(original)
    places = ([i for i, byte in enumerate(original) if chr(byte).isdigit()] if digits
              else range(len(original)))
    for _ in range(100):
        data = bytearray(original)
        for _ in range(ctx.rng.randint(1, 3)):
            where = ctx.rng.choice(places)
            others = [d for d in "0123456789" if d != chr(data[where])]
            data[where] = ord(ctx.rng.choice(others)) if digits else ctx.rng.randrange(256)
        after = _plain(bytes(data))
        if after == PLACEHOLDER:
            break  # not JSON: every reader must refuse it
        if json.dumps(after) == json.dumps(before):
            continue  # the same value: harmless
        if name == "record.json" and _plausible_provenance(before, after):
            continue  # provenance from another machine: harmless by design
        if name == "plan.json":
            # Still JSON, so maybe still a valid plan (a renamed split, another text): it may
            # be checked and frozen, but no longer has the hash the record names.
            ctx.commands = ("report", "report-json", "verify")
        elif name == "record.json" and _same_shape(before, after):
            ctx.report_may_match = True
        break
    changed = [i for i, (a, b) in enumerate(zip(original, data, strict=True)) if a != b]
    ctx.note = f"bytes {changed} of {len(data)} set to {[data[i] for i in changed]}"
    ctx.write(name, bytes(data))


def _truncate(ctx: Ctx, name: str) -> None:
    data = ctx.path(name).read_bytes()
    cut = ctx.rng.randrange(len(data.rstrip()))
    ctx.note = f"cut at byte {cut} of {len(data)}"
    ctx.write(name, data[:cut])


def _swap(ctx: Ctx, name: str) -> None:
    value = ctx.read(name)
    path = _random_path(value, ctx.rng, stop=0.2, avoid=VARYING) or [ctx.rng.choice(list(value))]
    old = _get(value, path)
    # JSON has one number type: an integer where a float is expected is no type change.
    kinds = {_kind_of(old)} | ({"int"} if isinstance(old, float) else set())
    new = ctx.rng.choice([v for v in SWAPS if _kind_of(v) not in kinds])
    _get(value, path[:-1])[path[-1]] = copy.deepcopy(new)
    ctx.note = f"{_where(path)}: {json.dumps(old)[:40]} -> {json.dumps(new)}"
    ctx.report_may_match = name == "record.json"
    ctx.write(name, _dump(value, _layout(name)))


def _delete(ctx: Ctx, name: str) -> None:
    value = ctx.read(name)
    # A plan's top-level fields are all required; deeper ones may be optional, so stay there.
    path = [] if name == "plan.json" else _random_path(value, ctx.rng, dict, avoid=VARYING)
    key = ctx.rng.choice(list(_get(value, path)))
    _get(value, path).pop(key)
    ctx.note = f"deleted {_where([*path, key])}"
    ctx.report_may_match = name == "record.json"
    ctx.write(name, _dump(value, _layout(name)))


def _add(ctx: Ctx, name: str) -> None:
    value = ctx.read(name)
    path = [] if name == "plan.json" else _random_path(value, ctx.rng, dict, avoid=VARYING)
    key = f"fuzz_{ctx.rng.randrange(1000)}"
    _get(value, path)[key] = copy.deepcopy(ctx.rng.choice(SWAPS))
    ctx.note = f"added {_where([*path, key])}"
    ctx.write(name, _dump(value, _layout(name)))


def _duplicate_random(ctx: Ctx, name: str) -> None:
    value = ctx.read(name)
    path = _random_path(value, ctx.rng, dict)
    target = _get(value, path)
    key = ctx.rng.choice(list(target))
    raw = json.dumps(ctx.rng.choice([target[key], *SWAPS])).encode()
    ctx.note = f"{_where([*path, key])} given twice"
    _duplicate(ctx, name, path, key, raw)


MUTATORS = {"truncate": _truncate, "flip": _flip,
            "digit": lambda ctx, name: _flip(ctx, name, digits=True), "swap": _swap,
            "delete": _delete, "add": _add, "duplicate": _duplicate_random}
FILE_COMMANDS = {"record": ("record.json", RECORD_COMMANDS),
                 "summary": ("summary.json", ("verify",)),
                 "plan": ("plan.json", PLAN_COMMANDS)}
for _target, _counts in RANDOM.items():
    if _target not in FILE_COMMANDS:
        continue
    _file, _commands = FILE_COMMANDS[_target]
    for _mutation, _count in _counts.items():
        for _index in range(_count):
            case(f"random-{_target}-{_mutation}-{_index}", _commands)(
                lambda ctx, m=MUTATORS[_mutation], f=_file: m(ctx, f))


#: For each plan key, values of a JSON type its schema refuses, or out of range.
WRONG_INT = ['"12"', "12.5", "true", "null", "[12]", '{"n": 12}', "0", "-3", "10000000"]
WRONG_FLOAT = ['"0.5"', "true", "null", "[0.5]", '{"x": 0.5}', "-1.0", "1e300"]
WRONG_STR = ["5", "true", "null", "[1]", '{"a": 1}']
WRONG_LIST = ["5", '"x"', '{"a": 1}', "null", "true", "[]"]
WRONG_DICT = ["5", '"x"', "[1]", "null", "true"]


def _wrong_values(key: str, value: Any) -> list[str]:
    if isinstance(value, bool):
        return WRONG_STR
    if isinstance(value, int):
        return WRONG_INT
    if isinstance(value, float):
        return WRONG_FLOAT
    if isinstance(value, str):
        return WRONG_STR
    return WRONG_LIST if isinstance(value, list) else WRONG_DICT


def _random_setting(ctx: Ctx) -> None:
    plan = ctx.read("plan.json")
    key = ctx.rng.choice([k for k in plan if k not in ("version", "date", "parent")])
    ctx.settings = [f"{key}={ctx.rng.choice(_wrong_values(key, plan[key]))}"]
    ctx.note = f"--set {ctx.settings[0]}"


for _index in range(RANDOM["set"]):
    case(f"random-set-{_index}", ("freeze",))(_random_setting)


def _random_checkpoint(ctx: Ctx) -> None:
    """Flip bytes of a checkpoint: verify must notice (the recorded sha256 no longer matches),
    and loading the bytes directly must give finite tensors or one clean error."""
    path = ctx.path("seed-4-initial.pt")
    data = bytearray(path.read_bytes())
    for _ in range(ctx.rng.randint(1, 8)):
        data[ctx.rng.randrange(len(data))] = ctx.rng.randrange(256)
    if bytes(data) == path.read_bytes():
        data[0] ^= 0xFF
    ctx.write("seed-4-initial.pt", bytes(data))
    ctx.load, ctx.load_must_fail = (path, None), False


for _index in range(RANDOM["checkpoint"]):
    case(f"random-checkpoint-{_index}", ("verify", "load"))(_random_checkpoint)


# --- the test ----------------------------------------------------------------------------------

@pytest.mark.parametrize("fuzz", CASES, ids=[c.name for c in CASES])
def test_damage_is_refused_cleanly(fuzz: Case, base: Base, tmp_path: Path, capsys) -> None:
    ctx = Ctx(root=tmp_path, rng=random.Random(f"{SEED}-{fuzz.name}"), commands=fuzz.commands)
    shutil.copytree(base.run, ctx.run)
    fuzz.damage(ctx)
    before = _snapshot(tmp_path)
    capsys.readouterr()
    problems = []  # every command runs, so a failure names all that break the promise
    for command in ctx.commands:
        try:
            # Warnings are recorded, not raised as the suite's filter would: outside tests a
            # warning is more lines on stderr, so none may be emitted.
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                if command == "load":
                    _load_directly(ctx)
                else:
                    argv = _argv(command, ctx.run, tmp_path, ctx.settings)
                    code = _alarmed(lambda a=argv: main(a), command)
                    captured = capsys.readouterr()
                    _check_exit(command, code, captured.out, captured.err, ctx, base)
            if caught:
                problems.append(f"{command}: warned {caught[0].category.__name__}: "
                                f"{str(caught[0].message).splitlines()[0][:150]}")
        except (Exception, pytest.fail.Exception) as exc:
            capsys.readouterr()
            text = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
            problems.append(text if isinstance(exc, AssertionError | pytest.fail.Exception)
                            else f"{command}: raised {type(exc).__name__}: {text[:200]}")
        if ctx.marker.exists():
            problems.append(f"{command}: code from a checkpoint ran")
        if _snapshot(tmp_path) != before:
            problems.append(f"{command}: wrote or changed files")
            before = _snapshot(tmp_path)
    if problems:
        pytest.fail((f"[{ctx.note}] " if ctx.note else "") + "; ".join(problems),
                    pytrace=False)
