"""The documentation site builds with ``mkdocs build --strict``: a broken link, a missing
anchor, a page left out of the navigation or a benchmark table whose data is gone fails here.
The README stays the front door: short, and every page it links exists."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def test_the_site_builds_strictly_with_its_api_reference_and_benchmark_tables(tmp_path):
    pytest.importorskip("mkdocs")
    site = tmp_path / "site"
    import os

    done = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir",
                           str(site)], cwd=ROOT, capture_output=True, text=True,
                          env=dict(os.environ, NO_MKDOCS_2_WARNING="1"))
    assert done.returncode == 0, done.stderr[-3000:]
    api = (site / "api" / "index.html").read_text()
    assert "Evaluate the starting model of every seed" in api  # from a docstring
    history = (site / "getting-started" / "index.html").read_text()
    assert "1,740 passed" in history  # the table made from bench/results/ci.json
    assert "1.78" in (site / "benchmarks" / "trl" / "index.html").read_text()


def test_every_benchmark_has_its_page_and_its_history():
    """Each benchmark script under bench/ has a page under docs/benchmarks/, listed in the
    navigation and the index, whose history table is made from a data file that exists."""
    pages = {"bench_code_paths.py": "code-paths", "bench_engine.py": "engine",
             "bench_ensemble.py": "ensemble-vs-exact",
             "bench_ensemble_pieces.py": "ensemble-pieces",
             "bench_ensemble_scale.py": "ensemble-scale", "bench_estimate.py": "estimate",
             "bench_records.py": "records", "bench_sweep.py": "sweep", "bench_trl.py": "trl",
             "bench_verify.py": "verify", "columnar_vs_oracle.py": "columnar-vs-oracle",
             "interval_coverage.py": "interval-coverage", "stress_exit.py": "stress-exit",
             "bench_kv_cache.py": "kv-cache"}
    # no page of their own: the page of the benchmark they serve says what they are for
    helpers = {"assemble_records.py", "trl_memory.py", "trl_limits.py"}
    assert {p.name for p in (ROOT / "bench").glob("*.py")} == set(pages) | helpers
    nav = (ROOT / "mkdocs.yml").read_text()
    index = (ROOT / "docs" / "benchmarks" / "index.md").read_text()
    for script, slug in pages.items():
        text = (ROOT / "docs" / "benchmarks" / f"{slug}.md").read_text()
        assert f"bench/{script}" in text, slug
        assert f"benchmarks/{slug}.md" in nav and f"]({slug}.md)" in index, slug
        data = re.search(r"^<!-- results: (\S+)", text, re.MULTILINE)
        assert data and (ROOT / data.group(1)).is_file(), slug


def test_a_table_is_made_from_its_data_and_a_missing_field_fails(tmp_path, monkeypatch):
    sys.path.insert(0, str(ROOT / "scripts"))
    try:
        import docs_tables
    finally:
        sys.path.remove(str(ROOT / "scripts"))
    monkeypatch.setattr(docs_tables, "ROOT", tmp_path)
    (tmp_path / "h.json").write_text('[{"date": "2026-12-07", "machine": "m", "x": {"s": 1.5},'
                                     ' "command": "c"}]')
    page = "before\n<!-- results: h.json columns=date,x.s -->\nafter"
    assert docs_tables.on_page_markdown(page) == (
        "before\n| date | x.s |\n| --- | --- |\n| 2026-12-07 | 1.5 |\nafter")
    generic = docs_tables.on_page_markdown("<!-- results: h.json -->")
    assert "| 2026-12-07 | m | `c` | x.s 1.5 |" in generic
    with pytest.raises(KeyError, match=r"no field 'x\.t'"):
        docs_tables.on_page_markdown("<!-- results: h.json columns=x.t -->")


def test_the_readme_is_short_and_its_links_resolve():
    text = (ROOT / "README.md").read_text()
    assert len(text.splitlines()) <= 250
    for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", text):
        if not target.startswith("http"):
            assert (ROOT / target).exists(), target
