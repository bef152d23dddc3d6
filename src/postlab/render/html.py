"""One self-contained HTML page: tables and figures embedded, nothing loaded from elsewhere."""

from __future__ import annotations

import base64
import html

from postlab.analysis.aggregate import Analysis
from postlab.render.figures import Figure
from postlab.render.labels import LABELS
from postlab.render.tables import Table, build_tables

STYLE = """
body { font-family: system-ui, sans-serif; margin: 2em auto; max-width: 72em; color: #222; }
table { border-collapse: collapse; margin: 0.5em 0 1.5em; font-size: 0.9em; }
th, td { border: 1px solid #ccc; padding: 0.25em 0.6em; text-align: left; }
th { background: #f2f2f2; }
figure { margin: 1em 0; }
figcaption { font-size: 0.9em; color: #555; }
img { max-width: 100%; }
.note { color: #555; font-size: 0.9em; }
"""


def page_start(lang: str, title: str) -> list[str]:
    """The page's head (inline style only) and its title heading."""
    esc = html.escape
    return [f'<!DOCTYPE html>\n<html lang="{lang}"><head><meta charset="utf-8">',
            f"<title>{esc(title)}</title><style>{STYLE}</style></head><body>",
            f"<h1>{esc(title)}</h1>"]


def table_html(table: Table) -> str:
    """One table with its heading; every cell escaped."""
    esc = html.escape
    head = "".join(f"<th>{esc(c)}</th>" for c in table.columns)
    body = "\n".join("<tr>" + "".join(f"<td>{esc(c)}</td>" for c in row) + "</tr>"
                     for row in table.rows)
    return (f"<h2>{esc(table.title)}</h2><table><thead><tr>{head}</tr></thead><tbody>\n"
            f"{body}\n</tbody></table>")


def figure_html(figure: Figure) -> str:
    """One figure embedded as a PNG data URL, so the page loads nothing from elsewhere."""
    esc = html.escape
    data = base64.b64encode(figure.png).decode()
    return (f'<figure><img alt="{esc(figure.title)}" src="data:image/png;base64,{data}">'
            f"<figcaption>{esc(figure.title)}</figcaption></figure>")


def render_html(analysis: Analysis, figures: list[Figure], lang: str,
                split: str = "test") -> str:
    words = LABELS[lang]
    esc = html.escape
    parts = [*page_start(lang, words["title"]),
             f"<p>{esc(words['plan_sha256'])}: <code>{esc(analysis.plan_sha256)}</code> · "
             f"{esc(words['seeds'])}: {esc(', '.join(map(str, analysis.seeds)))}</p>",
             f"<p class=\"note\">{esc(words['reading'])}</p>"]
    parts += [table_html(table) for table in build_tables(analysis, lang, split)]
    parts.append(f"<h2>{esc(words['figures'])}</h2>")
    parts += [figure_html(figure) for figure in figures]
    method = words["interval_method"].format(method=analysis.interval_method)
    parts.append(f'<p class="note">{esc(method)} {esc(analysis.band_method)}.</p>'
                 "</body></html>\n")
    return "\n".join(parts)
