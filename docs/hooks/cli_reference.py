"""The CLI reference page, generated from the argparse parsers at build time so it cannot drift.

``mkdocs build`` calls :func:`on_files`, which adds ``reference/cli.md`` to the site: one section per
subcommand of :func:`calengine.cli.build_parser` (the parser ``calengine`` itself runs), with its usage
line, its arguments and every option's flags, default, choices and help.  The page is never written
into ``docs/``; ``tests/contract/test_docs.py`` calls :func:`cli_markdown` and checks that every flag,
default and choice of every parser is on it.

Only the standard library and ``calengine.cli`` (which imports only the standard library) are used,
so the tests import this file without MkDocs installed.
"""

from __future__ import annotations

import argparse
import html

PAGE = "reference/cli.md"

INTRO = """\
# Command-line reference

This page is generated from the parsers `calengine` runs (`calengine.cli.build_parser()`) each time the
site is built: every subcommand, argument, flag, default and choice below is the code's own, so it
cannot fall behind. For what the commands are for, start from the [user guide](../guide/index.md); for
exit codes, warnings, limits and run logs see [Conventions](conventions.md).

The global flags (`--version`, `--strict-plugins`, `--io-timeout`, `--progress`, `--quiet`) are accepted
before or after the subcommand: `calengine fit DATA ... --progress`.
"""


def _subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def _help_of(parser: argparse.ArgumentParser) -> dict[str, str]:
    """subcommand -> its one-line help, as ``calengine --help`` lists it."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return {a.dest: a.help or "" for a in action._choices_actions}
    return {}


def _cell(text: str) -> str:
    """Text for a Markdown table cell: HTML-escaped (help text says ``<other>``), pipes and the
    characters Markdown would read as emphasis escaped."""
    text = html.escape(" ".join(str(text).split()), quote=False)
    for ch in "|*_`[]":
        text = text.replace(ch, "\\" + ch)
    return text


def _code(text: str) -> str:
    return f"`{text}`" if "`" not in text else f"`` {text} ``"


def _default(action: argparse.Action) -> str:
    if action.default is argparse.SUPPRESS or action.required:
        return ""
    if isinstance(action, (argparse._StoreTrueAction, argparse._StoreFalseAction)):
        return ""
    if action.default is None:
        return ""
    return _code(repr(action.default) if isinstance(action.default, str) else str(action.default))


def _flags(action: argparse.Action) -> str:
    if not action.option_strings:
        return _code(action.metavar or action.dest)
    metavar = ""
    if action.nargs != 0:
        if action.metavar is not None:
            metavar = action.metavar if isinstance(action.metavar, str) else " ".join(action.metavar)
        elif action.choices is not None:
            metavar = ""
        else:
            metavar = action.dest.upper()
        if action.nargs == "?":
            metavar = f"[{metavar}]"
    return ", ".join(_code(f"{flag} {metavar}".strip()) for flag in action.option_strings)


def _kind(action: argparse.Action) -> str:
    if isinstance(action, argparse._StoreTrueAction):
        return "switch"
    if isinstance(action, argparse._StoreFalseAction):
        return "switch (off)"
    if isinstance(action, argparse._AppendAction):
        return "repeatable"
    if action.nargs == "?":
        return "value optional"
    return ""


def _table(actions: list[argparse.Action], positional: bool) -> list[str]:
    if positional:
        rows = ["| argument | help |", "|---|---|"]
        for a in actions:
            rows.append(f"| {_flags(a)} | {_cell(a.help or '')} |")
        return rows
    rows = ["| option | default | choices | help |", "|---|---|---|---|"]
    for a in actions:
        choices = ", ".join(_code(str(c)) for c in a.choices) if a.choices is not None else ""
        notes = [n for n in (_kind(a), "required" if a.required else "") if n]
        help_text = _cell(a.help or "") + (f" *({', '.join(notes)})*" if notes else "")
        rows.append(f"| {_flags(a)} | {_default(a)} | {choices} | {help_text} |")
    return rows


def _exclusive_groups(parser: argparse.ArgumentParser) -> list[str]:
    out = []
    for group in parser._mutually_exclusive_groups:
        flags = [a.option_strings[0] for a in group._group_actions if a.option_strings]
        if len(flags) > 1:
            out.append(" / ".join(_code(f) for f in flags))
    return out


GLOBAL = {"--version", "--strict-plugins", "--io-timeout", "--progress", "--quiet", "-h", "--help"}


def _is_global(action: argparse.Action) -> bool:
    return bool(action.option_strings) and set(action.option_strings) <= GLOBAL


def command_markdown(name: str, parser: argparse.ArgumentParser, summary: str) -> list[str]:
    lines = [f"## calengine {name}", ""]
    if summary:
        lines += [summary[0].upper() + summary[1:] + ".", ""]
    usage = parser.format_usage().strip()
    usage = usage[len("usage: "):] if usage.startswith("usage: ") else usage
    lines += ["```text", " ".join(usage.split()), "```", ""]
    positional = [a for a in parser._actions if not a.option_strings]
    options = [a for a in parser._actions if a.option_strings and not _is_global(a)]
    if positional:
        lines += ["**Arguments**", "", *_table(positional, True), ""]
    if options:
        lines += ["**Options**", "", *_table(options, False), ""]
    groups = _exclusive_groups(parser)
    groups = [g for g in groups if "--progress" not in g]
    if groups:
        lines += ["Mutually exclusive: " + "; ".join(groups) + ".", ""]
    return lines


def cli_markdown(parser: argparse.ArgumentParser | None = None) -> str:
    """The whole reference page for ``parser`` (default: ``calengine.cli.build_parser()``)."""
    if parser is None:
        from calengine.cli import build_parser

        parser = build_parser()
    lines = [INTRO, "## Global options", ""]
    globals_ = [a for a in parser._actions if a.option_strings and _is_global(a) and "-h" not in a.option_strings]
    lines += [*_table(globals_, False), "", "`--progress` and `--quiet` are mutually exclusive; without either,"
              " progress is shown on a terminal and not when output is piped.", ""]
    summaries = _help_of(parser)
    lines += ["## Commands", "", "| command | what it does |", "|---|---|"]
    for name in _subparsers(parser):
        lines.append(f"| [`calengine {name}`](#calengine-{name}) | {_cell(summaries.get(name, ''))} |")
    lines.append("")
    for name, sub in _subparsers(parser).items():
        lines += command_markdown(name, sub, summaries.get(name, ""))
    return "\n".join(lines) + "\n"


def on_files(files, config):  # mkdocs hook
    from mkdocs.structure.files import File

    files.append(File.generated(config, PAGE, content=cli_markdown()))
    return files
