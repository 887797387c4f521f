"""The table of what every option of a fit accepts, generated from the constraints at build time.

``mkdocs build`` calls :func:`on_page_markdown`, which replaces the marker ``<!-- options-table -->`` of
``reference/options.md`` with :func:`options_table`: one row per field of
:class:`calengine.plan.options.FitConfig` and :class:`~calengine.plan.options.TableSpec`, with its default
and what it accepts, in the words of the constraint that checks it (``describe_options``), so the page
cannot drift from the checks.  ``tests/plan/test_options.py`` calls :func:`options_table` and checks the
marker is on the page.
"""

from __future__ import annotations

PAGE = "reference/options.md"
MARKER = "<!-- options-table -->"


def options_table() -> str:
    from calengine.plan.options import describe_options

    lines = ["| option | record | default | accepts |", "|---|---|---|---|"]
    for record, name, default, accepts in describe_options():
        lines.append(f"| `{name}` | {record} | `{default}` | {accepts.replace('|', '&#124;')} |")
    return "\n".join(lines)


def on_page_markdown(markdown, page, config, files):  # mkdocs hook
    if page.file.src_uri == PAGE:
        return markdown.replace(MARKER, options_table())
    return markdown
