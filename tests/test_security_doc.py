"""docs/security.md cites tests by pytest node id: every one must exist, so the threat model can never point at a
test that was renamed or removed, and every threat names its tests (or says why it has none)."""

from __future__ import annotations

import re
import subprocess
import sys
from functools import cache

from tests.conftest import ROOT

DOC = ROOT / "docs" / "security.md"
# `tests/e2e/test_callback.py::test_name` or `…::TestClass::test_name`, optionally with a parametrize id.
CITED = re.compile(r"`(tests/[\w/]+\.py(?:::\w+)+(?:\[[^\]`]+\])?)`")


def cited() -> list[str]:
    return CITED.findall(DOC.read_text(encoding="utf-8"))


@cache
def collected(files: tuple[str, ...]) -> frozenset[str]:
    """The node ids pytest collects from these files, as `pytest --collect-only -q` prints them."""
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", *files],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return frozenset(line.strip() for line in done.stdout.splitlines() if "::" in line)


def test_every_cited_test_exists() -> None:
    citations = cited()
    assert len(citations) >= 50, "the threat model should cite its tests by node id"
    files = tuple(sorted({c.split("::", 1)[0] for c in citations}))
    missing_files = [f for f in files if not (ROOT / f).is_file()]
    assert missing_files == [], f"docs/security.md cites files that do not exist: {missing_files}"
    ids = collected(files)
    # A parametrised test may be cited by its function (every case) or by one case.
    functions = {node.split("[", 1)[0] for node in ids}
    missing = sorted({c for c in citations if c not in ids and c not in functions})
    assert missing == [], f"docs/security.md cites tests that do not exist: {missing}"


def test_every_threat_names_its_tests_or_says_why_not() -> None:
    text = DOC.read_text(encoding="utf-8")
    sections = re.split(r"^## (?=\d+\. )", text, flags=re.MULTILINE)[1:]
    assert len(sections) == len(re.findall(r"^\| \d+ \| \[", text, flags=re.MULTILINE)) >= 16  # one per table row
    for section in sections:
        title = section.splitlines()[0]
        assert "**Tests.**" in section, f"{title}: no Tests block"
        assert CITED.search(section) or "not tested" in section, f"{title}: cites no test and says none is missing"
        for part in ("**The attack", "**What stops it", "**Residual risk"):
            assert part in section, f"{title}: no {part}**"


def test_the_readme_and_the_testing_page_link_the_threat_model() -> None:
    """A newcomer meets the threat model in the README's opening lines and where the tests are described."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    top = readme.partition("## Two commands")[0]
    assert "](docs/security.md)" in top
    testing = (ROOT / "docs" / "testing.md").read_text(encoding="utf-8")
    tests = testing.partition("## Tests")[2].partition("\n## ")[0]
    assert "](security.md)" in tests and "tests/test_security_doc.py" in tests
