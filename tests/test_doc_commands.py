"""Every shell command shown in README.md, docs/*.md and bench/README.md works as written, short of running a
deploy: each block is valid shell; `make` targets and variables exist in the Makefile; `crcr` commands parse
with the real command line (every subcommand, flag, choice and required argument); scripts exist and take the
flags shown; Python given inline compiles; `aws` commands name real operations and parameters (botocore's own
service models); files of the repository named in a command exist. A program the test does not know fails it,
so a new kind of command gets a check here before it reaches the docs. docs/local-stack.md also runs for real on a
local stack, its `crcr local`, `crcr send` and `crcr follow` commands included (tests/e2e/test_local_stack_doc.py)."""

from __future__ import annotations

import argparse
import contextlib
import fnmatch
import io
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import botocore.session
import pytest

from crcr.ops import cli
from tests.conftest import ROOT

SOURCES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")), ROOT / "bench" / "README.md"]
SHELL_FENCES = {"sh", "shell", "bash", "console"}
# Programs whose effect the test cannot check without their service, with where else they are checked.
UNCHECKED = {
    "clickhouse-client": "its statement is run by tests/export/test_formats.py in chdb",
    "duckdb": "its statement is run by tests/export/test_formats.py in the duckdb package",
    "curl": "GitHub's manifest conversion, an endpoint the relay may not call",
    "rm": "removes the files the block made",
}
REPO_DIRS = {p.name for p in ROOT.iterdir() if p.is_dir() and not p.name.startswith(".")} - {"build"}
OUTPUT_FLAGS = {"--out", "-out", "--form"}  # what follows is written, not read
# Files the repository makes and git ignores (bench/results.json): named in commands, absent from a fresh clone.
IGNORED = [
    line.strip().rstrip("/")
    for line in (ROOT / ".gitignore").read_text(encoding="utf-8").splitlines()
    if line.strip() and not line.startswith("#")
]


@dataclass(frozen=True)
class Block:
    source: Path
    line: int
    text: str

    def __str__(self) -> str:
        return f"{self.source.relative_to(ROOT)}:{self.line}"


@dataclass(frozen=True)
class Command:
    block: Block
    words: tuple[str, ...]  # after shell parsing; environment assignments left out
    env: tuple[str, ...]
    heredoc: str | None
    synopsis: bool  # `crcr health [--json] [--window-days N]`: a usage line, not a command

    def __str__(self) -> str:
        return f"{self.block}: {shlex.join(self.words)}"


def blocks() -> list[Block]:
    out = []
    for source in SOURCES:
        lines = source.read_text(encoding="utf-8").splitlines()
        i = 0
        while i < len(lines):
            match = re.match(r"^```(\w*)\s*$", lines[i])
            if match:
                end = next(j for j in range(i + 1, len(lines)) if lines[j].startswith("```"))
                if match.group(1) in SHELL_FENCES:
                    out.append(Block(source, i + 1, "\n".join(lines[i + 1 : end]) + "\n"))
                i = end
            i += 1
    return out


def commands(block: Block) -> list[Command]:
    """Logical lines (continuations joined, heredoc bodies kept with their command), split at ; && || |."""
    out: list[Command] = []
    lines = block.text.splitlines()
    i = 0
    while i < len(lines):
        line = lines[i]
        while line.endswith("\\") and i + 1 < len(lines):
            i += 1
            line = line[:-1] + " " + lines[i].lstrip()
        i += 1
        heredoc = None
        marker = re.search(r"<<-?\s*'?(\w+)'?", line)
        if marker:
            body = []
            while lines[i].strip() != marker.group(1):
                body.append(lines[i])
                i += 1
            i += 1
            heredoc = "\n".join(body) + "\n"
            line = line[: marker.start()] + line[marker.end() :]
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        if re.search(r"\[--", line):
            words = shlex.split(re.sub(r"[\[\]]", " ", line.replace("|", ",")), comments=True)
            out.append(Command(block, tuple(words), (), None, synopsis=True))
            continue
        lexer = shlex.shlex(line, posix=True, punctuation_chars=True)
        lexer.whitespace_split = True
        lexer.commenters = "#"
        current: list[str] = []
        for token in [*lexer, ";"]:
            if token in {";", "&&", "||", "|", "&"}:
                if current:
                    out.append(split_env(block, current, heredoc))
                current = []
            else:
                current.append(token)
    return out


def split_env(block: Block, tokens: list[str], heredoc: str | None) -> Command:
    words, redirect_target = [], False
    for token in tokens:
        if redirect_target:
            redirect_target = False
            continue
        if token in {">", ">>", "<", "2>", "2>&1"}:
            redirect_target = token != "2>&1"
            continue
        words.append(token)
    env = []
    while words and re.match(r"^[A-Z_][A-Z0-9_]*=", words[0]):
        env.append(words.pop(0))
    return Command(block, tuple(words), tuple(env), heredoc, synopsis=False)


ALL_BLOCKS = blocks()
ALL_COMMANDS = [c for b in ALL_BLOCKS for c in commands(b)]


def test_the_docs_show_commands() -> None:
    programs = {Path(c.words[0]).name for c in ALL_COMMANDS}
    assert {"make", "crcr", "sam", "aws", "openssl", "python3", "python"} <= programs
    assert len(ALL_COMMANDS) >= 25


@pytest.mark.parametrize("block", ALL_BLOCKS, ids=str)
def test_each_block_is_valid_shell(block: Block) -> None:
    done = subprocess.run(["bash", "-n"], input=block.text, capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr


@pytest.mark.parametrize("command", ALL_COMMANDS, ids=str)
def test_each_command_refers_to_real_things(command: Command) -> None:
    program = Path(command.words[0]).name
    words = command.words[1:]
    inputs = [w for i, w in enumerate(words) if i == 0 or words[i - 1] not in OUTPUT_FLAGS]
    for word in [*inputs, *(e.split("=", 1)[1] for e in command.env)]:
        repo_path(command, word)
    if program == "make":
        check_make(command)
    elif program == "crcr":
        assert command.words[0] in {"crcr", ".venv/bin/crcr"}, "crcr is on PATH in the venv, or .venv/bin/crcr"
        check_crcr(command)
    elif program == "sam":
        check_sam(command)
    elif program in {"python", "python3"}:
        check_python(command)
    elif program == "aws":
        check_aws(command)
    elif program == "openssl":
        check_openssl(command)
    else:
        assert program in UNCHECKED, f"{command}: no check knows {program!r}; add one to {Path(__file__).name}"


def repo_path(command: Command, word: str) -> None:
    """A word naming a path under one of the repository's top-level directories must exist."""
    path = word.removeprefix("file://")
    if "/" in path and path.split("/", 1)[0] in REPO_DIRS and not re.search(r"[<>$*…]", path):
        if any(fnmatch.fnmatch(path, pattern) for pattern in IGNORED):
            return
        assert (ROOT / path).exists(), f"{command}: {path} does not exist"


@cache
def makefile() -> tuple[frozenset[str], frozenset[str]]:
    text = (ROOT / "Makefile").read_text(encoding="utf-8")
    targets = set(re.findall(r"^([A-Za-z][\w-]*)\s*:(?!=)", text, flags=re.MULTILINE))
    variables = set(re.findall(r"^([A-Z][A-Z0-9_]*)\s*[?:]?=", text, flags=re.MULTILINE))
    return frozenset(targets), frozenset(variables)


def check_make(command: Command) -> None:
    targets, variables = makefile()
    args = command.words[1:]
    assert args, f"{command}: name the target"
    for arg in args:
        if "=" in arg:
            assert arg.split("=", 1)[0] in variables, f"{command}: the Makefile sets no {arg.split('=', 1)[0]}"
        else:
            assert arg in targets, f"{command}: the Makefile has no target {arg!r}"


class Parsed(Exception):
    def __init__(self, namespace: argparse.Namespace) -> None:
        super().__init__("parsed")
        self.namespace = namespace


def crcr(argv: list[str]) -> tuple[int | str | None, str]:
    """`crcr argv` up to its argument parsing and no further: (exit code or None when it parsed, output)."""
    parse = argparse.ArgumentParser.parse_args

    def parse_only(self: argparse.ArgumentParser, *args: object, **kwargs: object) -> argparse.Namespace:
        raise Parsed(parse(self, *args, **kwargs))  # type: ignore[arg-type]

    out = io.StringIO()
    with pytest.MonkeyPatch.context() as patch, contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
        patch.setattr(argparse.ArgumentParser, "parse_args", parse_only)
        try:
            cli.main(argv)
        except Parsed:
            return None, out.getvalue()
        except SystemExit as exc:
            return exc.code, out.getvalue()
    raise AssertionError(f"crcr {argv}: main() returned without parsing its arguments")


def check_crcr(command: Command) -> None:
    argv = list(command.words[1:])
    if not command.synopsis:
        code, output = crcr(argv)
        assert code is None, f"{command}: crcr refuses it: {output.strip()}"
        return
    # A usage line: its subcommand exists, and every flag and choice it shows is the command's own.
    words = [w for w in argv if not w.startswith("-")]
    path = []
    for word in words:
        code, _ = crcr([*path, word, "--help"])
        if code != 0:
            break
        path.append(word)
    code, help_text = crcr([*path, "--help"])
    assert code == 0 and path, f"{command}: no such crcr command"
    for flag in (w for w in argv if w.startswith("--")):
        assert re.search(rf"(^|\s|\[){re.escape(flag)}\b", help_text), f"{command}: crcr {' '.join(path)} has no {flag}"
    for choices in re.findall(r"\b(\w+(?:,\w+)+)\b", " ".join(argv)):
        assert "{" + choices + "}" in help_text, f"{command}: crcr {' '.join(path)} offers other choices than {choices}"


@cache
def help_of(*argv: str) -> str:
    done = subprocess.run([*argv, "--help"], cwd=ROOT, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def check_script_flags(command: Command, argv: list[str]) -> None:
    text = help_of(*argv[:2])
    for flag in (w for w in argv[2:] if w.startswith("--")):
        assert re.search(rf"(^|\s|\[){re.escape(flag)}\b", text), f"{command}: {argv[1]} has no {flag}"


def check_python(command: Command) -> None:
    words = list(command.words)
    if words[0].startswith(".venv/"):
        assert words[0] == ".venv/bin/python", f"{command}: the venv's interpreter is .venv/bin/python"
    if words[1:2] == ["-c"]:
        compile(words[2], f"{command.block} (python -c)", "exec")
    elif words[1:2] == ["-m"]:
        assert words[2:3] == ["pytest"], f"{command}: python -m runs pytest in the docs, nothing else"
    elif words[1:2] == ["-"]:
        assert command.heredoc, f"{command}: python reads a script from standard input, and none is given"
        compile(command.heredoc, f"{command.block} (python heredoc)", "exec")
    else:
        script = words[1]
        assert (ROOT / script).is_file(), f"{command}: no script {script}"
        check_script_flags(command, [sys.executable, script, *words[2:]])


def check_sam(command: Command) -> None:
    assert command.words[0] == ".tools-venv/bin/sam", f"{command}: SAM CLI lives in .tools-venv (make build)"
    pins = (ROOT / "infra" / "requirements-tools.txt").read_text(encoding="utf-8")
    assert re.search(r"^aws-sam-cli==", pins, flags=re.MULTILINE), "SAM CLI is pinned for .tools-venv"
    assert command.words[1] in {"build", "deploy", "delete", "validate"}, f"{command}: not a SAM CLI command here"
    sam = ROOT / ".tools-venv" / "bin" / "sam"
    if sam.exists():  # `make test` builds it (template-lint); then the flags are checked against SAM itself
        text = help_of(str(sam), command.words[1])
        for flag in (w for w in command.words[2:] if w.startswith("--")):
            assert flag in text, f"{command}: sam {command.words[1]} has no {flag}"


AWS_GLOBAL_OPTIONS = {"--query", "--output", "--region", "--profile", "--endpoint-url", "--no-cli-pager"}


def check_aws(command: Command) -> None:
    """The service and operation exist in botocore's models, and each option is an input member or global."""
    service, operation, *rest = command.words[1:]
    session = botocore.session.get_session()
    assert service in session.get_available_services(), f"{command}: no AWS service {service!r}"
    model = session.get_service_model(service)
    names = {re.sub(r"(?<!^)(?=[A-Z])", "-", op).lower(): op for op in model.operation_names}
    assert operation in names, f"{command}: {service} has no operation {operation!r}"
    members = model.operation_model(names[operation]).input_shape.members
    options = {re.sub(r"(?<!^)(?=[A-Z])", "-", m).lower() for m in members}
    for flag in (w for w in rest if w.startswith("--")):
        assert flag in AWS_GLOBAL_OPTIONS or flag[2:] in options, f"{command}: {service} {operation} has no {flag}"


def check_openssl(command: Command) -> None:
    """Run it (it only makes a key) where it cannot touch the repository."""
    assert shutil.which("openssl"), "openssl is on PATH"
    with tempfile.TemporaryDirectory() as where:
        done = subprocess.run(list(command.words), cwd=where, capture_output=True, text=True, check=False)
        assert done.returncode == 0, f"{command}: {done.stderr}"
        assert list(Path(where).iterdir()), f"{command}: wrote nothing"


def test_a_wrong_command_is_caught() -> None:
    """The checks refuse what they must: an unknown flag, target, operation or script option."""
    block = Block(ROOT / "README.md", 0, "")

    def cmd(text: str) -> Command:
        return commands(Block(block.source, 0, text + "\n"))[0]

    with pytest.raises(AssertionError, match="refuses"):
        check_crcr(cmd("crcr dlq redrive --dry-run"))  # the DLQ is required
    with pytest.raises(AssertionError, match="refuses"):
        check_crcr(cmd("crcr health --days 3"))
    with pytest.raises(AssertionError, match="has no --csv"):
        check_crcr(cmd("crcr hud export [--csv]"))
    with pytest.raises(AssertionError, match="other choices"):
        check_crcr(cmd("crcr hud export [--format jsonl|xml]"))
    with pytest.raises(AssertionError, match="no target"):
        check_make(cmd("make deploy"))
    with pytest.raises(AssertionError, match="no operation"):
        check_aws(cmd("aws secretsmanager rotate-everything --secret-id x"))
    with pytest.raises(AssertionError, match="has no --name"):
        check_aws(cmd("aws secretsmanager put-secret-value --name x"))
    with pytest.raises(AssertionError, match="has no --fast"):
        check_python(cmd(".venv/bin/python bench/run.py --fast"))
    with pytest.raises(AssertionError, match="does not exist"):
        repo_path(cmd("crcr allowlist check examples/nope.yaml"), "examples/nope.yaml")
    with pytest.raises(SyntaxError):
        check_python(cmd('python3 -c \'import json; print(json.load(open("x"))["id"]\''))
