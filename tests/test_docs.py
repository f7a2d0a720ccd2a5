"""The documentation a newcomer reads: a short README that links every page, links and anchors that resolve, and
pages that keep up with the template and the settings (every alarm explained, every parameter, output and
variable named)."""

from __future__ import annotations

import re
import subprocess
import unicodedata
from functools import cache
from pathlib import Path
from typing import Any

import pytest
import yaml

from crcr.settings import Settings
from tests.conftest import ROOT

DOCS = ROOT / "docs"
PAGES = sorted(DOCS.glob("*.md"))
# Markdown a reader follows links in: the README, every docs page, the benchmark's and the action's READMEs.
LINKED = [ROOT / "README.md", *PAGES, ROOT / "bench" / "README.md", ROOT / "action" / "README.md"]
LINK = re.compile(r"(?<!!)\[(?:[^\]`]|`[^`]*`)*\]\(([^)\s]+)\)")
FENCE = re.compile(r"^(```|~~~)")


def prose(text: str) -> str:
    """The text outside fenced code blocks (a `#` there is a comment, `[x](y)` is code)."""
    out, fenced = [], False
    for line in text.splitlines():
        if FENCE.match(line):
            fenced = not fenced
            continue
        if not fenced:
            out.append(line)
    return "\n".join(out)


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, markup and punctuation dropped, spaces to hyphens."""
    text = re.sub(r"`([^`]*)`", r"\1", heading.strip())
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", text)
    text = text.lower()
    kept = "".join(
        c for c in text if c in " -_" or unicodedata.category(c)[0] in "LN" or unicodedata.category(c) == "Mn"
    )
    return kept.replace(" ", "-")


@cache
def anchors(path: Path) -> frozenset[str]:
    seen: dict[str, int] = {}
    out = set()
    for line in prose(path.read_text(encoding="utf-8")).splitlines():
        match = re.match(r"^#{1,6} (.+?)\s*#*\s*$", line)
        if not match:
            continue
        base = slug(match.group(1))
        n = seen.get(base, 0)
        seen[base] = n + 1
        out.add(base if n == 0 else f"{base}-{n}")
    return frozenset(out)


def links(path: Path) -> list[str]:
    return LINK.findall(prose(path.read_text(encoding="utf-8")))


def test_the_readme_reads_in_five_minutes_and_links_every_page() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert len(readme.splitlines()) <= 150, "the README is the front door: move detail into docs/"
    for heading in ("## Two commands", "## Architecture", "## Where to go next"):
        assert heading in readme
    assert "make demo" in readme and "make test" in readme
    linked = {target.split("#", 1)[0] for target in links(ROOT / "README.md")}
    missing = [p.relative_to(ROOT).as_posix() for p in PAGES if p.relative_to(ROOT).as_posix() not in linked]
    assert missing == [], f"the README does not link these docs pages: {missing}"


@pytest.mark.parametrize("page", LINKED, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_every_relative_link_and_anchor_resolves(page: Path) -> None:
    broken = []
    for target in links(page):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # https:, mailto:
            continue
        path_part, _, anchor = target.partition("#")
        dest = (page.parent / path_part).resolve() if path_part else page
        if not dest.exists():
            broken.append(f"{target}: no such file")
        elif anchor and (dest.suffix != ".md" or anchor not in anchors(dest)):
            broken.append(f"{target}: no heading with that anchor in {dest.relative_to(ROOT)}")
    assert broken == [], f"{page.relative_to(ROOT)}: {broken}"


def test_slugs_follow_github() -> None:
    """The anchors GitHub gives headings like ours (checked by hand on rendered pages)."""
    assert slug("`crcr hud export`") == "crcr-hud-export"
    assert slug("Dispatch: `POST /repos/{downstream}/dispatches`") == "dispatch-post-reposdownstreamdispatches"
    assert slug("Alarms: what each means and what to do") == "alarms-what-each-means-and-what-to-do"
    assert slug("6. `check_run_writes`: upstream check-run writes per event, `per_job` against `per_repo`") == (
        "6-check_run_writes-upstream-check-run-writes-per-event-per_job-against-per_repo"
    )
    assert slug("The job state machine (per dispatch \u00d7 run_id \u00d7 run_attempt \u00d7 job_name)") == (
        "the-job-state-machine-per-dispatch--run_id--run_attempt--job_name"
    )


@cache
def template() -> dict[str, Any]:
    class Loader(yaml.SafeLoader):
        pass

    def tagged(loader: yaml.SafeLoader, suffix: str, node: yaml.Node) -> Any:
        if isinstance(node, yaml.ScalarNode):
            return loader.construct_scalar(node)
        if isinstance(node, yaml.SequenceNode):
            return loader.construct_sequence(node, deep=True)
        return loader.construct_mapping(node, deep=True)  # type: ignore[arg-type]

    Loader.add_multi_constructor("!", tagged)
    return yaml.load((ROOT / "template.yaml").read_text(encoding="utf-8"), Loader=Loader)


def table_rows(text: str, heading: str) -> list[list[str]]:
    """The body rows of the first table under `heading`, split into cells."""
    section = text.partition(heading)[2].partition("\n## ")[0]
    rows = [line for line in section.splitlines() if line.startswith("|")]
    return [[cell.strip() for cell in row.strip("|").split(" | ")] for row in rows[2:]]


def test_every_alarm_in_the_template_is_explained_once() -> None:
    alarms = {name for name, r in template()["Resources"].items() if r["Type"] == "AWS::CloudWatch::Alarm"}
    assert len(alarms) >= 30
    operations = (DOCS / "operations.md").read_text(encoding="utf-8")
    rows = table_rows(operations, "## Alarms: what each means and what to do")
    named = [row[0].strip("`") for row in rows]
    assert sorted(named) == sorted(alarms), (
        f"unexplained: {sorted(alarms - set(named))}; not in the template: {sorted(set(named) - alarms)}"
    )
    for row in rows:
        assert len(row) == 4 and all(len(cell) > 10 for cell in row[1:]), f"{row[0]}: every column says something"


def test_every_template_parameter_and_output_is_documented() -> None:
    operations = (DOCS / "operations.md").read_text(encoding="utf-8")
    parameters = {row[0].strip("`") for row in table_rows(operations, "**Parameters.**")}
    assert parameters == set(template()["Parameters"]), "docs/operations.md's parameter table and template.yaml"
    outputs = operations.partition("**Outputs.**")[2].partition("\n\n")[0]
    missing = [name for name in template()["Outputs"] if f"`{name}`" not in outputs]
    assert missing == [], f"outputs not named in docs/operations.md: {missing}"


def test_every_setting_is_documented() -> None:
    configuration = (DOCS / "configuration.md").read_text(encoding="utf-8")
    missing = [f"CRCR_{name.upper()}" for name in Settings.model_fields if f"CRCR_{name.upper()}" not in configuration]
    assert missing == [], f"variables not in docs/configuration.md: {missing}"


BRIEF = r"\bDESI" + r"GN\b"  # the design brief the project was built from, which users never receive


def test_no_file_cites_a_document_outside_the_repository() -> None:
    """A user clones the repository alone: every reference points inside it (docs/contracts.md and the rest), and
    the workflow `crcr onboard` writes into downstream repositories cites nothing a downstream cannot open."""
    tracked = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True).stdout.split()
    citing = [
        name
        for name in tracked
        if (ROOT / name).is_file() and re.search(BRIEF, (ROOT / name).read_text(errors="ignore"))
    ]
    assert citing == []
