"""The command line: ``postlab freeze | plan | run | reproduce | sweep | verify | report |
plot | compare | samples | export | exercises``.

``parser`` holds every command's options; one module per group of commands (``plans``,
``training``, ``checks``, ``reports``) parses nothing and decides nothing itself: it calls
:mod:`postlab.api` and prints. ``main(argv)`` returns an exit code, so tests call it
in-process. Commands that train or re-evaluate pin the CPU code path before torch loads (see
:mod:`postlab.machine.numerics`).
"""

from postlab.cli.main import COMMANDS, entry, main
from postlab.cli.parser import build_parser, default_lang

__all__ = ["COMMANDS", "build_parser", "default_lang", "entry", "main"]
