"""`crcr onboard`: checks a new downstream against GitHub, prints its allowlist entry and writes its CI files."""

from __future__ import annotations

import html
import json
import os
import tempfile
import urllib.parse
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import crcr

if TYPE_CHECKING:
    from crcr.app.onboard import Onboarding

# Exit statuses, as the other operator commands: 2 for the operator's input or configuration, 1 for what GitHub
# answered (not installed, refused, unreachable) or for an output that could not be written.
USAGE = 2
FAILED = 1


class OnboardFailed(Exception):
    def __init__(self, code: int, message: str) -> None:
        super().__init__(" ".join(message.split()))
        self.code = code


@dataclass
class Done:
    payload: dict[str, Any]
    text: str
    files: list[str] = field(default_factory=list)


def checkout_root() -> Path:
    """The crcr checkout this package runs from (its examples/ and action/), else the working directory."""
    root = Path(crcr.__file__).resolve().parents[2]
    return root if (root / "examples").is_dir() else Path.cwd()


def onboard_from_env(
    repo: str,
    level: str,
    device: str | None,
    buildkite: str | None,
    out: str | None,
    action_ref: str | None,
    force: bool = False,
    no_report: bool = False,
) -> Done:
    """The whole command with the functions' variables; raises OnboardFailed with one line and an exit status."""
    from botocore.exceptions import BotoCoreError, ClientError  # noqa: PLC0415

    from crcr.app.onboard import onboard  # noqa: PLC0415
    from crcr.app.ports.github import GitHubError, GitHubUnavailable, NotInstalled  # noqa: PLC0415
    from crcr.domain.errors import CrcrError  # noqa: PLC0415
    from crcr.domain.onboarding import ACTION_PLACEHOLDER, check_action_ref, parse_request  # noqa: PLC0415
    from crcr.settings import ConfigError, Settings  # noqa: PLC0415

    try:
        request = parse_request(repo, level, device, buildkite)
        ref = check_action_ref(action_ref) if action_ref else ACTION_PLACEHOLDER
        settings = Settings.from_env()
        if no_report and request.buildkite is not None:
            raise OnboardFailed(USAGE, "--no-report is for GitHub Actions downstreams (a Buildkite build reports)")
        examples = _examples(request.buildkite is not None, no_report)
        github = None
        if request.buildkite is None:  # a Buildkite downstream needs nothing from GitHub
            from crcr.composition.base import load_settings  # noqa: PLC0415
            from crcr.composition.operators import build_onboard_github  # noqa: PLC0415

            github = build_onboard_github(load_settings())
    except (CrcrError, ConfigError) as exc:
        raise OnboardFailed(USAGE, getattr(exc, "message", None) or str(exc)) from None
    except OSError as exc:
        raise OnboardFailed(USAGE, f"{exc.filename}: {exc.strerror}" if exc.filename else str(exc)) from None
    except (BotoCoreError, ClientError, ValueError) as exc:  # CRCR_SECRETS_ARN unreadable or not JSON
        raise OnboardFailed(USAGE, f"CRCR_SECRETS_ARN: {exc}") from None
    try:
        result = onboard(request, github)
    except NotInstalled as exc:
        raise OnboardFailed(FAILED, _not_installed_or_wrong_api(github, settings.github_api_url, exc)) from None
    except GitHubUnavailable as exc:
        raise OnboardFailed(
            FAILED, f"GitHub at CRCR_GITHUB_API_URL {settings.github_api_url} is unreachable or failing: {exc}"
        ) from None
    except GitHubError as exc:
        raise OnboardFailed(FAILED, str(exc)) from None
    relay = None
    if settings.callback_url:  # the relay's own URL, when the operator has the functions' variables
        parts = urllib.parse.urlsplit(settings.callback_url)
        relay = f"{parts.scheme}://{parts.netloc}"
    try:
        files = _render(result.repo, request.buildkite is not None, examples, ref, settings.upstream_repo, relay)
        if no_report:
            from crcr.domain.onboarding import WORKFLOW_PATH, minimal_workflow  # noqa: PLC0415

            files = {WORKFLOW_PATH: minimal_workflow(examples["minimal"], result.repo, settings.upstream_repo)}
    except CrcrError as exc:
        raise OnboardFailed(USAGE, exc.message) from None
    target = Path(out) if out else Path("crcr-onboard") / result.repo.replace("/", "-")
    change = _allowlist_change(settings, result)
    return _report(result, _write(target, files, force), ref, relay_known=relay is not None, change=change)


@dataclass
class Change:
    """What onboarding changes in the relay's current allowlist (CRCR_ALLOWLIST): a unified diff, or why not."""

    source: str
    diff: str = ""
    problem: str | None = None  # the allowlist could not be read, or edited safely: the entry is printed instead


def _allowlist_change(settings: Any, result: Onboarding) -> Change | None:
    """The current allowlist with the repository at the level asked for: added, or moved from the level it is at
    (its oncalls kept), its `repos:` settings set. Checked by parsing it back: every other entry unchanged."""
    import difflib  # noqa: PLC0415

    from crcr.adapters.allowlist_source import fetcher_for, parse_allowlist  # noqa: PLC0415
    from crcr.composition.base import aws_client, github_app  # noqa: PLC0415
    from crcr.domain.allowlist import Entry  # noqa: PLC0415
    from crcr.domain.allowlist_edit import place  # noqa: PLC0415
    from crcr.domain.errors import AllowlistError  # noqa: PLC0415

    source = settings.allowlist
    if not source:
        return None
    try:
        data = fetcher_for(source, lambda: aws_client("s3"), lambda: github_app(settings))()
        text = (data or b"").decode("utf-8")
        current = parse_allowlist(text)
    except AllowlistError as exc:
        return Change(source, problem=f"the current allowlist is not valid ({exc.message})")
    except Exception as exc:  # unreadable: not there, no access, GitHub down
        return Change(source, problem=f"the current allowlist could not be read ({' '.join(str(exc).split())})")
    request = result.request
    existing = current.get(result.repo)
    entry = Entry(result.repo, request.level, existing.oncalls if existing else (), request.device)
    wanted: dict[str, str] = {}
    if result.repository_id is not None:
        wanted["repository_id"] = str(result.repository_id)
    if request.buildkite is not None:
        bk = request.buildkite
        wanted["buildkite"] = json.dumps({"organization": bk.organization, "pipeline": bk.pipeline})
    try:
        after_text = place(text, existing, entry, wanted)
        after = parse_allowlist(after_text)
    except AllowlistError as exc:
        return Change(source, problem=f"it could not be edited safely ({exc.message})")
    if not _only_change(current, after, result):
        return Change(source, problem="it could not be edited safely (another entry would have changed)")
    name = source.rsplit("/", 1)[-1]
    diff = difflib.unified_diff(
        text.splitlines(keepends=True), after_text.splitlines(keepends=True), f"a/{name}", f"b/{name}"
    )
    return Change(source, "".join(diff))


def _only_change(before: Any, after: Any, result: Onboarding) -> bool:
    from crcr.domain.ids import repo_key  # noqa: PLC0415

    key = repo_key(result.repo)
    moved = after.get(result.repo)
    request = result.request
    if moved is None or (moved.level, moved.device) != (request.level, request.device):
        return False
    if result.repository_id is not None and moved.settings.repository_id != result.repository_id:
        return False
    others = [(e.key, e.level, e.device, e.oncalls, e.settings) for e in before.entries if e.key != key]
    kept = [(e.key, e.level, e.device, e.oncalls, e.settings) for e in after.entries if e.key != key]
    return sorted(others, key=repr) == sorted(kept, key=repr)


def _not_installed_or_wrong_api(github: Any, api_url: str, exc: Exception) -> str:
    """GitHub answers 404 where the App is not installed, and so does any server at a wrong URL: the App's own
    endpoint (its webhook deliveries, with the App's JWT) tells the two apart."""
    from crcr.app.ports.github import GitHubError  # noqa: PLC0415

    try:
        github.request("GET", "/app/hook/deliveries?per_page=1", f"Bearer {github.app_jwt()}", kind="hook_deliveries")
    except GitHubError as probe:
        return (
            f"CRCR_GITHUB_API_URL {api_url} does not answer as GitHub's API for this App ({probe}), so whether the "
            "App is installed is not known: check the URL (GitHub Enterprise: https://HOST/api/v3)"
        )
    return str(exc)


def _examples(buildkite: bool, no_report: bool = False) -> dict[str, str]:
    root = checkout_root()
    wanted = (
        {"pipeline": root / "examples" / "buildkite" / "pipeline.yml", "helper": root / "action" / "report.py"}
        if buildkite
        else {"workflow": root / "examples" / "workflows" / "downstream.yml"}
    )
    if no_report:
        wanted["minimal"] = root / "examples" / "workflows" / "downstream-minimal.yml"
    return {name: path.read_text(encoding="utf-8") for name, path in wanted.items()}


def _render(
    repo: str, buildkite: bool, examples: dict[str, str], ref: str, upstream: str, relay: str | None
) -> dict[str, str]:
    from crcr.domain.onboarding import (  # noqa: PLC0415
        HELPER_PATH,
        PIPELINE_PATH,
        WORKFLOW_PATH,
        buildkite_pipeline,
        downstream_workflow,
    )

    if not buildkite:
        return {WORKFLOW_PATH: downstream_workflow(examples["workflow"], repo, ref, upstream)}
    return {PIPELINE_PATH: buildkite_pipeline(examples["pipeline"], upstream, relay), HELPER_PATH: examples["helper"]}


def _write(target: Path, files: dict[str, str], force: bool = False) -> list[str]:
    """Each file whole or not at all (a temporary file, then a rename); none when one would overwrite a file that
    differs, unless `force`d."""
    if not force:
        for relative, text in files.items():
            path = target / relative
            try:
                differs = path.exists() and path.read_text(encoding="utf-8") != text
            except (OSError, UnicodeDecodeError):
                differs = True
            if differs:
                raise OnboardFailed(FAILED, f"{path} exists and differs: --force to overwrite it")
    written = []
    for relative, text in files.items():
        path = target / relative
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
            with os.fdopen(fd, "w", encoding="utf-8") as fh:
                fh.write(text)
            Path(tmp).replace(path)
        except OSError as exc:
            raise OnboardFailed(FAILED, f"{exc.filename or path}: {exc.strerror}") from None
        written.append(str(path))
    return written


def _report(result: Onboarding, written: list[str], ref: str, relay_known: bool, change: Change | None = None) -> Done:
    from crcr.domain.onboarding import (  # noqa: PLC0415
        ACTION_PLACEHOLDER,
        EXAMPLE_RELAY_URL,
        HELPER_PATH,
        PIPELINE_PATH,
        WORKFLOW_PATH,
    )

    request = result.request
    bk = request.buildkite
    where = f"Buildkite pipeline {bk.organization}/{bk.pipeline}" if bk else "GitHub Actions"
    level = request.level.name + (
        f" (device {request.device}, label ciflow/crcr/{request.device})" if request.device else ""
    )
    steps: list[str] = []
    if bk is None:
        if ref == ACTION_PLACEHOLDER:
            steps.append(
                f"In {WORKFLOW_PATH}, replace {ACTION_PLACEHOLDER} (twice) with crcr's action at the full commit "
                "your relay runs (or run again with --action-ref)."
            )
        steps.append(f"Commit {WORKFLOW_PATH} to {result.repo}'s default branch.")
        steps.append(f"{_apply(change)}, check the file with `crcr allowlist check FILE`, publish it.")
    else:
        steps.append(
            f"Commit {PIPELINE_PATH} and {HELPER_PATH} to {result.repo}'s {bk.branch} branch; make the pipeline's "
            f"steps `buildkite-agent pipeline upload {PIPELINE_PATH}`."
        )
        if not relay_known:
            steps.append(f"In {PIPELINE_PATH}, replace {EXAMPLE_RELAY_URL} (twice) with your relay's URL.")
        steps.append(
            "Add the ci_providers.yml entry with the pipeline's two UUIDs to the relay's CRCR_CI_PROVIDERS; "
            f"{_apply(change).lower()} (check it with `crcr allowlist check FILE`); publish both."
        )
    payload = {
        "repo": result.repo,
        "level": request.level.name,
        "device": request.device,
        "ci": "buildkite" if bk else "github_actions",
        "buildkite": {"organization": bk.organization, "pipeline": bk.pipeline, "branch": bk.branch} if bk else None,
        "installation_id": result.installation_id,
        "repository_id": result.repository_id,
        "checks": [{"check": c.name, "result": c.result, "detail": c.detail} for c in result.checks],
        "files": written,
        "allowlist_entry": result.allowlist_entry,
        "ci_providers_entry": result.ci_providers_entry,
        "allowlist": None
        if change is None
        else {"source": change.source, "diff": change.diff, "problem": change.problem},
        "next": steps,
    }
    lines = [f"crcr onboard: {result.repo} at {level}, {where}"]
    lines += [f"  {c.result:<7} {c.detail}" for c in result.checks]
    lines += [f"  wrote   {path}" for path in written]
    if change is not None and change.problem is None:
        if change.diff:
            lines += ["", f"Allowlist change (CRCR_ALLOWLIST {change.source}):", ""]
            lines += change.diff.rstrip("\n").splitlines()
        else:
            lines += ["", f"The allowlist (CRCR_ALLOWLIST {change.source}) already admits {result.repo} as asked."]
    else:
        sections = (
            f"{request.level.name}: and repos:" if "repos:" in result.allowlist_entry else f"{request.level.name}:"
        )
        if change is not None:
            lines += ["", f"CRCR_ALLOWLIST {change.source}: {change.problem}."]
        lines += ["", f"Allowlist entry (merge into the allowlist's {sections} sections where it has them):", ""]
        lines += result.allowlist_entry.rstrip("\n").splitlines()
    if result.ci_providers_entry and bk is not None:
        lines += [
            "",
            "ci_providers.yml entry (the relay's CRCR_CI_PROVIDERS; merge into providers.buildkite.repo_map where it "
            "has one):",
            "",
            *result.ci_providers_entry.rstrip("\n").splitlines(),
            "",
            f"<organization_id>/<pipeline_id> are the UUIDs of {bk.organization}/{bk.pipeline} (never its slugs): "
            "every job of the pipeline has them as $BUILDKITE_ORGANIZATION_ID and $BUILDKITE_PIPELINE_ID, and "
            'report.py prints them ("crcr: this pipeline is <organization_id>/<pipeline_id> ...").',
        ]
    lines += ["", "Next:"]
    lines += [f"  {i}. {step}" for i, step in enumerate(steps, 1)]
    return Done(payload, "\n".join(lines), written)


def _apply(change: Change | None) -> str:
    if change is not None and change.problem is None:
        return "Apply the allowlist change above" if change.diff else "Leave the allowlist as it is"
    return "Add the allowlist entry"


def as_json(done: Done) -> str:
    return json.dumps(done.payload, indent=2)


MANIFEST_PATH = Path("infra") / "github-app-manifest.json"


# A shadow relay (CRCR_MODE=shadow) reads the upstream's events and writes nothing anywhere on GitHub.
SHADOW_PERMISSIONS = {"contents": "read", "issues": "read", "metadata": "read", "pull_requests": "read"}
SHADOW_EVENTS = ["pull_request", "push"]


def app_manifest(webhook_url: str, name: str | None = None, *, shadow: bool = False) -> dict[str, Any]:
    """infra/github-app-manifest.json with the relay's webhook URL (and its origin as the App's homepage); `shadow`:
    read-only permissions and only the events a shadow relay plans from."""
    parts = urllib.parse.urlsplit(webhook_url)
    loopback = parts.hostname in ("127.0.0.1", "localhost", "::1")
    if not parts.hostname or not (parts.scheme == "https" or (parts.scheme == "http" and loopback)):
        raise OnboardFailed(USAGE, f"--webhook-url must be an https URL (the relay's WebhookUrl), got {webhook_url!r}")
    if not parts.path.rstrip("/").endswith("/webhook") or parts.query or parts.fragment:
        raise OnboardFailed(
            USAGE,
            f"--webhook-url must end in /webhook, where the relay takes GitHub's deliveries (the stack output "
            f"WebhookUrl), got {webhook_url!r}",
        )
    path = checkout_root() / MANIFEST_PATH
    try:
        manifest: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise OnboardFailed(USAGE, f"{path}: {exc.strerror}") from None
    manifest["url"] = f"{parts.scheme}://{parts.netloc}"
    manifest["hook_attributes"] = {**manifest["hook_attributes"], "url": webhook_url}
    if shadow:
        manifest["description"] = (
            "Cross-Repository CI Relay in shadow: plans upstream pull requests and pushes for downstream CI and "
            "records what it would send, beside the relay in service. Read-only: it dispatches and writes nothing."
        )
        manifest["default_permissions"] = dict(SHADOW_PERMISSIONS)
        manifest["default_events"] = list(SHADOW_EVENTS)
    if name:
        manifest = {"name": name, **manifest}
    return manifest


def manifest_form(manifest: dict[str, Any], state: str, org: str | None, github_url: str) -> str:
    """A page whose form registers the App from the manifest (GitHub: "Registering a GitHub App from a manifest")."""
    parts = urllib.parse.urlsplit(github_url)
    if parts.scheme not in ("https", "http") or not parts.hostname or parts.query or parts.fragment:
        raise OnboardFailed(
            USAGE, f"--github-url must be GitHub's web URL with its scheme (https://github.com), got {github_url!r}"
        )
    base = github_url.rstrip("/")
    target = f"{base}/organizations/{urllib.parse.quote(org)}/settings/apps/new" if org else f"{base}/settings/apps/new"
    action = f"{target}?state={urllib.parse.quote(state)}"
    return (
        "<!doctype html>\n"
        '<html lang="en"><meta charset="utf-8"><title>Register the crcr GitHub App</title>\n'
        f'<form action="{html.escape(action)}" method="post">\n'
        f'  <input type="hidden" name="manifest" value="{html.escape(json.dumps(manifest))}">\n'
        "  <p>Registers a GitHub App from crcr's manifest"
        f"{' for the organization ' + html.escape(org) if org else ''}.</p>\n"
        '  <button type="submit">Register the GitHub App</button>\n'
        "</form>\n"
        "</html>\n"
    )
