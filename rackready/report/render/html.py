"""HTML handoff documents (node and rack) rendered from report JSON only.

Page 1 is the decision; plots and the appendix follow. Jinja2 autoescapes every
value and a finalize hook strips control characters from all of them; the only
markup marked safe is the SVG from plots.py, whose text matplotlib escapes.
"""

from __future__ import annotations

from typing import Any

from jinja2 import Environment, PackageLoader, StrictUndefined, select_autoescape
from markupsafe import Markup

from rackready.report import naming
from rackready.report.views import figures, page
from rackready.report.views import rack as rack_view
from rackready.report.views import tables as view_tables


def _finalize(value: Any) -> Any:
    if isinstance(value, Markup):
        return value
    if isinstance(value, str):
        return naming.clean(value)
    return value


def _env() -> Environment:
    env = Environment(loader=PackageLoader("rackready.report", "templates"),
                      autoescape=select_autoescape(default=True, default_for_string=True),
                      undefined=StrictUndefined, trim_blocks=True, lstrip_blocks=True,
                      finalize=_finalize)
    env.filters["value"] = naming.value_text
    env.filters["threshold"] = naming.threshold_text
    env.filters["labels"] = naming.labels_text
    env.filters["when"] = page.fmt_time
    env.filters["clean"] = naming.clean
    env.filters["css_string"] = page.css_string
    return env


def _figures(figs: list[figures.Figure]) -> list[dict[str, Any]]:
    # matplotlib is imported when a figure is drawn, not by every command that imports
    # the reports (a second and more of each `invoke` startup)
    from rackready.report.render import plots

    out = []
    for f in figs:
        svg = plots.render(f)
        if svg:
            out.append({"key": f.key, "title": f.title, "caption": f.caption,
                        "svg": Markup(svg)})
    return out


def inventory_view(inv: dict[str, Any]) -> dict[str, Any]:
    """Split an inventory of unknown shape into key/value rows and tables."""
    scalars: list[tuple[str, Any]] = []
    tables: list[dict[str, Any]] = []

    def walk(prefix: str, obj: dict[str, Any]) -> None:
        for k, v in obj.items():
            key = f"{prefix}{k}"
            if isinstance(v, dict) and v and all(isinstance(x, dict) for x in v.values()):
                # {"0": {...}, "1": {...}} (GPUs by index): one table, the key as a column
                cols: list[str] = ["id"]
                for row in v.values():
                    cols += [c for c in row if c not in cols]
                tables.append({"name": key, "columns": cols,
                               "rows": [[k2, *(row.get(c) for c in cols[1:])]
                                        for k2, row in v.items()]})
            elif isinstance(v, dict):
                if v:
                    walk(f"{key}.", v)
            elif isinstance(v, list) and v and all(isinstance(x, dict) for x in v):
                cols = []
                for row in v:
                    cols += [c for c in row if c not in cols]
                tables.append({"name": key, "columns": cols,
                               "rows": [[row.get(c) for c in cols] for row in v]})
            else:
                scalars.append((key, v))

    walk("", inv)
    return {"scalars": scalars, "tables": tables}


def render_node_html(doc: dict[str, Any]) -> str:
    refs = page.References()
    # Number references in reading order: page 1 first, then the appendix.
    failures = view_tables.failures(doc, refs)
    below = view_tables.failures(doc, refs, "below_expected")
    key = view_tables.key_figures(doc, refs)
    appendix = view_tables.appendix(doc, refs)
    return _env().get_template("node.html.j2").render(
        doc=doc, banners=page.banners(doc), reason=page.outcome_reason(doc),
        identity=page.identity(doc), failures=failures, key_figures=key, below=below,
        limits=naming.limits_line(doc.get("limits")),
        figures=_figures(figures.node_figures(doc)), appendix=appendix,
        references=refs.items(), unjudged=view_tables.unjudged(doc),
        series_counts=view_tables.series_counts(doc), inventory=inventory_view(doc["inventory"]),
        signoff=page.signoff(doc), bmc=page.bmc_view(doc),
        n_fail=sum(1 for v in doc["verdicts"] if v["outcome"] == "fail"),
        n_pass=sum(1 for v in doc["verdicts"] if v["outcome"] == "pass"),
        n_na=sum(1 for v in doc["verdicts"] if v["outcome"] == "not_applicable"),
    )


def render_rack_html(rack: dict[str, Any], node_docs: list[dict[str, Any]]) -> str:
    fig = rack_view.rack_figure(node_docs)
    return _env().get_template("rack.html.j2").render(
        doc=rack, banners=page.banners(rack), reason=rack_view.rack_reason(rack),
        rows=rack_view.rack_rows(rack, node_docs), counts=rack_view.rack_counts(rack),
        figures=_figures([fig] if fig else []), signoff=page.signoff(rack),
        rack_step=rack_view.rack_step(rack),
    )
