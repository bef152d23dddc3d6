"""The command line's own surface: one-line usage errors, help on everything, near-miss names."""

import argparse
import json

import pytest

from postlab.cli import COMMANDS, build_parser, main
from postlab.plan.frozen import freeze


def _one_line(capsys, args, prefix):
    """Exit 2 and exactly one stderr line that starts with ``prefix``; return the line."""
    assert main(args) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    err = captured.err
    assert err.count("\n") == 1 and err.endswith("\n"), err
    assert err.startswith(prefix), err
    assert "Traceback" not in err
    return err.rstrip("\n")


def _parsers(parser, path=("postlab",)):
    """Every parser in the tree with the command words that reach it."""
    yield path, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, child in action.choices.items():
                yield from _parsers(child, (*path, name))


# --- one-line usage errors -------------------------------------------------------------------

@pytest.mark.parametrize(("args", "prefix", "needle"), [
    ([], "postlab: ", "missing command; choose one of freeze, plan"),
    (["plan"], "postlab plan: ", "missing command; choose one of diff, check, schema"),
    (["freeze"], "postlab freeze: ", "required: PATH"),
    (["plan", "diff"], "postlab plan diff: ", "required: A, B"),
    (["run"], "postlab run: ", "required: --out-dir"),
    (["run", "--out-dir", "x", "--workers", "many"], "postlab run: ", "--workers"),
    (["report", "--lang", "fr"], "postlab report: ", "--lang fr: unknown; choose one of zh, en"),
    (["exercises", "one"], "postlab exercises: ", "invalid int value"),
    (["verify", "a", "b"], "postlab verify: ", "unrecognized arguments: b"),
])
def test_usage_errors_are_one_line_with_the_usage(capsys, args, prefix, needle):
    line = _one_line(capsys, args, prefix)
    assert needle in line
    # Named once, by the command concerned, with its own usage at the end.
    problem, usage = line.split(" (usage: ", 1)
    assert problem.count("postlab") == 1
    assert usage.startswith(f"{prefix.rstrip(': ')} [-h]") and usage.endswith(")")


def test_usage_errors_never_show_internal_names(capsys):
    for args in ([], ["plan"], ["plan", "nope"], ["nope"], ["report", "--format", "x"]):
        line = _one_line(capsys, args, "postlab")
        for internal in ("plan_command", "argument command", "format_", "dest"):
            assert internal not in line, line


@pytest.mark.parametrize("args", [
    ["verify", "a", "b\nc"],
    ["report", "--lang", "x\ny"],
    ["ver\nify"],
    ["plan", "di\udcffff"],
])
def test_typed_newlines_and_bad_bytes_stay_on_one_line(capsys, args):
    _one_line(capsys, args, "postlab")


def test_other_user_errors_keep_the_plain_prefix(tmp_path, capsys):
    line = _one_line(capsys, ["verify", str(tmp_path / "missing")], "postlab: ")
    assert "usage" not in line


def test_help_and_version_exit_zero(capsys):
    with pytest.raises(SystemExit) as stop:
        main(["--version"])
    assert stop.value.code == 0
    assert capsys.readouterr().out.startswith("postlab ")


# --- help on everything ----------------------------------------------------------------------

def test_every_argument_has_help():
    missing = []
    for path, parser in _parsers(build_parser()):
        for action in parser._actions:
            if isinstance(action, argparse._HelpAction | argparse._VersionAction):
                continue
            if not action.help:
                missing.append(f"{' '.join(path)} {action.option_strings or action.dest}")
            if isinstance(action, argparse._SubParsersAction):
                for choice in action._choices_actions:
                    if not choice.help:
                        missing.append(f"{' '.join(path)} {choice.dest}")
    assert missing == []


def test_version_has_help_too():
    parser = build_parser()
    version = [a for a in parser._actions if isinstance(a, argparse._VersionAction)]
    assert version and version[0].help and "version" in version[0].help


def test_top_level_help_lists_every_command(capsys):
    with pytest.raises(SystemExit):
        main(["--help"])
    out = capsys.readouterr().out
    description = build_parser().description
    assert description is not None
    for name in COMMANDS:
        assert name in description, name
        assert f"\n    {name}" in out, name
    assert "``" not in out


def test_every_command_has_help_output(capsys):
    for path, _parser in _parsers(build_parser()):
        with pytest.raises(SystemExit) as stop:
            main([*path[1:], "--help"])
        assert stop.value.code == 0
        assert capsys.readouterr().out.startswith(f"usage: {' '.join(path)}")


# --- did you mean ----------------------------------------------------------------------------

@pytest.mark.parametrize(("args", "prefix", "needle"), [
    (["verfy"], "postlab: ", "unknown command verfy (did you mean verify?)"),
    (["plan", "chek"], "postlab plan: ", "unknown command chek (did you mean check?)"),
    (["report", "--format", "tabel"], "postlab report: ", "(did you mean table?)"),
    (["report", "--lnag", "en"], "postlab report: ", "--lnag (did you mean --lang?)"),
    (["report", "--contract", "strcit"], "postlab: ",
     "--contract strcit: unknown (did you mean strict?); known: episode-anywhere, "
     "episode-strict, exact, format, per-call, rg-final, rg-score, rg-strict, rg-substring, "
     "strict, substring"),
])
def test_near_misses_name_the_closest(capsys, args, prefix, needle):
    assert needle in _one_line(capsys, args, prefix)


@pytest.mark.parametrize("command", ["run", "reproduce"])
def test_cpu_path_near_miss(tmp_path, capsys, command):
    out = tmp_path / "out"
    line = _one_line(capsys, [command, "--out-dir", str(out), "--cpu-path", "portabel"],
                     "postlab: ")
    assert "--cpu-path portabel: unknown (did you mean portable?); choose one of portable" in line
    assert not out.exists()


def test_unknown_cpu_path_without_a_near_name(tmp_path, capsys):
    line = _one_line(capsys, ["run", "--out-dir", str(tmp_path / "o"), "--cpu-path", "zzz"],
                     "postlab: ")
    assert "did you mean" not in line and "choose one of" in line


def test_set_key_near_miss(tmp_path, capsys):
    old = tmp_path / "v1.json"
    freeze(old)
    capsys.readouterr()
    new = tmp_path / "v2.json"
    line = _one_line(capsys, ["freeze", str(new), "--from", str(old), "--set", "cilp=0.3"],
                     "postlab: ")
    assert "--set cilp: unknown plan key (did you mean clip?); known: " in line
    line = _one_line(capsys, ["freeze", str(new), "--from", str(old), "--set", "qqqq=1"],
                     "postlab: ")
    assert "did you mean" not in line and "unknown plan key" in line
    assert not new.exists()


def test_unknown_command_without_a_near_name(capsys):
    line = _one_line(capsys, ["zzzzzz"], "postlab: ")
    assert "did you mean" not in line
    assert all(name in line for name in COMMANDS)


# --- stage names -----------------------------------------------------------------------------

def test_english_surfaces_call_the_sft_model_sft(capsys):
    assert main(["report", "--lang", "en", "--contract", "exact"]) == 0
    out = capsys.readouterr().out
    assert " initial " not in out
    assert "\n11 SFT       0/19" in out and "\n11 SFT       (no RL contract)" in out
    assert main(["report", "--lang", "en", "--format", "json"]) == 0
    assert json.loads(capsys.readouterr().out)["stages"][0] == "initial"  # the record's key


def test_chinese_text_keeps_the_reference_word(capsys):
    assert main(["report", "--lang", "zh"]) == 0
    assert "\n11 initial   0/19" in capsys.readouterr().out


def _api_calls(function) -> list[str]:
    """The calls of postlab.api functions written in ``function``'s body: ``api.name(...)``,
    or a name it imports from ``postlab.api`` (or a module under it)."""
    import ast
    import inspect
    import textwrap

    tree = ast.parse(textwrap.dedent(inspect.getsource(function)))
    imported = {alias.asname or alias.name for node in ast.walk(tree)
                if isinstance(node, ast.ImportFrom)
                and (node.module or "").startswith("postlab.api") for alias in node.names}
    calls = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name) \
                and func.value.id == "api":
            calls.append(func.attr)
        elif isinstance(func, ast.Name) and func.id in imported:
            calls.append(func.id)
    return calls


def test_every_command_calls_exactly_one_api_function():
    """The command line parses, calls one function of postlab.api and prints: no command
    computes or writes anything itself (``plan`` by its subcommands, ``report`` of a sweep
    by ``compare``)."""
    from postlab.cli import plans
    from postlab.cli.main import COMMANDS

    commands = {name: f for name, f in COMMANDS.items() if name != "plan"}
    commands |= {f"plan {name}": f for name, f in plans.PLAN_COMMANDS.items()}
    counts = {name: _api_calls(function) for name, function in commands.items()}
    assert {name: len(calls) for name, calls in counts.items()} == dict.fromkeys(commands, 1), \
        counts
    # and the check itself can fail: a function with two calls is counted as two
    def two(args):
        from postlab.api.planning import check_plan, diff_plans

        return check_plan(args.a), diff_plans(args.a, args.b)

    assert _api_calls(two) == ["check_plan", "diff_plans"]
