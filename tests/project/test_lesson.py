"""The guided lesson (lessons/): ten sections per language, executed as a notebook kernel
would, and the same numbers printed in English and in Chinese."""

import re
import subprocess
import sys
from pathlib import Path

import jupytext  # in the test extra: a missing one fails, the lesson is never skipped
import pytest

LESSONS = Path(__file__).resolve().parents[2] / "lessons"
LANGUAGES = ("en", "zh")
#: A section's heading: "## Answer 3: ..." in English, "## 第 3 题：..." in Chinese.
HEADINGS = {"en": re.compile(r"^## Answer (\d+):"), "zh": re.compile(r"^## 第 (\d+) 题：")}
#: Runs the notebook's code cells in order in one fresh namespace, as a kernel does; any
#: exception fails the process with its traceback naming the cell.
RUNNER = """
import sys

import jupytext

namespace = {"__name__": "__main__"}
for index, cell in enumerate(jupytext.read(sys.argv[1]).cells):
    if cell.cell_type == "code":
        exec(compile(cell.source, f"<cell {index}>", "exec"), namespace)
"""
NUMBER = re.compile(r"-?\d+(?:\.\d+)?")


def lesson(lang: str) -> Path:
    return LESSONS / lang / "lesson.py"


def sections(notebook, lang: str) -> dict[int, list[str]]:
    """Section number -> the cell types under its heading, in order."""
    found: dict[int, list[str]] = {}
    current = None
    for cell in notebook.cells:
        if cell.cell_type == "markdown":
            for line in cell.source.splitlines():
                match = HEADINGS[lang].match(line)
                if match:
                    current = int(match.group(1))
                    found.setdefault(current, [])
        if current is not None:
            found[current].append(cell.cell_type)
    return found


@pytest.mark.parametrize("lang", LANGUAGES)
def test_lesson_has_ten_sections_of_prose_and_code(lang):
    notebook = jupytext.read(lesson(lang))
    assert notebook.metadata["jupytext"]["text_representation"]["format_name"] == "percent"
    found = sections(notebook, lang)
    assert list(found) == list(range(1, 11))
    for number, kinds in found.items():
        assert "markdown" in kinds and "code" in kinds, f"section {number}: {kinds}"


def _printed(tmp_path: Path) -> dict[str, str]:
    """Each lesson executed once in a subprocess, in an empty working directory."""
    out = {}
    for lang in LANGUAGES:
        cwd = tmp_path / f"lesson-{lang}"
        cwd.mkdir()
        done = subprocess.run([sys.executable, "-c", RUNNER, str(lesson(lang))], cwd=cwd,
                              capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, f"lessons/{lang}/lesson.py failed:\n{done.stderr}"
        assert not list(cwd.iterdir()), "the lesson writes only to temporary folders"
        out[lang] = done.stdout
    return out


@pytest.mark.slow
def test_both_lessons_execute_and_print_the_same_numbers(tmp_path):
    """One test, not one per language: the two executions are compared, and a test runner that
    spreads tests over processes would otherwise execute them twice."""
    printed = _printed(tmp_path)
    for lang in LANGUAGES:
        for number in range(1, 11):
            heading = rf"^(answer|第) {number}( 题|:)"
            assert re.search(heading, printed[lang], re.MULTILINE), (lang, number)
    numbers = {lang: NUMBER.findall(text) for lang, text in printed.items()}
    assert len(numbers["en"]) > 100
    assert numbers["en"] == numbers["zh"]
