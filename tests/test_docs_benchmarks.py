"""docs/benchmarks.md and docs/where-to-change-what.md against the tree: every
in-page link lands on a heading, every question section points into the
history, every benchmark script named exists and takes the options its
commands give it, and every file the change guide names exists."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
BENCHMARKS_MD = ROOT / "docs" / "benchmarks.md"
WHERE_MD = ROOT / "docs" / "where-to-change-what.md"
HISTORY = "## History"
UNFILED = "## Newest measurements, not yet filed by question"


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation but '-' and '_' dropped, spaces to '-'."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def headings(text: str) -> list[tuple[int, str, int]]:
    """(level, title, line index) of every heading outside code blocks."""
    out, fenced = [], False
    for i, line in enumerate(text.splitlines()):
        if line.startswith("```"):
            fenced = not fenced
        elif not fenced and (m := re.match(r"(#+) (.*)", line)):
            out.append((len(m.group(1)), m.group(2), i))
    return out


def anchors(text: str) -> set[str]:
    """Every heading's anchor; a repeated heading's gets -1, -2, ... as on GitHub."""
    known, repeats = set(), {}
    for _level, title, _i in headings(text):
        s = slug(title)
        if s in repeats:
            repeats[s] += 1
            known.add(f"{s}-{repeats[s]}")
        else:
            repeats[s] = 0
            known.add(s)
    return known


def links(text: str) -> list[str]:
    return re.findall(r"\]\(#([^)\s]+)\)", text)


def test_every_in_page_link_lands_on_a_heading():
    text = BENCHMARKS_MD.read_text()
    known = anchors(text)
    missing = sorted({a for a in links(text) if a not in known})
    assert not missing, f"docs/benchmarks.md links to no heading: {missing}"


def test_the_history_comes_before_the_unfiled_heading_that_later_sections_follow():
    lines = BENCHMARKS_MD.read_text().splitlines()
    assert HISTORY in lines and UNFILED in lines
    assert lines.index(HISTORY) < lines.index(UNFILED)


def test_every_question_section_points_into_the_history():
    text = BENCHMARKS_MD.read_text()
    lines = text.splitlines()
    heads = headings(text)
    history_at = lines.index(HISTORY)
    history_anchors = {slug(t) for _l, t, i in heads if i > history_at}
    questions = [(lvl, t, i) for lvl, t, i in heads if 0 < i < history_at and lvl >= 2]
    assert len(questions) >= 10
    for n, (level, title, start) in enumerate(questions):
        end = questions[n + 1][2] if n + 1 < len(questions) else history_at
        has_children = n + 1 < len(questions) and questions[n + 1][0] > level
        if has_children:
            continue
        body = "\n".join(lines[start:end])
        assert set(links(body)) & history_anchors, f"section {title!r} links to no part of the history"


def _named_scripts(text: str) -> set[str]:
    return set(re.findall(r"benchmarks/(\w+\.py)", text))


def test_every_benchmark_script_named_in_the_docs_exists():
    named = set()
    for doc in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        named |= _named_scripts(doc.read_text())
    assert "overhead_ladder.py" in named
    missing = sorted(s for s in named if not (ROOT / "benchmarks" / s).is_file())
    assert not missing, f"docs name benchmark scripts that do not exist: {missing}"


def _commands(text: str) -> dict[str, set[str]]:
    """Script -> the long options its `python benchmarks/X.py ...` commands in backticks give it."""
    out: dict[str, set[str]] = {}
    for span in re.findall(r"`([^`]*)`", text):
        m = re.match(r"\s*(?:time\s+)?(?:PYTHONPATH=\S+\s+)?python3?\s+benchmarks/(\w+\.py)(.*)", span, re.S)
        if m:
            out.setdefault(m.group(1), set()).update(re.findall(r"(?<![\w-])(--[a-z][a-z-]*)", m.group(2)))
    return out


def test_the_benchmark_commands_shown_take_the_options_they_give():
    commands = _commands(BENCHMARKS_MD.read_text())
    assert {"overhead_ladder.py", "fleet_scale.py", "fuzz_reader.py"} <= set(commands)
    env = dict(os.environ, PYTHONPATH=str(ROOT / "exporter"))
    for script, options in sorted(commands.items()):
        if not options:
            continue
        r = subprocess.run(
            [sys.executable, str(ROOT / "benchmarks" / script), "--help"],
            capture_output=True,
            text=True,
            env=env,
            timeout=120,
        )
        if r.returncode != 0 and "ModuleNotFoundError" in r.stderr:
            pytest.skip(f"{script} --help needs a module this machine lacks: {r.stderr.strip().splitlines()[-1]}")
        assert r.returncode == 0, f"{script} --help failed: {r.stderr[-500:]}"
        unknown = sorted(o for o in options if o not in r.stdout)
        assert not unknown, f"docs/benchmarks.md gives {script} options its --help does not list: {unknown}"


def _guide_paths(text: str) -> set[str]:
    """Backticked file names in the change guide (a path, or a bare name with a source suffix)."""
    names = set()
    for span in re.findall(r"`([^`\s]+)`", text):
        span = span.rstrip(".,:;")
        if re.search(r"\.(h|cpp|cu|py|c|md|\*)$", span) or ("/" in span and "." in span.rsplit("/", 1)[-1]):
            names.add(span)
    return names


def _exists(name: str) -> bool:
    for base in (ROOT, ROOT / "exporter" / "gpuobs", ROOT / "exporter", ROOT / "tool"):
        if "*" in name:
            if list(base.glob(name)):
                return True
        elif (base / name).exists():
            return True
    return False


def test_every_file_the_change_guide_names_exists():
    names = _guide_paths(WHERE_MD.read_text())
    assert "schemas/gpuobs_schema.h" in names and len(names) > 15
    missing = sorted(n for n in names if not _exists(n))
    assert not missing, f"docs/where-to-change-what.md names files that do not exist: {missing}"
