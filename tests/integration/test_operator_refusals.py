"""Operator commands refuse what cannot work, in one line and a non-zero exit, before doing anything: an App manifest
whose webhook URL GitHub could not deliver to, `keys rotate` given a file and a secret at once, an allowlist that
lists no repository."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest


def crcr(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CRCR_", "AWS_"))}
    return subprocess.run(
        [sys.executable, "-m", "crcr.ops.cli", *args],
        env=env,
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


@pytest.mark.parametrize(
    ("args", "line"),
    [
        (
            ["--webhook-url", "https://crcr.acme.dev"],
            "crcr app-manifest: --webhook-url must end in /webhook, where the relay takes GitHub's deliveries",
        ),
        (
            ["--webhook-url", "https://crcr.acme.dev/callback"],
            "crcr app-manifest: --webhook-url must end in /webhook",
        ),
        (
            ["--webhook-url", "https://crcr.acme.dev/webhook", "--form", "f.html", "--github-url", "github.acme.dev"],
            "crcr app-manifest: --github-url must be GitHub's web URL with its scheme (https://github.com), got "
            "'github.acme.dev'",
        ),
    ],
    ids=["no-path", "callback", "github-url-without-scheme"],
)
def test_app_manifest_refuses_urls_that_cannot_work(tmp_path: Path, args: list[str], line: str) -> None:
    done = crcr(tmp_path, "app-manifest", *args)

    assert done.returncode == 2
    assert done.stdout == ""
    assert done.stderr.startswith(line), done.stderr
    assert len(done.stderr.splitlines()) == 1
    assert not (tmp_path / "f.html").exists()


@pytest.mark.parametrize(
    ("args", "line"),
    [
        (
            ["--secret-arn", "arn:aws:secretsmanager:us-east-1:123456789012:secret:crcr", "--from", "doc.json"],
            "crcr keys rotate: give --secret-arn or --from, not both: --from does nothing with --secret-arn",
        ),
        (
            ["--secret-arn", "arn:aws:secretsmanager:us-east-1:123456789012:secret:crcr", "--out", "new.json"],
            "crcr keys rotate: give --secret-arn or --from, not both: --out does nothing with --secret-arn",
        ),
        (["--out", "new.json"], "crcr keys rotate: --out writes the document read with --from: give --from FILE"),
    ],
    ids=["from-and-arn", "out-and-arn", "out-alone"],
)
def test_keys_rotate_refuses_what_it_would_ignore(tmp_path: Path, args: list[str], line: str) -> None:
    (tmp_path / "doc.json").write_text("{}")

    done = crcr(tmp_path, "keys", "rotate", *args)

    assert done.returncode == 2
    assert done.stdout == ""
    assert done.stderr.startswith(line), done.stderr
    assert len(done.stderr.splitlines()) == 1
    assert not (tmp_path / "new.json").exists()


@pytest.mark.parametrize("text", ["{}\n", "", "L1: []\nL2:\n", "# nothing yet\n"])
def test_allowlist_check_refuses_an_empty_allowlist_unless_allowed(tmp_path: Path, text: str) -> None:
    (tmp_path / "allowlist.yaml").write_text(text)

    done = crcr(tmp_path, "allowlist", "check", "allowlist.yaml")

    assert done.returncode == 1
    assert done.stdout == ""
    assert done.stderr == (
        "allowlist.yaml: lists no repository: published, it would stop every dispatch "
        "(--allow-empty if that is meant)\n"
    )

    allowed = crcr(tmp_path, "allowlist", "check", "allowlist.yaml", "--allow-empty")

    assert allowed.returncode == 0, allowed.stderr
    assert allowed.stdout.splitlines()[-1] == "0 repositories"


@pytest.mark.parametrize(
    ("rows", "line"),
    [
        (None, "crcr shadow compare: {path}: No such file or directory"),
        (
            '{"delivery_id": "d-1", "run_id": 5}\n',
            "crcr shadow compare: {path}: line 1: needs delivery_id, downstream_repo",
        ),
        (
            '[{"delivery_id": "d-1", "downstream_repo": "o/r", "run_id": 1}]',
            "crcr shadow compare: missing configuration",
        ),
    ],
    ids=["no-file", "row-without-repo", "no-state-table"],
)
def test_shadow_compare_names_the_row_or_setting_it_cannot_use(tmp_path: Path, rows: str | None, line: str) -> None:
    path = tmp_path / "rows.jsonl"
    if rows is not None:
        path.write_text(rows)
    done = crcr(tmp_path, "shadow", "compare", "--rows", str(path))

    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.startswith(line.format(path=path)), done.stderr
    assert len(done.stderr.splitlines()) == 1


@pytest.mark.parametrize(
    ("content", "extra", "line"),
    [
        ('[{"guid": "g"}]', ["--secret-file", "secret"], "crcr replay: {path}: entry 1: needs request.payload"),
        (
            '{"request": {"payload": {}}, "event": "push"}\n',
            ["--secret-file", "secret"],
            "crcr replay: {path}: line 1: a delivery log entry needs guid and event",
        ),
        ("not json", ["--secret-file", "secret"], "crcr replay: {path}: line 1 is not JSON it takes (Expecting value"),
        ("[]", [], "crcr replay: the relay's webhook secret: set CRCR_WEBHOOK_SECRET, or give --secret-file PATH"),
        ("[]", ["--secret-file", "secret"], "crcr replay: {path}: no deliveries in it"),
        (
            "[]",
            ["--secret", "s3cr3t"],
            "crcr replay: --secret is refused: a command line is readable by every local user (/proc/<pid>/cmdline); "
            "set CRCR_WEBHOOK_SECRET or give --secret-file PATH",
        ),
        ("[]", ["--secret-file", "missing"], "crcr replay: --secret-file missing: No such file or directory"),
        ("[]", ["--secret-file", "empty"], "crcr replay: --secret-file empty: one line holding the secret"),
        ("[]", ["--secret-file", "two-lines"], "crcr replay: --secret-file two-lines: one line holding the secret"),
    ],
    ids=["neither-shape", "no-guid", "not-json", "no-secret", "no-deliveries", "secret-on-the-command-line",
         "no-secret-file", "empty-secret-file", "secret-file-of-two-lines"],
)  # fmt: skip
def test_replay_names_the_entry_it_cannot_send_before_sending_any(
    tmp_path: Path, content: str, extra: list[str], line: str
) -> None:
    path = tmp_path / "deliveries.json"
    path.write_text(content)
    (tmp_path / "secret").write_text("s3cr3t\n")  # as `echo` writes it: the line end is not the secret's
    (tmp_path / "empty").write_text("\n")
    (tmp_path / "two-lines").write_text("s3cr3t\nmore\n")
    done = crcr(tmp_path, "replay", str(path), "--url", "http://127.0.0.1:9", *extra)

    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.startswith(line.format(path=path)), done.stderr
    assert len(done.stderr.splitlines()) == 1 and "s3cr3t" not in done.stderr


@pytest.mark.parametrize(
    ("body", "extra", "line"),
    [
        (
            b"[" * 100_000 + b"]" * 100_000,
            [],
            "crcr send: body.json: its body is not JSON it takes (JSON nested deeper than 64",
        ),
        (b"[1, 2]", [], "crcr send: body.json: a webhook body is a JSON object"),
        (b'{"action": NaN}', [], "crcr send: body.json: its body is not JSON it takes (NaN (not JSON) at action)"),
        (b'{"a": "' + b"a" * (11 * 1024 * 1024) + b'"}', [], "crcr send: body.json: over the relay's body limit"),
        (b"{}", ["--secret-file", "missing"], "crcr send: --secret-file missing: No such file or directory"),
    ],
    ids=["deep", "not-an-object", "nan", "over-the-body-limit", "no-secret-file"],
)
def test_send_refuses_a_body_file_it_would_not_send_in_one_line(
    tmp_path: Path, body: bytes, extra: list[str], line: str
) -> None:
    (tmp_path / "body.json").write_bytes(body)
    args = ["send", "--file", "body.json", "--event", "push", "--url", "http://127.0.0.1:9", *extra]
    done = crcr(tmp_path, *args) if extra else crcr_with_secret(tmp_path, *args)

    assert done.returncode == 2 and done.stdout == "" and "Traceback" not in done.stderr, done.stderr
    assert done.stderr.startswith(line), done.stderr
    assert len(done.stderr.splitlines()) == 1 and "cannot reach" not in done.stderr


def crcr_with_secret(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CRCR_", "AWS_"))} | {"CRCR_WEBHOOK_SECRET": "s"}
    return subprocess.run(
        [sys.executable, "-m", "crcr.ops.cli", *args], env=env, cwd=cwd, capture_output=True, text=True, timeout=60,
        check=False,
    )  # fmt: skip
