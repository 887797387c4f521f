"""TeX in the pages, rendered to MathML when the site is built: no script, no font or CDN request.

``pymdownx.arithmatex`` (generic mode) keeps ``$...$`` and ``$$...$$`` away from Markdown and wraps them
in ``<span class="arithmatex">\\(...\\)</span>`` / ``<div class="arithmatex">\\[...\\]</div>``; this hook
replaces each wrapper's TeX with the MathML that ``latex2mathml`` writes, which browsers draw natively.
A formula latex2mathml cannot read fails the build, naming it.
"""

from __future__ import annotations

import html
import re

_INLINE = re.compile(r'<span class="arithmatex">\\\((.*?)\\\)</span>', re.S)
_BLOCK = re.compile(r'<div class="arithmatex">\\\[(.*?)\\\]</div>', re.S)


def _mathml(tex: str, display: str, page) -> str:
    from latex2mathml.converter import convert

    source = html.unescape(tex).strip()
    try:
        return convert(source, display=display)
    except Exception as exc:  # noqa: BLE001 - any converter failure is a broken formula on a page
        raise ValueError(f"{page.file.src_uri}: cannot render the formula {source!r}: {exc}") from exc


def on_page_content(content, page, config, files):  # mkdocs hook
    content = _BLOCK.sub(lambda m: f'<div class="math-display">{_mathml(m[1], "block", page)}</div>', content)
    return _INLINE.sub(lambda m: _mathml(m[1], "inline", page), content)
