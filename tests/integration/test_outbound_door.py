"""The outbound door (crcr.app.outbound): an inventory of every method of the GitHub, Buildkite and HUD adapters that
writes, each refusing to send without the door's permit, against the HTTP doubles."""

from __future__ import annotations

import ast
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from crcr.adapters.allowlist_pulls import GitHubAllowlistPulls
from crcr.adapters.allowlist_source import parse_allowlist
from crcr.adapters.buildkite import BuildkiteClient
from crcr.adapters.commands import GitHubCommands
from crcr.adapters.dispatch_runs import GitHubWorkflows
from crcr.adapters.github import GitHubApp, GitHubCheckRuns, GitHubHookDeliveries, GitHubIssueComments, GitHubReruns
from crcr.adapters.torchci import TorchciClient
from crcr.app.outbound import BUILDKITE, GITHUB, HUD, Permit, Unpermitted, Write
from crcr.app.ports.buildkite import NewBuild
from tests.conftest import APP_ID, HUD_TOKEN, ROOT
from tests.doubles.buildkite_double import BuildkiteDouble
from tests.doubles.github_double import GitHubDouble
from tests.doubles.hud import HudDouble
from tests.unit.fakes import FakeShadowLog, RecordingMetrics, StaticAllowlist, door

ADAPTERS = ROOT / "shared" / "crcr" / "adapters"
PACKAGE = ROOT / "shared" / "crcr"
READS = {"GET"}

# Every method of an adapter that makes a request other than a GET to GitHub, Buildkite or PyTorch's HUD. A new one
# fails the inventory below until it is listed here, with a call that shows it refusing without a permit.
WRITERS = {
    "allowlist_pulls.GitHubAllowlistPulls.close_pull",
    "allowlist_pulls.GitHubAllowlistPulls.open_pull",
    "allowlist_pulls.GitHubAllowlistPulls.prepare_branch",
    "allowlist_pulls.GitHubAllowlistPulls.update_pull",
    "allowlist_pulls.GitHubAllowlistPulls.write_file",
    "buildkite.BuildkiteClient.create",
    "commands.GitHubCommands.react",
    "dispatch_runs.GitHubWorkflows.dispatch_workflow",
    "github.GitHubApp.dispatch",
    "github.GitHubApp.repo_token",  # the installation token the App mints for itself: not a write of the relay's
    "github.GitHubCheckRuns.create_check_run",
    "github.GitHubCheckRuns.update_check_run",
    "github.GitHubHookDeliveries.redeliver",
    "github.GitHubIssueComments.create_comment",
    "github.GitHubIssueComments.update_comment",
    "github.GitHubReruns.rerun_failed_jobs",
    "torchci.TorchciClient.push",
}
TOKEN_MINTS = {"github.GitHubApp.repo_token"}
# The transports: each checks the permit of every request but a GET (and GitHub's token mint) itself.
TRANSPORTS = {"github.GitHubApp.request", "buildkite.BuildkiteClient._request"}


def _methods() -> Iterator[tuple[str, ast.FunctionDef]]:
    for path in sorted(ADAPTERS.glob("*.py")):
        tree = ast.parse(path.read_text())
        for cls in (n for n in tree.body if isinstance(n, ast.ClassDef)):
            for fn in (n for n in cls.body if isinstance(n, ast.FunctionDef)):
                yield f"{path.stem}.{cls.name}.{fn.name}", fn


def _writes(fn: ast.FunctionDef) -> list[ast.Call]:
    """The calls of a method that send a request by a method other than GET (named as a literal)."""
    return [
        node
        for node in ast.walk(fn)
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr in ("request", "_request")
        and node.args
        and isinstance(node.args[0], ast.Constant)
        and node.args[0].value not in READS
    ]


def _calls(fn: ast.FunctionDef, name: str) -> bool:
    return any(isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id == name for n in ast.walk(fn))


def test_every_writing_method_of_the_adapters_is_listed_and_needs_the_doors_permit() -> None:
    found = {name: fn for name, fn in _methods() if _writes(fn)}
    assert set(found) == WRITERS, "a writing adapter method not in the inventory (or one gone from it)"
    for name, fn in found.items():
        if name in TOKEN_MINTS:
            continue
        assert "permit" in [a.arg for a in fn.args.kwonlyargs], f"{name} takes no permit"
        for call in _writes(fn):
            passes = any(k.arg == "permit" for k in call.keywords)
            assert passes or _calls(fn, "require"), f"{name} sends a write without the permit"
    transports = dict(_methods())
    for name in TRANSPORTS:
        assert _calls(transports[name], "require"), f"{name} sends writes without checking the permit"


def test_only_the_door_issues_permits() -> None:
    """`Permit(…)` is built, and its issuer's token named, in crcr.app.outbound alone."""
    for path in sorted(PACKAGE.rglob("*.py")):
        if path.name == "outbound.py" and path.parent.name == "app":
            continue
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
                assert node.func.id != "Permit", f"{path.relative_to(ROOT)} builds a Permit"
            if isinstance(node, ast.Name | ast.alias):
                assert getattr(node, "id", getattr(node, "name", "")) != "_ISSUED", f"{path} names the issuer"
    with pytest.raises(Unpermitted):
        Permit(Write(GITHUB, "dispatch", "org/down", "pytorch/pytorch", "k"), object())


def test_no_other_http_client_talks_to_github_buildkite_or_the_hud() -> None:
    """Outside the adapters, only the operator's tools and the embedded stack's sandboxes make HTTP requests (to the
    relay itself, through the one webhook sender, or playing GitHub and Buildkite), none of them on the relay's
    behalf."""
    allowed = {"local/webhook_sender.py", "ops/onboard.py", "local/stack.py", "local/sandbox.py",
               "local/sandbox_buildkite.py"}  # fmt: skip
    for path in sorted(PACKAGE.rglob("*.py")):
        where = str(path.relative_to(PACKAGE))
        if where.startswith("adapters/") or where in allowed:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
                assert node.func.attr not in ("request", "_request", "urlopen"), f"{where} makes an HTTP request"
            if isinstance(node, ast.Import | ast.ImportFrom):
                names = [a.name for a in node.names] + [getattr(node, "module", None) or ""]
                assert not any(n.split(".")[0] == "urllib3" for n in names), f"{where} imports urllib3"


UPSTREAM, DOWN, ALLOW = "pytorch/pytorch", "org/down", "org/allow"


@pytest.fixture
def app(github: GitHubDouble, app_key_pem: str) -> GitHubApp:
    perms = {"contents": "write", "checks": "write", "issues": "write", "pull_requests": "write", "actions": "write",
             "metadata": "read"}  # fmt: skip
    github.install(UPSTREAM, installation_id=1, repo_id=65600975, permissions=perms)
    github.install(DOWN, installation_id=2, repo_id=700, permissions=perms)
    github.add_repo_to_installation(2, ALLOW, repo_id=701)
    return GitHubApp(github.url, APP_ID, app_key_pem, time.time)


def _github_calls(app: GitHubApp) -> dict[str, Callable[[Permit | None], Any]]:
    """One call of each GitHub writer, as the use cases make it."""
    checks, comments, reruns = GitHubCheckRuns(app), GitHubIssueComments(app), GitHubReruns(app)
    pulls, hooks = GitHubAllowlistPulls(app, ALLOW, "allowlist.yml", "main"), GitHubHookDeliveries(app, UPSTREAM)
    return {
        "github.GitHubApp.dispatch": lambda p: app.dispatch(
            DOWN,
            app.repo_token(app.installation_for(DOWN), DOWN),
            "pull_request",
            {},
            permit=p,  # type: ignore[arg-type]
        ),
        "dispatch_runs.GitHubWorkflows.dispatch_workflow": lambda p: GitHubWorkflows(app).dispatch_workflow(
            DOWN,
            "ci.yml",
            "main",
            {},
            permit=p,  # type: ignore[arg-type]
        ),
        "github.GitHubCheckRuns.create_check_run": lambda p: checks.create_check_run(UPSTREAM, {}, permit=p),  # type: ignore[arg-type]
        "github.GitHubCheckRuns.update_check_run": lambda p: checks.update_check_run(UPSTREAM, 1, {}, permit=p),  # type: ignore[arg-type]
        "github.GitHubIssueComments.create_comment": lambda p: comments.create_comment(UPSTREAM, 5, "x", permit=p),  # type: ignore[arg-type]
        "github.GitHubIssueComments.update_comment": lambda p: comments.update_comment(UPSTREAM, 5, "x", permit=p),  # type: ignore[arg-type]
        "github.GitHubReruns.rerun_failed_jobs": lambda p: reruns.rerun_failed_jobs(DOWN, "77", permit=p),  # type: ignore[arg-type]
        "github.GitHubHookDeliveries.redeliver": lambda p: hooks.redeliver(9, permit=p),  # type: ignore[arg-type]
        "commands.GitHubCommands.react": lambda p: GitHubCommands(app).react(UPSTREAM, 9, "rocket", permit=p),  # type: ignore[arg-type]
        "allowlist_pulls.GitHubAllowlistPulls.prepare_branch": lambda p: pulls.prepare_branch("b", "a" * 40, permit=p),  # type: ignore[arg-type]
        "allowlist_pulls.GitHubAllowlistPulls.write_file": lambda p: pulls.write_file("b", "x", "s", "m", permit=p),  # type: ignore[arg-type]
        "allowlist_pulls.GitHubAllowlistPulls.open_pull": lambda p: pulls.open_pull("b", "t", "b", [], permit=p),  # type: ignore[arg-type]
        "allowlist_pulls.GitHubAllowlistPulls.update_pull": lambda p: pulls.update_pull(1, "t", "b", permit=p),  # type: ignore[arg-type]
        "allowlist_pulls.GitHubAllowlistPulls.close_pull": lambda p: pulls.close_pull(1, "c", permit=p),  # type: ignore[arg-type]
    }


def _sent_writes(github: GitHubDouble) -> list[str]:
    return [
        f"{r.method} {r.path}"
        for r in github.requests
        if r.method != "GET" and not r.path.split("?")[0].endswith("/access_tokens")
    ]


def test_every_github_writer_refuses_to_send_without_a_permit_or_with_another_writes(
    github: GitHubDouble, app: GitHubApp
) -> None:
    calls = _github_calls(app)
    assert set(calls) == {w for w in WRITERS if not w.startswith(("buildkite.", "torchci.")) and w not in TOKEN_MINTS}
    elsewhere = door().permit(Write(BUILDKITE, "dispatch", DOWN, UPSTREAM, "k"))
    for name, call in calls.items():
        for wrong in (None, elsewhere):
            with pytest.raises(Unpermitted):
                call(wrong)
        assert _sent_writes(github) == [], f"{name} reached GitHub without the door"
    # A permit for one downstream's dispatch does not send another's.
    other = door().permit(Write(GITHUB, "dispatch", "org/other", UPSTREAM, "k"))
    with pytest.raises(Unpermitted):
        calls["github.GitHubApp.dispatch"](other)
    with pytest.raises(Unpermitted):  # nor does the transport itself send a write without one
        app.request("POST", f"/repos/{DOWN}/dispatches", f"Bearer {app.app_jwt()}", {})
    assert _sent_writes(github) == []
    granted = door().permit(Write(GITHUB, "dispatch", DOWN, UPSTREAM, "k"))
    calls["github.GitHubApp.dispatch"](granted)
    assert _sent_writes(github) == [f"POST /repos/{DOWN}/dispatches"]  # the door's permit sends it


@pytest.fixture
def buildkite() -> Iterator[BuildkiteDouble]:
    with BuildkiteDouble() as double:
        yield double


def test_buildkite_and_the_hud_refuse_to_send_without_a_permit(buildkite: BuildkiteDouble) -> None:
    hud = HudDouble(HUD_TOKEN)
    client = BuildkiteClient(buildkite.url, buildkite.token)
    build = NewBuild(branch="main", message="m", env={}, meta_data={})
    pusher = TorchciClient(hud.url, HUD_TOKEN)
    github_permit = door().permit(Write(GITHUB, "dispatch", DOWN, UPSTREAM, "k"))
    for wrong in (None, github_permit):
        with pytest.raises(Unpermitted):
            client.create("org", "pipe", build, permit=wrong)  # type: ignore[arg-type]
        with pytest.raises(Unpermitted):
            pusher.push({"untrusted": {}}, permit=wrong)  # type: ignore[arg-type]
    assert [r for r in buildkite.requests if r.method != "GET"] == [] and hud.attempts == []
    hud_permit = door().permit(Write(HUD, "hud_push", DOWN, UPSTREAM, "k"))
    assert hud_permit is not None
    with pytest.raises(Exception) as refused:  # the permit lets it through: the HUD answers (a 4xx for this body)
        pusher.push({"untrusted": {}}, permit=hud_permit)
    assert not isinstance(refused.value, Unpermitted) and len(hud.attempts) == 1
    hud.stop()


def test_a_shadow_downstreams_write_is_kept_and_never_permitted() -> None:
    log, metrics = FakeShadowLog(), RecordingMetrics()
    allowlist = StaticAllowlist(
        parse_allowlist("L4:\n  - org/down\n  - org/live\nrepos:\n  org/down:\n    mode: shadow\n")
    )
    gate = door("live", allowlist, log, metrics)
    write = Write(GITHUB, "check_run", "org/down", UPSTREAM, "sha:name:queued:None", {"status": "queued"}, 5, "a" * 40)
    assert gate.permit(write) is None and gate.permit(write) is None  # asked twice (a retry): kept once
    assert gate.permit(Write(GITHUB, "check_run", "org/live", UPSTREAM, "x")) is not None
    [kept] = log.kept
    assert (kept.decision, kept.event, kept.repo, kept.pr, kept.head_sha) == (
        "withheld",
        "check_run",
        DOWN,
        5,
        "a" * 40,
    )
    assert kept.payload == {"status": "queued"} and "allowlist" in kept.reason
    assert metrics.counts["WriteWithheld.action=check_run"] == 2
    # A shadow deployment: every downstream but one moved live by its entry; the relay's own redeliveries pass.
    moved = StaticAllowlist(parse_allowlist("L4:\n  - org/down\n  - org/live\nrepos:\n  org/live:\n    mode: live\n"))
    shadow = door("shadow", moved, FakeShadowLog())
    assert shadow.permit(Write(HUD, "hud_push", "org/down", UPSTREAM, "k")) is None
    assert shadow.permit(Write(HUD, "hud_push", "org/live", UPSTREAM, "k")) is not None
    assert shadow.permit(Write(GITHUB, "comment", None, UPSTREAM, "k")) is None  # speaks for no live downstream
    assert shadow.permit(Write(GITHUB, "redelivery", None, UPSTREAM, "k")) is not None
    assert shadow.permit(Write(HUD, "hud_push", "org/unlisted", UPSTREAM, "k")) is None  # the deployment's mode


def test_an_allowlist_that_cannot_be_read_lets_nothing_through() -> None:
    class Broken:
        def current(self) -> Any:
            raise RuntimeError("allowlist unreadable")

    with pytest.raises(RuntimeError):
        door("live", Broken()).permit(Write(GITHUB, "dispatch", DOWN, UPSTREAM, "k"))
