"""A griffe extension for the API reference: calengine's docstrings as Markdown.

calengine's docstrings are written for Sphinx habits, which mkdocstrings does not read:

* an attribute is documented by ``#:`` comment lines right above it (``Calibrator.multiclass``,
  ``BoosterLearner.library``, ...): they become the attribute's docstring;
* cross-references are reST roles (``:func:`calengine.fit_table```, ``:class:`~calengine.base.Learner```):
  they become code spans (with ``~``, the last component only);
* a paragraph ending in ``::`` introduces an indented literal block: the ``::`` becomes ``:`` (the
  indented block already reads as code in Markdown).
"""

from __future__ import annotations

import re
from pathlib import Path

import griffe

_ROLE = re.compile(r":(?:py:)?(?:func|class|meth|mod|attr|data|exc|obj|const):`(~?)([^`]+)`")
_LITERAL = re.compile(r"::\n(\s*\n)", re.M)


def _role(match: re.Match) -> str:
    tilde, target = match.groups()
    target = target.strip()
    if "<" in target and target.endswith(">"):  # :class:`text <target>`
        target = target[: target.index("<")].strip()
    if tilde:
        target = target.split(".")[-1]
    return f"`{target}`"


def markdown_docstring(text: str) -> str:
    """A Sphinx-flavoured docstring as Markdown (see the module docstring)."""
    text = _ROLE.sub(_role, text)
    return _LITERAL.sub(r":\n\1", text)


def _comment_above(attr: griffe.Attribute) -> str | None:
    """The ``#:`` lines right above ``attr``'s assignment, without the markers."""
    path = attr.filepath
    if not isinstance(path, Path) or attr.lineno is None:
        return None
    lines = path.read_text(encoding="utf-8").splitlines()
    found = []
    i = attr.lineno - 2
    while i >= 0 and lines[i].strip().startswith("#:"):
        found.append(lines[i].strip()[2:].removeprefix(" "))
        i -= 1
    return "\n".join(reversed(found)) if found else None


class CalengineDocstrings(griffe.Extension):
    def on_attribute_instance(self, *, node, attr: griffe.Attribute, agent, **kwargs) -> None:
        if attr.docstring is None:
            text = _comment_above(attr)
            if text:
                attr.docstring = griffe.Docstring(text, parent=attr)

    def on_package(self, *, pkg: griffe.Module, loader, **kwargs) -> None:
        seen: set[int] = set()

        def walk(obj) -> None:
            if id(obj) in seen or obj.is_alias:
                return
            seen.add(id(obj))
            if obj.docstring is not None:
                obj.docstring.value = markdown_docstring(obj.docstring.value)
            for member in obj.members.values():
                if not member.is_alias:
                    walk(member)

        walk(pkg)
