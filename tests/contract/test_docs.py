"""The manual (``docs/``, built by MkDocs from ``mkdocs.yml``) is tested like code.

* Every fenced block of every page runs, as the README's do (``tests/test_readme.py``: the same parser,
  runner and output comparison; the pages say ``<!-- docs-test: ... -->``).  The blocks of one page run
  in document order in one scratch directory holding a copy of ``data/``.  A block that only shows a
  command's shape is marked ``synopsis`` and its flags are checked against the parser.
* Every decimal number a page's prose quotes is one a run printed: an output the page shows (and
  its block test compares with the real output) or a benchmark results page it includes.
* The generated references cannot miss anything: the CLI reference names every flag, default and
  choice of every parser; the API reference has an entry for every name in ``calengine.__all__``, for
  every public attribute and method of the plugin base classes and for the testing kits' public
  functions, each entry pointing at the very object the name is; the plugin guide has a section for
  every hook and names every attribute and method of the base classes.
* ``benchmarks/results`` holds one page per benchmark, each naming its command, commit and machine,
  none naming a path of the machine it ran on, each included by the Benchmarks page.

The site itself is built (``mkdocs build --strict``) by ``.ci/run``, not here.
"""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import re
from pathlib import Path

import pytest

from contract.test_readme import (  # the README test's mechanism, shared
    _Runner,
    _same_to_shown_digits,
    check_inventory,
    console_session,
    parse_blocks,
    synopsis_problems,
)

REPO = Path(__file__).resolve().parents[2]
DOCS = REPO / "docs"
PAGES = sorted(p for p in DOCS.rglob("*.md"))
RESULTS = REPO / "benchmarks" / "results"


def _module(path: Path, name: str):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _shown(path: Path) -> str:
    return str(path.relative_to(REPO))


# ---------------------------------------------------------------------------------------------------
# every block runs


def _params():
    out = []
    for page in PAGES:
        for b in parse_blocks(page):
            marks = [pytest.mark.slow] if "slow" in b.directives else []
            if "skip" in b.directives:
                marks.append(pytest.mark.skip(reason=f"the page says: {b.directives['skip']}"))
            elif b.kind is None and "output" not in b.directives and "file" not in b.directives:
                continue  # data, or a synopsis (checked below)
            out.append(pytest.param(page, b.line, marks=marks, id=b.id))
    return out


@pytest.fixture(scope="module")
def runners(tmp_path_factory):
    made: dict[Path, _Runner] = {}

    def get(page: Path) -> _Runner:
        if page not in made:
            made[page] = _Runner(page, tmp_path_factory.mktemp(page.stem))
        return made[page]

    return get


@pytest.mark.timeout(3600)  # a block selected alone first runs every block above it
@pytest.mark.parametrize("page, line", _params())
def test_docs_block(runners, page, line):
    runners(page).upto(line)


def test_every_block_is_run_compared_or_marked_for_a_stated_reason():
    blocks = [b for page in PAGES for b in parse_blocks(page)]
    problems = check_inventory(blocks)
    problems += [p for b in blocks if "synopsis" in b.directives for p in synopsis_problems(b)]
    for b in blocks:
        if "readme" in b.directives.get("skip", "").lower():
            problems.append(f"{b.id}: skip reasons on a page speak of the page")
    assert not problems, "\n".join(problems)
    ran = [b for b in blocks if b.kind]
    print(f"\ndocs blocks: {len(blocks)} on {len(PAGES)} pages; {len(ran)} run,"
          f" {len([b for b in blocks if 'synopsis' in b.directives])} synopses,"
          f" {len([b for b in blocks if 'skip' in b.directives])} skipped")
    assert len(ran) >= 40


# ---------------------------------------------------------------------------------------------------
# numbers in prose come from runs

#: a decimal number in prose (0.195, 4.29, 38.4 in "38.4 %"): versions and section numbers are removed first
_DECIMAL = re.compile(r"(?<![\w.\-/])(\d+\.\d+)(?![\d.]\d)")
_NOT_FIGURES = re.compile(
    r"(?:Python|scikit-learn|versions?|format|opset|mlflow-skinny|MLflow|Kubernetes|Keep a Changelog|MkDocs|"
    r"release|calengine|skops|TLS|HTTP)\s+v?\d+(?:\.\d+)+\+?|\bv\d+(?:\.\d+)+|\d+(?:\.\d+){2,}")
_ANY_NUMBER = re.compile(r"[-+]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?")
_SNIPPET = re.compile(r'^\s*--8<--\s+"([^"]+)"\s*$', re.M)


def prose(text: str) -> str:
    """The page without what is not prose: fenced blocks, code spans, comments, formulas, link
    targets and snippet lines."""
    text = re.sub(r"^(\s*)(```+|~~~+).*?^\1\2\s*$", "", text, flags=re.M | re.S)
    text = re.sub(r"<!--.*?-->", "", text, flags=re.S)
    text = re.sub(r"\$\$.*?\$\$", "", text, flags=re.S)
    text = re.sub(r"(?<!\\)\$[^$\n]+\$", "", text)
    text = re.sub(r"``.+?``|`[^`]+`", "", text, flags=re.S)
    text = re.sub(r"\]\([^)]*\)", "]", text)
    text = _SNIPPET.sub("", text)
    return _NOT_FIGURES.sub("", text)


def _section(text: str, name: str) -> str:
    start = re.search(rf"--8<-- \[start:{re.escape(name)}\]", text)
    end = re.search(rf"--8<-- \[end:{re.escape(name)}\]", text)
    assert start and end, f"no section {name!r}"
    return text[start.end():end.start()]


def run_figures(page: Path) -> list[str]:
    """Every number a run printed that ``page`` shows: the output blocks its block tests compare, the
    printed lines of its console sessions, and the benchmark results it includes."""
    blocks = parse_blocks(page)
    named_runs = {b.directives["name"] for b in blocks if "name" in b.directives and "skip" not in b.directives}
    texts = []
    for b in blocks:
        if "output" in b.directives and b.directives["output"] in named_runs:
            texts.append(b.text)
        elif b.kind == "console":
            texts += [out for _, out in console_session(b.text)]
    for target in _SNIPPET.findall(page.read_text(encoding="utf-8")):
        path, _, section = target.partition(":")
        included = (REPO / path).read_text(encoding="utf-8")
        texts.append(_section(included, section) if section else included)
    return [n for t in texts for n in _ANY_NUMBER.findall(t.replace(",", ""))]


def unsourced_numbers(page: Path) -> list[str]:
    figures = run_figures(page)
    out = []
    for number in _DECIMAL.findall(prose(page.read_text(encoding="utf-8"))):
        if not any(_shown_as(number, f) for f in figures):
            out.append(number)
    return out


def _shown_as(shown: str, printed: str) -> bool:
    try:
        return _same_to_shown_digits(shown, printed)
    except Exception:  # noqa: BLE001 - not a number in the same sense
        return False


@pytest.mark.parametrize("page", [p for p in PAGES] + [REPO / "README.md"], ids=_shown)
def test_numbers_in_prose_come_from_runs(page):
    """A figure typed into prose goes stale silently; one that is a run's output shown on the page is
    compared by the block's test, and one in an included results page was written by the benchmark."""
    missing = unsourced_numbers(page)
    assert not missing, (
        f"{_shown(page)}: these numbers are in the prose but in no output the page shows or includes: {missing};"
        " show the run that prints them (a compared output block), include the benchmark results section, or"
        " put a parameter value in `code`")


def test_the_prose_check_catches_a_typed_figure(tmp_path):
    page = tmp_path / "p.md"
    page.write_text("<!-- docs-test: name a -->\n```bash\necho\n```\n\n<!-- docs-test: output a -->\n"
                    "```text\nbrier 0.194826\n```\n\nBrier is 0.195 here, and 0.131 there; `alpha=0.05` is code;"
                    " Python 3.11.\n")
    assert unsourced_numbers(page) == ["0.131"]


# ---------------------------------------------------------------------------------------------------
# the generated references


def _cli_reference():
    return _module(DOCS / "hooks" / "cli_reference.py", "_docs_cli_reference")


def test_cli_reference_names_every_subcommand_flag_default_and_choice():
    import argparse

    from calengine.cli import build_parser

    ref = _cli_reference()
    parser = build_parser()
    page = ref.cli_markdown(parser)
    subs = ref._subparsers(parser)
    assert set(subs) == {"fit", "score", "decide", "evaluate", "cv", "recalibrate", "adapt", "export", "plugins"}
    missing = []
    for name, sub in subs.items():
        section = page[page.index(f"## calengine {name}\n"):]
        section = section[: section.find("\n## ", 1) if "\n## " in section[1:] else len(section)]
        for action in sub._actions:
            for flag in action.option_strings:
                if flag in ("-h", "--help"):
                    continue
                where = page if ref._is_global(action) else section
                if not re.search(rf"`{re.escape(flag)}[ `]", where):
                    missing.append(f"{name} {flag}")
            if not action.option_strings and f"`{action.metavar or action.dest}`" not in section:
                missing.append(f"{name} {action.metavar or action.dest}")
            for choice in action.choices or ():
                if f"`{choice}`" not in section and not isinstance(action, argparse._SubParsersAction):
                    missing.append(f"{name} {action.option_strings} choice {choice}")
            default = ref._default(action)
            if default and default not in section:
                missing.append(f"{name} {action.option_strings} default {default}")
    assert not missing, f"not in the generated CLI reference: {missing}"


def test_the_cli_reference_check_fails_for_a_flag_the_page_leaves_out():
    from calengine.cli import build_parser

    ref = _cli_reference()
    parser = build_parser()
    page = ref.cli_markdown(parser)
    fit = ref._subparsers(parser)["fit"]
    fit.add_argument("--a-new-flag", help="x")
    assert "`--a-new-flag " in ref.cli_markdown(parser) and "`--a-new-flag " not in page


def _mkdocs_config() -> dict:
    import yaml

    return yaml.safe_load((REPO / "mkdocs.yml").read_text(encoding="utf-8"))


def _nav_pages(nav) -> list[str]:
    out = []
    for item in nav:
        if isinstance(item, str):
            out.append(item)
        elif isinstance(item, dict):
            for value in item.values():
                out += _nav_pages(value) if isinstance(value, list) else [value]
    return out


def test_every_page_is_in_the_nav_and_the_generated_ones_are_wired():
    config = _mkdocs_config()
    nav = set(_nav_pages(config["nav"]))
    on_disk = {str(p.relative_to(DOCS)) for p in PAGES}
    generated = {"reference/cli.md"} | {f"gallery/{p.stem}.md" for p in (DOCS / "gallery").glob("*.py")}
    assert on_disk | generated == nav, (sorted(nav - on_disk - generated), sorted(on_disk - nav))
    assert {"docs/hooks/cli_reference.py", "docs/hooks/gallery.py", "docs/hooks/mathml.py"} <= set(config["hooks"])
    assert config["theme"]["font"] is False  # no font download at build or view time


def _directives() -> list[dict]:
    """Every ``::: target`` of the reference pages with its heading and explicit members."""
    out = []
    for page in sorted((DOCS / "reference").glob("*.md")):
        lines = page.read_text(encoding="utf-8").splitlines()
        for i, line in enumerate(lines):
            m = re.match(r"^::: ([\w.]+)\s*$", line)
            if not m:
                continue
            entry = {"page": page.name, "target": m[1], "heading": None, "members": None}
            j = i + 1
            while j < len(lines) and (lines[j].startswith("    ") or not lines[j].strip()):
                text = lines[j].strip()
                if text.startswith("heading:"):
                    entry["heading"] = text.split(":", 1)[1].strip().strip('"')
                if text == "members:":
                    entry["members"] = []
                elif text.startswith("- ") and entry["members"] is not None:
                    entry["members"].append(text[2:].strip())
                if not text and j + 1 < len(lines) and not lines[j + 1].startswith("    "):
                    break
                j += 1
            out.append(entry)
    return out


def _resolve(target: str):
    parts = target.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        for attr in parts[cut:]:
            obj = getattr(obj, attr)
        return obj
    raise ImportError(target)


PLUGIN_BASES = ("Learner", "SklearnLearner", "BoosterLearner", "Calibrator", "Combiner")


def public_members(cls) -> set[str]:
    return {n for n in dir(cls) if not n.startswith("_")}


def test_every_public_name_has_an_api_reference_entry_pointing_at_it():
    import calengine
    import calengine.base
    import calengine.hookspecs
    import calengine.testing
    import calengine.testing.cluster

    entries = _directives()
    by_heading = {e["heading"] or e["target"]: e for e in entries}
    problems = []
    for name in calengine.__all__:
        entry = by_heading.get(f"calengine.{name}")
        if entry is None:
            problems.append(f"calengine.{name}: no entry")
        elif _resolve(entry["target"]) is not getattr(calengine, name):
            problems.append(f"calengine.{name}: its entry documents {entry['target']}, which is another object")
    for cls_name in PLUGIN_BASES:
        entry = by_heading.get(f"calengine.base.{cls_name}")
        if entry is None:
            problems.append(f"calengine.base.{cls_name}: no entry")
            continue
        listed = set(entry["members"] or ())
        for member in sorted(public_members(getattr(calengine.base, cls_name)) - listed):
            problems.append(f"calengine.base.{cls_name}.{member}: not among the entry's members")
    for module in (calengine.testing, calengine.testing.cluster, calengine.hookspecs):
        # A package's faces are its __all__ (calengine.testing re-exports the kit from .checks); a module's
        # are the functions it defines.
        names = getattr(module, "__all__", None) or [
            n for n, obj in vars(module).items() if not n.startswith("_") and inspect.isfunction(obj)
            and obj.__module__ == module.__name__]
        for name in names:
            if f"{module.__name__}.{name}" not in by_heading:
                problems.append(f"{module.__name__}.{name}: no entry")
    for entry in entries:  # and every entry points at something that exists
        try:
            _resolve(entry["target"])
        except (ImportError, AttributeError):
            problems.append(f"{entry['page']}: ::: {entry['target']} does not exist")
    assert not problems, "\n".join(problems)


def test_the_plugin_guide_covers_every_hook_and_every_base_class_member():
    import calengine.base
    import calengine.hookspecs

    guide = "\n".join(p.read_text(encoding="utf-8") for p in sorted((DOCS / "plugins").glob("*.md")))
    hooks_page = (DOCS / "plugins" / "hooks.md").read_text(encoding="utf-8")
    problems = []
    for name, obj in vars(calengine.hookspecs).items():
        if inspect.isfunction(obj) and hasattr(obj, "calengine_spec"):
            if not re.search(rf"^## `{name}`", hooks_page, re.M):
                problems.append(f"hook {name}: no '## `{name}`' section in plugins/hooks.md")
    for cls_name in PLUGIN_BASES:
        for member in sorted(public_members(getattr(calengine.base, cls_name))):
            if f"`{member}`" not in guide and f"`{member}(" not in guide:
                problems.append(f"{cls_name}.{member}: not named in the plugin guide")
    assert not problems, "\n".join(problems)


# ---------------------------------------------------------------------------------------------------
# benchmark results: one current page per benchmark


_MACHINE_PATHS = re.compile(r"(?<![\w.])/(?:tmp|work|root|home|Users|var/folders)/")


def test_results_pages_are_one_per_benchmark_and_name_command_commit_and_machine():
    problems = []
    pages = sorted(RESULTS.glob("*.md"))
    benchmarks_page = (DOCS / "benchmarks.md").read_text(encoding="utf-8")
    for page in pages:
        text = page.read_text(encoding="utf-8")
        for word in ("Command", "Commit", "Machine"):
            if not re.search(rf"^\*\*{word}\*\*", text, re.M):
                problems.append(f"{page.name}: no **{word}** line")
        if "--8<-- [start:headline]" not in text:
            problems.append(f"{page.name}: no headline section")
        if f'--8<-- "benchmarks/results/{page.name}:headline"' not in benchmarks_page:
            problems.append(f"{page.name}: not included by docs/benchmarks.md")
        if re.search(r"_s\d+|_merged|_quiet|_half_|_iso\d?\b", page.stem):
            problems.append(f"{page.name}: a run's suffix in the name; a benchmark has one current page")
    for path in sorted(RESULTS.iterdir()):
        if path.suffix in (".md", ".json") and _MACHINE_PATHS.search(path.read_text(encoding="utf-8")):
            problems.append(f"{path.name}: names a path of the machine it ran on")
    assert not problems, "\n".join(problems)


# ---------------------------------------------------------------------------------------------------
# the README is a front page


def test_readme_is_a_front_page_whose_links_into_the_docs_exist():
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    assert len(readme.splitlines()) <= 250
    assert re.search(r"^## Quick start$", readme, re.M)
    links = re.findall(r"\]\((docs/[^)#]+)(?:#[^)]*)?\)", readme)
    assert len(links) >= 8
    for link in links:
        assert (REPO / link).exists(), link
