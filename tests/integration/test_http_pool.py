"""The relay's GitHub and Buildkite clients on urllib3 pools (`crcr.adapters.http_pool`): through the proxy the
environment names, with the proxy's credentials sent to the proxy alone (over TLS when the proxy is `https://`),
straight to the host NO_PROXY names, and never after a redirect."""

from __future__ import annotations

import base64
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from crcr.adapters.buildkite import BuildkiteClient
from crcr.adapters.github import GitHubApp
from crcr.app.outbound import BUILDKITE
from crcr.app.ports.buildkite import BuildkiteUnavailable, NewBuild
from crcr.app.ports.github import GitHubUnavailable
from tests.conftest import APP_ID
from tests.doubles.aws_proxy import AwsProxy, make_tls
from tests.doubles.buildkite_double import BuildkiteDouble
from tests.doubles.github_double import GitHubDouble
from tests.unit.fakes import permit

REPO = "org-one/repo-one"


@pytest.fixture(autouse=True)
def no_proxy_from_the_host(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY", "http_proxy", "https_proxy", "no_proxy", "ALL_PROXY"):
        monkeypatch.delenv(name, raising=False)


@pytest.fixture
def tls_proxy(github: GitHubDouble, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[AwsProxy]:
    """A forward proxy answering over TLS, with a certificate the machine's trust store (SSL_CERT_FILE) accepts."""
    ca, cert, key = make_tls(tmp_path)
    monkeypatch.setenv("SSL_CERT_FILE", str(ca))
    proxy = AwsProxy(github.url, tls=(cert, key))
    yield proxy
    proxy.stop()


def dispatch(github: GitHubDouble, app_key_pem: str) -> None:
    app = GitHubApp(github.url, APP_ID, app_key_pem, time.time)
    token = app.repo_token(app.installation_for(REPO), REPO)
    app.dispatch(REPO, token, "pull_request", {"delivery_id": "d-1"}, permit=permit(repo=REPO))


def test_github_calls_go_through_the_named_proxy_with_its_credentials_over_tls(
    github: GitHubDouble, app_key_pem: str, tls_proxy: AwsProxy, monkeypatch: pytest.MonkeyPatch
) -> None:
    github.install(REPO, installation_id=7, repo_id=70)
    proxy_url = tls_proxy.url.replace("https://", "https://relay:s%40cret@")
    monkeypatch.setenv("HTTP_PROXY", proxy_url)
    dispatch(github, app_key_pem)
    assert len(github.dispatches(REPO)) == 1
    # Every request went to the proxy (the whole URL on the request line), each with the proxy's credentials.
    assert [seen.path.split("?")[0].removeprefix(github.url) for seen in tls_proxy.seen] == [
        f"/repos/{REPO}/installation",
        "/app/installations/7/access_tokens",
        f"/repos/{REPO}/dispatches",
    ]
    expected = "Basic " + base64.b64encode(b"relay:s@cret").decode()
    assert {seen.header("proxy-authorization") for seen in tls_proxy.seen} == {expected}


def test_a_host_no_proxy_names_is_reached_directly(
    github: GitHubDouble, app_key_pem: str, tls_proxy: AwsProxy, monkeypatch: pytest.MonkeyPatch
) -> None:
    github.install(REPO, installation_id=7, repo_id=70)
    monkeypatch.setenv("HTTP_PROXY", tls_proxy.url)
    monkeypatch.setenv("NO_PROXY", "localhost,127.0.0.1")
    dispatch(github, app_key_pem)
    assert len(github.dispatches(REPO)) == 1 and tls_proxy.seen == []


class Redirecting:
    """An API that answers every request with a redirect to `to`."""

    def __init__(self, to: str) -> None:
        self.requests = 0
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:
                return

            def _redirect(self) -> None:
                outer.requests += 1
                self.rfile.read(int(self.headers.get("content-length") or 0))
                self.send_response(307)
                self.send_header("location", to + self.path)
                self.send_header("content-length", "0")
                self.end_headers()

            do_GET = do_POST = _redirect

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"
        threading.Thread(target=self._server.serve_forever, daemon=True).start()

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()


def test_a_redirect_is_never_followed_with_the_token(github: GitHubDouble, app_key_pem: str) -> None:
    github.install(REPO, installation_id=7, repo_id=70)
    moved = Redirecting(github.url)
    try:
        app = GitHubApp(moved.url, APP_ID, app_key_pem, time.time)
        with pytest.raises(GitHubUnavailable, match="unexpected HTTP 307"):
            app.installation_for(REPO)
        buildkite = BuildkiteClient(moved.url, "bk-token")
        build = NewBuild(branch="main", message="m", env={}, meta_data={})
        with pytest.raises(BuildkiteUnavailable, match="unexpected HTTP 307"):
            buildkite.create("org", "pipe", build, permit=permit(BUILDKITE))
    finally:
        moved.stop()
    assert moved.requests == 2 and github.requests == []


def test_buildkite_calls_go_through_the_named_proxy(monkeypatch: pytest.MonkeyPatch) -> None:
    with BuildkiteDouble() as buildkite:
        buildkite.add_pipeline("vllm", "ci")
        proxy = AwsProxy(buildkite.url)
        try:
            monkeypatch.setenv("HTTP_PROXY", proxy.url)
            build = NewBuild(branch="main", message="m", env={}, meta_data={"crcr_dispatch_id": "did-1"})
            BuildkiteClient(buildkite.url, buildkite.token).create("vllm", "ci", build, permit=permit(BUILDKITE))
            assert len(buildkite.builds("vllm", "ci")) == 1
        finally:
            proxy.stop()
    assert [(seen.method, seen.path.removeprefix(buildkite.url)) for seen in proxy.seen] == [
        ("POST", "/v2/organizations/vllm/pipelines/ci/builds")
    ]
