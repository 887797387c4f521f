"""The Python parameter an error names -> the flag the command line reports it under.

Below :mod:`calengine.cli`, a :class:`~calengine.errors.CalengineError` names the Python parameter it is
about (``max_categories must be at least 1, got 0``) and carries it as ``parameter``.  The CLI writes
the same message under the flag the user typed (``--max-categories must be at least 1, got 0``): the
one mapping is derived from the argparse parsers themselves (each action's ``dest`` is the Python
parameter, its long option string the flag), so a new flag needs no entry here.

The contract for a message below the CLI: it names each parameter it is about by its Python name, as
a word (``max_categories``, ``method='mcgrad'`` for a value given to one), lists them in the error's
``parameter``, and uses those names for nothing else (write "segment over another column", not
"segment by ..." when ``by`` is one of them): the CLI rewrites every whole-word occurrence.  Where a Python
parameter is not its flag's ``dest`` (``learner_params`` is filled by the repeatable
``--learner-param``), :data:`PARAMETER_DEST` says so: that table is the only thing to extend.

Only the standard library is imported (``calengine --help`` imports this package).
"""

from __future__ import annotations

import argparse
import re

#: Python parameter -> the ``dest`` of the argparse action that fills it, where the two differ.  The
#: CLI parses a repeatable ``--x-param K=V`` into the ``x_params`` dict, a comma list into a tuple, ...
PARAMETER_DEST = {
    "learner_params": "learner_param",
    "method_params": "method_param",
    "combiner_params": "combiner_param",
    "text_columns": "text_column",
    "trust": "trust_type",
    "randomized": "randomize",  # conformal's --no-randomize
}


def _flags(parser: argparse.ArgumentParser) -> dict[tuple[str, str], str]:
    """(command, dest) -> long flag of every subcommand of ``parser`` (the CLI's, from
    :func:`calengine.cli.build_parser`), and ("", dest) -> the flag any command spells that dest with
    (the first one met, in ``--help`` order)."""
    found: dict[tuple[str, str], str] = {}

    def walk(parser: argparse.ArgumentParser, command: str) -> None:
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for name, sub in action.choices.items():
                    walk(sub, name)
                continue
            longs = [s for s in action.option_strings if s.startswith("--")]
            if not longs or action.dest in (argparse.SUPPRESS, "help"):
                continue
            flag = longs[0]
            found.setdefault((command, action.dest), flag)
            found.setdefault(("", action.dest), flag)

    walk(parser, "")
    return found


def flag_for(parameter: str, parser: argparse.ArgumentParser, command: str = "") -> str | None:
    """The flag of Python ``parameter`` in ``command`` of ``parser`` (any command's when it has none),
    or None when no flag fills that parameter."""
    dest = PARAMETER_DEST.get(parameter, parameter)
    flags = _flags(parser)
    return flags.get((command, dest)) or flags.get(("", dest))


def cli_message(exc: BaseException, parser: argparse.ArgumentParser, command: str = "") -> str:
    """``exc``'s message as the command line says it: each Python parameter the error carries
    (``exc.parameters``) written as its flag wherever the message names it as a word, and
    ``name='value'`` or ``name=value`` as ``--flag value``.  A name followed by a quoted value
    (``unknown learner 'knn2'``) is the noun, not the parameter, and stays; so does a name right after
    a ``*_params`` parameter (``method_params multiclass=one_vs_rest``): it is a key of that dict."""
    message = str(exc)
    for parameter in getattr(exc, "parameters", ()) or ():
        flag = flag_for(parameter, parser, command)
        if flag is not None:
            message = re.sub(
                # a whole word only, not part of a flag, a path or a longer name
                rf"(?<![\w\-./])(?<!_params )(?<!-param ){re.escape(parameter)}(?:='([^']*)'|=([^\s'=,;:)]+))?(?![\w=]| ')",
                lambda m: flag if m.group(1) is None and m.group(2) is None else f"{flag} {m.group(1) or m.group(2)}",
                message,
            )
    return message
