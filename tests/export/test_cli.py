"""`crcr hud export` as an operator runs it: a subprocess reaching moto through the variables `crcr local`
hands out (or a deployed stack's), a short summary line, and one line naming the problem when it fails."""

from __future__ import annotations

import json
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from crcr.app.torchci import COLUMNS
from crcr.local.stack import OPERATOR_CRCR_KEYS, OPERATOR_ENV_KEYS, free_port
from crcr.ops.torchci_rows import last_change, select_rows, write
from tests.export.conftest import BUCKET, RESULTS_TABLE, Aws
from tests.export.jobs import recorded_jobs
from tests.export.test_from_export import moto_export, table_rows

CRCR = str(Path(sys.executable).parent / "crcr")


def crcr(*args: str, env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    run = [CRCR, "hud", "export", *args]
    return subprocess.run(run, env=env, cwd=cwd, capture_output=True, text=True, timeout=60, check=False)


def fails_in_one_line(done: subprocess.CompletedProcess[str], code: int, says: str) -> None:
    assert done.returncode == code, done.stderr
    assert done.stdout == ""
    assert done.stderr.count("\n") == 1 and done.stderr.startswith("crcr hud export: "), done.stderr
    assert says in done.stderr, done.stderr


def test_crcr_local_hands_operators_what_the_export_reads() -> None:
    assert {"AWS_ENDPOINT_URL", "AWS_DEFAULT_REGION"} <= set(OPERATOR_ENV_KEYS)
    assert "CRCR_RESULTS_TABLE" in OPERATOR_CRCR_KEYS


def test_exports_the_table_to_the_default_file(aws: Aws, tmp_path: Path) -> None:
    done = crcr(env=aws.env(), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout == (
        f"8 rows (7 completed, 1 in_progress) from table {RESULTS_TABLE} → crcr_workflow_job.jsonl (JSONEachRow)\n"
    )
    expected = tmp_path / "expected.jsonl"
    write(table_rows(aws), "jsonl", str(expected))
    assert (tmp_path / "crcr_workflow_job.jsonl").read_bytes() == expected.read_bytes()


def test_since_and_parquet_with_a_json_summary(aws: Aws, tmp_path: Path) -> None:
    jobs = recorded_jobs()
    cutoff = sorted(last_change(job) for job in jobs)[3]
    since = datetime.fromtimestamp(cutoff, UTC).isoformat()
    done = crcr(
        "--since", since, "--format", "parquet", "--out", "recent.parquet", "--json", env=aws.env(), cwd=tmp_path
    )
    assert done.returncode == 0, done.stderr
    summary = json.loads(done.stdout)
    kept = [j for j in jobs if last_change(j) >= cutoff]
    assert summary["rows"] == len(kept) and summary["since"] == since and summary["format"] == "parquet"
    table = pq.read_table(tmp_path / "recent.parquet")
    assert table.column_names == [name for name, _ in COLUMNS]
    assert table.num_rows == len(kept)


def test_rows_to_standard_output_and_the_summary_to_standard_error(aws: Aws, tmp_path: Path) -> None:
    done = crcr("--format", "csv", "--out", "-", env=aws.env(), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("dynamoKey,status,downstream_repo,")
    assert done.stderr.endswith("→ - (CSVWithNames)\n")


def test_from_a_table_export_in_s3(aws: Aws, tmp_path: Path) -> None:
    moto_export(aws, RESULTS_TABLE, "exports/cli")
    done = crcr("--from-export", f"s3://{BUCKET}/exports/cli", "--out", "x.jsonl", env=aws.env(), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert f"from export s3://{BUCKET}/exports/cli" in done.stdout
    expected = tmp_path / "expected.jsonl"
    write(select_rows(recorded_jobs()), "jsonl", str(expected))
    assert (tmp_path / "x.jsonl").read_bytes() == expected.read_bytes()


@pytest.mark.parametrize(
    ("args", "env", "code", "says"),
    [
        ((), {"CRCR_RESULTS_TABLE": ""}, 2, "missing configuration: CRCR_RESULTS_TABLE"),
        (("--since", "yesterday"), {}, 2, "bad --since 'yesterday': expected ISO 8601"),
        (("--from-export", "crcr-exports/exports"), {}, 2, "bad --from-export 'crcr-exports/exports'"),
        (("--from-export", f"s3://{BUCKET}/nothing-here"), {}, 1, "no DynamoDB export under it"),
        (("--from-export", "s3://no-such-bucket/x"), {}, 1, "NoSuchBucket"),
        ((), {"CRCR_RESULTS_TABLE": "no-such-table"}, 1, "cannot read table no-such-table: "),
        (("--out", "/no/such/dir/x.jsonl"), {}, 1, "cannot write /no/such/dir/x.jsonl: No such file or directory"),
    ],
)
def test_failures_name_the_problem_in_one_line(
    aws: Aws, tmp_path: Path, args: tuple[str, ...], env: dict[str, str], code: int, says: str
) -> None:
    fails_in_one_line(crcr(*args, env=aws.env(**env), cwd=tmp_path), code, says)


def test_an_unreachable_endpoint_is_one_line(aws: Aws, tmp_path: Path) -> None:
    down = aws.env(AWS_ENDPOINT_URL=f"http://127.0.0.1:{free_port()}")
    fails_in_one_line(crcr(env=down, cwd=tmp_path), 1, "Could not connect to the endpoint URL")


def test_parquet_without_pyarrow_says_how_to_install_it(aws: Aws, tmp_path: Path) -> None:
    shadow = tmp_path / "no-pyarrow" / "pyarrow"
    shadow.mkdir(parents=True)
    (shadow / "__init__.py").write_text("raise ImportError('No module named pyarrow')\n")
    env = aws.env(PYTHONPATH=str(shadow.parent))
    fails_in_one_line(crcr("--format", "parquet", env=env, cwd=tmp_path), 2, "pip install 'crcr[export]'")
    assert not (tmp_path / "crcr_workflow_job.parquet").exists()
