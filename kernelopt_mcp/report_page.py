"""A self-contained HTML page for a person to read, and matplotlib figures inlined in it as SVG.

The orchestrator's run report and the suite's report (suite_report.py) are both written with
it. The styles sit in the page (report_page.html) and its Content-Security-Policy stops the
browser from fetching anything or running any script: a page opens offline, and a name a
problem or a kernel chose cannot run in it (every text is escaped, :func:`escape`). Figures are
drawn on their own ``Figure`` (no pyplot: no global state, no display) and saved as SVG text with
their ids salted by the figure's name, so several figures in one page never share an id; text stays
text (``svg.fonttype: none``): the page is smaller and its numbers can be searched and copied.
"""

from __future__ import annotations

import html
import io
import re
from datetime import UTC, datetime
from importlib import resources
from string import Template
from typing import Any

import matplotlib
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from ._version import __version__

__all__ = ["escape", "figure", "inline_svg", "iso_time", "render_page", "svg_text"]


def escape(value: Any) -> str:
    """``value`` as text safe inside HTML (quotes too: it may sit in an attribute)."""
    return html.escape(str(value), quote=True)


def iso_time(timestamp: float) -> str:
    return datetime.fromtimestamp(timestamp, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def render_page(*, title: str, subtitle: str, nav: dict[str, str], sections: str, source: str) -> str:
    """The page: ``title`` and ``subtitle`` (text, escaped here), ``nav`` (section id -> heading, the
    links at the top), ``sections`` (HTML, each ``<section id=...>``) and ``source`` (what it was
    written from, in the footer)."""
    template = Template(resources.files(__package__).joinpath("report_page.html").read_text(encoding="utf-8"))
    return template.substitute(
        title=escape(title), subtitle=escape(subtitle),
        nav=" ".join(f'<a href="#{escape(k)}">{escape(v)}</a>' for k, v in nav.items()),
        sections=sections, version=escape(__version__), source=escape(source),
        generated=iso_time(datetime.now(UTC).timestamp()),
    )


def figure(width_in: float, height_in: float) -> Figure:
    """A figure of its own (its own canvas, no pyplot)."""
    fig = Figure(figsize=(width_in, height_in), dpi=100)
    FigureCanvasAgg(fig)
    return fig


def svg_text(fig: Figure, name: str) -> str:
    """The figure as an ``<svg>`` element (no XML prolog or DOCTYPE), ids salted with ``name``."""
    buffer = io.StringIO()
    with matplotlib.rc_context({"svg.hashsalt": name, "svg.fonttype": "none"}):
        fig.savefig(buffer, format="svg", metadata={"Date": None})
    return inline_svg(buffer.getvalue())


def inline_svg(text: str) -> str:
    """An SVG file's text made fit to sit inside HTML: everything before ``<svg`` dropped.

    Raises:
        ValueError: the text holds no ``<svg`` element.
    """
    start = text.find("<svg")
    if start < 0:
        raise ValueError("not an SVG document (no <svg> element)")
    svg = text[start:]
    # scale down with the page (the viewBox keeps the aspect ratio), never up past the drawn size
    return re.sub(r'<svg([^>]*?) width="([^"]*)" height="[^"]*"',
                  r'<svg\1 class="plot" style="max-width: \2"', svg, count=1)
