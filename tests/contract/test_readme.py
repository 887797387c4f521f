"""Every shell and Python example of the READMEs runs, and prints what the README says it prints.

Each fenced block of ``README.md`` and ``plugins/*/README.md`` tagged ``bash``, ``sh``, ``shell``,
``console`` or ``python`` is a test.  The blocks of one README run in document order in one temporary
directory holding a copy of the repository's ``data/``, with the installed ``calengine`` first on
``PATH``, so a block may use what an earlier one made (a model, a file), as a reader following the
README would.  A ``console`` block is a session: ``$ `` lines (with ``\\`` continuations) are
commands and the lines under them what they print.

What a block is for is said in the README itself, in an HTML comment right before it (invisible on
GitHub), so a new block is tested by default and every exception is visible where it is made::

    <!-- readme-test: skip (why) -->            not run; the reason is required
    <!-- readme-test: name NAME -->             a block whose output another names
    <!-- readme-test: output NAME -->           this block is what block NAME prints (compared)
    <!-- readme-test: without-install -->       drop `python3 -m venv`/`pip install` from the
                                                 command's `&&` chain and `.venv/bin/` prefixes: the
                                                 tests run in an installed environment already
    <!-- readme-test: file PATH -->             write the block to PATH for the blocks after it
    <!-- readme-test: pytest -->                a Python block of test functions: run by pytest
    <!-- readme-test: slow -->                  marks the block's test slow (it still runs in CI)
    <!-- readme-test: synopsis -->              a command's shape with placeholders, not run: every
                                                 ``--flag`` on a ``calengine CMD`` line must be one of
                                                 CMD's options (checked against the parser)

The pages of the manual (``docs/**/*.md``) are tested the same way by ``tests/contract/test_docs.py``,
with ``<!-- docs-test: ... -->`` comments.  Several directives go in one comment, separated by ``;``.  Printed output is compared line by line
after folding white space: a line ``...`` stands for any lines, ``...`` inside a line for any text, and
every number must equal the printed one to the digits the README shows.  Blocks without a tag are
refused when they look like commands; a block of another language (``text``, ``json``, ``toml``) is
data, used only through ``file`` or ``output``.
"""

from __future__ import annotations

import functools
import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
READMES = [REPO / "README.md", *sorted(REPO.glob("plugins/*/README.md"))]
RUNNABLE = {"bash": "shell", "sh": "shell", "shell": "shell", "console": "console", "python": "python"}
DIRECTIVES = {"skip", "name", "output", "without-install", "file", "pytest", "slow", "synopsis"}
#: seconds for one block; the slowest (three Adult commands and a fit) took 52 s on a 2-core machine at load 9
BLOCK_TIMEOUT = 600

_FENCE = re.compile(r"^(?P<indent>\s*)(?P<fence>```+)(?P<lang>[\w+-]*)\s*$")
_DIRECTIVE = re.compile(r"^\s*<!--\s*(?:readme|docs)-test:\s*(?P<body>.*?)\s*-->\s*$")
_COMMAND_LIKE = re.compile(r"^\s*(\$ |calengine |pip |python3? |pytest\b)")


@dataclass
class Block:
    readme: Path
    line: int  # 1-based line of the opening fence
    lang: str
    text: str
    directives: dict = field(default_factory=dict)

    @property
    def id(self) -> str:
        return f"{_shown(self.readme)}:{self.line}"

    @property
    def kind(self) -> str | None:
        """How the block runs: 'shell', 'console', 'python', 'pytest', or None (data, or skipped)."""
        if any(d in self.directives for d in ("skip", "file", "output", "synopsis")):
            return None
        kind = RUNNABLE.get(self.lang)
        return "pytest" if kind == "python" and "pytest" in self.directives else kind


def _shown(path: Path) -> str:
    return str(path.relative_to(REPO)) if path.is_relative_to(REPO) else str(path)


def parse_directives(body: str, where: str) -> dict:
    """``skip (reason); name quickstart`` -> {"skip": "reason", "name": "quickstart"}."""
    out, parts, depth, current = {}, [], 0, ""
    for ch in body:  # split at the ';' outside parentheses: a reason may hold one
        depth += (ch == "(") - (ch == ")")
        if ch == ";" and depth == 0:
            parts.append(current)
            current = ""
        else:
            current += ch
    for part in filter(None, (p.strip() for p in [*parts, current])):
        word, _, arg = part.partition(" ")
        arg = arg.strip()
        if word not in DIRECTIVES:
            raise ValueError(f"{where}: unknown readme-test directive {word!r} (known: {sorted(DIRECTIVES)})")
        if word == "skip" and not re.fullmatch(r"\(.*\S.*\)", arg):
            raise ValueError(f"{where}: 'skip' needs a reason in parentheses: <!-- readme-test: skip (why) -->")
        if word in ("name", "output", "file") and not re.fullmatch(r"[\w./-]+", arg):
            raise ValueError(f"{where}: {word!r} needs one argument, e.g. <!-- readme-test: {word} quickstart -->")
        out[word] = arg[1:-1].strip() if word == "skip" else arg
    return out


def parse_blocks(readme: Path) -> list[Block]:
    """The fenced blocks of ``readme`` with the directives of the comment right above each one.  A
    directive comment that is not right above a block is an error (a misplaced one would silently do
    nothing)."""
    lines = readme.read_text(encoding="utf-8").splitlines()
    blocks, pending, i = [], None, 0
    while i < len(lines):
        where = f"{_shown(readme)}:{i + 1}"
        directive = _DIRECTIVE.match(lines[i])
        opening = _FENCE.match(lines[i])
        if directive:
            if pending is not None:
                raise ValueError(f"{pending[0]}: readme-test comment not followed by a fenced block")
            pending = (where, parse_directives(directive["body"], where))
        elif opening:
            indent, fence = opening["indent"], opening["fence"]
            end = next((j for j in range(i + 1, len(lines)) if lines[j].strip() == fence), None)
            if end is None:
                raise ValueError(f"{where}: unclosed fenced block")
            body = [ln[len(indent):] if ln.startswith(indent) else ln.lstrip() for ln in lines[i + 1:end]]
            blocks.append(Block(readme, i + 1, opening["lang"].lower(), "\n".join(body) + "\n",
                                pending[1] if pending else {}))
            pending, i = None, end
        elif lines[i].strip() and pending is not None:
            raise ValueError(f"{pending[0]}: readme-test comment not followed by a fenced block")
        i += 1
    if pending is not None:
        raise ValueError(f"{pending[0]}: readme-test comment not followed by a fenced block")
    return blocks


def check_inventory(blocks: list[Block]) -> list[str]:
    """What is wrong with the README's blocks as a set: untagged commands, a text block that holds
    commands, names that are missing or repeated."""
    problems = []
    names = [(b.readme, b.directives["name"]) for b in blocks if "name" in b.directives]
    for readme, name in {n for n in names if names.count(n) > 1}:
        problems.append(f"{_shown(readme)}: block name {name!r} is used twice")
    for b in blocks:
        commands = [ln for ln in b.text.splitlines() if _COMMAND_LIKE.match(ln)]
        if b.lang in ("", "text") and commands and not b.directives:
            problems.append(f"{b.id}: {'an untagged' if not b.lang else 'a text'} block holding commands"
                            f" ({commands[0].strip()!r}); tag it ```bash or ```console so it is tested, or mark"
                            " it <!-- readme-test: skip (why) -->")
        if "output" in b.directives and (b.readme, b.directives["output"]) not in names:
            problems.append(f"{b.id}: output of {b.directives['output']!r}, which no block of this README is named")
        if "without-install" in b.directives and RUNNABLE.get(b.lang) != "shell":
            problems.append(f"{b.id}: without-install applies to shell blocks only")
        if "pytest" in b.directives and b.lang != "python":
            problems.append(f"{b.id}: pytest applies to python blocks only")
        if "synopsis" in b.directives and not any(ln.strip().startswith("calengine ") for ln in b.text.splitlines()):
            problems.append(f"{b.id}: a synopsis shows calengine commands (lines starting 'calengine ')")
    return problems


def synopsis_problems(block: Block) -> list[str]:
    """Flags a ``synopsis`` block shows that its command does not have.  A command is a line starting
    ``calengine CMD`` with the indented lines under it; every ``--flag`` on it must be an option of
    CMD's parser (``calengine.cli.build_parser``) or a global one."""
    from calengine.cli import build_parser

    parser = build_parser()
    subs = next(a.choices for a in parser._actions if isinstance(a, __import__("argparse")._SubParsersAction))
    commands: list[str] = []
    for line in block.text.splitlines():
        text = line.strip()
        if text.startswith("calengine "):
            commands.append(text)
        elif commands and text and line[:1].isspace():
            commands[-1] += " " + text
    problems = []
    for command in commands:
        words = command.split()
        sub = subs.get(words[1]) if len(words) > 1 else None
        if sub is None:
            problems.append(f"{block.id}: no subcommand {words[1:2]} in {command!r}")
            continue
        known = {flag for action in sub._actions for flag in action.option_strings}
        for flag in re.findall(r"(?<![\w-])--[a-z][a-z0-9-]*", command):
            if flag not in known:
                problems.append(f"{block.id}: calengine {words[1]} has no option {flag}")
    return problems


# ---------------------------------------------------------------------------------------------------
# comparing printed output with the README's


_NUMBER = r"[-+]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?"
_TOKEN_RE = re.compile(rf"\.\.\.|(?<![\w.]){_NUMBER}(?!\w)")


def _line_pattern(expected: str) -> tuple[re.Pattern, list[str]]:
    """A regex for one expected line (white space folded, ``...`` any text, each number standing
    alone a group; digits inside a word such as ``p_0`` or ``>50K`` are text), and the numbers as the
    README writes them."""
    def literal(chunk: str) -> str:
        return r"\s+".join(re.escape(w) for w in chunk.split(" "))

    text = " ".join(expected.split())
    parts, numbers, pos = [], [], 0
    for m in _TOKEN_RE.finditer(text):
        parts.append(literal(text[pos:m.start()]))
        if m.group(0) == "...":
            parts.append(".*?")
        else:
            parts.append(f"({_NUMBER})")
            numbers.append(m.group(0))
        pos = m.end()
    parts.append(literal(text[pos:]))
    return re.compile("".join(parts)), numbers


def _same_to_shown_digits(shown: str, printed: str) -> bool:
    """``printed`` rounds to ``shown`` at the last digit the README shows (0.1948 vs 0.194826)."""
    s, p = Decimal(shown), Decimal(printed)
    exponent = s.as_tuple().exponent
    return abs(p - s) <= Decimal(5).scaleb(exponent - 1) * (1 + Decimal("1e-12"))


@functools.lru_cache(maxsize=None)
def _line_matches(expected: str, actual: str) -> bool:
    pattern, numbers = _line_pattern(expected)
    m = pattern.fullmatch(" ".join(actual.split()))
    if m is None:
        return False
    return all(_same_to_shown_digits(s, p) for s, p in zip(numbers, m.groups()))


def output_mismatch(expected: str, actual: str) -> str | None:
    """None when ``actual`` shows what ``expected`` says it prints; else where it differs.

    ``expected`` is cut at its ``...`` lines into runs of consecutive lines; the runs must appear in
    order, each as consecutive lines of ``actual``; without a leading (trailing) ``...`` the first
    (last) run must start (end) the output.  Blank lines are ignored on both sides."""
    exp = [ln for ln in expected.splitlines() if ln.strip()]
    act = [ln for ln in actual.splitlines() if ln.strip()]
    runs, run = [], []
    for ln in exp:
        if ln.strip() == "...":
            runs.append(run)
            run = []
        else:
            run.append(ln)
    runs.append(run)
    anchored_start, anchored_end = bool(runs[0]), bool(runs[-1])
    runs = [r for r in runs if r]
    pos = 0
    for k, run in enumerate(runs):
        last = k == len(runs) - 1
        starts = [pos] if (k == 0 and anchored_start) else range(pos, len(act) - len(run) + 1)
        if last and anchored_end:
            starts = [s for s in starts if s == len(act) - len(run)]
        def run_at(start: int) -> bool:
            return all(_line_matches(e, a) for e, a in zip(run, act[start:start + len(run)]))

        found = next((s for s in starts if run_at(s)), None)
        if found is None:
            missing = next((e for e in run if not any(_line_matches(e, a) for a in act[pos:])), None)
            loose = next((s for s in range(pos, len(act) - len(run) + 1) if run_at(s)), None)
            if missing:
                why = f"not printed: {missing.strip()!r}"
            elif loose is None:
                why = "each line is printed, but not as consecutive lines (mark what the README leaves out with ...)"
            elif k == 0 and anchored_start and loose != 0:
                why = "more is printed before these lines (start the block with ... if that is meant)"
            else:
                why = "more is printed after these lines (end the block with ... if that is meant)"
            shown = "\n    ".join(run)
            printed = "\n    ".join(act[pos:pos + 80])
            return f"the README's lines\n    {shown}\ndo not match: {why}; printed:\n    {printed}"
        pos = found + len(run)
    return None


# ---------------------------------------------------------------------------------------------------
# running blocks


def _environment() -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHONPATH", "CALENGINE_"))}
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    env.update(COLUMNS="100", LINES="40", PYTHONUNBUFFERED="1", PYTHONDONTWRITEBYTECODE="1", MPLBACKEND="Agg")
    return env


def _without_install(command: str) -> str:
    """``python3 -m venv .venv && .venv/bin/pip install ... && .venv/bin/calengine fit ...`` ->
    ``calengine fit ...``: the environment the tests run in is that installation already."""
    joined = re.sub(r"\\\n\s*", " ", command)
    kept = []
    for line in joined.splitlines():
        parts = [p.strip() for p in line.split("&&")]
        parts = [p for p in parts if p and not re.match(r"(python3? -m venv|(\S*/)?pip3? install)\b", p)]
        kept.append(" && ".join(p.replace(".venv/bin/", "") for p in parts))
    return "\n".join(kept) + "\n"


def _run(args: list[str], cwd: Path, what: str) -> str:
    proc = subprocess.run(args, cwd=cwd, env=_environment(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          text=True, timeout=BLOCK_TIMEOUT)
    if proc.returncode != 0:
        pytest.fail(f"{what} exited with {proc.returncode}:\n{proc.stdout[-4000:]}", pytrace=False)
    return proc.stdout


def console_session(text: str) -> list[tuple[str, str]]:
    """``$ cmd \\`` / continuation / output lines -> [(command, expected output)]."""
    session, command, output, continued = [], None, [], False
    for line in text.splitlines():
        if continued:
            command += "\n" + line
            continued = line.rstrip().endswith("\\")
        elif line.startswith("$ "):
            if command is not None:
                session.append((command, "\n".join(output)))
            command, output = line[2:], []
            continued = line.rstrip().endswith("\\")
        elif command is None:
            if line.strip():
                raise ValueError(f"console block: output before any '$ ' command: {line!r}")
        else:
            output.append(line)
    if command is not None:
        session.append((command, "\n".join(output)))
    return session


def run_block(block: Block, cwd: Path, outputs: dict) -> None:
    """Run one block in ``cwd``; a named block's output is kept for the block that shows it."""
    kind = block.kind
    if "file" in block.directives:
        target = cwd / block.directives["file"]
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(block.text, encoding="utf-8")
        return
    if kind == "shell":
        script = _without_install(block.text) if "without-install" in block.directives else block.text
        path = cwd / f"_readme_block_{block.line}.sh"
        path.write_text("set -e -o pipefail\n" + script, encoding="utf-8")
        printed = _run(["bash", str(path)], cwd, f"{block.id} (bash)")
    elif kind in ("python", "pytest"):
        path = cwd / f"_readme_block_{block.line}.py"
        if kind == "pytest":
            path = cwd / f"test_readme_block_{block.line}.py"
        path.write_text(block.text, encoding="utf-8")
        args = [sys.executable, str(path)] if kind == "python" else [
            sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--rootdir", str(cwd), str(path)]
        printed = _run(args, cwd, f"{block.id} ({kind})")
    elif kind == "console":
        printed = ""
        for command, expected in console_session(block.text):
            got = _run(["bash", "-e", "-o", "pipefail", "-c", command], cwd, f"{block.id}: $ {command.splitlines()[0]}")
            if expected.strip():
                problem = output_mismatch(expected, got)
                if problem:
                    pytest.fail(f"{block.id}: $ {command.splitlines()[0]}\n{problem}", pytrace=False)
            printed += got
    else:
        return
    if "name" in block.directives:
        outputs[block.directives["name"]] = printed


# ---------------------------------------------------------------------------------------------------
# the tests


def _all_blocks() -> list[Block]:
    return [b for readme in READMES for b in parse_blocks(readme)]


def _params():
    out = []
    for b in _all_blocks():
        marks = [pytest.mark.slow] if "slow" in b.directives else []
        if "skip" in b.directives:
            marks.append(pytest.mark.skip(reason=f"README says: {b.directives['skip']}"))
        elif b.kind is None and "output" not in b.directives and "file" not in b.directives:
            continue  # data: a json/toml/text block used by nothing
        out.append(pytest.param(b.readme, b.line, marks=marks, id=b.id))
    return out


class _Runner:
    """The blocks of one README, run in document order in one directory, each at most once."""

    def __init__(self, readme: Path, cwd: Path):
        self.blocks = parse_blocks(readme)
        self.cwd = cwd
        self.outputs: dict[str, str] = {}
        self.done: dict[int, BaseException | None] = {}
        shutil.copytree(REPO / "data", cwd / "data")

    def upto(self, line: int) -> None:
        """Run every block before ``line`` not run yet (a test selected alone still finds what the
        blocks above it made), then the block at ``line``."""
        for b in self.blocks:
            if b.line > line:
                break
            if b.line in self.done or "skip" in b.directives:
                continue
            try:
                if "output" in b.directives:
                    self._compare(b)
                else:
                    run_block(b, self.cwd, self.outputs)
                self.done[b.line] = None
            except (Exception, pytest.fail.Exception) as exc:  # reported by the block's own test
                self.done[b.line] = exc
        error = self.done.get(line)
        if error is not None:
            raise error

    def _compare(self, b: Block) -> None:
        name = b.directives["output"]
        if name not in self.outputs:
            pytest.fail(f"{b.id}: block {name!r} did not run (see its own test)", pytrace=False)
        problem = output_mismatch(b.text, self.outputs[name])
        if problem:
            pytest.fail(f"{b.id}: output of {name!r}:\n{problem}", pytrace=False)


@pytest.fixture(scope="module")
def runners(tmp_path_factory):
    made: dict[Path, _Runner] = {}

    def get(readme: Path) -> _Runner:
        if readme not in made:
            made[readme] = _Runner(readme, tmp_path_factory.mktemp(readme.parent.name or "readme"))
        return made[readme]

    return get


@pytest.mark.timeout(3600)  # a block selected alone first runs every block above it
@pytest.mark.parametrize("readme, line", _params())
def test_readme_block(runners, readme, line):
    runners(readme).upto(line)


def test_every_block_is_run_or_skipped_for_a_stated_reason():
    """The inventory: blocks run, compared, written as files, skipped (with the README's reasons),
    and nothing that looks like a command left untested by accident."""
    blocks = _all_blocks()
    problems = check_inventory(blocks)
    assert not problems, "\n".join(problems)
    ran = [b for b in blocks if b.kind]
    skipped = [b for b in blocks if "skip" in b.directives]
    compared = [b for b in blocks if "output" in b.directives] + [
        b for b in blocks if b.kind == "console" and any(out.strip() for _, out in console_session(b.text))]
    print(f"\nREADME blocks: {len(blocks)} in {len(READMES)} files; {len(ran)} run, {len(compared)} with printed"
          f" output compared, {len([b for b in blocks if 'file' in b.directives])} written as files,"
          f" {len(skipped)} skipped:")
    for b in skipped:
        print(f"  {b.id}: {b.directives['skip']}")
    # the README is a front page (issue 38): its quick start and first tasks; the manual's many blocks are
    # counted by tests/contract/test_docs.py
    assert len(ran) >= 5 and len(compared) >= 1


# ---------------------------------------------------------------------------------------------------
# the checker checks itself: a README that drifts must fail


def test_synopses_name_only_options_their_commands_have():
    problems = [p for b in _all_blocks() if "synopsis" in b.directives for p in synopsis_problems(b)]
    assert not problems, "\n".join(problems)


def test_output_comparison_catches_a_changed_figure_and_tolerates_only_what_the_readme_elides():
    printed = "fitted ...\nmetric   raw  cal\nbrier  0.194826  0.127508\nauc  0.829330  0.832043\nece  0.1  0.2\n"
    assert output_mismatch("...\nbrier 0.194826 0.127508\nauc 0.829330 0.832043\n...", printed) is None
    assert output_mismatch("...\nbrier 0.1948 0.1275\n...", printed) is None  # to the digits shown
    assert output_mismatch("...\nbrier 0.1949 0.1275\n...", printed)  # 0.194826 is 0.1948
    assert output_mismatch("...\nbrier 0.194826 0.127509\n...", printed)
    assert output_mismatch("...\nbrier 0.194826 0.127508\nece 0.1 0.2\n", printed)  # auc between: not consecutive
    assert output_mismatch("...\nbrier 0.194826 0.127508\n...\nece 0.1 0.2\n", printed) is None
    assert output_mismatch("metric raw cal\n...", printed)  # the first printed line is "fitted ..."
    assert "more is printed after" in output_mismatch("...\nauc 0.829330 0.832043", printed)  # not the last line
    assert "more is printed before" in output_mismatch("metric raw cal\n...", printed)
    assert "not printed: 'auc 0.8293 0.8321'" in output_mismatch("...\nauc 0.8293 0.8321\n...", printed)
    assert output_mismatch("...\nmetric ... cal\n...", printed) is None
    assert output_mismatch("...\np = 4.2e-104\n...", "z\np = 4.2e-104\nx") is None
    assert output_mismatch("...\np = 4.2e-104\n...", "z\np = 4.3e-104\nx")
    assert output_mismatch("...\ndecided 4000 rows -> decided\n...", "a\ndecided 4000 rows -> decided\nb") is None
    assert output_mismatch("...\n1 8 p_0 >50K\n...", "1 8 p_0 >50K") is None


def test_directives_are_parsed_strictly(tmp_path):
    readme = tmp_path / "README.md"
    readme.write_text("<!-- readme-test: name a; slow -->\n```bash\necho hi\n```\n\ntext\n\n"
                      "<!-- readme-test: output a -->\n```text\nhi\n```\n```\ncalengine fit x\n```\n")
    a, out, untagged = parse_blocks(readme)
    assert a.directives == {"name": "a", "slow": ""} and a.kind == "shell" and out.kind is None
    problems = check_inventory([a, out, untagged])
    assert len(problems) == 1 and f"README.md:{untagged.line}: an untagged block holding commands" in problems[0]
    for bad in ("<!-- readme-test: skip -->\n```bash\nx\n```\n",  # no reason
                "<!-- readme-test: skp (x) -->\n```bash\nx\n```\n",  # unknown directive
                "<!-- readme-test: skip (x) -->\n\nsome prose\n```bash\nx\n```\n"):  # not right above
        readme.write_text(bad)
        with pytest.raises(ValueError):
            parse_blocks(readme)
