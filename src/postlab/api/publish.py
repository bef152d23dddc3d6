"""Publishing a folder of files whole: written aside, then renamed into place, so it appears
complete or not at all; and replacing a folder of figures an earlier ``plot`` wrote.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

from postlab import jsonio
from postlab.errors import UserError


@contextlib.contextmanager
def staged_folder(out: Path) -> Iterator[Path]:
    """A folder to write ``out``'s files into, renamed into place when the block ends
    without an error: ``out`` appears complete or not at all, and a failed block leaves
    nothing behind. Files may be written in pieces (an export streams its tables)."""
    parent = out.parent
    if not parent.is_dir():
        raise UserError(f"{out}: folder {parent} does not exist")
    try:
        staging = Path(tempfile.mkdtemp(prefix=f".{out.name}.", suffix=".partial", dir=parent))
    except OSError as exc:
        raise UserError(f"{out}: cannot create: {exc.strerror}") from None
    try:
        yield staging
        staging.chmod(0o755)
        try:
            os.rename(staging, out)  # fails if out appeared meanwhile (and is not empty)
        except OSError as exc:
            raise UserError(f"{out}: cannot create: {exc.strerror}") from None
    finally:
        if staging.exists():
            shutil.rmtree(staging, ignore_errors=True)


def publish_folder(out: Path, files: dict[str, bytes]) -> None:
    """Write a folder of files aside, then rename it into place: all of it or nothing."""
    with staged_folder(out) as staging:
        for name, data in files.items():
            jsonio.publish_bytes(staging / name, data)


def check_only_figures(folder: Path, names: frozenset[str]) -> None:
    """--overwrite replaces only what plot itself writes: a folder of its figure files."""
    if folder.is_symlink() or not folder.is_dir():
        raise UserError(f"{folder}: not a folder of figures; --overwrite replaces only "
                        "figures an earlier 'postlab plot' wrote")
    others = sorted(entry.name for entry in folder.iterdir()
                    if not (entry.is_file() and not entry.is_symlink()
                            and entry.suffix in (".png", ".svg") and entry.stem in names))
    if others:
        more = f" (and {len(others) - 1} more)" if len(others) > 1 else ""
        raise UserError(f"{folder}: holds {others[0]}{more}, which plot did not write; "
                        "--overwrite replaces only figure folders")


def replace_folder(out: Path, files: dict[str, bytes], names: frozenset[str]) -> None:
    """Write the new folder aside, then swap it in. The old one is removed after, file by file
    and only its figures: anything that appeared there meanwhile is kept, and said."""
    try:
        aside = Path(tempfile.mkdtemp(prefix=f".{out.name}.", suffix=".old", dir=out.parent))
    except OSError as exc:
        raise UserError(f"{out}: cannot replace: {exc.strerror}") from None
    aside.rmdir()  # only its unique name is wanted; the old folder is renamed to it
    staged = out.parent / f"{aside.name.removesuffix('.old')}.new"
    publish_folder(staged, files)
    try:
        os.rename(out, aside)
    except OSError as exc:
        remove_figures(staged, frozenset(f.removesuffix(".png").removesuffix(".svg")
                                          for f in files))
        raise UserError(f"{out}: cannot replace: {exc.strerror}") from None
    try:
        os.rename(staged, out)
    except OSError as exc:
        os.rename(aside, out)  # put the earlier figures back
        raise UserError(f"{out}: cannot replace: {exc.strerror}") from None
    if not remove_figures(aside, names):
        print(f"{aside}: files other than figures appeared during the replacement; kept "
              "there", file=sys.stderr)


def remove_figures(folder: Path, names: frozenset[str]) -> bool:
    """Remove a folder's figure files, then the folder if nothing else is left in it."""
    for entry in folder.iterdir():
        figure = entry.suffix in (".png", ".svg") and entry.stem in names
        if entry.is_file() and not entry.is_symlink() and figure:
            entry.unlink()
    try:
        folder.rmdir()
    except OSError:
        return False
    return True
