"""infra/vulture_whitelist.py stays trimmed: each name it keeps is still in the module its line names, so an entry
outliving its code cannot hide the next unused thing of that name."""

from __future__ import annotations

import re

from tests.conftest import ROOT

ENTRY = re.compile(r"^_\.(\w+)  # ([\w/.]+\.py(?:, [\w/.]+\.py)*): \S")


def test_every_whitelisted_name_is_in_the_module_its_line_names() -> None:
    lines = [line for line in (ROOT / "infra" / "vulture_whitelist.py").read_text().splitlines() if line[:2] == "_."]
    assert lines, "no entries read"
    stale = []
    for line in lines:
        entry = ENTRY.match(line)
        assert entry, f"not `_.name  # module.py: who reads it`: {line}"
        name, modules = entry.group(1), entry.group(2).split(", ")
        sources = [(ROOT / "shared" / "crcr" / module).read_text() for module in modules]
        if not all(re.search(rf"\b{re.escape(name)}\b", source) for source in sources):
            stale.append(line)
    assert not stale, "whitelisted names no longer where their line says:\n" + "\n".join(stale)
