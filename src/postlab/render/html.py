"""One self-contained HTML page: tables and figures embedded, nothing loaded from elsewhere.

A run's page opens on what a reader asks first (what was trained, does it verify, what did
it find, what do the answers look like) and keeps the full tables for after the figures.
"""

from __future__ import annotations

import base64
import html
from collections.abc import Sequence
from dataclasses import dataclass, field

from postlab.analysis.results import Analysis
from postlab.analysis.samples import CORRECT, GAMED, WRONG, Example, KindExamples
from postlab.render.figures import Figure
from postlab.render.labels import LABELS, brief, episode_parts, stage_label
from postlab.render.tables import Table, build_tables

STYLE = """
body { font-family: system-ui, sans-serif; margin: 1.5em auto; max-width: 90em;
       padding: 0 1.5em; color: #222; line-height: 1.4; }
h1 { margin-bottom: 0.2em; } h2 { margin-top: 1.4em; }
table { border-collapse: collapse; margin: 0.5em 0 1.5em; font-size: 0.9em; }
th, td { border: 1px solid #ccc; padding: 0.25em 0.6em; text-align: left;
         vertical-align: top; }
th { background: #f2f2f2; }
figure { margin: 0; }
figcaption { font-size: 0.85em; color: #555; margin-top: 0.3em; }
img { max-width: 100%; height: auto; }
.note { color: #555; font-size: 0.9em; }
.screen { display: grid; grid-template-columns: minmax(24em, 1fr) minmax(24em, 1.2fr);
          gap: 1.5em; align-items: start; }
.facts th { width: 8em; }
.badge { padding: 0.6em 0.9em; border-radius: 0.3em; font-weight: 600; }
.pass { background: #e3f4e3; border: 1px solid #7bbf7b; }
.fail { background: #fbe3e3; border: 1px solid #d27a7a; }
.unknown { background: #f2f2f2; border: 1px solid #bbb; }
.findings li { margin-bottom: 0.45em; }
.figures { display: grid; grid-template-columns: repeat(auto-fit, minmax(30em, 1fr));
           gap: 1.5em; }
.wide { grid-column: 1 / -1; }
.answers { display: grid; grid-template-columns: repeat(auto-fit, minmax(22em, 1fr));
           gap: 1em; }
.answers > div { min-width: 0; overflow-x: auto; }
code { background: #f5f5f5; padding: 0 0.2em; }
code .tool { background: #dde7f0; border-radius: 0.2em; padding: 0 0.25em; margin: 0 0.15em; }
.kind-gamed { color: #a33; } .kind-wrong { color: #666; } .kind-correct { color: #276b27; }
"""

#: The order the page shows kinds of answer: the gamed ones are the run's lesson.
PAGE_KINDS = (GAMED, CORRECT, WRONG)
#: Figures drawn across the whole page width (their panels need it).
WIDE_FIGURES = frozenset({"dynamics", "pair_success"})


def page_start(lang: str, title: str) -> list[str]:
    """The page's head (inline style only) and its title heading. A Chinese page carries the
    shipped CJK subset as a web font for its Chinese characters: a browser without a CJK font
    draws postlab's own words with it instead of empty boxes."""
    esc = html.escape
    style = STYLE + (cjk_font_face() if lang == "zh" else "")
    return [f'<!DOCTYPE html>\n<html lang="{lang}"><head><meta charset="utf-8">',
            '<meta name="viewport" content="width=device-width, initial-scale=1">',
            f"<title>{esc(title)}</title><style>{style}</style></head><body>",
            f"<h1>{esc(title)}</h1>"]


def cjk_font_face() -> str:
    """CSS that embeds the shipped CJK subset for the page's Chinese characters."""
    import base64

    from postlab.render.figures import SHIPPED_CJK_FAMILY, shipped_cjk_font

    path = shipped_cjk_font()
    if not path.is_file():
        return ""
    data = base64.b64encode(path.read_bytes()).decode("ascii")
    # first in the list but only for CJK code points (unicode-range), so Latin text keeps the
    # system's font; a character the subset lacks falls through to the system's fonts.
    # (Listed after the generic families, Chromium never reached it.)
    return (f'@font-face {{ font-family: "{SHIPPED_CJK_FAMILY}"; '
            f'src: url(data:font/otf;base64,{data}) format("opentype"); '
            f'unicode-range: U+3000-303F, U+4E00-9FFF, U+FF00-FFEF; }}\n'
            f'body {{ font-family: "{SHIPPED_CJK_FAMILY}", system-ui, sans-serif; }}\n')


def table_html(table: Table, heading: str = "h2", css: str = "") -> str:
    """One table with its heading; every cell escaped."""
    esc = html.escape
    head = "".join(f"<th>{esc(c)}</th>" for c in table.columns)
    body = "\n".join("<tr>" + "".join(f"<td>{esc(c)}</td>" for c in row) + "</tr>"
                     for row in table.rows)
    klass = f' class="{css}"' if css else ""
    return (f"<{heading}>{esc(table.title)}</{heading}><table{klass}><thead><tr>{head}</tr>"
            f"</thead><tbody>\n{body}\n</tbody></table>")


def figure_html(figure: Figure, wide: bool = False) -> str:
    """One figure embedded as a PNG data URL, so the page loads nothing from elsewhere."""
    esc = html.escape
    data = base64.b64encode(figure.png).decode()
    caption = esc(figure.title) + (f" — {esc(figure.caption)}" if figure.caption else "")
    klass = ' class="wide"' if wide else ""
    return (f'<figure{klass} data-figure="{esc(figure.name)}"><img alt="{esc(figure.title)}" '
            f'src="data:image/png;base64,{data}"><figcaption>{caption}</figcaption></figure>')


@dataclass(frozen=True, kw_only=True)
class FirstScreen:
    """What the page shows before any table: facts, verification, findings, answers."""

    facts: Sequence[tuple[str, str]] = ()
    verification: str = ""
    verified: bool | None = None
    findings: Sequence[str] = ()
    answers: Sequence[KindExamples] = ()
    notices: Sequence[str] = field(default_factory=tuple)


def _episode_html(text: str) -> str:
    """An answer's text; an agent episode's tool outputs set apart (a shaded span titled
    as the tool's), so the policy's own turns read on their own."""
    return "".join(html.escape(part) if written else
                   f'<span class="tool" title="tool output">{html.escape(part)}</span>'
                   for part, written in episode_parts(text))


def _answer(example: Example, lang: str) -> str:
    esc = html.escape
    words = LABELS[lang]
    ending = "" if example.terminated else f" <span class=\"note\">{esc(words['no_eos'])}</span>"
    accepted = ", ".join(example.accepted) or "—"
    return (f"<tr><td><code title=\"{esc(example.prompt)}\">{esc(brief(example.prompt))}</code>"
            f"</td><td><code>{_episode_html(example.text)}"
            f"</code>{ending}</td><td>{esc(str(example.expected))}</td><td>{esc(accepted)}</td>"
            f"<td>{example.count}</td></tr>")


def _answers_html(answers: Sequence[KindExamples], lang: str, split: str) -> str:
    esc = html.escape
    words = LABELS[lang]
    stages = list(dict.fromkeys(a.stage for a in answers))
    blocks = []
    for stage in stages:
        rows = []
        for kind in PAGE_KINDS:
            found = next((a for a in answers if (a.stage, a.kind) == (stage, kind)), None)
            if found is None:
                continue
            rows.append(f'<tr><th colspan="5" class="kind-{kind}">'
                        f"{esc(words['kind_' + kind])}: {found.count} / {found.total}</th></tr>")
            rows += [_answer(example, lang) for example in found.examples]
        head = "".join(f"<th>{esc(words[c])}</th>" for c in
                       ("question", "answer", "expected", "accepted_by", "times"))
        blocks.append(f"<div><h3>{esc(stage_label(stage, lang))}</h3><table><thead><tr>{head}"
                      f"</tr></thead><tbody>{''.join(rows)}</tbody></table></div>")
    return (f"<h2>{esc(words['answers'].format(split=split))}</h2>"
            f"<p class=\"note\">{esc(words['answers_note'])}</p>"
            f"<div class=\"answers\">{''.join(blocks)}</div>")


def _first_screen(screen: FirstScreen, lang: str, split: str) -> list[str]:
    from postlab.render.overview import OVERVIEW_WORDS

    esc = html.escape
    words = OVERVIEW_WORDS[lang]
    facts = "".join(f"<tr><th>{esc(k)}</th><td>{esc(v)}</td></tr>" for k, v in screen.facts)
    state = {True: "pass", False: "fail", None: "unknown"}[screen.verified]
    findings = "".join(f"<li>{esc(s)}</li>" for s in screen.findings)
    parts = ['<section class="screen" id="summary">',
             f'<div><h2>{esc(words["heading"])}</h2><table class="facts">{facts}</table></div>',
             f'<div><h2>{esc(words["verification"])}</h2>'
             f'<p class="badge {state}" id="verification">{esc(screen.verification)}</p>',
             f'<h2>{esc(words["findings"])}</h2><ul class="findings" id="findings">{findings}'
             "</ul></div></section>"]
    if screen.answers:
        parts.append(f'<section id="answers">{_answers_html(screen.answers, lang, split)}'
                     "</section>")
    return parts


def render_html(analysis: Analysis, figures: list[Figure], lang: str,
                split: str = "test", screen: FirstScreen | None = None) -> str:
    words = LABELS[lang]
    esc = html.escape
    parts = [*page_start(lang, words["title"]),
             f"<p>{esc(words['plan_sha256'])}: <code>{esc(analysis.plan_sha256)}</code> · "
             f"{esc(words['seeds'])}: {esc(', '.join(map(str, analysis.seeds)))}</p>"]
    if screen is not None:
        parts += [f'<p class="note">{esc(notice)}</p>' for notice in screen.notices]
        parts += _first_screen(screen, lang, split)
    tables = build_tables(analysis, lang, split)
    if analysis.verdicts:
        parts.append(table_html(tables.pop(0)))
    parts.append(f"<h2>{esc(words['figures'])}</h2>")
    by_name = {figure.name: figure for figure in figures}
    heatmap = by_name.pop("pair_success", None)
    if heatmap is not None:
        parts.append(f'<div class="figures">{figure_html(heatmap, wide=True)}</div>')
    parts.append('<div class="figures">' + "".join(
        figure_html(figure, wide=figure.name in WIDE_FIGURES)
        for figure in by_name.values()) + "</div>")
    parts.append(f"<h2>{esc(words['details'])}</h2>")
    parts.append(f"<p class=\"note\">{esc(words['reading'])}</p>")
    parts += [table_html(table, "h3") for table in tables]
    method = words["interval_method"].format(method=analysis.interval_method)
    parts.append(f'<p class="note" id="methods">{esc(method)} {esc(analysis.band_method)}.</p>'
                 "</body></html>\n")
    return "\n".join(parts)
