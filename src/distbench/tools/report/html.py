"""report.html: the report's sections rendered with Jinja from the packaged template
(distbench/tools/templates/report.html.j2), plots embedded as data URIs so that the page is
self-contained: MLflow's artifact viewer shows it in a sandboxed frame where relative image paths
break.

    python -c "from distbench.tools.report.html import data_uri; help(data_uri)"
"""

from __future__ import annotations

import base64
from pathlib import Path
from typing import Any

from distbench.tools.report.document import (
    BEST_MARK_NOTE,
    NO_SCALING,
    PRED_ERROR_NOTE,
    Sections,
)
from distbench.tools.report.views import constant_line, verdict_lines


def data_uri(path: Path) -> str:
    """A PNG as a data: URI, so that the page needs no file beside it."""
    return "data:image/png;base64," + base64.b64encode(Path(path).read_bytes()).decode("ascii")


def _template(name: str) -> Any:
    from jinja2 import Environment, PackageLoader, StrictUndefined, select_autoescape

    env = Environment(
        loader=PackageLoader("distbench.tools", "templates"),
        autoescape=select_autoescape(["html", "j2"]),
        undefined=StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    return env.get_template(name)


def render_html(s: Sections) -> str:
    """The self-contained report page (templates/report.html.j2): plots embedded."""
    return _template("report.html.j2").render(
        title=s.title,
        num_runs=s.num_runs,
        num_finished=s.num_finished,
        verdict=verdict_lines(s.best),
        views=s.views,
        constant=constant_line(s.grid),
        best_mark_note=BEST_MARK_NOTE,
        no_scaling=NO_SCALING,
        pred_error_note=PRED_ERROR_NOTE,
        pred_accuracy=s.pred_accuracy,
        relative_links=s.experiment_id is not None and s.ui_base is None,
        plots=[{"name": p.stem, "src": data_uri(p)} for p in s.plots],
    )
