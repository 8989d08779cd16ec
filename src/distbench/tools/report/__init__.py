"""`distbench report`: a sweep's runs, read back from MLflow, as tables, plots and a verdict.

One idea per module, each importable on its own:

    load.py      MLflow → which runs a sweep names → one flat DataFrame (flat_table)
    tables.py    pure tables: the grid (layout and tokens per step beside the world size),
                 pivots, best per headline metric among comparable runs (figures/fair.py),
                 Pareto front, scaling efficiency, failed runs, prediction errors (headline
                 metrics: the workloads' MetricSpecs, distbench.workloads.metric_catalog)
    views.py     the tables as documents show them: cells, links to runs, markdown, verdicts
    plots.py     matplotlib figures (PNG)
    document.py  the report's sections and their markdown
    html.py      report.html, self-contained (plots as data URIs; templates/report.html.j2)
    publish.py   the files in a folder, then as artifacts `report/` of the sweep's parent run

Runs without a metric (failed runs, gemm/collectives workloads) are kept as rows and skipped by
what needs the metric. Every public name of the modules is re-exported here.

    distbench report --sweep latest --out report/          # the most recent sweep
    distbench report --sweep <parent run id> --format csv --out report/
    distbench report --sweep multirun/2026-11-22/10-00-00   # or its parent run's name, or previous
    distbench report --ui-url http://127.0.0.1:5000     # absolute run links for a sqlite store
    python -c "from distbench.tools.report import *; print(best_per_metric(flat_table(load_runs( \
        'sqlite:///mlflow.db', 'latest').runs)))"
"""

from distbench.tools.report.document import (
    MAX_PRED_HISTORY_ROWS,
    NO_SCALING,
    PRED_ERROR_NOTE,
    Sections,
    build_sections,
    render_markdown,
)
from distbench.tools.report.html import data_uri, render_html
from distbench.tools.report.load import (
    ID_COLUMNS,
    SWEEP_FORMS,
    TAG_COLUMNS,
    Selection,
    Sweeps,
    flat_table,
    index_sweeps,
    load_runs,
    pick_sweep,
    read_sweep_dir,
    sweep_path,
    tag_columns,
)
from distbench.tools.report.plots import (
    PLOTS,
    RANK_MEM,
    plot_cost,
    plot_pareto,
    plot_peak_mem_per_rank,
    plot_pred_error_history,
    plot_scaling,
    plot_throughput_tflops,
)
from distbench.tools.report.publish import (
    REPORT_ARTIFACT_DIR,
    log_report,
    report_note,
    write_csv,
    write_report,
)
from distbench.tools.report.tables import (
    FAIR_KEYS,
    GRID_KEYS,
    PRED_COLUMNS,
    best_per_metric,
    best_rows,
    comparable_groups,
    failed_runs,
    finished,
    grid_table,
    headline_metrics,
    key_labels,
    pareto_front,
    pivot,
    pred_error_history,
    pred_error_summary,
    pred_vs_measured,
    scales,
    scaling_efficiency,
    with_labels,
)
from distbench.tools.report.views import (
    GRID_LABELS,
    Cell,
    TableView,
    constant_line,
    grid_view,
    markdown_table,
    markdown_view,
    run_link,
    table_view,
    ui_base_url,
    verdict_lines,
)

__all__ = [
    "FAIR_KEYS",
    "GRID_KEYS",
    "GRID_LABELS",
    "ID_COLUMNS",
    "MAX_PRED_HISTORY_ROWS",
    "NO_SCALING",
    "PLOTS",
    "PRED_COLUMNS",
    "PRED_ERROR_NOTE",
    "RANK_MEM",
    "REPORT_ARTIFACT_DIR",
    "SWEEP_FORMS",
    "TAG_COLUMNS",
    "Cell",
    "Sections",
    "Selection",
    "Sweeps",
    "TableView",
    "best_per_metric",
    "best_rows",
    "build_sections",
    "comparable_groups",
    "constant_line",
    "data_uri",
    "failed_runs",
    "finished",
    "flat_table",
    "grid_table",
    "grid_view",
    "headline_metrics",
    "index_sweeps",
    "key_labels",
    "load_runs",
    "log_report",
    "markdown_table",
    "markdown_view",
    "pareto_front",
    "pick_sweep",
    "pivot",
    "plot_cost",
    "plot_pareto",
    "plot_peak_mem_per_rank",
    "plot_pred_error_history",
    "plot_scaling",
    "plot_throughput_tflops",
    "pred_error_history",
    "pred_error_summary",
    "pred_vs_measured",
    "read_sweep_dir",
    "render_html",
    "render_markdown",
    "report_note",
    "run_link",
    "scales",
    "scaling_efficiency",
    "sweep_path",
    "table_view",
    "tag_columns",
    "ui_base_url",
    "verdict_lines",
    "with_labels",
    "write_csv",
    "write_report",
]
