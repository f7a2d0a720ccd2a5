"""An independent, strict HTTP double of the GitHub REST API, for judging the relay.

Written from GitHub's public REST documentation (docs.github.com, the OpenAPI description in
github/rest-api-description) and from error bodies GitHub is publicly known to return, never from
the relay's code.  It is a real HTTP server (``ThreadingHTTPServer`` on 127.0.0.1, a free port, a
daemon thread), so the code under test talks to it over the wire exactly as it would to
``https://api.github.com``.

Usage::

    gh = GitHubDouble(app_id="424242", app_public_key_pem=pem_bytes)   # already serving
    gh.url                                                              # "http://127.0.0.1:<port>"
    gh.install("Org/Repo", installation_id=7, repo_id=1001,
               permissions={"contents": "write", "checks": "write", "metadata": "read"})
    gh.install("Org/Other", installation_id=7)      # same org installation, one more repository
    gh.script("POST", r"/repos/org/repo/dispatches", [Reply(502), Reply(502), Reply(502)])
    ...
    gh.dispatches("org/repo")      # accepted (204) dispatch bodies, in order
    gh.requests                    # every request, in arrival order (RecordedRequest)
    gh.unexpected                  # requests to endpoints outside the list below (answered 404)
    gh.stop()                      # or: with GitHubDouble(...) as gh: ...

World set-up: ``install`` / ``add_repo_to_installation`` / ``remove_repo_from_installation`` /
``set_installation_permissions`` / ``suspend_installation``; ``put_file(repo, path, ref, bytes)``;
``add_commit(repo, sha, branch=None)``; ``add_workflow_run(repo, run_id, ..., jobs=("build-and-test",))`` (a
seeded run, its jobs sharing its status and conclusion; no webhook); ``set_dispatch_workflow(repo, run_name, name=,
path=, jobs=, event_types=, on_repository_dispatch=True, on_workflow_dispatch=False)`` (a workflow that dispatches
start: see "Workflow runs" below); ``legacy_dispatch(repo_or_all=True)``;
``add_check_run(repo, name=, head_sha=, ...)`` (a run owned by another App, e.g. GitHub Actions);
``check_suite_id(repo, head_sha)``; ``add_issue(repo, number, pull_request=True)`` (an issue or PR
that comments can go on); ``add_comment(repo, number, body, user=..., app_slug=None)`` (a comment by a
person, or by another App); ``delete_comment(repo, id)``; ``expire_tokens()``; ``reset_requests()``.
Observation: ``requests``, ``unexpected``, ``dispatches(repo)``, ``check_runs(repo)``, ``reruns(repo)``,
``comments(repo, number)`` (the conversation as it stands), ``comment_writes(repo)`` (every accepted
comment POST and PATCH, in order),
``workflow_run(repo, id)``, ``runs_of(repo)`` (oldest first), ``jobs_of(repo, run_id, attempt=None)``,
``workflow_dispatches(repo)`` ((workflow path, body) of each accepted workflow dispatch), ``tokens`` /
``token_info(token)`` (each issued token's scope), and
``internal_errors`` (exceptions inside the double; answered 500 - should stay empty).  Pass
``clock=`` to move time (JWT checks, token expiry, rate-limit windows) without sleeping.
Repository names are case-insensitive everywhere, as on GitHub.

Endpoints (every other method/path is answered ``404 {"message": "Not Found"}`` and recorded in
``unexpected``, as GitHub answers an unknown route or an unsupported method with 404):

* ``POST /app/installations/{id}/access_tokens`` (App JWT) -> 201 installation token
* ``GET /repos/{owner}/{repo}/installation`` (App JWT)
* ``POST /repos/{owner}/{repo}/dispatches`` (contents: write) -> 204
* ``POST /repos/{owner}/{repo}/check-runs``, ``PATCH .../check-runs/{id}`` (checks: write)
* ``GET /repos/{owner}/{repo}/check-suites/{id}/check-runs`` (checks: read; paginated, Link header)
* ``GET /repos/{owner}/{repo}/actions/runs/{id}`` (actions: read): status, conclusion and ``run_attempt`` as they stand
* ``GET /repos/{owner}/{repo}/actions/runs`` (actions: read; ``event``, ``created``, ``per_page``, ``page``): newest
  first
* ``POST /repos/{owner}/{repo}/actions/runs/{id}/rerun-failed-jobs`` (actions: write) -> 201 ``{}``; a new attempt,
  queued: the previous attempt's failed, cancelled and timed-out jobs run again as new jobs (new ids, as on GitHub),
  the others are carried into the new attempt's listing as they were (same id, completed); ``workflow_run``
  ``requested`` goes out for it. 403 "This workflow is already running" / "This workflow run cannot be retried".
* ``GET /repos/{owner}/{repo}/actions/runs/{id}/attempts/{n}/jobs`` (actions: read): that attempt's jobs; 404 for
  an unknown run or attempt. ``GET /repos/{owner}/{repo}/actions/runs/{id}/jobs`` (actions: read): the latest
  attempt's (``filter=latest``, the default) or every attempt's (``filter=all``: oldest attempt first, a carried-over
  job once). Both answer ``{"total_count": N, "jobs": [...]}`` in the workflow's job order, ``per_page`` (default
  30, at most 100) and ``page``, with a ``Link`` header (next, last, prev, first).
* ``POST /repos/{owner}/{repo}/actions/workflows/{workflow_id}/dispatches`` (actions: write; ``workflow_id`` the
  workflow's id or file name, e.g. ``ci.yml``) with ``{"ref", "inputs", "return_run_details"}``: 204 without a body,
  or with ``return_run_details: true`` 200 ``{"workflow_run_id", "run_url", "html_url"}``; after
  ``legacy_dispatch(...)`` 204 whatever is asked (an older GitHub Enterprise Server). 404 for no such workflow, 422
  "Workflow does not have 'workflow_dispatch' trigger", 422 "No ref found for: <ref>", 422 "No more than 25
  properties are allowed; N were supplied." (inputs), and 422 for inputs over 65,535 characters of JSON (the docs
  give the limit, not the message: the double's words).
* ``GET /repos/{owner}/{repo}/contents/{path}[?ref=]`` (contents: read; ETag / If-None-Match -> 304;
  ``Accept: application/vnd.github.raw`` gives the raw bytes)
* ``GET /repos/{owner}/{repo}/commits/{ref}`` (contents: read)
* ``GET /repos/{owner}/{repo}/compare/{base}...{head}`` (contents: read; SHAs): the files ``set_pull_files(...,
  head=)`` gave that head, at most 300 (GitHub leaves the rest out without saying so); 404 for an unknown head
* ``GET /search/issues`` (an installation token; ``q`` must name ``repo:owner/name``, one the token's installation
  has; the qualifiers ``is:issue``/``is:pr``, ``is:open``/``is:closed``, ``in:title`` and ``created:>=|>|<=|<DATE``,
  other words all in the title (and the body unless ``in:title``), case-insensitive): the ``add_search_issue``
  issues, ``sort=created`` with ``order`` (else newest number first), ``per_page`` at most 100 and ``page``, a
  ``Link`` header; ``{"total_count", "incomplete_results": false, "items"}``, each item with its author's ``user``
  (``login``, ``id``, ``type``) and ``author_association``. As documented: at most 1,000 results
  per query (a page past them: 422 "Only the first 1000 search results are available"), and search's own limit of
  ``search_rate_limit`` (30) requests a minute per installation (403, ``x-ratelimit-resource: search``, remaining
  0 and the minute's reset), apart from the core limit; a repository the token cannot see: 422
* ``POST /repos/{owner}/{repo}/issues/{number}/comments`` -> 201, ``PATCH .../issues/comments/{id}`` -> 200
  (issues: write, or pull_requests: write on a pull request)
* ``GET /repos/{owner}/{repo}/issues/{number}/comments`` (issues: read, or pull_requests: read on a pull
  request; paginated, ``per_page`` at most 100, ``Link`` header), oldest first
* ``GET /app/hook/deliveries`` (App JWT): the App webhook's deliveries, newest first, ``per_page`` at most 100,
  ``cursor`` paging with a ``Link: <...&cursor=...>; rel="next"`` header, ``redelivery=true|false``; each item has
  ``id``, ``guid``, ``delivered_at``, ``redelivery``, ``duration``, ``status``, ``status_code``, ``event``,
  ``action``, ``installation_id``, ``repository_id``, ``throttled_at`` (hook-delivery-item)
* ``POST /app/hook/deliveries/{id}/attempts`` (App JWT) -> 202 ``{}``; the double then delivers the same event,
  body and guid again (``redelivery: true``), as GitHub does; an unknown id is 404

Workflow runs: a dispatch (``POST .../dispatches`` with an ``event_type`` the workflow listens to, or a workflow
dispatch) starts a run of each ``set_dispatch_workflow`` workflow it triggers: ``queued``, ``event``
``repository_dispatch`` or ``workflow_dispatch``, ``display_title`` = ``run_name(request body)``, ``head_branch`` the
default branch (or the dispatched ref), its jobs queued, each with an id from a counter (a job's id is also its check
run's id: ``check_run_url``). Tests then drive it: ``start_run(repo, run_id)`` (run and unfinished jobs
``in_progress``, jobs get ``started_at`` and a runner), ``finish_run(repo, run_id, "success" | {"job": "failure"})``
(unfinished jobs completed, a job never started gets ``started_at`` = ``completed_at``; the run's conclusion is
``run_conclusion`` of all the attempt's jobs: failure if one failed or timed out, else cancelled if one was cancelled,
else skipped if all were skipped, else success), ``cancel_run(repo, run_id)`` (unfinished jobs and the run
``cancelled``). Each step, the creation and a re-run send the App the ``workflow_run`` webhook GitHub sends
(``requested``, ``in_progress``, ``completed``); ``deliver=False`` on a step sends none.

Acting as GitHub's webhook sender: ``set_webhook(url, secret)`` (the App's settings), then
``deliver(event, payload, guid=None)`` POSTs the event signed (``X-Hub-Signature-256`` and ``X-Hub-Signature``)
with GitHub's headers over a new connection, waits at most 10 s (GitHub's timeout) and records the answer as a
delivery (``hook_deliveries``, ``deliveries_of(guid)``). Status texts where the docs give none: ``OK`` for 2xx,
``Invalid HTTP Response: <code>``, ``timed out`` and ``failed to connect to host`` (both ``status_code`` 0).
``wait_redeliveries()`` waits for the redeliveries asked for to be made. The ``workflow_run`` webhooks of the runs
above the double sends by itself, only with a webhook set and only for repositories the App is installed on: queued
as the run changes and sent by one background thread in order, after the HTTP answer of the request that caused them
(GitHub delivers asynchronously), signed and recorded like ``deliver``'s; ``wait_webhooks(timeout=10)`` waits until
all queued are sent. Their body: ``action``, ``workflow_run`` (the run object as ``GET .../actions/runs/{id}``
answers it at that moment: id, name, display_title, event, status, conclusion, run_attempt, head_sha, head_branch,
path, workflow_id, url, html_url, jobs_url, created_at, updated_at, run_started_at, actor, triggering_actor,
previous_attempt_url, repository, ...), ``workflow`` (id, name, path, state, url, html_url), ``repository``,
``organization`` (for an organization's installation), ``installation`` ``{id, node_id}`` and ``sender`` (the run's
triggering actor: the App's bot for what the App dispatched or re-ran). ``drop_webhooks(predicate, record=True)``
loses those for which ``predicate(event, payload)`` holds: recorded as failed deliveries (``status_code`` 0,
"failed to connect to host"; a redelivery then really makes them), or with ``record=False`` never tried at all
(``dropped_webhooks``, like ``deliver=False``); ``drop_webhooks(None)`` stops.

Scripted faults: ``gh.script(method, path_regex, replies)``.  ``method`` is an HTTP method or
``"*"``; ``path_regex`` is matched with ``re.fullmatch`` against the request path (without the
query string), case-insensitively.  The next matching requests take the replies in order; once
they are used up the endpoint behaves normally again.  Scripted replies pre-empt everything
(authentication, validation, rate limits), as a fault in front of GitHub would.  Reply kinds:

* ``Reply(502)`` / ``Reply.error(status, message=None)`` - that status with a GitHub-shaped body
  ``{"message": ..., "documentation_url": ..., "status": "<code>"}``.
* ``Reply.too_many_requests(retry_after=60)`` - 429 with ``retry-after``.
* ``Reply.secondary_rate_limit(retry_after=60, status=403)`` - GitHub's secondary-limit answer:
  403 (or 429) "You have exceeded a secondary rate limit. Please wait a few minutes before you
  try again. ..." with ``retry-after`` (pass ``retry_after=None`` to omit it, which GitHub also
  does) while ``x-ratelimit-remaining`` stays above 0, so only the body tells it apart.
* ``Reply.primary_rate_limit(reset_in=60, status=403)`` - "API rate limit exceeded for
  installation ID N. ..." with ``x-ratelimit-remaining: 0`` and ``x-ratelimit-reset`` = now +
  ``reset_in`` (UTC epoch seconds).
* ``Reply.slow(seconds, then=None)`` - wait, then answer normally (or with ``then``).  Only that
  request's thread waits; other requests are served meanwhile.  Side effects of a normal answer
  happen after the wait, even if the client has given up by then (as on GitHub).
* ``Reply.drop(after_processing=False)`` - close the connection without an answer.  With
  ``after_processing=True`` the request is first processed normally (e.g. the dispatch IS
  accepted), then the answer is lost.
* ``Reply.accept_then_hang(seconds)`` - process the request normally at once (the dispatch IS accepted),
  then answer only after ``seconds``: a client with a shorter timeout gives up on a request GitHub carried out.
* ``Reply.normal()`` - behave normally (a gap in a sequence).
* ``Reply(status, body=..., headers=...)`` - anything else (``body``: JSON-able, bytes, or None).

Random faults: ``gh.chaos(method, path_regex, [(0.05, Reply(502)), (0.01, Reply.accept_then_hang(5))],
seed=1)`` - every matching request that no script takes draws once and gets the fault whose share it falls in,
else a normal answer. Each request records the fault that shaped it (``RecordedRequest.fault``: ``"502"``,
``"429"``, ``"secondary_403"``, ``"timeout"``, ``"drop"``, ...) and whether the double did what it asked
(``accepted``: a dispatch recorded, a redelivery made), so a duplicate can be traced to its cause.

GitHub facts this double enforces (sources: docs.github.com and the REST OpenAPI description):

* App JWT: ``RS256`` only, signed with the App key; ``iss`` = the App id (string or integer) or
  the App's client id; ``exp`` "no more than 10 minutes into the future" (``exp - now <= 600``)
  and in the future; ``iat`` at most 60 s in the future.  Messages: "A JSON web token could not
  be decoded", "'Expiration time' claim ('exp') is too far in the future", "'Expiration time'
  claim ('exp') must be a numeric value representing the future time at which the assertion
  expires", "'Issued at' claim ('iat') must be an Integer representing the time that the
  assertion was issued".  ``jwt_max_lifetime=600`` additionally enforces ``exp - iat <= 600``.
* Installation tokens expire after 1 hour; ``repositories`` / ``repository_ids`` and
  ``permissions`` can only narrow the installation (422 "There is at least one repository that
  does not exist or is not accessible to the parent installation." / "The permissions requested
  are not granted to this installation." / "The level of access for permissions requested are
  not granted to this installation.").  A suspended installation: 403 "This installation has
  been suspended".
* ``repository_dispatch``: ``event_type`` 1-100 characters; ``client_payload`` an object with "a
  maximum of 10 top-level properties" (422 "No more than 10 properties are allowed; N were
  supplied.") whose "total size ... must be less than 64KB" (we reject >= 65536 bytes of compact
  UTF-8 JSON with 422 "client_payload is too large."); needs ``contents: write``.
* Bad/expired token: 401 "Bad credentials"; a token that does not cover the repository: 404 "Not
  Found" (GitHub hides private repositories); no ``Authorization`` at all: 404 for a private
  repository, 401 "Requires authentication" for a public one; an App JWT on a repository
  endpoint: 403; missing permission: 403 "Resource not accessible by integration" (with
  ``x-accepted-github-permissions``).  ``Authorization: token <t>`` and ``Bearer <t>`` both work
  for installation tokens; App JWTs must be sent as ``Bearer``.
* Check runs: ``name`` and ``head_sha`` required (and the commit must exist: 422 "No commit found
  for SHA: ..."), status ``queued|in_progress|completed`` ("Only GitHub Actions can set a status
  of waiting, pending, or requested"), ``conclusion`` required with status ``completed`` or
  ``completed_at``, providing it sets status ``completed``, ``stale`` "only GitHub can set",
  ``output`` needs ``title`` and ``summary``, summary/text at most 65535 characters, at most 50
  annotations per request.
* Every answer carries ``x-ratelimit-limit/remaining/reset/used/resource`` and
  ``x-github-request-id``; a 304 does not count against the primary limit.  Primary limit
  (default 5000/hour per installation, and per App for JWT calls) is enforced; the secondary
  "80 content-generating requests per minute" is enforced per installation when
  ``content_writes_per_minute`` is given, and "500 content-generating requests per hour" when
  ``content_writes_per_hour`` is (each over the last 60 s / 3600 s of the double's clock).
* Issue comments: ``body`` required, a string of at most 65536 characters (422 "Validation Failed" with
  ``errors: [{resource: IssueComment, code: custom, field: body, message: "body is too long (maximum is
  65536 characters)"}]``); an unknown issue or comment is 404; a comment made with an installation token is
  the App's bot user's (``user.login`` ``<slug>[bot]``, ``user.type`` ``Bot``) with
  ``performed_via_github_app`` set to the App.
* A request without ``User-Agent`` is refused (403), and an unsupported ``X-GitHub-Api-Version``
  is a 400, as on GitHub.
"""

from __future__ import annotations

import base64
import contextlib
import copy
import dataclasses
import hashlib
import hmac
import http.client
import itertools
import json
import math
import random
import re
import secrets
import socket
import threading
import time
import uuid
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, quote, unquote, urlsplit

import jwt
from cryptography.hazmat.primitives.serialization import load_pem_public_key

__all__ = ["DEFAULT_PERMISSIONS", "GitHubDouble", "RecordedRequest", "Reply", "TokenInfo", "run_conclusion"]

DOCS = "https://docs.github.com/rest"
DOC_TOKEN = "https://docs.github.com/rest/apps/apps#create-an-installation-access-token-for-an-app"
DOC_REPO_INSTALLATION = "https://docs.github.com/rest/apps/apps#get-a-repository-installation-for-the-authenticated-app"
DOC_DISPATCH = "https://docs.github.com/rest/repos/repos#create-a-repository-dispatch-event"
DOC_CHECK_CREATE = "https://docs.github.com/rest/checks/runs#create-a-check-run"
DOC_CHECK_UPDATE = "https://docs.github.com/rest/checks/runs#update-a-check-run"
DOC_CHECK_LIST = "https://docs.github.com/rest/checks/runs#list-check-runs-in-a-check-suite"
DOC_RUN_GET = "https://docs.github.com/rest/actions/workflow-runs#get-a-workflow-run"
DOC_RUN_RERUN = "https://docs.github.com/rest/actions/workflow-runs#re-run-failed-jobs-from-a-workflow-run"
DOC_CONTENTS = "https://docs.github.com/rest/repos/contents#get-repository-content"
DOC_COMMIT = "https://docs.github.com/rest/commits/commits#get-a-commit"
DOC_COMMENT_CREATE = "https://docs.github.com/rest/issues/comments#create-an-issue-comment"
DOC_COMMENT_UPDATE = "https://docs.github.com/rest/issues/comments#update-an-issue-comment"
DOC_COMMENT_LIST = "https://docs.github.com/rest/issues/comments#list-issue-comments"
DOC_GIT_REF = "https://docs.github.com/rest/git/refs#get-a-reference"
DOC_GIT_REF_CREATE = "https://docs.github.com/rest/git/refs#create-a-reference"
DOC_GIT_REF_UPDATE = "https://docs.github.com/rest/git/refs#update-a-reference"
DOC_CONTENTS_PUT = "https://docs.github.com/rest/repos/contents#create-or-update-file-contents"
DOC_PULLS_LIST = "https://docs.github.com/rest/pulls/pulls#list-pull-requests"
DOC_PULLS_CREATE = "https://docs.github.com/rest/pulls/pulls#create-a-pull-request"
DOC_PULLS_UPDATE = "https://docs.github.com/rest/pulls/pulls#update-a-pull-request"
DOC_PULL_FILES = "https://docs.github.com/rest/pulls/pulls#list-pull-requests-files"
DOC_COMPARE = "https://docs.github.com/rest/commits/commits#compare-two-commits"
DOC_SEARCH_ISSUES = "https://docs.github.com/rest/search/search#search-issues-and-pull-requests"
MAX_COMPARE_FILES = 300  # a comparison names at most this many files (more are left out, unannounced)
DOC_COLLABORATOR_PERMISSION = (
    "https://docs.github.com/rest/collaborators/collaborators#get-repository-permissions-for-a-user"
)
DOC_REACTION_CREATE = "https://docs.github.com/rest/reactions/reactions#create-reaction-for-an-issue-comment"
REACTIONS = ("+1", "-1", "laugh", "confused", "heart", "hooray", "rocket", "eyes")
DOC_RUNS_LIST = "https://docs.github.com/rest/actions/workflow-runs#list-workflow-runs-for-a-repository"
DOC_LABELS_ADD = "https://docs.github.com/rest/issues/labels#add-labels-to-an-issue"
DOC_HOOK_DELIVERIES = "https://docs.github.com/rest/apps/webhooks#list-deliveries-for-an-app-webhook"
DOC_HOOK_REDELIVER = "https://docs.github.com/rest/apps/webhooks#redeliver-a-delivery-for-an-app-webhook"
DOC_WORKFLOW_DISPATCH = "https://docs.github.com/rest/actions/workflows#create-a-workflow-dispatch-event"
DOC_WORKFLOW_DISPATCH_INPUTS = (
    "https://docs.github.com/actions/writing-workflows/workflow-syntax-for-github-actions#onworkflow_dispatchinputs"
)
DOC_JOBS_LIST = "https://docs.github.com/rest/actions/workflow-jobs#list-jobs-for-a-workflow-run"
DOC_JOBS_ATTEMPT = "https://docs.github.com/rest/actions/workflow-jobs#list-jobs-for-a-workflow-run-attempt"
DOC_WEBHOOK_WORKFLOW_RUN = "https://docs.github.com/webhooks/webhook-events-and-payloads#workflow_run"
DOC_PRIMARY = "https://docs.github.com/rest/overview/rate-limits-for-the-rest-api"
DOC_SECONDARY = (
    "https://docs.github.com/free-pro-team@latest/rest/overview/rate-limits-for-the-rest-api"
    "#about-secondary-rate-limits"
)

#: API versions GitHub currently accepts in ``X-GitHub-Api-Version`` (REST OpenAPI descriptions).
API_VERSIONS = ("2022-11-28", "2026-03-10")

#: Permissions an installation gets when ``install()`` is not told otherwise.
DEFAULT_PERMISSIONS: Mapping[str, str] = {
    "actions": "write",
    "checks": "write",
    "contents": "write",
    "metadata": "read",
}

JSON_TYPE = "application/json; charset=utf-8"
LEVELS = {"read": 1, "write": 2, "admin": 3}
CHECK_STATUSES = ("queued", "in_progress", "completed")
ACTIONS_ONLY_STATUSES = ("waiting", "requested", "pending")
CHECK_CONCLUSIONS = ("action_required", "cancelled", "failure", "neutral", "success", "skipped", "timed_out")
ANNOTATION_LEVELS = ("notice", "warning", "failure")
MAX_CLIENT_PAYLOAD_PROPERTIES = 10
MAX_CLIENT_PAYLOAD_BYTES = 64 * 1024  # "must be less than 64KB"
MAX_EVENT_TYPE = 100
MAX_OUTPUT_TEXT = 65535
MAX_ANNOTATIONS = 50
MAX_CHECK_ACTIONS = 3
MAX_RERUN_ATTEMPTS = 50
MAX_COMMENT_BODY = 65536
MAX_DELIVERIES_PER_PAGE = 100
MAX_DISPATCH_INPUTS = 25  # "The maximum number of top-level properties for inputs is 25."
MAX_DISPATCH_INPUTS_CHARS = 65535  # "The maximum payload for inputs is 65,535 characters."
#: A job's conclusion (workflow-job), and the ones "Re-run failed jobs" runs again (with the jobs' new ids).
JOB_CONCLUSIONS = ("success", "failure", "neutral", "cancelled", "skipped", "timed_out", "action_required")
RERUN_JOB_CONCLUSIONS = ("failure", "cancelled", "timed_out")
WEBHOOK_TIMEOUT_S = 10.0  # GitHub gives up on a delivery after 10 seconds
JWT_MAX_EXP_AHEAD = 600
JWT_MAX_IAT_AHEAD = 60
CONTENT_INLINE_LIMIT = 1024 * 1024
WRITE_METHODS = frozenset({"POST", "PATCH", "PUT", "DELETE"})

_SECONDARY_MESSAGE = (
    "You have exceeded a secondary rate limit. Please wait a few minutes before you try again. "
    "If you reach out to GitHub Support for help, please include the request ID {rid}."
)
_DEFAULT_MESSAGES = {
    400: "Bad Request",
    401: "Bad credentials",
    403: "Forbidden",
    404: "Not Found",
    409: "Conflict",
    422: "Validation Failed",
    429: "Too Many Requests",
    500: "Server Error",
    502: "Server Error",
    503: "Service Unavailable",
    504: (
        "We couldn't respond to your request in time. Sorry about that. Please try resubmitting "
        "your request and contact us if the problem persists."
    ),
}
_NO_USER_AGENT = (
    "Request forbidden by administrative rules. Please make sure your request has a User-Agent "
    "header (https://docs.github.com/en/rest/overview/resources-in-the-rest-api#user-agent-required). "
    "Check https://developer.github.com for other possible causes.\n"
)


# --------------------------------------------------------------------------------------------
# Public value types
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Reply:
    """One scripted answer.  ``status=None`` means "answer normally" (after ``delay``)."""

    status: int | None = None
    message: str | None = None
    body: Any = None
    headers: Mapping[str, str] = field(default_factory=dict)
    delay: float = 0.0
    close_connection: bool = False
    after_processing: bool = False
    retry_after: int | None = None
    reset_in: float | None = None
    kind: str = "error"
    delay_after: float = 0.0  # processed at once, answered only this much later (the client has given up)
    hold: threading.Event | None = None  # processed at once, answered only when the test sets this event

    @classmethod
    def error(cls, status: int, message: str | None = None, headers: Mapping[str, str] | None = None) -> Reply:
        return cls(status=status, message=message, headers=dict(headers or {}))

    @classmethod
    def too_many_requests(cls, retry_after: int = 60, message: str | None = None) -> Reply:
        return cls(status=429, message=message, retry_after=retry_after, kind="too_many")

    @classmethod
    def secondary_rate_limit(cls, retry_after: int | None = 60, status: int = 403) -> Reply:
        return cls(status=status, retry_after=retry_after, kind="secondary")

    @classmethod
    def primary_rate_limit(cls, reset_in: float = 60, status: int = 403) -> Reply:
        return cls(status=status, reset_in=reset_in, kind="primary")

    @classmethod
    def slow(cls, seconds: float, then: Reply | None = None) -> Reply:
        return dataclasses.replace(then or cls(), delay=seconds)

    @classmethod
    def drop(cls, after_processing: bool = False) -> Reply:
        return cls(close_connection=True, after_processing=after_processing)

    @classmethod
    def accept_then_hang(cls, seconds: float) -> Reply:
        """Do what was asked at once (e.g. accept the dispatch), then answer only after ``seconds``: a client with
        a shorter timeout gives up on a request GitHub did carry out."""
        return cls(delay_after=seconds, kind="timeout")

    @classmethod
    def held(cls, release: threading.Event) -> Reply:
        """Do what was asked at once, answer only when ``release`` is set: what the client does next waits on
        what the test does meanwhile."""
        return cls(hold=release, kind="held")

    @classmethod
    def normal(cls) -> Reply:
        return cls()

    @property
    def label(self) -> str:
        """What kind of fault this is, as ``RecordedRequest.fault`` names it."""
        if self.close_connection:
            return "drop_after_processing" if self.after_processing else "drop"
        if self.status is None:
            if self.hold is not None:
                return "held"
            return "timeout" if self.delay_after else ("slow" if self.delay else "normal")
        return {"too_many": "429", "secondary": "secondary_403", "primary": "primary_limit"}.get(
            self.kind, str(self.status)
        )


@dataclass
class RecordedRequest:
    """One request as the double saw it, and what it answered."""

    method: str
    path: str
    query: dict[str, list[str]]
    headers: dict[str, str]
    body: bytes
    json: Any
    time: float
    status: int | None = None
    outcome: str = "pending"  # answered | scripted | dropped | client-gone | pending
    response_headers: dict[str, str] = field(default_factory=dict)
    response_body: bytes = b""
    installation_id: int | None = None
    fault: str | None = None  # the scripted or random fault that shaped the answer (Reply.label), if any
    accepted: bool = False  # the double did what was asked: a dispatch recorded, a redelivery made
    answered_at: float | None = None  # when the answer was written (clock); None: never answered

    @property
    def response_json(self) -> Any:
        try:
            return json.loads(self.response_body) if self.response_body else None
        except ValueError:
            return None


@dataclass(frozen=True)
class TokenInfo:
    """What the double remembers about an installation token it issued."""

    token: str
    installation_id: int
    repository_ids: frozenset[int] | None  # None: every repository of the installation
    permissions: Mapping[str, str]
    expires_at: float
    issued_at: float


@dataclass(frozen=True)
class HookDelivery:
    """One webhook delivery the double made as GitHub, and how the receiver answered it."""

    id: int
    guid: str
    event: str
    action: str | None
    delivered_at: float
    redelivery: bool
    status_code: int  # 0: no HTTP answer (a timeout, a refused connection)
    status: str
    duration: float
    installation_id: int | None
    repository_id: int | None
    body: bytes
    response_body: bytes = b""

    @property
    def ok(self) -> bool:
        return 200 <= self.status_code < 300

    def item(self) -> dict[str, Any]:
        """The list endpoint's item (hook-delivery-item): no request or response."""
        return {
            "id": self.id,
            "guid": self.guid,
            "delivered_at": _iso(self.delivered_at),
            "redelivery": self.redelivery,
            "duration": round(self.duration, 2),
            "status": self.status,
            "status_code": self.status_code,
            "event": self.event,
            "action": self.action,
            "installation_id": self.installation_id,
            "repository_id": self.repository_id,
            "throttled_at": None,
        }


# --------------------------------------------------------------------------------------------
# Internal state
# --------------------------------------------------------------------------------------------


@dataclass
class _Repo:
    id: int
    owner: str
    name: str
    private: bool
    default_branch: str
    installation_id: int

    @property
    def full_name(self) -> str:
        return f"{self.owner}/{self.name}"

    @property
    def key(self) -> str:
        return self.full_name.lower()


@dataclass
class _Installation:
    id: int
    account: str
    account_id: int
    target_type: str
    permissions: dict[str, str]
    repository_selection: str
    repo_keys: list[str] = field(default_factory=list)
    suspended: bool = False
    created_at: float = 0.0


@dataclass
class _File:
    content: bytes
    sha: str


@dataclass
class _Workflow:
    """A workflow file of a repository, as far as dispatches go: what starts it and which jobs each run has."""

    id: int
    name: str
    path: str
    run_name: Callable[[dict[str, Any]], str]
    jobs: tuple[str, ...]
    event_types: frozenset[str] | None  # on repository_dispatch: None = every event_type
    on_repository_dispatch: bool
    on_workflow_dispatch: bool
    created_at: float

    @property
    def file_name(self) -> str:
        return self.path.rsplit("/", 1)[-1]


@dataclass
class _Resp:
    status: int
    body: bytes = b""
    headers: dict[str, str] = field(default_factory=dict)


@dataclass
class _Ctx:
    rec: RecordedRequest
    bucket: str | None = None
    count: bool = True
    unexpected: bool = False


class _Script:
    def __init__(self, method: str, pattern: str, replies: Iterable[Reply]) -> None:
        self.method = method.upper()
        self.regex = re.compile(pattern, re.IGNORECASE)
        self.replies: deque[Reply] = deque(replies)


class _Chaos:
    def __init__(self, method: str, pattern: str, faults: Iterable[tuple[float, Reply]], rng: random.Random) -> None:
        self.method = method.upper()
        self.regex = re.compile(pattern, re.IGNORECASE)
        self.faults = list(faults)
        if sum(p for p, _ in self.faults) > 1 or any(p < 0 for p, _ in self.faults):
            raise ValueError("fault probabilities must be >= 0 and sum to at most 1")
        self.rng = rng

    def draw(self) -> Reply | None:
        x = self.rng.random()
        for probability, reply in self.faults:
            if x < probability:
                return reply
            x -= probability
        return None


def _iso(t: float) -> str:
    return datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _parse_iso(value: Any) -> float | None:
    if not isinstance(value, str):
        return None
    try:
        parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=UTC)
    return parsed.timestamp()


def _inspect(value: Any) -> str:
    """Render a value the way GitHub's (Ruby) validation messages do."""
    if value is None:
        return "nil"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, list):
        return "[" + ", ".join(_inspect(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{json.dumps(str(k))}=>{_inspect(v)}" for k, v in value.items()) + "}"
    return repr(value)


def _id_of(obj: Any) -> int | None:
    """The numeric ``id`` of a payload's object (``installation``, ``repository``), if it has one."""
    ident = obj.get("id") if isinstance(obj, dict) else None
    return ident if isinstance(ident, int) and not isinstance(ident, bool) else None


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _login_number(text: str) -> int:
    """A stable small number for a login (an account id the double makes up)."""
    return int(hashlib.sha1(text.encode(), usedforsecurity=False).hexdigest()[:6], 16)


def _node_id(kind: str, ident: int) -> str:
    return base64.b64encode(f"0{len(kind)}:{kind}{ident}".encode()).decode().rstrip("=")


def _json_resp(status: int, obj: Any, headers: Mapping[str, str] | None = None) -> _Resp:
    body = json.dumps(obj, separators=(",", ":"), ensure_ascii=False).encode()
    return _Resp(status, body, {"content-type": JSON_TYPE, **(headers or {})})


def _error(status: int, message: str, doc: str = DOCS, headers: Mapping[str, str] | None = None) -> _Resp:
    return _json_resp(status, {"message": message, "documentation_url": doc, "status": str(status)}, headers)


def _invalid(detail: str, doc: str) -> _Resp:
    return _error(422, f"Invalid request.\n\n{detail}", doc)


def _not_found(doc: str = DOCS) -> _Resp:
    return _error(404, "Not Found", doc)


def _search_match(item: Mapping[str, Any], words: list[str]) -> bool:
    """GitHub's issue search, for the qualifiers the double knows (the others are ignored)."""
    in_title = "in:title" in (w.lower() for w in words)
    text = item["title"] if in_title else f"{item['title']} {item['body']}"
    for word in words:
        key, _, value = word.partition(":")
        key = key.lower()
        if key in ("repo", "in"):
            continue
        if key == "is" and value in ("issue", "pr"):
            if (value == "pr") != ("pull_request" in item):
                return False
        elif (key == "is" and value in ("open", "closed")) or key == "state":
            if item["state"] != value:
                return False
        elif key == "created":
            op = next(o for o in (">=", "<=", ">", "<", "") if value.startswith(o))
            at, bound = item["created_at"][: len(value) - len(op)], value[len(op) :]
            ok = {">=": at >= bound, "<=": at <= bound, ">": at > bound, "<": at < bound, "": at == bound}[op]
            if not ok:
                return False
        elif not value and word.lower() not in text.lower():
            return False
    return True


def run_conclusion(job_conclusions: Iterable[str | None]) -> str:
    """A completed run's conclusion as GitHub derives it from its jobs': ``failure`` if one failed (or timed out),
    else ``cancelled`` if one was cancelled, else ``skipped`` if all were skipped, else ``success``."""
    found = list(job_conclusions)
    if any(c in ("failure", "timed_out") for c in found):
        return "failure"
    if "cancelled" in found:
        return "cancelled"
    if found and all(c == "skipped" for c in found):
        return "skipped"
    return "success"


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, address: tuple[str, int], double: GitHubDouble) -> None:
        self.double = double
        super().__init__(address, _Handler)


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "GitHub.com"
    sys_version = ""
    timeout = 30  # idle keep-alive connections end on their own
    server: _Server

    def setup(self) -> None:
        super().setup()
        with contextlib.suppress(OSError):  # small answers must not wait on Nagle + delayed ACK
            self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def log_message(self, format: str, *args: Any) -> None:
        return

    def _serve(self) -> None:
        try:
            body = self._read_body()
        except (OSError, ValueError):
            self.close_connection = True
            return
        self.server.double._serve(self, body)

    do_GET = do_POST = do_PATCH = do_PUT = do_DELETE = do_HEAD = do_OPTIONS = _serve

    def _read_body(self) -> bytes:
        if "chunked" in self.headers.get("Transfer-Encoding", "").lower():
            chunks = []
            while True:
                size = int(self.rfile.readline().split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                        pass
                    return b"".join(chunks)
                chunks.append(self.rfile.read(size))
                self.rfile.readline()
        length = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(length) if length > 0 else b""


# --------------------------------------------------------------------------------------------
# The double
# --------------------------------------------------------------------------------------------


class GitHubDouble:
    """A strict in-process GitHub REST API served over HTTP.  See the module docstring."""

    def __init__(
        self,
        app_id: str | int,
        app_public_key_pem: bytes | str,
        *,
        client_id: str | None = None,
        app_slug: str = "crcr-test-app",
        content_writes_per_minute: int | None = None,
        content_writes_per_hour: int | None = None,
        primary_rate_limit: int = 5000,
        token_ttl: float = 3600.0,
        jwt_max_lifetime: int | None = None,
        require_known_commits: bool = True,
        clock: Callable[[], float] = time.time,
        host: str = "127.0.0.1",
        webhook_timeout_s: float = WEBHOOK_TIMEOUT_S,
    ) -> None:
        pem = app_public_key_pem.encode() if isinstance(app_public_key_pem, str) else app_public_key_pem
        self.app_id = str(app_id)
        self.client_id = client_id
        self.app_slug = app_slug
        self.content_writes_per_minute = content_writes_per_minute
        self.content_writes_per_hour = content_writes_per_hour
        self.primary_rate_limit = primary_rate_limit
        self.token_ttl = token_ttl
        self.jwt_max_lifetime = jwt_max_lifetime
        self.require_known_commits = require_known_commits
        self.clock = clock
        self._public_key = load_pem_public_key(pem)
        self._lock = threading.RLock()
        self._stopping = threading.Event()
        self._requests: list[RecordedRequest] = []
        self.internal_errors: list[Exception] = []
        self._unexpected: list[RecordedRequest] = []
        self._scripts: list[_Script] = []
        self._chaos: list[_Chaos] = []
        self.webhook_timeout_s = webhook_timeout_s
        self._webhook: tuple[str, bytes] | None = None  # the App's webhook URL and secret
        self._hook_id = 490_000_001  # X-GitHub-Hook-ID of the App's webhook
        self._hook_deliveries: list[HookDelivery] = []
        self._hook_ids = itertools.count(70_000_000_001)
        self._redelivering: set[threading.Thread] = set()
        self._installations: dict[int, _Installation] = {}
        self._repos: dict[str, _Repo] = {}
        self._tokens: dict[str, TokenInfo] = {}
        self._dispatches: list[tuple[str, dict[str, Any]]] = []
        self._reruns: list[tuple[str, int, Any]] = []
        self._check_runs: dict[int, dict[str, Any]] = {}
        self._check_run_owner: dict[int, tuple[str, str]] = {}  # id -> (repo key, app slug)
        self._suites: dict[tuple[str, str, str], int] = {}
        self._suite_repo: dict[int, str] = {}
        self._workflow_runs: dict[tuple[str, int], dict[str, Any]] = {}
        self._issues: dict[tuple[str, int], bool] = {}  # (repo key, number) -> is a pull request
        self._comments: dict[int, dict[str, Any]] = {}
        self._comment_issue: dict[int, tuple[str, int]] = {}
        self._comment_writes: list[tuple[str, str, int, str]] = []  # (repo key, method, id, body)
        self._comment_ids = itertools.count(2_100_000_001)
        self._files: dict[tuple[str, str, str], _File] = {}
        self._pulls: dict[tuple[str, int], dict[str, Any]] = {}  # (repo key, number) -> pull request
        self._pull_files: dict[tuple[str, int], list[dict[str, Any]]] = {}
        self._head_files: dict[tuple[str, str], list[dict[str, Any]]] = {}  # (repo key, head sha) -> its files
        self._collaborators: dict[tuple[str, str], str] = {}  # (repo key, login lower) -> role name
        self._workflows: dict[str, dict[str, _Workflow]] = {}  # repo key -> path -> the workflows dispatches start
        self._workflow_ids = itertools.count(161_335_001)
        self._job_ids = itertools.count(30_000_000_001)  # a job's id is also its check run's id
        self._jobs: dict[tuple[str, int], dict[int, list[dict[str, Any]]]] = {}  # (repo key, run id) -> attempt -> jobs
        self._workflow_dispatches: list[tuple[str, str, dict[str, Any]]] = []  # (repo key, workflow path, body)
        self._legacy_dispatch: set[str] | bool = False  # True: every repository; a set: those repository keys
        # The webhooks the double sends by itself (workflow_run), one sender thread, in order.
        self._hook_cond = threading.Condition()
        self._hook_queue: deque[tuple[str, bytes, str, str]] = deque()  # (event, body, guid, "send"|"fail")
        self._hook_busy = False
        self._hook_sender: threading.Thread | None = None
        self._hook_guids = itertools.count(0x5EB1_0000_0000_0000_0000_0000_0000_0001)
        self._hook_drop: tuple[Callable[[str, Mapping[str, Any]], bool], bool] | None = None  # (predicate, record)
        self._dropped_hooks: list[tuple[str, dict[str, Any]]] = []
        self._reactions: dict[int, list[dict[str, Any]]] = {}  # comment id -> reactions
        self._issue_numbers = itertools.count(180_001)
        self._commits: dict[str, set[str]] = {}
        # A repository's commit history (add_history): sha -> (first parent, message, author login, ISO date).
        self._history: dict[tuple[str, str], tuple[str | None, str, str, str]] = {}
        self._searchable: dict[str, dict[int, dict[str, Any]]] = {}  # repo key -> number -> issue item
        self._search_hits: dict[tuple[int, int], int] = {}  # (installation, minute) -> searches
        self.search_rate_limit = 30
        self._branches: dict[tuple[str, str], str] = {}
        self._refs: dict[str, set[str]] = {}
        self._buckets: dict[str, list[float]] = {}  # key -> [window_start, used]
        self._writes: dict[int, deque[float]] = {}
        self._writes_hour: dict[int, deque[float]] = {}
        self._ids = itertools.count(1001)
        self._account_ids = itertools.count(9_000_001)
        self._check_run_ids = itertools.count(4_000_000_001)
        self._suite_ids = itertools.count(5_000_000_001)
        self._routes: list[tuple[str, re.Pattern[str], Callable[..., _Resp]]] = [
            ("POST", re.compile(r"/app/installations/(\d+)/access_tokens"), self._h_access_token),
            ("GET", re.compile(r"/repos/([^/]+)/([^/]+)/installation"), self._h_repo_installation),
            ("POST", re.compile(r"/repos/([^/]+)/([^/]+)/dispatches"), self._h_dispatch),
            ("POST", re.compile(r"/repos/([^/]+)/([^/]+)/check-runs"), self._h_check_create),
            ("PATCH", re.compile(r"/repos/([^/]+)/([^/]+)/check-runs/(\d+)"), self._h_check_update),
            ("GET", re.compile(r"/repos/([^/]+)/([^/]+)/check-suites/(\d+)/check-runs"), self._h_check_list),
            ("GET", re.compile(r"/repos/([^/]+)/([^/]+)/actions/runs/(\d+)"), self._h_run_get),
            (
                "POST",
                re.compile(r"/repos/([^/]+)/([^/]+)/actions/runs/(\d+)/rerun-failed-jobs"),
                self._h_run_rerun,
            ),
            ("GET", re.compile(r"/repos/([^/]+)/([^/]+)/contents/(.+)"), self._h_contents),
            ("PUT", re.compile(r"/repos/([^/]+)/([^/]+)/contents/(.+)"), self._h_contents_put),
            ("GET", re.compile(r"/repos/([^/]+)/([^/]+)/git/ref/(.+)"), self._h_git_ref),
            ("POST", re.compile(r"/repos/([^/]+)/([^/]+)/git/refs"), self._h_git_ref_create),
            ("PATCH", re.compile(r"/repos/([^/]+)/([^/]+)/git/refs/(.+)"), self._h_git_ref_update),
            ("GET", re.compile(r"/repos/([^/]+)/([^/]+)/pulls"), self._h_pulls_list),
            ("POST", re.compile(r"/repos/([^/]+)/([^/]+)/pulls"), self._h_pulls_create),
            ("PATCH", re.compile(r"/repos/([^/]+)/([^/]+)/pulls/(\d+)"), self._h_pulls_update),
            ("GET", re.compile(r"/repos/([^/]+)/([^/]+)/pulls/(\d+)/files"), self._h_pull_files),
            (
                "GET",
                re.compile(r"/repos/([^/]+)/([^/]+)/compare/([0-9a-fA-F]{40})\.\.\.([0-9a-fA-F]{40})"),
                self._h_compare,
            ),
            ("GET", re.compile(r"/repos/([^/]+)/([^/]+)/actions/runs"), self._h_runs_list),
            ("GET", re.compile(r"/repos/([^/]+)/([^/]+)/collaborators/([^/]+)/permission"), self._h_permission),
            (
                "POST",
                re.compile(r"/repos/([^/]+)/([^/]+)/issues/comments/(\d+)/reactions"),
                self._h_reaction_create,
            ),
            ("POST", re.compile(r"/repos/([^/]+)/([^/]+)/issues/(\d+)/labels"), self._h_labels_add),
            ("GET", re.compile(r"/repos/([^/]+)/([^/]+)/commits/(.+)"), self._h_commit),
            ("POST", re.compile(r"/repos/([^/]+)/([^/]+)/issues/(\d+)/comments"), self._h_comment_create),
            ("GET", re.compile(r"/repos/([^/]+)/([^/]+)/issues/(\d+)/comments"), self._h_comment_list),
            ("PATCH", re.compile(r"/repos/([^/]+)/([^/]+)/issues/comments/(\d+)"), self._h_comment_update),
            ("GET", re.compile(r"/search/issues"), self._h_search_issues),
            ("GET", re.compile(r"/app/hook/deliveries"), self._h_hook_deliveries),
            ("POST", re.compile(r"/app/hook/deliveries/(\d+)/attempts"), self._h_hook_redeliver),
            ("GET", re.compile(r"/repos/([^/]+)/([^/]+)/actions/runs/(\d+)/jobs"), self._h_jobs_list),
            (
                "GET",
                re.compile(r"/repos/([^/]+)/([^/]+)/actions/runs/(\d+)/attempts/(\d+)/jobs"),
                self._h_jobs_attempt,
            ),
            (
                "POST",
                re.compile(r"/repos/([^/]+)/([^/]+)/actions/workflows/([^/]+)/dispatches"),
                self._h_workflow_dispatch,
            ),
        ]
        self._server = _Server((host, 0), self)
        self.port: int = self._server.server_address[1]
        self.url = f"http://{host}:{self.port}"
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.01}, daemon=True)
        self._thread.start()

    # ---------------------------------------------------------------- lifecycle

    def stop(self) -> None:
        """Stop serving; wakes any request that is still waiting on a scripted delay."""
        if self._stopping.is_set():
            return
        self._stopping.set()
        with self._hook_cond:
            self._hook_cond.notify_all()
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)
        if self._hook_sender is not None:
            self._hook_sender.join(timeout=1)

    def __enter__(self) -> GitHubDouble:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # ---------------------------------------------------------------- world set-up

    def install(
        self,
        full_name: str,
        *,
        installation_id: int,
        repo_id: int | None = None,
        permissions: Mapping[str, str] | None = None,
        private: bool = True,
        default_branch: str = "main",
        repository_selection: str = "selected",
        target_type: str = "Organization",
    ) -> None:
        """Install the App on ``owner/name``; calling again with the same id adds a repository.

        One account has at most one installation of the App (as on GitHub); permissions given
        for an existing installation must match (use ``set_installation_permissions`` to change).
        """
        owner, _, _ = full_name.partition("/")
        with self._lock:
            inst = self._installations.get(installation_id)
            if inst is None:
                for other in self._installations.values():
                    if other.account.lower() == owner.lower():
                        raise ValueError(f"{owner} already has installation {other.id} of this App")
                if repository_selection not in ("selected", "all"):
                    raise ValueError("repository_selection must be 'selected' or 'all'")
                inst = _Installation(
                    id=installation_id,
                    account=owner,
                    account_id=next(self._account_ids),
                    target_type=target_type,
                    permissions=dict(DEFAULT_PERMISSIONS if permissions is None else permissions),
                    repository_selection=repository_selection,
                    created_at=self.clock(),
                )
                self._installations[installation_id] = inst
            elif permissions is not None and dict(permissions) != inst.permissions:
                raise ValueError(
                    f"installation {installation_id} has permissions {inst.permissions}; "
                    "use set_installation_permissions() to change them"
                )
        self.add_repo_to_installation(
            installation_id, full_name, repo_id=repo_id, private=private, default_branch=default_branch
        )

    def add_repo_to_installation(
        self,
        installation_id: int,
        full_name: str,
        *,
        repo_id: int | None = None,
        private: bool = True,
        default_branch: str = "main",
    ) -> None:
        owner, sep, name = full_name.partition("/")
        if not sep or not owner or not name or "/" in name:
            raise ValueError(f"not an owner/name repository: {full_name!r}")
        with self._lock:
            inst = self._installations[installation_id]
            if owner.lower() != inst.account.lower():
                raise ValueError(f"installation {installation_id} belongs to {inst.account}, not {owner}")
            key = full_name.lower()
            existing = self._repos.get(key)
            if existing is not None:
                if existing.installation_id != installation_id:
                    raise ValueError(f"{full_name} is in installation {existing.installation_id}")
                if repo_id is not None and repo_id != existing.id:
                    raise ValueError(f"{full_name} already has id {existing.id}")
                return
            taken = {r.id for r in self._repos.values()}
            if repo_id is not None and repo_id in taken:
                raise ValueError(f"repository id {repo_id} is taken")
            rid = repo_id
            while rid is None or rid in taken:
                rid = next(self._ids)
            self._repos[key] = _Repo(rid, inst.account, name, private, default_branch, installation_id)
            inst.repo_keys.append(key)

    def remove_repo_from_installation(self, full_name: str) -> None:
        """Take a repository out of its installation (tokens stop covering it at once)."""
        with self._lock:
            repo = self._repos.pop(full_name.lower())
            self._installations[repo.installation_id].repo_keys.remove(repo.key)

    def set_installation_permissions(self, installation_id: int, permissions: Mapping[str, str]) -> None:
        """Change what the installation grants; tokens already issued keep their own scope."""
        with self._lock:
            self._installations[installation_id].permissions = dict(permissions)

    def suspend_installation(self, installation_id: int, suspended: bool = True) -> None:
        with self._lock:
            self._installations[installation_id].suspended = suspended

    def put_file(self, repo: str, path: str, ref: str, content: bytes | str) -> str:
        """Serve ``content`` at ``path`` for ``ref`` (a branch name or a 40-hex commit sha, which then
        counts as a commit of ``repo``); returns the git blob sha GitHub would report."""
        data = content.encode() if isinstance(content, str) else bytes(content)
        sha = hashlib.sha1(b"blob %d\x00" % len(data) + data, usedforsecurity=False).hexdigest()
        with self._lock:
            self._files[(repo.lower(), path.strip("/"), ref)] = _File(data, sha)
            self._refs.setdefault(repo.lower(), set()).add(ref)
            if re.fullmatch(r"[0-9a-fA-F]{40}", ref):  # a file at a commit implies the commit
                self._commits.setdefault(repo.lower(), set()).add(ref.lower())
        return sha

    def pulls(self, repo: str) -> list[dict[str, Any]]:
        """The repository's pull requests (the relay's and seeded ones), oldest first."""
        with self._lock:
            return [copy.deepcopy(p) for (k, _), p in sorted(self._pulls.items()) if k == repo.lower()]

    def set_dispatch_workflow(
        self,
        repo: str,
        run_name: Callable[[dict[str, Any]], str],
        *,
        name: str = "CI",
        path: str = ".github/workflows/ci.yml",
        jobs: Iterable[str] = ("build-and-test",),
        event_types: Iterable[str] | None = None,
        on_repository_dispatch: bool = True,
        on_workflow_dispatch: bool = False,
    ) -> None:
        """`repo` has the workflow `path` (named `name`, with `jobs`): every accepted dispatch it listens to starts a
        run of it at once, titled `run_name(body)` (the workflow's run-name, evaluated on the request's body: a
        repository_dispatch's event_type and client_payload, a workflow dispatch's ref and inputs).

        On repository_dispatch (unless `on_repository_dispatch=False`) it listens to every event_type, or only to
        `event_types` when given (`on: repository_dispatch: types: [...]`); with `on_workflow_dispatch=True` it also
        has a `workflow_dispatch` trigger, so ``POST .../actions/workflows/{id or file name}/dispatches`` starts it.
        A repository can have several such workflows (one per `path`); calling again with the same `path` replaces
        that one and keeps its id. A run starts `queued` with its jobs queued, and the App gets `workflow_run`
        `requested` (see ``start_run`` / ``finish_run`` / ``cancel_run`` for the rest of its life)."""
        names = tuple(jobs)
        if not names or len(set(names)) != len(names):
            raise ValueError(f"jobs must be at least one distinct job name, not {names!r}")
        clean = path.strip("/")
        with self._lock:
            workflows = self._workflows.setdefault(repo.lower(), {})
            existing = workflows.get(clean)
            workflows[clean] = _Workflow(
                id=existing.id if existing is not None else next(self._workflow_ids),
                name=name,
                path=clean,
                run_name=run_name,
                jobs=names,
                event_types=frozenset(event_types) if event_types is not None else None,
                on_repository_dispatch=on_repository_dispatch,
                on_workflow_dispatch=on_workflow_dispatch,
                created_at=existing.created_at if existing is not None else self.clock(),
            )

    def legacy_dispatch(self, repo_or_all: str | bool = True) -> None:
        """Answer workflow dispatches as a GitHub Enterprise Server older than ``return_run_details`` does: 204 with
        no body whatever the request asks (the run is still created). ``True``: every repository; ``False``: none
        again; a repository name: that one too."""
        with self._lock:
            if isinstance(repo_or_all, bool):
                self._legacy_dispatch = repo_or_all
            elif self._legacy_dispatch is not True:
                legacy = self._legacy_dispatch if isinstance(self._legacy_dispatch, set) else set()
                self._legacy_dispatch = legacy | {repo_or_all.lower()}

    def add_collaborator(self, repo: str, login: str, role: str) -> None:
        """`login` has `role` (admin, maintain, write, triage, read) on `repo`."""
        with self._lock:
            self._collaborators[(repo.lower(), login.lower())] = role

    def reactions(self, comment_id: int) -> list[str]:
        """The reactions the App left on a comment, in order."""
        with self._lock:
            return [r["content"] for r in self._reactions.get(comment_id, [])]

    def set_pull_files(
        self, repo: str, number: int, files: list[str | tuple[str, str]], *, head: str | None = None
    ) -> None:
        """The files pull request `number` changes now: a name, or (new name, previous name) for a rename; with
        `head`, also what comparing that commit with any base names (``GET …/compare/{base}...{head}``), kept for
        that head after the PR moves on, as GitHub's commits are."""
        entries = []
        for f in files:
            name, previous = (f, None) if isinstance(f, str) else f
            entry: dict[str, Any] = {"filename": name, "status": "renamed" if previous else "modified"}
            if previous:
                entry["previous_filename"] = previous
            entries.append(entry)
        with self._lock:
            self._pull_files[(repo.lower(), number)] = entries
            if head is not None:
                self._head_files[(repo.lower(), head.lower())] = entries
                self._commits.setdefault(repo.lower(), set()).add(head.lower())

    def file_at(self, repo: str, path: str, ref: str) -> bytes | None:
        """The file's content at a branch or commit, as the contents API would serve it."""
        with self._lock:
            found = self._find_file(self._repos[repo.lower()], path.strip("/"), ref)
        return found.content if found is not None else None

    def branch_head(self, repo: str, branch: str) -> str | None:
        with self._lock:
            return self._branches.get((repo.lower(), branch))

    def add_history(self, repo: str, commits: list[dict[str, Any]]) -> None:
        """Commits of ``repo`` with their first parent, message, author and date (oldest first): what comparing two
        of them lists (``GET …/compare/{base}...{head}``'s ``commits``)."""
        with self._lock:
            for c in commits:
                sha = str(c["sha"]).lower()
                self._commits.setdefault(repo.lower(), set()).add(sha)
                parent = str(c["parent"]).lower() if c.get("parent") else None
                self._history[(repo.lower(), sha)] = (parent, str(c["message"]), str(c["author"]), str(c["date"]))

    def add_search_issue(
        self,
        repo: str,
        number: int,
        title: str,
        body: str = "",
        *,
        created_at: str = "2026-12-01T00:00:00Z",
        state: str = "open",
        pull_request: bool = False,
        author: str = "pytorch-bot[bot]",
        association: str = "NONE",
    ) -> None:
        """An issue (or pull request) of ``repo`` that ``GET /search/issues`` finds, opened by ``author`` whose
        ``author_association`` with the repository is ``association`` (an App's bot user has none)."""
        full = self._repos[repo.lower()].full_name if repo.lower() in self._repos else repo
        user = {"login": author, "id": _login_number(author), "type": "Bot" if author.endswith("[bot]") else "User"}
        item: dict[str, Any] = {
            "url": f"{self.url}/repos/{full}/issues/{number}",
            "html_url": f"https://github.com/{full}/{'pull' if pull_request else 'issues'}/{number}",
            "number": number, "title": title, "body": body, "state": state, "created_at": created_at,
            "updated_at": created_at, "user": user, "author_association": association, "labels": [],
            "comments": 0, "score": 1.0,
        }  # fmt: skip
        if pull_request:
            item["pull_request"] = {"url": f"{self.url}/repos/{full}/pulls/{number}"}
        with self._lock:
            self._searchable.setdefault(repo.lower(), {})[number] = item

    def add_commit(self, repo: str, sha: str, *, branch: str | None = None) -> None:
        """Make ``sha`` a commit of ``repo`` (and, with ``branch``, that branch's head)."""
        with self._lock:
            self._commits.setdefault(repo.lower(), set()).add(sha.lower())
            if branch is not None:
                self._branches[(repo.lower(), branch)] = sha.lower()
                self._refs.setdefault(repo.lower(), set()).add(branch)

    def add_workflow_run(
        self,
        repo: str,
        run_id: int,
        *,
        head_sha: str = "0" * 40,
        status: str = "completed",
        conclusion: str | None = "failure",
        name: str = "CI",
        event: str = "repository_dispatch",
        head_branch: str = "main",
        run_attempt: int = 1,
        path: str = ".github/workflows/ci.yml",
        jobs: Iterable[str] = ("build-and-test",),
    ) -> dict[str, Any]:
        """Seed a run (no webhook is sent for it). Its `jobs` (listed under attempt `run_attempt` only) share the
        run's status and conclusion: a failed run's jobs failed, so re-running its failed jobs re-runs them all."""
        with self._lock:
            run = self._new_run(
                repo,
                run_id,
                head_sha=head_sha,
                status=status,
                conclusion=conclusion,
                name=name,
                event=event,
                head_branch=head_branch,
                run_attempt=run_attempt,
                path=path,
                workflow_id=161335,
                display_title=name,
                actor=self._owner_obj("octocat", 583231, "User"),
            )
            now = self.clock()
            made = [self._new_job(run, job_name, now) for job_name in jobs]
            for job in made:
                if status == "in_progress":
                    self._start_job(job, now)
                elif status == "completed":
                    self._finish_job(job, conclusion or "success", now)
            self._jobs[(repo.lower(), run_id)] = {run_attempt: made}
            return copy.deepcopy(run)

    def start_run(self, repo: str, run_id: int, *, deliver: bool = True) -> dict[str, Any]:
        """A runner picked the queued run up: it and its unfinished jobs are `in_progress` (the jobs get
        `started_at` and a runner); the App gets `workflow_run` `in_progress` (none with `deliver=False`: GitHub
        lost it before sending). Returns the run."""
        key = repo.lower()
        with self._lock:
            run = self._workflow_runs[(key, run_id)]
            if run["status"] != "queued":
                raise ValueError(f"run {run_id} is {run['status']}, not queued")
            now = self.clock()
            run.update(status="in_progress", updated_at=_iso(now))
            for job in self._jobs_now(key, run_id):
                if job["status"] != "completed":
                    self._start_job(job, now)
            self._workflow_run_hook(key, run, "in_progress", deliver=deliver)
            return copy.deepcopy(run)

    def finish_run(
        self, repo: str, run_id: int, conclusions: Mapping[str, str] | str = "success", *, deliver: bool = True
    ) -> dict[str, Any]:
        """Every unfinished job of the run's latest attempt completes with its conclusion (`conclusions`: one for
        all, or per job name, those not named succeeding); a job never started gets `started_at` = `completed_at`.
        The run completes with the conclusion GitHub derives from all the attempt's jobs (``run_conclusion``), and
        the App gets `workflow_run` `completed` (none with `deliver=False`). Returns the run."""
        key = repo.lower()
        with self._lock:
            run = self._workflow_runs[(key, run_id)]
            if run["status"] == "completed":
                raise ValueError(f"run {run_id} is already completed")
            jobs = self._jobs_now(key, run_id)
            open_jobs = [j for j in jobs if j["status"] != "completed"]
            if isinstance(conclusions, str):
                wanted = {j["name"]: conclusions for j in open_jobs}
            else:
                unknown = set(conclusions) - {j["name"] for j in open_jobs}
                if unknown:
                    raise ValueError(f"run {run_id} has no unfinished jobs named {sorted(unknown)}")
                wanted = {j["name"]: conclusions.get(j["name"], "success") for j in open_jobs}
            bad = sorted({c for c in wanted.values() if c not in JOB_CONCLUSIONS})
            if bad:
                raise ValueError(f"not job conclusions: {bad}")
            now = self.clock()
            for job in open_jobs:
                self._finish_job(job, wanted[job["name"]], now)
            run.update(
                status="completed", conclusion=run_conclusion(j["conclusion"] for j in jobs), updated_at=_iso(now)
            )
            self._workflow_run_hook(key, run, "completed", deliver=deliver)
            return copy.deepcopy(run)

    def cancel_run(self, repo: str, run_id: int, *, deliver: bool = True) -> dict[str, Any]:
        """Someone cancelled the run: its unfinished jobs are `cancelled`, the run is completed `cancelled`, and the
        App gets `workflow_run` `completed` (none with `deliver=False`). Returns the run."""
        key = repo.lower()
        with self._lock:
            run = self._workflow_runs[(key, run_id)]
            if run["status"] == "completed":
                raise ValueError(f"run {run_id} is already completed")
            now = self.clock()
            for job in self._jobs_now(key, run_id):
                if job["status"] != "completed":
                    self._finish_job(job, "cancelled", now)
            run.update(status="completed", conclusion="cancelled", updated_at=_iso(now))
            self._workflow_run_hook(key, run, "completed", deliver=deliver)
            return copy.deepcopy(run)

    def drop_webhooks(self, predicate: Callable[[str, Mapping[str, Any]], bool] | None, *, record: bool = True) -> None:
        """Lose the webhooks the double sends by itself (``workflow_run``) for which ``predicate(event, payload)``
        is true, from now on; ``None`` stops losing them. With ``record=True`` a lost one is in the App's delivery
        log as a failed delivery (``status_code`` 0, "failed to connect to host"), which a redelivery (``POST
        /app/hook/deliveries/{id}/attempts``) then really makes; with ``record=False`` GitHub never tried: it is
        only in ``dropped_webhooks``. ``deliver(...)`` called by a test is never dropped."""
        with self._lock:
            self._hook_drop = (predicate, record) if predicate is not None else None

    def add_check_run(
        self,
        repo: str,
        *,
        name: str,
        head_sha: str,
        status: str = "completed",
        conclusion: str | None = "success",
        app_slug: str = "github-actions",
    ) -> dict[str, Any]:
        """Seed a check run, by default one created by another App (e.g. GitHub Actions)."""
        with self._lock:
            key = repo.lower()
            now = self.clock()
            run = self._new_check_run(key, app_slug, {"name": name, "head_sha": head_sha}, now)
            run["status"] = status
            run["conclusion"] = conclusion
            if status == "completed":
                run["completed_at"] = _iso(now)
            return copy.deepcopy(run)

    def check_suite_id(self, repo: str, head_sha: str, app_slug: str | None = None) -> int:
        """The id of the check suite of ``app_slug`` (default: this App) for ``head_sha``."""
        with self._lock:
            return self._suite_for(repo.lower(), head_sha, app_slug or self.app_slug)

    def add_issue(self, repo: str, number: int, *, pull_request: bool = True) -> None:
        """An issue (or, by default, a pull request) of ``repo`` that comments can go on."""
        with self._lock:
            self._issues[(repo.lower(), number)] = pull_request

    def add_comment(
        self, repo: str, number: int, body: str, *, user: str = "octocat", app_slug: str | None = None
    ) -> dict[str, Any]:
        """Seed a comment by a person (``user``), or by an App (``app_slug``: its bot user, through the App)."""
        with self._lock:
            return copy.deepcopy(self._new_comment(repo.lower(), number, body, app_slug, user))

    def delete_comment(self, repo: str, comment_id: int) -> None:
        """Someone deleted the comment (a maintainer, in the browser)."""
        with self._lock:
            if self._comment_issue.get(comment_id, ("", 0))[0] == repo.lower():
                self._comments.pop(comment_id)
                self._comment_issue.pop(comment_id)

    def script(self, method: str, path_pattern: str, replies: Iterable[Reply]) -> None:
        with self._lock:
            self._scripts.append(_Script(method, path_pattern, replies))

    def chaos(
        self, method: str, path_pattern: str, faults: Iterable[tuple[float, Reply]], *, seed: int | None = None
    ) -> None:
        """Random faults: each matching request that no script takes draws once, and gets the first fault whose
        share of [0, 1) the draw falls in (``[(0.05, Reply(502)), (0.02, Reply.too_many_requests(2))]``: 5 % and
        2 %), else a normal answer. The first chaos rule that matches a request decides it; ``seed`` repeats a run.
        """
        with self._lock:
            self._chaos.append(_Chaos(method, path_pattern, faults, random.Random(seed)))

    def set_webhook(self, url: str, secret: str | bytes) -> None:
        """The App's webhook URL and secret (its settings page): where ``deliver`` and redeliveries POST."""
        with self._lock:
            self._webhook = (url, secret.encode() if isinstance(secret, str) else secret)

    def expire_tokens(self) -> None:
        """Make every installation token issued so far expired."""
        with self._lock:
            past = self.clock() - 1
            self._tokens = {t: dataclasses.replace(i, expires_at=past) for t, i in self._tokens.items()}

    def reset_requests(self) -> None:
        with self._lock:
            self._requests.clear()
            self._unexpected.clear()

    # ---------------------------------------------------------------- observation

    @property
    def requests(self) -> list[RecordedRequest]:
        with self._lock:
            return list(self._requests)

    @property
    def unexpected(self) -> list[RecordedRequest]:
        with self._lock:
            return list(self._unexpected)

    @property
    def tokens(self) -> list[TokenInfo]:
        with self._lock:
            return list(self._tokens.values())

    def token_info(self, token: str) -> TokenInfo | None:
        with self._lock:
            return self._tokens.get(token)

    def dispatches(self, repo: str) -> list[dict[str, Any]]:
        with self._lock:
            return [copy.deepcopy(body) for key, body in self._dispatches if key == repo.lower()]

    def reruns(self, repo: str) -> list[int]:
        """Workflow run ids whose failed jobs were re-run (accepted requests), in order."""
        with self._lock:
            return [run_id for key, run_id, _ in self._reruns if key == repo.lower()]

    def check_runs(self, repo: str) -> list[dict[str, Any]]:
        with self._lock:
            return [
                copy.deepcopy(run)
                for cid, run in sorted(self._check_runs.items())
                if self._check_run_owner[cid][0] == repo.lower()
            ]

    def comments(self, repo: str, number: int) -> list[dict[str, Any]]:
        """The conversation of an issue or PR as it stands, oldest first."""
        with self._lock:
            return [
                copy.deepcopy(c)
                for cid, c in sorted(self._comments.items())
                if self._comment_issue[cid] == (repo.lower(), number)
            ]

    def comment_writes(self, repo: str) -> list[tuple[str, int, str]]:
        """Every accepted comment write on ``repo``: (``POST`` or ``PATCH``, comment id, body), in order."""
        with self._lock:
            return [(method, cid, body) for key, method, cid, body in self._comment_writes if key == repo.lower()]

    def workflow_run(self, repo: str, run_id: int) -> dict[str, Any]:
        with self._lock:
            return copy.deepcopy(self._workflow_runs[(repo.lower(), run_id)])

    def runs_of(self, repo: str) -> list[dict[str, Any]]:
        """The repository's workflow runs (seeded and dispatched) as they stand, oldest first."""
        with self._lock:
            return [copy.deepcopy(r) for (k, _), r in self._workflow_runs.items() if k == repo.lower()]

    def jobs_of(self, repo: str, run_id: int, attempt: int | None = None) -> list[dict[str, Any]]:
        """The jobs of a run's attempt (default: its latest), in the workflow's order, as the jobs API lists them."""
        with self._lock:
            attempts = self._jobs.get((repo.lower(), run_id), {})
            number = attempt if attempt is not None else self._workflow_runs[(repo.lower(), run_id)]["run_attempt"]
            return copy.deepcopy(attempts.get(number, []))

    def workflow_dispatches(self, repo: str) -> list[tuple[str, dict[str, Any]]]:
        """Accepted workflow dispatches: (the workflow's path, the request body), in order."""
        with self._lock:
            return [(path, copy.deepcopy(body)) for key, path, body in self._workflow_dispatches if key == repo.lower()]

    @property
    def dropped_webhooks(self) -> list[tuple[str, dict[str, Any]]]:
        """The webhooks GitHub never tried to send (``deliver=False``, ``drop_webhooks(..., record=False)``):
        (event, payload), in order."""
        with self._lock:
            return copy.deepcopy(self._dropped_hooks)

    def wait_webhooks(self, timeout: float = 10.0) -> bool:
        """Wait until every webhook the double queued by itself has been delivered (or recorded as lost); False if
        some are still waiting after `timeout` seconds."""
        with self._hook_cond:
            return self._hook_cond.wait_for(lambda: not self._hook_queue and not self._hook_busy, timeout)

    @property
    def hook_deliveries(self) -> list[HookDelivery]:
        """Every webhook delivery made (``deliver`` and redeliveries), in order."""
        with self._lock:
            return list(self._hook_deliveries)

    def deliveries_of(self, guid: str) -> list[HookDelivery]:
        with self._lock:
            return [d for d in self._hook_deliveries if d.guid == guid]

    def wait_redeliveries(self, timeout: float = 30.0) -> bool:
        """Wait until every redelivery asked for has been made; False if some are still going."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with self._lock:
                if not self._redelivering:
                    return True
            time.sleep(0.02)
        return False

    # ---------------------------------------------------------------- acting as GitHub's webhook sender

    def deliver(self, event: str, payload: bytes | Mapping[str, Any], *, guid: str | None = None) -> HookDelivery:
        """POST ``payload`` to the App's webhook as GitHub delivers an event (signed with the webhook secret, a
        new connection, GitHub's 10 s timeout) and record the answer as a delivery; returns the record."""
        body = payload if isinstance(payload, bytes) else json.dumps(payload, separators=(",", ":")).encode()
        return self._send_hook(event, body, guid or str(uuid.uuid4()), redelivery=False)

    def _send_hook(self, event: str, body: bytes, guid: str, *, redelivery: bool, lost: bool = False) -> HookDelivery:
        with self._lock:
            if self._webhook is None:
                raise RuntimeError("no webhook configured: call set_webhook(url, secret) first")
            url, secret = self._webhook
            delivery_id = next(self._hook_ids)
        try:
            parsed = json.loads(body)
        except ValueError:
            parsed = None
        doc: dict[str, Any] = parsed if isinstance(parsed, dict) else {}
        action = doc.get("action") if isinstance(doc.get("action"), str) else None
        installation_id, repository_id = (_id_of(doc.get(k)) for k in ("installation", "repository"))
        headers = {
            "Content-Type": "application/json",
            "User-Agent": "GitHub-Hookshot/crcr-double",
            "X-GitHub-Event": event,
            "X-GitHub-Delivery": guid,
            "X-GitHub-Hook-ID": str(self._hook_id),
            "X-GitHub-Hook-Installation-Target-Type": "integration",
            "X-GitHub-Hook-Installation-Target-ID": self.app_id,
            "X-Hub-Signature": "sha1=" + hmac.new(secret, body, "sha1").hexdigest(),
            "X-Hub-Signature-256": "sha256=" + hmac.new(secret, body, "sha256").hexdigest(),
        }
        target = urlsplit(url)
        started, wall = time.monotonic(), self.clock()
        status_code, status, answer = 0, "", b""
        if lost:  # drop_webhooks: GitHub tried and could not reach the receiver
            status = "failed to connect to host"
        else:
            conn = http.client.HTTPConnection(
                target.hostname or "127.0.0.1", target.port, timeout=self.webhook_timeout_s
            )
            try:
                conn.request("POST", target.path or "/", body=body, headers=headers)
                resp = conn.getresponse()
                answer = resp.read()
                status_code = resp.status
                status = "OK" if 200 <= resp.status < 300 else f"Invalid HTTP Response: {resp.status}"
            except TimeoutError:
                status = "timed out"
            except (OSError, http.client.HTTPException) as exc:
                status = f"failed to connect to host: {type(exc).__name__}"
            finally:
                conn.close()
        record = HookDelivery(
            id=delivery_id,
            guid=guid,
            event=event,
            action=action,
            delivered_at=wall,
            redelivery=redelivery,
            status_code=status_code,
            status=status,
            duration=time.monotonic() - started,
            installation_id=installation_id,
            repository_id=repository_id,
            body=body,
            response_body=answer,
        )
        with self._lock:
            self._hook_deliveries.append(record)
        return record

    def _queue_hook(self, event: str, payload: dict[str, Any], *, deliver: bool = True) -> None:
        """Queue a webhook the double sends by itself, for the sender thread (GitHub delivers asynchronously, after
        answering the request that caused it). Nothing without a webhook configured."""
        with self._lock:
            if self._webhook is None:
                return
            drop = self._hook_drop
            mode = "send" if deliver else "skip"
            if deliver and drop is not None and drop[0](event, payload):
                mode = "fail" if drop[1] else "skip"
            if mode == "skip":
                self._dropped_hooks.append((event, copy.deepcopy(payload)))
                return
            guid = str(uuid.UUID(int=next(self._hook_guids)))
        body = json.dumps(payload, separators=(",", ":")).encode()
        with self._hook_cond:
            self._hook_queue.append((event, body, guid, mode))
            if self._hook_sender is None:
                self._hook_sender = threading.Thread(target=self._hook_loop, name="github-double-hooks", daemon=True)
                self._hook_sender.start()
            self._hook_cond.notify_all()

    def _hook_loop(self) -> None:
        while True:
            with self._hook_cond:
                self._hook_cond.wait_for(lambda: self._hook_queue or self._stopping.is_set())
                if self._stopping.is_set():
                    return
                event, body, guid, mode = self._hook_queue.popleft()
                self._hook_busy = True
            try:
                self._send_hook(event, body, guid, redelivery=False, lost=mode == "fail")
            except Exception as exc:  # a bug in the double must show
                with self._lock:
                    self.internal_errors.append(exc)
            finally:
                with self._hook_cond:
                    self._hook_busy = False
                    self._hook_cond.notify_all()

    # ---------------------------------------------------------------- HTTP plumbing

    def _serve(self, handler: _Handler, body: bytes) -> None:
        split = urlsplit(handler.path)
        try:
            parsed = json.loads(body) if body else None
        except ValueError:
            parsed = None
        rec = RecordedRequest(
            method=handler.command,
            path=unquote(split.path),
            query=parse_qs(split.query, keep_blank_values=True),
            headers={k.lower(): v for k, v in handler.headers.items()},
            body=body,
            json=parsed,
            time=self.clock(),
        )
        rec_raw_path = split.path
        with self._lock:
            self._requests.append(rec)
            reply = self._take_scripted(rec)
        ctx = _Ctx(rec)
        if reply is None:
            resp = self._process(ctx, rec_raw_path)
            rec.outcome = "answered"
        else:
            rec.fault = reply.label
            if reply.delay and self._stopping.wait(reply.delay):
                self._drop_connection(handler, rec)
                return
            if reply.close_connection:
                if reply.after_processing:
                    self._process(ctx, rec_raw_path)
                self._drop_connection(handler, rec)
                return
            if reply.status is None:
                resp = self._process(ctx, rec_raw_path)
                rec.outcome = "answered"
                if reply.delay_after and self._stopping.wait(reply.delay_after):
                    self._drop_connection(handler, rec)
                    return
                while reply.hold is not None and not reply.hold.wait(0.1):
                    if self._stopping.is_set():
                        self._drop_connection(handler, rec)
                        return
            else:
                resp = self._scripted(reply, ctx)
                rec.outcome = "scripted"
        self._send(handler, ctx, resp)

    def _process(self, ctx: _Ctx, raw_path: str) -> _Resp:
        try:
            return self._normal(ctx, raw_path)
        except Exception as exc:  # a bug in the double must show, not hang the client
            with self._lock:
                self.internal_errors.append(exc)
            ctx.count = False
            return _error(500, "Server Error")

    def _take_scripted(self, rec: RecordedRequest) -> Reply | None:
        for script in self._scripts:
            if script.replies and script.method in ("*", rec.method) and script.regex.fullmatch(rec.path) is not None:
                return script.replies.popleft()
        for rule in self._chaos:
            if rule.method in ("*", rec.method) and rule.regex.fullmatch(rec.path) is not None:
                return rule.draw()
        return None

    def _drop_connection(self, handler: _Handler, rec: RecordedRequest) -> None:
        rec.outcome = "dropped"
        rec.status = None
        handler.close_connection = True
        with contextlib.suppress(OSError):
            handler.connection.shutdown(socket.SHUT_RDWR)

    def _send(self, handler: _Handler, ctx: _Ctx, resp: _Resp) -> None:
        rec = ctx.rec
        headers = {**self._rate_headers(ctx, resp), **resp.headers}
        headers.setdefault("x-github-request-id", self._request_id())
        headers.setdefault("x-github-api-version-selected", "2022-11-28")
        if resp.status not in (204, 304):
            headers["content-length"] = str(len(resp.body))
        rec.status = resp.status
        rec.response_headers = dict(headers)
        rec.response_body = resp.body
        rec.answered_at = self.clock()
        try:
            handler.send_response(resp.status)
            for name, value in headers.items():
                handler.send_header(name, value)
            handler.end_headers()
            if resp.body and resp.status not in (204, 304) and rec.method != "HEAD":
                handler.wfile.write(resp.body)
            handler.wfile.flush()
        except OSError:
            rec.outcome = "client-gone"
            handler.close_connection = True

    @staticmethod
    def _request_id() -> str:
        parts = (secrets.token_hex(n).upper() for n in (2, 3, 3, 3, 4))
        return ":".join(parts)

    # ---------------------------------------------------------------- rate limits

    def _bucket_state(self, key: str) -> list[float]:
        now = self.clock()
        state = self._buckets.get(key)
        if state is None or now >= state[0] + 3600:
            state = [math.floor(now), 0]
            self._buckets[key] = state
        return state

    def _rate_headers(self, ctx: _Ctx, resp: _Resp) -> dict[str, str]:
        with self._lock:
            key = ctx.bucket or self._peek_bucket(ctx.rec)
            limit = 60 if key.startswith("anonymous") else self.primary_rate_limit
            state = self._bucket_state(key)
            if ctx.bucket is not None and ctx.count and resp.status != 304 and state[1] < limit:
                state[1] += 1
            used = int(state[1])
            return {
                "x-ratelimit-limit": str(limit),
                "x-ratelimit-remaining": str(max(limit - used, 0)),
                "x-ratelimit-reset": str(int(state[0] + 3600)),
                "x-ratelimit-used": str(used),
                "x-ratelimit-resource": "core",
            }

    def _peek_bucket(self, rec: RecordedRequest) -> str:
        scheme, cred = self._authorization(rec)
        info = self._tokens.get(cred) if cred else None
        if info is not None:
            return f"installation:{info.installation_id}"
        if scheme == "bearer" and cred.count(".") == 2:
            return "app"
        return "anonymous"

    def _primary_exhausted(self, ctx: _Ctx) -> _Resp | None:
        assert ctx.bucket is not None
        with self._lock:
            state = self._bucket_state(ctx.bucket)
            if state[1] < self.primary_rate_limit:
                return None
        ctx.count = False
        return self._primary_limit_resp(ctx.bucket, int(state[0] + 3600), 403)

    def _primary_limit_resp(self, bucket: str, reset: int, status: int) -> _Resp:
        who = (
            f"installation ID {bucket.split(':', 1)[1]}"
            if bucket.startswith("installation:")
            else (f"app ID {self.app_id}" if bucket == "app" else "127.0.0.1")
        )
        rid = self._request_id()
        message = (
            f"API rate limit exceeded for {who}. If you reach out to GitHub Support for help, please "
            f"include the request ID {rid} and timestamp {datetime.now(UTC):%Y-%m-%d %H:%M:%S} UTC."
        )
        return _error(
            status,
            message,
            DOC_PRIMARY + "#about-primary-rate-limits",
            {
                "x-ratelimit-remaining": "0",
                "x-ratelimit-used": str(self.primary_rate_limit),
                "x-ratelimit-reset": str(reset),
                "x-github-request-id": rid,
            },
        )

    def _secondary_resp(self, retry_after: int | None, status: int = 403) -> _Resp:
        rid = self._request_id()
        headers = {"x-github-request-id": rid}
        if retry_after is not None:
            headers["retry-after"] = str(retry_after)
        return _error(status, _SECONDARY_MESSAGE.format(rid=rid), DOC_SECONDARY, headers)

    def _secondary_gate(self, ctx: _Ctx, installation_id: int) -> _Resp | None:
        limits = (
            (self.content_writes_per_minute, 60.0, self._writes),
            (self.content_writes_per_hour, 3600.0, self._writes_hour),
        )
        if ctx.rec.method not in WRITE_METHODS or all(limit is None for limit, _, _ in limits):
            return None
        now = self.clock()
        with self._lock:
            counted = []
            for limit, period, windows in limits:
                if limit is None:
                    continue
                window = windows.setdefault(installation_id, deque())
                while window and window[0] <= now - period:
                    window.popleft()
                if len(window) >= limit:
                    return self._secondary_resp(max(1, math.ceil(window[0] + period - now)))
                counted.append(window)
            for window in counted:
                window.append(now)
        return None

    def _scripted(self, reply: Reply, ctx: _Ctx) -> _Resp:
        assert reply.status is not None
        ctx.count = False
        if reply.kind == "secondary":
            return self._secondary_resp(reply.retry_after, reply.status)
        if reply.kind == "primary":
            with self._lock:
                bucket = self._peek_bucket(ctx.rec)
            reset = int(self.clock() + (reply.reset_in or 0))
            return self._primary_limit_resp(bucket, reset, reply.status)
        headers = dict(reply.headers)
        if reply.retry_after is not None:
            headers.setdefault("retry-after", str(reply.retry_after))
        if isinstance(reply.body, bytes):
            return _Resp(reply.status, reply.body, headers)
        if reply.body is not None:
            return _json_resp(reply.status, reply.body, headers)
        if reply.status in (204, 304):
            return _Resp(reply.status, b"", headers)
        message = reply.message or _DEFAULT_MESSAGES.get(reply.status, "Error")
        return _error(reply.status, message, DOCS, headers)

    # ---------------------------------------------------------------- routing

    def _normal(self, ctx: _Ctx, raw_path: str) -> _Resp:
        rec = ctx.rec
        if not rec.headers.get("user-agent"):
            ctx.count = False
            return _Resp(403, _NO_USER_AGENT.encode(), {"content-type": "text/plain; charset=utf-8"})
        version = rec.headers.get("x-github-api-version")
        if version is not None and version not in API_VERSIONS:
            supported = ", ".join(f'"{v}"' for v in sorted(API_VERSIONS, reverse=True))
            return _error(
                400,
                f'The version you specified in the "X-GitHub-API-Version" request header, "{version}", '
                f"is not a supported version. The following versions are currently supported: {supported}.",
            )
        for method, regex, handler in self._routes:
            match = regex.fullmatch(raw_path)
            if match is not None and method == rec.method:
                return handler(ctx, *(unquote(g) for g in match.groups()))
        ctx.unexpected = True
        with self._lock:
            self._unexpected.append(rec)
        return _not_found()

    @staticmethod
    def _authorization(rec: RecordedRequest) -> tuple[str, str]:
        value = rec.headers.get("authorization", "").strip()
        scheme, _, cred = value.partition(" ")
        return scheme.lower(), cred.strip()

    def _body_object(self, ctx: _Ctx, doc: str, *, required: bool) -> dict[str, Any] | _Resp:
        rec = ctx.rec
        if not rec.body.strip():
            if required:
                return _error(400, "Problems parsing JSON", doc)
            return {}
        try:
            value = json.loads(rec.body)
        except ValueError:
            return _error(400, "Problems parsing JSON", doc)
        if not isinstance(value, dict):
            return _invalid(f"{_inspect(value)} is not an object.", doc)
        return value

    # ---------------------------------------------------------------- App (JWT) authentication

    def _jwt_problem(self, cred: str) -> str | None:
        """None if ``cred`` is a JWT GitHub would accept for this App, else GitHub's message."""
        undecodable = "A JSON web token could not be decoded"
        try:
            header = jwt.get_unverified_header(cred)
        except jwt.PyJWTError:
            return undecodable
        if header.get("alg") != "RS256":
            return undecodable
        try:
            raw = jwt.PyJWS().decode(cred, self._public_key, algorithms=["RS256"])  # type: ignore[arg-type]
            claims = json.loads(raw)
        except (jwt.PyJWTError, ValueError):
            return undecodable
        if not isinstance(claims, dict):
            return undecodable
        iss = claims.get("iss")
        if iss is None or isinstance(iss, bool):
            return "'Issuer' claim ('iss') must be an Integer"
        if str(iss) != self.app_id and (self.client_id is None or str(iss) != self.client_id):
            return undecodable
        now = self.clock()
        exp, iat = claims.get("exp"), claims.get("iat")
        if not _is_number(exp) or exp <= now:
            return (
                "'Expiration time' claim ('exp') must be a numeric value representing the future time "
                "at which the assertion expires"
            )
        if exp > now + JWT_MAX_EXP_AHEAD:
            return "'Expiration time' claim ('exp') is too far in the future"
        if not _is_number(iat) or iat > now + JWT_MAX_IAT_AHEAD:
            return "'Issued at' claim ('iat') must be an Integer representing the time that the assertion was issued"
        if self.jwt_max_lifetime is not None and exp - iat > self.jwt_max_lifetime:
            return "'Expiration time' claim ('exp') is too far in the future"
        return None

    def _auth_app(self, ctx: _Ctx, doc: str) -> _Resp | None:
        scheme, cred = self._authorization(ctx.rec)
        problem = "A JSON web token could not be decoded" if scheme != "bearer" or not cred else self._jwt_problem(cred)
        if problem is not None:
            ctx.count = False
            return _error(401, problem, DOCS)
        ctx.bucket = "app"
        return self._primary_exhausted(ctx)

    # ---------------------------------------------------------------- installation token authentication

    def _auth_repo(
        self, ctx: _Ctx, owner: str, name: str, permission: str | tuple[str, ...], level: str, doc: str
    ) -> tuple[_Repo, TokenInfo] | _Resp:
        rec = ctx.rec
        key = f"{owner}/{name}".lower()
        scheme, cred = self._authorization(rec)
        with self._lock:
            repo = self._repos.get(key)
            info = self._tokens.get(cred) if cred else None
        if not rec.headers.get("authorization"):
            ctx.count = False
            if repo is None or repo.private:
                return _not_found(doc)
            return _error(401, "Requires authentication", doc)
        if scheme not in ("token", "bearer") or not cred:
            ctx.count = False
            return _error(401, "Bad credentials", DOCS)
        if info is None:
            ctx.count = False
            if scheme == "bearer" and self._jwt_problem(cred) is None:
                # An App JWT is not an installation: it cannot act on repositories.
                ctx.bucket = "app"
                return _error(403, "Resource not accessible by integration", doc)
            return _error(401, "Bad credentials", DOCS)
        if self.clock() >= info.expires_at:
            ctx.count = False
            return _error(401, "Bad credentials", DOCS)
        rec.installation_id = info.installation_id
        ctx.bucket = f"installation:{info.installation_id}"
        limited = self._primary_exhausted(ctx) or self._secondary_gate(ctx, info.installation_id)
        if limited is not None:
            ctx.count = False
            return limited
        if (
            repo is None
            or repo.installation_id != info.installation_id
            or (info.repository_ids is not None and repo.id not in info.repository_ids)
        ):
            return _not_found(doc)
        accepted = (permission,) if isinstance(permission, str) else permission  # any one of them will do
        if all(LEVELS.get(info.permissions.get(p, ""), 0) < LEVELS[level] for p in accepted):
            return _error(
                403,
                "Resource not accessible by integration",
                doc,
                {"x-accepted-github-permissions": "; ".join(f"{p}={level}" for p in accepted)},
            )
        return repo, info

    # ---------------------------------------------------------------- endpoints: App

    def _h_access_token(self, ctx: _Ctx, installation_id: str) -> _Resp:
        denied = self._auth_app(ctx, DOC_TOKEN)
        if denied is not None:
            return denied
        with self._lock:
            inst = self._installations.get(int(installation_id))
        if inst is None:
            return _not_found(DOC_TOKEN)
        if inst.suspended:
            return _error(403, "This installation has been suspended", DOC_TOKEN)
        body = self._body_object(ctx, DOC_TOKEN, required=False)
        if isinstance(body, _Resp):
            return body
        with self._lock:
            inst_repos = [self._repos[k] for k in inst.repo_keys]
        names, ids = body.get("repositories"), body.get("repository_ids")
        for prop, value, kind in (("repositories", names, str), ("repository_ids", ids, int)):
            if value is not None and (
                not isinstance(value, list) or any(not isinstance(v, kind) or isinstance(v, bool) for v in value)
            ):
                return _invalid(f"For 'properties/{prop}', {_inspect(value)} is not valid.", DOC_TOKEN)
        chosen: list[_Repo] | None = None
        if names or ids:  # empty lists narrow nothing
            chosen = []
            by_name = {r.name.lower(): r for r in inst_repos}
            by_id = {r.id: r for r in inst_repos}
            wanted = [by_name.get(n.lower()) for n in names or []] + [by_id.get(i) for i in ids or []]
            for found in wanted:
                if found is None:
                    return _error(
                        422,
                        "There is at least one repository that does not exist or is not accessible "
                        "to the parent installation.",
                        DOC_TOKEN,
                    )
                if found not in chosen:
                    chosen.append(found)
            if len(chosen) > 500:
                return _invalid("No more than 500 repositories may be requested.", DOC_TOKEN)
        asked = body.get("permissions")
        if asked is not None:
            if not isinstance(asked, dict):
                return _invalid(f"For 'properties/permissions', {_inspect(asked)} is not an object.", DOC_TOKEN)
            for perm, level in asked.items():
                if level not in LEVELS:
                    return _invalid(
                        f'For \'properties/{perm}\', {_inspect(level)} is not a member of ["read", "write"].',
                        DOC_TOKEN,
                    )
                granted = inst.permissions.get(perm)
                if granted is None:
                    return _error(422, "The permissions requested are not granted to this installation.", DOC_TOKEN)
                if LEVELS[level] > LEVELS[granted]:
                    return _error(
                        422,
                        "The level of access for permissions requested are not granted to this installation.",
                        DOC_TOKEN,
                    )
            permissions = dict(asked)
            if "metadata" in inst.permissions:
                permissions.setdefault("metadata", "read")
        else:
            permissions = dict(inst.permissions)
        now = self.clock()
        token = "ghs_" + secrets.token_urlsafe(27).replace("-", "a").replace("_", "b")[:36]
        info = TokenInfo(
            token=token,
            installation_id=inst.id,
            repository_ids=frozenset(r.id for r in chosen) if chosen is not None else None,
            permissions=permissions,
            expires_at=now + self.token_ttl,
            issued_at=now,
        )
        with self._lock:
            self._tokens[token] = info
        out: dict[str, Any] = {
            "token": token,
            "expires_at": _iso(info.expires_at),
            "permissions": permissions,
            "repository_selection": "selected" if chosen is not None else inst.repository_selection,
        }
        if chosen is not None:
            out["repositories"] = [self._repo_summary(r) for r in chosen]
        return _json_resp(201, out)

    def _h_repo_installation(self, ctx: _Ctx, owner: str, name: str) -> _Resp:
        denied = self._auth_app(ctx, DOC_REPO_INSTALLATION)
        if denied is not None:
            return denied
        with self._lock:
            repo = self._repos.get(f"{owner}/{name}".lower())
            inst = self._installations.get(repo.installation_id) if repo else None
        if repo is None or inst is None:
            return _not_found(DOC_REPO_INSTALLATION)
        return _json_resp(200, self._installation_obj(inst))

    # ---------------------------------------------------------------- endpoints: dispatch

    def _h_dispatch(self, ctx: _Ctx, owner: str, name: str) -> _Resp:
        auth = self._auth_repo(ctx, owner, name, "contents", "write", DOC_DISPATCH)
        if isinstance(auth, _Resp):
            return auth
        repo, _ = auth
        body = self._body_object(ctx, DOC_DISPATCH, required=True)
        if isinstance(body, _Resp):
            return body
        if "event_type" not in body:
            return _invalid('"event_type" wasn\'t supplied.', DOC_DISPATCH)
        event_type = body["event_type"]
        if not isinstance(event_type, str):
            return _invalid(f"For 'properties/event_type', {_inspect(event_type)} is not a string.", DOC_DISPATCH)
        if not 1 <= len(event_type) <= MAX_EVENT_TYPE:
            bound = "too short" if not event_type else "too long"
            return _invalid(
                f"For 'properties/event_type', {_inspect(event_type)} is {bound} "
                f"({len(event_type)} chars, must be 1 to {MAX_EVENT_TYPE}).",
                DOC_DISPATCH,
            )
        if "client_payload" in body:
            payload = body["client_payload"]
            if not isinstance(payload, dict):
                return _invalid(f"For 'properties/client_payload', {_inspect(payload)} is not an object.", DOC_DISPATCH)
            if len(payload) > MAX_CLIENT_PAYLOAD_PROPERTIES:
                return _invalid(
                    f"No more than {MAX_CLIENT_PAYLOAD_PROPERTIES} properties are allowed; "
                    f"{len(payload)} were supplied.",
                    DOC_DISPATCH,
                )
            size = len(json.dumps(payload, separators=(",", ":"), ensure_ascii=False).encode())
            if size >= MAX_CLIENT_PAYLOAD_BYTES:
                return _error(422, "client_payload is too large.", DOC_DISPATCH)
        with self._lock:
            self._dispatches.append((repo.key, copy.deepcopy(body)))
            for workflow in list(self._workflows.get(repo.key, {}).values()):
                listens = workflow.event_types is None or event_type in workflow.event_types
                if workflow.on_repository_dispatch and listens:
                    self._dispatch_run(repo, workflow, body, "repository_dispatch", repo.default_branch)
        ctx.rec.accepted = True
        return _Resp(204)

    def _h_workflow_dispatch(self, ctx: _Ctx, owner: str, name: str, workflow_id: str) -> _Resp:
        doc = DOC_WORKFLOW_DISPATCH
        auth = self._auth_repo(ctx, owner, name, "actions", "write", doc)
        if isinstance(auth, _Resp):
            return auth
        repo, _ = auth
        body = self._body_object(ctx, doc, required=True)
        if isinstance(body, _Resp):
            return body
        if "ref" not in body:
            return _invalid('"ref" wasn\'t supplied.', doc)
        ref = body["ref"]
        if not isinstance(ref, str):
            return _invalid(f"For 'properties/ref', {_inspect(ref)} is not a string.", doc)
        inputs = body.get("inputs", {})
        if not isinstance(inputs, dict):
            return _invalid(f"For 'properties/inputs', {_inspect(inputs)} is not an object.", doc)
        if len(inputs) > MAX_DISPATCH_INPUTS:
            return _invalid(
                f"No more than {MAX_DISPATCH_INPUTS} properties are allowed; {len(inputs)} were supplied.", doc
            )
        details = body.get("return_run_details", False)
        if not isinstance(details, bool):
            return _invalid(f"For 'properties/return_run_details', {_inspect(details)} is not a boolean.", doc)
        with self._lock:
            workflow = next(
                (w for w in self._workflows.get(repo.key, {}).values() if workflow_id in (str(w.id), w.file_name)),
                None,
            )
        if workflow is None:
            return _not_found(doc)
        if not workflow.on_workflow_dispatch:
            return _error(422, "Workflow does not have 'workflow_dispatch' trigger", doc)
        branch = ref.removeprefix("refs/heads/")
        if not self._ref_known(repo, branch):
            return _error(422, f"No ref found for: {ref}", doc)
        size = len(json.dumps(inputs, separators=(",", ":"), ensure_ascii=False))
        if size > MAX_DISPATCH_INPUTS_CHARS:  # the docs give the limit, not GitHub's words: these are the double's
            return _error(
                422,
                f"inputs are too large ({size} characters; the maximum is {MAX_DISPATCH_INPUTS_CHARS}).",
                DOC_WORKFLOW_DISPATCH_INPUTS,
            )
        with self._lock:
            self._workflow_dispatches.append((repo.key, workflow.path, copy.deepcopy(body)))
            run = self._dispatch_run(repo, workflow, body, "workflow_dispatch", branch)
            legacy = self._legacy_dispatch is True or (
                isinstance(self._legacy_dispatch, set) and repo.key in self._legacy_dispatch
            )
        ctx.rec.accepted = True
        if legacy or not details:
            return _Resp(204)
        return _json_resp(200, {"workflow_run_id": run["id"], "run_url": run["url"], "html_url": run["html_url"]})

    # ---------------------------------------------------------------- endpoints: check runs

    def _suite_for(self, repo_key: str, head_sha: str, app_slug: str) -> int:
        key = (repo_key, head_sha.lower(), app_slug)
        suite = self._suites.get(key)
        if suite is None:
            suite = next(self._suite_ids)
            self._suites[key] = suite
            self._suite_repo[suite] = repo_key
        return suite

    def _new_check_run(self, repo_key: str, app_slug: str, fields: dict[str, Any], now: float) -> dict[str, Any]:
        cid = next(self._check_run_ids)
        repo = self._repos.get(repo_key)
        full = repo.full_name if repo else repo_key
        suite = self._suite_for(repo_key, fields["head_sha"], app_slug)
        run = {
            "id": cid,
            "node_id": _node_id("CheckRun", cid),
            "head_sha": fields["head_sha"],
            "external_id": "",
            "url": f"{self.url}/repos/{full}/check-runs/{cid}",
            "html_url": f"https://github.com/{full}/runs/{cid}",
            "details_url": f"https://github.com/apps/{app_slug}",
            "status": "queued",
            "conclusion": None,
            "started_at": _iso(now),
            "completed_at": None,
            "output": {
                "title": None,
                "summary": None,
                "text": None,
                "annotations_count": 0,
                "annotations_url": f"{self.url}/repos/{full}/check-runs/{cid}/annotations",
            },
            "name": fields["name"],
            "check_suite": {"id": suite},
            "app": self._app_obj(app_slug),
            "pull_requests": [],
        }
        self._check_runs[cid] = run
        self._check_run_owner[cid] = (repo_key, app_slug)
        return run

    def _validate_check_fields(self, body: dict[str, Any], doc: str, *, creating: bool) -> _Resp | None:
        for prop in ("name", "head_sha", "details_url", "external_id"):
            if prop in body and not isinstance(body[prop], str):
                return _invalid(f"For 'properties/{prop}', {_inspect(body[prop])} is not a string.", doc)
        if creating:
            for prop in ("name", "head_sha"):
                if prop not in body:
                    return _invalid(f'"{prop}" wasn\'t supplied.', doc)
        status = body.get("status")
        conclusion = body.get("conclusion")
        if "status" in body and status not in CHECK_STATUSES:
            only_actions = (
                "\nOnly GitHub Actions can set a status of waiting, pending, or requested."
                if status in ACTIONS_ONLY_STATUSES
                else ""
            )
            return _invalid(
                'No subschema in "anyOf" matched.\n'
                f"{_inspect(status)} is not a member of {json.dumps(list(CHECK_STATUSES))}.{only_actions}",
                doc,
            )
        if "conclusion" in body and conclusion not in CHECK_CONCLUSIONS:
            return _invalid(
                f"{_inspect(conclusion)} is not a member of {json.dumps(list(CHECK_CONCLUSIONS))}."
                + ("\nOnly GitHub can set a conclusion of stale." if conclusion == "stale" else ""),
                doc,
            )
        if conclusion is None and (status == "completed" or "completed_at" in body):
            return _invalid('No subschema in "anyOf" matched.\n"conclusion" wasn\'t supplied.', doc)
        for prop in ("started_at", "completed_at"):
            if prop in body and _parse_iso(body[prop]) is None:
                return _invalid(f"For 'properties/{prop}', {_inspect(body[prop])} is not a date-time.", doc)
        if "output" in body:
            problem = self._validate_output(body["output"])
            if problem is not None:
                return _invalid(problem, doc)
        if "actions" in body:
            actions = body["actions"]
            if not isinstance(actions, list) or len(actions) > MAX_CHECK_ACTIONS:
                return _invalid(f"For 'properties/actions', at most {MAX_CHECK_ACTIONS} items are allowed.", doc)
            for action in actions:
                if not isinstance(action, dict):
                    return _invalid(f"{_inspect(action)} is not an object.", doc)
                for prop, limit in (("label", 20), ("description", 40), ("identifier", 20)):
                    value = action.get(prop)
                    if not isinstance(value, str):
                        return _invalid(f'"{prop}" wasn\'t supplied.', doc)
                    if len(value) > limit:
                        return _invalid(f"{_inspect(value)} is too long (maximum is {limit} characters).", doc)
        return None

    @staticmethod
    def _validate_output(output: Any) -> str | None:
        if not isinstance(output, dict):
            return f"For 'properties/output', {_inspect(output)} is not an object."
        for prop in ("title", "summary"):
            if prop not in output:
                return f'"{prop}" wasn\'t supplied.'
        for prop in ("title", "summary", "text"):
            if prop in output and not isinstance(output[prop], str):
                return f"For 'properties/{prop}', {_inspect(output[prop])} is not a string."
        for prop in ("summary", "text"):
            if prop in output and len(output[prop]) > MAX_OUTPUT_TEXT:
                return (
                    f"For 'properties/{prop}', the value is too long "
                    f"({len(output[prop])} characters; maximum is {MAX_OUTPUT_TEXT})."
                )
        annotations = output.get("annotations", [])
        if not isinstance(annotations, list):
            return f"For 'properties/annotations', {_inspect(annotations)} is not an array."
        if len(annotations) > MAX_ANNOTATIONS:
            return f"For 'properties/annotations', no more than {MAX_ANNOTATIONS} items are allowed."
        for item in annotations:
            if not isinstance(item, dict):
                return f"{_inspect(item)} is not an object."
            for prop in ("path", "start_line", "end_line", "annotation_level", "message"):
                if prop not in item:
                    return f'"{prop}" wasn\'t supplied.'
            if item["annotation_level"] not in ANNOTATION_LEVELS:
                return f"{_inspect(item['annotation_level'])} is not a member of {json.dumps(list(ANNOTATION_LEVELS))}."
        return None

    def _apply_check_fields(self, run: dict[str, Any], body: dict[str, Any], now: float) -> None:
        for prop in ("name", "details_url", "external_id"):
            if prop in body:
                run[prop] = body[prop]
        if "started_at" in body:
            run["started_at"] = _iso(_parse_iso(body["started_at"]) or now)
        if "conclusion" in body:
            run["status"] = "completed"
            run["conclusion"] = body["conclusion"]
            completed = _parse_iso(body.get("completed_at"))
            run["completed_at"] = _iso(completed if completed is not None else now)
        elif "status" in body:
            run["status"] = body["status"]
            run["conclusion"] = None
            run["completed_at"] = None
        if "output" in body:
            output = body["output"]
            run["output"] = {
                **run["output"],
                "title": output["title"],
                "summary": output["summary"],
                "text": output.get("text", run["output"].get("text")),
                "annotations_count": run["output"]["annotations_count"] + len(output.get("annotations", [])),
            }

    def _commit_known(self, repo_key: str, ref: str) -> bool:
        return self._resolve_commit(repo_key, ref) is not None

    def _resolve_commit(self, repo_key: str, ref: str) -> str | None:
        with self._lock:
            head = self._branches.get((repo_key, ref))
            if head is not None:
                return head
            commits = self._commits.get(repo_key, set())
            lowered = ref.lower()
            if lowered in commits:
                return lowered
            if len(lowered) >= 4 and re.fullmatch(r"[0-9a-f]+", lowered):
                matches = [c for c in commits if c.startswith(lowered)]
                if len(matches) == 1:
                    return matches[0]
        return None

    def _h_check_create(self, ctx: _Ctx, owner: str, name: str) -> _Resp:
        auth = self._auth_repo(ctx, owner, name, "checks", "write", DOC_CHECK_CREATE)
        if isinstance(auth, _Resp):
            return auth
        repo, _ = auth
        body = self._body_object(ctx, DOC_CHECK_CREATE, required=True)
        if isinstance(body, _Resp):
            return body
        problem = self._validate_check_fields(body, DOC_CHECK_CREATE, creating=True)
        if problem is not None:
            return problem
        if self.require_known_commits and not self._commit_known(repo.key, body["head_sha"]):
            return _error(422, f"No commit found for SHA: {body['head_sha']}", DOC_CHECK_CREATE)
        now = self.clock()
        with self._lock:
            run = self._new_check_run(repo.key, self.app_slug, body, now)
            self._apply_check_fields(run, body, now)
            return _json_resp(201, copy.deepcopy(run))

    def _h_check_update(self, ctx: _Ctx, owner: str, name: str, check_run_id: str) -> _Resp:
        auth = self._auth_repo(ctx, owner, name, "checks", "write", DOC_CHECK_UPDATE)
        if isinstance(auth, _Resp):
            return auth
        repo, _ = auth
        with self._lock:
            run = self._check_runs.get(int(check_run_id))
            owner_of = self._check_run_owner.get(int(check_run_id))
        if run is None or owner_of is None or owner_of[0] != repo.key:
            return _not_found(DOC_CHECK_UPDATE)
        if owner_of[1] != self.app_slug:
            return _error(
                403,
                f"Invalid app_id `{self.app_id}` - check run can only be modified by the GitHub App that created it.",
                DOC_CHECK_UPDATE,
            )
        body = self._body_object(ctx, DOC_CHECK_UPDATE, required=True)
        if isinstance(body, _Resp):
            return body
        problem = self._validate_check_fields(body, DOC_CHECK_UPDATE, creating=False)
        if problem is not None:
            return problem
        with self._lock:
            self._apply_check_fields(run, body, self.clock())
            return _json_resp(200, copy.deepcopy(run))

    def _h_check_list(self, ctx: _Ctx, owner: str, name: str, suite_id: str) -> _Resp:
        auth = self._auth_repo(ctx, owner, name, "checks", "read", DOC_CHECK_LIST)
        if isinstance(auth, _Resp):
            return auth
        repo, _ = auth
        query = {k: v[-1] for k, v in ctx.rec.query.items()}
        with self._lock:
            if self._suite_repo.get(int(suite_id)) != repo.key:
                return _not_found(DOC_CHECK_LIST)
            runs = [
                copy.deepcopy(r) for _, r in sorted(self._check_runs.items()) if r["check_suite"]["id"] == int(suite_id)
            ]
        status = query.get("status")
        if status is not None and status not in CHECK_STATUSES:
            return _invalid(
                f"{_inspect(status)} is not a member of {json.dumps(list(CHECK_STATUSES))}.", DOC_CHECK_LIST
            )
        filt = query.get("filter", "latest")
        if filt not in ("latest", "all"):
            return _invalid(f'{_inspect(filt)} is not a member of ["latest", "all"].', DOC_CHECK_LIST)
        if "check_name" in query:
            runs = [r for r in runs if r["name"] == query["check_name"]]
        if status is not None:
            runs = [r for r in runs if r["status"] == status]
        if filt == "latest":
            newest: dict[str, dict[str, Any]] = {}
            for run in runs:
                newest[run["name"]] = run
            runs = sorted(newest.values(), key=lambda r: r["id"])
        runs.sort(key=lambda r: r["id"], reverse=True)
        try:
            per_page = min(max(int(query.get("per_page", "30")), 1), 100)
            page = max(int(query.get("page", "1")), 1)
        except ValueError:
            return _invalid("per_page and page must be integers.", DOC_CHECK_LIST)
        chunk = runs[(page - 1) * per_page : page * per_page]
        headers: dict[str, str] = {}
        last = max(1, math.ceil(len(runs) / per_page))
        if page < last:
            base = f"{self.url}/repos/{repo.full_name}/check-suites/{suite_id}/check-runs"
            extra = "".join(f"&{quote(k)}={quote(v)}" for k, v in query.items() if k not in ("page", "per_page"))
            links = [
                f'<{base}?per_page={per_page}&page={page + 1}{extra}>; rel="next"',
                f'<{base}?per_page={per_page}&page={last}{extra}>; rel="last"',
            ]
            headers["link"] = ", ".join(links)
        return _json_resp(200, {"total_count": len(runs), "check_runs": chunk}, headers)

    # ---------------------------------------------------------------- endpoints: issue comments

    def _new_comment(self, repo_key: str, number: int, body: str, app_slug: str | None, user: str) -> dict[str, Any]:
        cid = next(self._comment_ids)
        repo = self._repos.get(repo_key)
        full = repo.full_name if repo else repo_key
        kind = "pull" if self._issues.get((repo_key, number), True) else "issues"
        now = _iso(self.clock())
        if app_slug is not None:
            login, account_kind, app = f"{app_slug}[bot]", "Bot", self._app_obj(app_slug)
        else:
            login, account_kind, app = user, "User", None
        comment = {
            "id": cid,
            "node_id": _node_id("IssueComment", cid),
            "url": f"{self.url}/repos/{full}/issues/comments/{cid}",
            "html_url": f"https://github.com/{full}/{kind}/{number}#issuecomment-{cid}",
            "issue_url": f"{self.url}/repos/{full}/issues/{number}",
            "body": body,
            "user": self._owner_obj(login, 41_000_000 + _login_number(login), account_kind),
            "created_at": now,
            "updated_at": now,
            "author_association": "NONE",
            "performed_via_github_app": app,
        }
        self._comments[cid] = comment
        self._comment_issue[cid] = (repo_key, number)
        return comment

    def _comment_body(self, ctx: _Ctx, doc: str) -> str | _Resp:
        body = self._body_object(ctx, doc, required=True)
        if isinstance(body, _Resp):
            return body
        if "body" not in body:
            return _invalid('"body" wasn\'t supplied.', doc)
        text = body["body"]
        if not isinstance(text, str):
            return _invalid(f"For 'properties/body', {_inspect(text)} is not a string.", doc)
        problem = None
        if not text.strip():
            problem = {"resource": "IssueComment", "code": "missing_field", "field": "body"}
        elif len(text) > MAX_COMMENT_BODY:
            problem = {
                "resource": "IssueComment",
                "code": "custom",
                "field": "body",
                "message": f"body is too long (maximum is {MAX_COMMENT_BODY} characters)",
            }
        if problem is not None:
            return _json_resp(422, {"message": "Validation Failed", "errors": [problem], "documentation_url": doc})
        return text

    def _issue_auth(
        self, ctx: _Ctx, owner: str, name: str, number: int, level: str, doc: str
    ) -> tuple[_Repo, TokenInfo] | _Resp:
        """Issues permission, or pull_requests on a pull request; an unknown issue is 404."""
        auth = self._auth_repo(ctx, owner, name, ("issues", "pull_requests"), level, doc)
        if isinstance(auth, _Resp):
            return auth
        repo, info = auth
        with self._lock:
            is_pr = self._issues.get((repo.key, number))
        if is_pr is None:
            return _not_found(doc)
        if not is_pr and LEVELS.get(info.permissions.get("issues", ""), 0) < LEVELS[level]:
            return _error(
                403, "Resource not accessible by integration", doc, {"x-accepted-github-permissions": f"issues={level}"}
            )
        return auth

    def _h_comment_create(self, ctx: _Ctx, owner: str, name: str, number: str) -> _Resp:
        auth = self._issue_auth(ctx, owner, name, int(number), "write", DOC_COMMENT_CREATE)
        if isinstance(auth, _Resp):
            return auth
        repo, _ = auth
        text = self._comment_body(ctx, DOC_COMMENT_CREATE)
        if isinstance(text, _Resp):
            return text
        with self._lock:
            comment = self._new_comment(repo.key, int(number), text, self.app_slug, "")
            self._comment_writes.append((repo.key, "POST", comment["id"], text))
            return _json_resp(201, copy.deepcopy(comment), {"location": comment["url"]})

    def _h_comment_update(self, ctx: _Ctx, owner: str, name: str, comment_id: str) -> _Resp:
        auth = self._auth_repo(ctx, owner, name, ("issues", "pull_requests"), "write", DOC_COMMENT_UPDATE)
        if isinstance(auth, _Resp):
            return auth
        repo, _ = auth
        with self._lock:
            comment = self._comments.get(int(comment_id))
            where = self._comment_issue.get(int(comment_id))
        if comment is None or where is None or where[0] != repo.key:
            return _not_found(DOC_COMMENT_UPDATE)
        text = self._comment_body(ctx, DOC_COMMENT_UPDATE)
        if isinstance(text, _Resp):
            return text
        with self._lock:
            comment["body"] = text
            comment["updated_at"] = _iso(self.clock())
            self._comment_writes.append((repo.key, "PATCH", int(comment_id), text))
            return _json_resp(200, copy.deepcopy(comment))

    def _h_comment_list(self, ctx: _Ctx, owner: str, name: str, number: str) -> _Resp:
        auth = self._issue_auth(ctx, owner, name, int(number), "read", DOC_COMMENT_LIST)
        if isinstance(auth, _Resp):
            return auth
        repo, _ = auth
        query = {k: v[-1] for k, v in ctx.rec.query.items()}
        try:
            per_page = min(max(int(query.get("per_page", "30")), 1), 100)
            page = max(int(query.get("page", "1")), 1)
        except ValueError:
            return _invalid("per_page and page must be integers.", DOC_COMMENT_LIST)
        with self._lock:
            found = [
                copy.deepcopy(c)
                for cid, c in sorted(self._comments.items())
                if self._comment_issue[cid] == (repo.key, int(number))
            ]
        last = max(1, math.ceil(len(found) / per_page))
        base = f"{self.url}/repos/{repo.full_name}/issues/{number}/comments"
        links = []
        if page < last:
            links += [
                f'<{base}?per_page={per_page}&page={page + 1}>; rel="next"',
                f'<{base}?per_page={per_page}&page={last}>; rel="last"',
            ]
        if page > 1:
            links += [
                f'<{base}?per_page={per_page}&page={page - 1}>; rel="prev"',
                f'<{base}?per_page={per_page}&page=1>; rel="first"',
            ]
        headers = {"link": ", ".join(links)} if links else {}
        return _json_resp(200, found[(page - 1) * per_page : page * per_page], headers)

    # ---------------------------------------------------------------- endpoints: the App's webhook deliveries

    def _h_hook_deliveries(self, ctx: _Ctx) -> _Resp:
        denied = self._auth_app(ctx, DOC_HOOK_DELIVERIES)
        if denied is not None:
            return denied
        query = {k: v[-1] for k, v in ctx.rec.query.items()}
        try:
            per_page = min(max(int(query.get("per_page", "30")), 1), MAX_DELIVERIES_PER_PAGE)
        except ValueError:
            return _invalid("per_page must be an integer.", DOC_HOOK_DELIVERIES)
        cursor = query.get("cursor")
        before: int | None = None
        if cursor:  # opaque to clients: "v1_<id>" pages on from the delivery before that id
            match = re.fullmatch(r"v1_(\d+)", cursor)
            if match is None:
                return _error(400, "Bad Request", DOC_HOOK_DELIVERIES)
            before = int(match.group(1))
        redelivery = query.get("redelivery")
        with self._lock:
            found = sorted(self._hook_deliveries, key=lambda d: d.id, reverse=True)  # newest first
        if before is not None:
            found = [d for d in found if d.id < before]
        if redelivery in ("true", "false"):
            found = [d for d in found if d.redelivery == (redelivery == "true")]
        page = found[:per_page]
        headers: dict[str, str] = {}
        if len(found) > per_page:
            extra = f"&redelivery={redelivery}" if redelivery in ("true", "false") else ""
            nxt = f"{self.url}/app/hook/deliveries?per_page={per_page}&cursor=v1_{page[-1].id}{extra}"
            headers["link"] = f'<{nxt}>; rel="next"'
        return _json_resp(200, [d.item() for d in page], headers)

    def _h_hook_redeliver(self, ctx: _Ctx, delivery_id: str) -> _Resp:
        denied = self._auth_app(ctx, DOC_HOOK_REDELIVER)
        if denied is not None:
            return denied
        with self._lock:
            original = next((d for d in self._hook_deliveries if d.id == int(delivery_id)), None)
            configured = self._webhook is not None
        if original is None or not configured:
            return _not_found(DOC_HOOK_REDELIVER)
        ctx.rec.accepted = True
        # GitHub answers at once and makes the delivery afterwards: the same event, body and guid.
        thread = threading.Thread(target=self._redeliver, args=(original,), daemon=True)
        with self._lock:
            self._redelivering.add(thread)
        thread.start()
        return _json_resp(202, {})

    def _redeliver(self, original: HookDelivery) -> None:
        try:
            self._send_hook(original.event, original.body, original.guid, redelivery=True)
        except Exception as exc:  # a bug in the double must show
            with self._lock:
                self.internal_errors.append(exc)
        finally:
            with self._lock:
                self._redelivering.discard(threading.current_thread())

    # ---------------------------------------------------------------- workflow runs and their jobs

    def _bot_user(self) -> dict[str, Any]:
        """The App's bot user: the actor of what the App does with an installation token."""
        login = f"{self.app_slug}[bot]"
        return self._owner_obj(login, 41_000_000 + _login_number(login), "Bot")

    def _new_run(
        self,
        repo_name: str,
        run_id: int,
        *,
        head_sha: str,
        status: str,
        conclusion: str | None,
        name: str,
        event: str,
        head_branch: str,
        run_attempt: int,
        path: str,
        workflow_id: int,
        display_title: str,
        actor: dict[str, Any],
    ) -> dict[str, Any]:
        """A workflow run object (workflow-run), stored; its jobs are the caller's."""
        now = self.clock()
        key = repo_name.lower()
        owner_repo = self._repos.get(key)
        full = owner_repo.full_name if owner_repo else repo_name
        api = f"{self.url}/repos/{full}/actions/runs/{run_id}"
        summary = self._repo_summary(owner_repo) if owner_repo else {"full_name": full}
        run = {
            "id": run_id,
            "name": name,
            "node_id": _node_id("WorkflowRun", run_id),
            "head_branch": head_branch,
            "head_sha": head_sha,
            "path": path,
            "display_title": display_title,
            "run_number": run_id % 100000,
            "event": event,
            "status": status,
            "conclusion": conclusion,
            "workflow_id": workflow_id,
            "check_suite_id": next(self._suite_ids),
            "url": api,
            "html_url": f"https://github.com/{full}/actions/runs/{run_id}",
            "jobs_url": f"{api}/jobs",
            "logs_url": f"{api}/logs",
            "rerun_url": f"{api}/rerun",
            "cancel_url": f"{api}/cancel",
            "workflow_url": f"{self.url}/repos/{full}/actions/workflows/{workflow_id}",
            "previous_attempt_url": f"{api}/attempts/{run_attempt - 1}" if run_attempt > 1 else None,
            "pull_requests": [],
            "created_at": _iso(now),
            "updated_at": _iso(now),
            "actor": actor,
            "triggering_actor": copy.deepcopy(actor),
            "run_attempt": run_attempt,
            "run_started_at": _iso(now),
            "repository": summary,
            "head_repository": copy.deepcopy(summary),
        }
        self._workflow_runs[(key, run_id)] = run
        return run

    def _new_job(self, run: dict[str, Any], name: str, now: float) -> dict[str, Any]:
        """A queued job (workflow-job) of the run's current attempt. Its id is also its check run's id."""
        job_id = next(self._job_ids)
        full = run["repository"]["full_name"]
        return {
            "id": job_id,
            "run_id": run["id"],
            "run_url": run["url"],
            "run_attempt": run["run_attempt"],
            "node_id": _node_id("CheckRun", job_id),
            "head_sha": run["head_sha"],
            "head_branch": run["head_branch"],
            "url": f"{self.url}/repos/{full}/actions/jobs/{job_id}",
            "html_url": f"https://github.com/{full}/actions/runs/{run['id']}/job/{job_id}",
            "status": "queued",
            "conclusion": None,
            "created_at": _iso(now),
            "started_at": _iso(now),  # GitHub fills it while the job is queued too, and again when it starts
            "completed_at": None,
            "name": name,
            "steps": [],
            "check_run_url": f"{self.url}/repos/{full}/check-runs/{job_id}",
            "labels": ["ubuntu-latest"],
            "runner_id": None,
            "runner_name": None,
            "runner_group_id": None,
            "runner_group_name": None,
            "workflow_name": run["name"],
        }

    @staticmethod
    def _start_job(job: dict[str, Any], now: float) -> None:
        runner = job["id"] % 1000 + 1
        job.update(
            status="in_progress",
            started_at=_iso(now),
            runner_id=runner,
            runner_name=f"GitHub Actions {runner}",
            runner_group_id=2,
            runner_group_name="GitHub Actions",
            steps=[
                {"name": "Set up job", "status": "completed", "conclusion": "success", "number": 1,
                 "started_at": _iso(now), "completed_at": _iso(now)},
                {"name": f"Run {job['name']}", "status": "in_progress", "conclusion": None, "number": 2,
                 "started_at": _iso(now), "completed_at": None},
            ],
        )  # fmt: skip

    def _finish_job(self, job: dict[str, Any], conclusion: str, now: float) -> None:
        """Complete a job; one that never started started when it completed (a skipped one never gets a runner)."""
        if job["status"] == "queued" and conclusion != "skipped":
            self._start_job(job, now)
        for step in job["steps"]:
            if step["status"] != "completed":
                step.update(status="completed", conclusion=conclusion, completed_at=_iso(now))
        if job["status"] == "queued":
            job["started_at"] = _iso(now)
        job.update(status="completed", conclusion=conclusion, completed_at=_iso(now))

    def _jobs_now(self, key: str, run_id: int) -> list[dict[str, Any]]:
        """The jobs of the run's latest attempt (live objects: the caller holds the lock)."""
        run = self._workflow_runs[(key, run_id)]
        return self._jobs.setdefault((key, run_id), {}).setdefault(run["run_attempt"], [])

    def _dispatch_run(
        self, repo: _Repo, workflow: _Workflow, body: dict[str, Any], event: str, branch: str
    ) -> dict[str, Any]:
        """A dispatch started a run of `workflow`: queued, its jobs queued, `workflow_run` `requested` queued."""
        title = workflow.run_name(copy.deepcopy(body))
        now = self.clock()
        run = self._new_run(
            repo.full_name,
            next(self._ids) + 9_000_000,
            head_sha=self._branches.get((repo.key, branch), "0" * 40),
            status="queued",
            conclusion=None,
            name=workflow.name,
            event=event,
            head_branch=branch,
            run_attempt=1,
            path=workflow.path,
            workflow_id=workflow.id,
            display_title=title,
            actor=self._bot_user(),
        )
        self._jobs[(repo.key, run["id"])] = {1: [self._new_job(run, job, now) for job in workflow.jobs]}
        self._workflow_run_hook(repo.key, run, "requested")
        return run

    def _workflow_obj(self, repo: _Repo, run: dict[str, Any]) -> dict[str, Any]:
        known = next((w for w in self._workflows.get(repo.key, {}).values() if w.id == run["workflow_id"]), None)
        created = _iso(known.created_at if known is not None else self.clock())
        wid = run["workflow_id"]
        return {
            "id": wid,
            "node_id": _node_id("Workflow", wid),
            "name": run["name"],
            "path": run["path"],
            "state": "active",
            "created_at": created,
            "updated_at": created,
            "url": f"{self.url}/repos/{repo.full_name}/actions/workflows/{wid}",
            "html_url": f"https://github.com/{repo.full_name}/blob/{repo.default_branch}/{run['path']}",
            "badge_url": f"https://github.com/{repo.full_name}/workflows/{quote(run['name'])}/badge.svg",
        }

    def _workflow_run_hook(self, key: str, run: dict[str, Any], action: str, *, deliver: bool = True) -> None:
        """Queue the `workflow_run` webhook GitHub sends the App for this run as it now stands (only where the App
        is installed). Caller holds the lock, so the payload is the run at this moment."""
        repo = self._repos.get(key)
        if repo is None:
            return
        inst = self._installations[repo.installation_id]
        payload: dict[str, Any] = {
            "action": action,
            "workflow_run": copy.deepcopy(run),
            "workflow": self._workflow_obj(repo, run),
            "repository": self._repo_summary(repo),
            "installation": {"id": inst.id, "node_id": _node_id("Integration::Installation", inst.id)},
            "sender": copy.deepcopy(run["triggering_actor"]),
        }
        if inst.target_type == "Organization":
            payload["organization"] = {
                "login": inst.account,
                "id": inst.account_id,
                "node_id": _node_id("Organization", inst.account_id),
            }
        self._queue_hook("workflow_run", payload, deliver=deliver)

    # ---------------------------------------------------------------- endpoints: workflow runs

    def _h_run_get(self, ctx: _Ctx, owner: str, name: str, run_id: str) -> _Resp:
        auth = self._auth_repo(ctx, owner, name, "actions", "read", DOC_RUN_GET)
        if isinstance(auth, _Resp):
            return auth
        repo, _ = auth
        with self._lock:
            run = self._workflow_runs.get((repo.key, int(run_id)))
            return _json_resp(200, copy.deepcopy(run)) if run is not None else _not_found(DOC_RUN_GET)

    def _h_run_rerun(self, ctx: _Ctx, owner: str, name: str, run_id: str) -> _Resp:
        auth = self._auth_repo(ctx, owner, name, "actions", "write", DOC_RUN_RERUN)
        if isinstance(auth, _Resp):
            return auth
        repo, _ = auth
        with self._lock:
            run = self._workflow_runs.get((repo.key, int(run_id)))
        if run is None:
            return _not_found(DOC_RUN_RERUN)
        body = self._body_object(ctx, DOC_RUN_RERUN, required=False)
        if isinstance(body, _Resp):
            return body
        debug = body.get("enable_debug_logging", False)
        if not isinstance(debug, bool):
            return _invalid(
                f"For 'properties/enable_debug_logging', {_inspect(debug)} is not a boolean.", DOC_RUN_RERUN
            )
        with self._lock:
            if run["status"] != "completed":
                return _error(403, "This workflow is already running", DOC_RUN_RERUN)
            if run["conclusion"] in ("success", "skipped", "neutral") or run["run_attempt"] >= MAX_RERUN_ATTEMPTS:
                return _error(403, "This workflow run cannot be retried", DOC_RUN_RERUN)
            now = self.clock()
            previous = run["run_attempt"]
            run.update(
                status="queued",
                conclusion=None,
                updated_at=_iso(now),
                run_started_at=_iso(now),
                run_attempt=previous + 1,
                previous_attempt_url=f"{run['url']}/attempts/{previous}",
                triggering_actor=self._bot_user(),
            )
            # The failed (and cancelled, timed out) jobs run again as new jobs, with new ids; the others are carried
            # over into the new attempt's listing as they were.
            attempts = self._jobs.setdefault((repo.key, int(run_id)), {})
            attempts[previous + 1] = [
                self._new_job(run, job["name"], now)
                if job["conclusion"] in RERUN_JOB_CONCLUSIONS
                else copy.deepcopy(job)
                for job in attempts.get(previous, [])
            ]
            self._reruns.append((repo.key, int(run_id), copy.deepcopy(body)))
            self._workflow_run_hook(repo.key, run, "requested")
        return _json_resp(201, {})

    def _jobs_query(self, ctx: _Ctx, doc: str) -> tuple[int, int] | _Resp:
        query = {k: v[-1] for k, v in ctx.rec.query.items()}
        try:
            return min(max(int(query.get("per_page", "30")), 1), 100), max(int(query.get("page", "1")), 1)
        except ValueError:
            return _invalid("per_page and page must be integers.", doc)

    def _jobs_page(self, ctx: _Ctx, path: str, jobs: list[dict[str, Any]], per_page: int, page: int) -> _Resp:
        """One page of a jobs listing, with GitHub's ``Link`` header (next and last; prev and first)."""
        query = {k: v[-1] for k, v in ctx.rec.query.items() if k not in ("page", "per_page")}
        extra = "".join(f"&{quote(k)}={quote(v)}" for k, v in query.items())
        base = f"{self.url}{path}?per_page={per_page}"
        last = max(1, math.ceil(len(jobs) / per_page))
        links = []
        if page < last:
            links += [f'<{base}&page={page + 1}{extra}>; rel="next"', f'<{base}&page={last}{extra}>; rel="last"']
        if page > 1:
            links += [f'<{base}&page={page - 1}{extra}>; rel="prev"', f'<{base}&page=1{extra}>; rel="first"']
        headers = {"link": ", ".join(links)} if links else {}
        chunk = jobs[(page - 1) * per_page : page * per_page]
        return _json_resp(200, {"total_count": len(jobs), "jobs": chunk}, headers)

    def _h_jobs_attempt(self, ctx: _Ctx, owner: str, name: str, run_id: str, attempt: str) -> _Resp:
        auth = self._auth_repo(ctx, owner, name, "actions", "read", DOC_JOBS_ATTEMPT)
        if isinstance(auth, _Resp):
            return auth
        repo, _ = auth
        paging = self._jobs_query(ctx, DOC_JOBS_ATTEMPT)
        if isinstance(paging, _Resp):
            return paging
        with self._lock:
            known = (repo.key, int(run_id)) in self._workflow_runs
            jobs = self._jobs.get((repo.key, int(run_id)), {}).get(int(attempt))
            if not known or jobs is None:
                return _not_found(DOC_JOBS_ATTEMPT)
            jobs = copy.deepcopy(jobs)
        path = f"/repos/{repo.full_name}/actions/runs/{run_id}/attempts/{attempt}/jobs"
        return self._jobs_page(ctx, path, jobs, *paging)

    def _h_jobs_list(self, ctx: _Ctx, owner: str, name: str, run_id: str) -> _Resp:
        auth = self._auth_repo(ctx, owner, name, "actions", "read", DOC_JOBS_LIST)
        if isinstance(auth, _Resp):
            return auth
        repo, _ = auth
        paging = self._jobs_query(ctx, DOC_JOBS_LIST)
        if isinstance(paging, _Resp):
            return paging
        filt = ctx.rec.query.get("filter", ["latest"])[-1]
        if filt not in ("latest", "all"):
            return _invalid(f'{_inspect(filt)} is not a member of ["latest", "all"].', DOC_JOBS_LIST)
        with self._lock:
            run = self._workflow_runs.get((repo.key, int(run_id)))
            if run is None:
                return _not_found(DOC_JOBS_LIST)
            attempts = self._jobs.get((repo.key, int(run_id)), {})
            if filt == "latest":
                jobs = copy.deepcopy(attempts.get(run["run_attempt"], []))
            else:  # every attempt's jobs, oldest attempt first; a job carried into a later attempt once
                seen: set[int] = set()
                jobs = []
                for number in sorted(attempts):
                    for job in attempts[number]:
                        if job["id"] not in seen:
                            seen.add(job["id"])
                            jobs.append(copy.deepcopy(job))
        return self._jobs_page(ctx, f"/repos/{repo.full_name}/actions/runs/{run_id}/jobs", jobs, *paging)

    # ---------------------------------------------------------------- endpoints: contents and commits

    def _ref_known(self, repo: _Repo, ref: str) -> bool:
        with self._lock:
            return (
                ref == repo.default_branch
                or ref in self._refs.get(repo.key, set())
                or self._resolve_commit(repo.key, ref) is not None
            )

    def _find_file(self, repo: _Repo, path: str, ref: str) -> _File | None:
        with self._lock:
            candidates = [ref]
            head = self._branches.get((repo.key, ref))
            if head is not None:
                candidates.append(head)
            sha = self._resolve_commit(repo.key, ref)
            if sha is not None:
                candidates.append(sha)
                candidates += [b for (k, b), h in self._branches.items() if k == repo.key and h == sha]
            for candidate in candidates:
                found = self._files.get((repo.key, path, candidate))
                if found is not None:
                    return found
        return None

    def _h_contents(self, ctx: _Ctx, owner: str, name: str, path: str) -> _Resp:
        auth = self._auth_repo(ctx, owner, name, "contents", "read", DOC_CONTENTS)
        if isinstance(auth, _Resp):
            return auth
        repo, _ = auth
        refs = ctx.rec.query.get("ref")
        ref = refs[-1] if refs and refs[-1] else repo.default_branch
        if not self._ref_known(repo, ref):
            return _error(404, f"No commit found for the ref {ref}", DOC_CONTENTS)
        clean = path.strip("/")
        found = self._find_file(repo, clean, ref)
        if found is None:
            return _not_found(DOC_CONTENTS)
        raw = "vnd.github.raw" in ctx.rec.headers.get("accept", "")
        tag = hashlib.sha1(f"{found.sha}:{ref}:{clean}:{raw}".encode(), usedforsecurity=False).hexdigest()
        etag = f'W/"{tag}"'
        headers = {
            "etag": etag,
            "cache-control": "private, max-age=60, s-maxage=60",
            "vary": "Accept, Authorization, Cookie, X-GitHub-OTP",
        }
        wanted = ctx.rec.headers.get("if-none-match", "")
        offered = {t.strip().removeprefix("W/") for t in wanted.split(",") if t.strip()}
        if f'"{tag}"' in offered or "*" in offered:
            return _Resp(304, b"", headers)
        if raw:
            return _Resp(200, found.content, {**headers, "content-type": "application/vnd.github.raw; charset=utf-8"})
        inline = len(found.content) <= CONTENT_INLINE_LIMIT
        encoded = base64.encodebytes(found.content).decode() if inline else ""
        full, url_path = repo.full_name, quote(clean)
        obj = {
            "type": "file",
            "encoding": "base64" if inline else "none",
            "size": len(found.content),
            "name": clean.rsplit("/", 1)[-1],
            "path": clean,
            "content": encoded,
            "sha": found.sha,
            "url": f"{self.url}/repos/{full}/contents/{url_path}?ref={quote(ref)}",
            "git_url": f"{self.url}/repos/{full}/git/blobs/{found.sha}",
            "html_url": f"https://github.com/{full}/blob/{quote(ref)}/{url_path}",
            "download_url": f"https://raw.githubusercontent.com/{full}/{quote(ref)}/{url_path}",
            "_links": {
                "self": f"{self.url}/repos/{full}/contents/{url_path}?ref={quote(ref)}",
                "git": f"{self.url}/repos/{full}/git/blobs/{found.sha}",
                "html": f"https://github.com/{full}/blob/{quote(ref)}/{url_path}",
            },
        }
        return _json_resp(200, obj, headers)

    # ---------------------------------------------------------------- endpoints: git refs, file writes, pulls

    def _h_git_ref(self, ctx: _Ctx, owner: str, name: str, ref: str) -> _Resp:
        auth = self._auth_repo(ctx, owner, name, "contents", "read", DOC_GIT_REF)
        if isinstance(auth, _Resp):
            return auth
        repo, _ = auth
        if not ref.startswith("heads/"):
            return _not_found(DOC_GIT_REF)
        with self._lock:
            sha = self._branches.get((repo.key, ref.removeprefix("heads/")))
        if sha is None:
            return _not_found(DOC_GIT_REF)
        return _json_resp(200, self._ref_obj(repo, ref, sha))

    def _ref_obj(self, repo: _Repo, ref: str, sha: str) -> dict[str, Any]:
        return {
            "ref": f"refs/{ref}",
            "node_id": _node_id("Ref", _login_number(ref)),
            "url": f"{self.url}/repos/{repo.full_name}/git/refs/{ref}",
            "object": {"sha": sha, "type": "commit", "url": f"{self.url}/repos/{repo.full_name}/git/commits/{sha}"},
        }

    def _h_git_ref_create(self, ctx: _Ctx, owner: str, name: str) -> _Resp:
        auth = self._auth_repo(ctx, owner, name, "contents", "write", DOC_GIT_REF_CREATE)
        if isinstance(auth, _Resp):
            return auth
        repo, _ = auth
        body = self._body_object(ctx, DOC_GIT_REF_CREATE, required=True)
        if isinstance(body, _Resp):
            return body
        ref, sha = body.get("ref"), body.get("sha")
        if not isinstance(ref, str) or not isinstance(sha, str):
            return _invalid('"ref" and "sha" are required strings.', DOC_GIT_REF_CREATE)
        if not ref.startswith("refs/") or ref.count("/") < 2:
            return _error(
                422, "Reference name must start with 'refs/' and have at least two slashes.", DOC_GIT_REF_CREATE
            )
        with self._lock:
            if self._resolve_commit(repo.key, sha) is None:
                return _error(422, "Object does not exist", DOC_GIT_REF_CREATE)
            branch = ref.removeprefix("refs/heads/")
            if (repo.key, branch) in self._branches:
                return _error(422, "Reference already exists", DOC_GIT_REF_CREATE)
            self._branches[(repo.key, branch)] = sha.lower()
            self._refs.setdefault(repo.key, set()).add(branch)
        return _json_resp(201, self._ref_obj(repo, f"heads/{branch}", sha.lower()))

    def _h_git_ref_update(self, ctx: _Ctx, owner: str, name: str, ref: str) -> _Resp:
        auth = self._auth_repo(ctx, owner, name, "contents", "write", DOC_GIT_REF_UPDATE)
        if isinstance(auth, _Resp):
            return auth
        repo, _ = auth
        body = self._body_object(ctx, DOC_GIT_REF_UPDATE, required=True)
        if isinstance(body, _Resp):
            return body
        sha, force = body.get("sha"), body.get("force", False)
        if not isinstance(sha, str):
            return _invalid('"sha" wasn\'t supplied.', DOC_GIT_REF_UPDATE)
        branch = ref.removeprefix("heads/")
        with self._lock:
            if not ref.startswith("heads/") or (repo.key, branch) not in self._branches:
                return _error(422, "Reference does not exist", DOC_GIT_REF_UPDATE)
            if self._resolve_commit(repo.key, sha) is None:
                return _error(422, "Object does not exist", DOC_GIT_REF_UPDATE)
            if force is not True and self._branches[(repo.key, branch)] != sha.lower():
                # The double keeps no history: moving a branch anywhere else is not a fast-forward it can prove.
                return _error(422, "Update is not a fast forward", DOC_GIT_REF_UPDATE)
            self._branches[(repo.key, branch)] = sha.lower()
            for key in [k for k in self._files if k[0] == repo.key and k[2] == branch]:
                del self._files[key]  # what the branch held before now comes from its new head
        return _json_resp(200, self._ref_obj(repo, f"heads/{branch}", sha.lower()))

    def _h_contents_put(self, ctx: _Ctx, owner: str, name: str, path: str) -> _Resp:
        auth = self._auth_repo(ctx, owner, name, "contents", "write", DOC_CONTENTS_PUT)
        if isinstance(auth, _Resp):
            return auth
        repo, _ = auth
        body = self._body_object(ctx, DOC_CONTENTS_PUT, required=True)
        if isinstance(body, _Resp):
            return body
        message, content = body.get("message"), body.get("content")
        branch = body.get("branch") or repo.default_branch
        if not isinstance(message, str) or not message:
            return _invalid('"message" wasn\'t supplied.', DOC_CONTENTS_PUT)
        if not isinstance(content, str):
            return _invalid('"content" wasn\'t supplied.', DOC_CONTENTS_PUT)
        try:
            data = base64.b64decode(content, validate=True)
        except ValueError:
            return _invalid("content is not valid Base64", DOC_CONTENTS_PUT)
        clean = path.strip("/")
        with self._lock:
            if (repo.key, branch) not in self._branches:
                return _error(404, f"Branch {branch} not found", DOC_CONTENTS_PUT)
            current = self._find_file(repo, clean, branch)
            sha = body.get("sha")
            if current is not None and sha is None:
                return _invalid('"sha" wasn\'t supplied.', DOC_CONTENTS_PUT)
            if current is not None and sha != current.sha:
                return _error(409, f"{clean} does not match {sha}", DOC_CONTENTS_PUT)
            blob = hashlib.sha1(b"blob %d\x00" % len(data) + data, usedforsecurity=False).hexdigest()
            commit = hashlib.sha1(f"{repo.key}:{branch}:{clean}:{blob}:{self.clock()}".encode(), usedforsecurity=False)
            head = commit.hexdigest()
            previous = self._branches[(repo.key, branch)]
            # The new commit holds what its parent held, and the written file.
            for (k, p, ref), f in list(self._files.items()):
                if k == repo.key and ref in (previous, branch) and p != clean:
                    self._files[(k, p, head)] = f
            self._files[(repo.key, clean, head)] = _File(data, blob)
            self._files.pop((repo.key, clean, branch), None)
            self._commits.setdefault(repo.key, set()).add(head)
            self._branches[(repo.key, branch)] = head
        status = 200 if current is not None else 201
        return _json_resp(
            status, {"content": {"path": clean, "sha": blob}, "commit": {"sha": head, "message": message}}
        )

    def _pull_obj(self, pull: dict[str, Any]) -> dict[str, Any]:
        return copy.deepcopy(pull)

    def _h_pulls_list(self, ctx: _Ctx, owner: str, name: str) -> _Resp:
        auth = self._auth_repo(ctx, owner, name, "pull_requests", "read", DOC_PULLS_LIST)
        if isinstance(auth, _Resp):
            return auth
        repo, _ = auth
        query = {k: v[-1] for k, v in ctx.rec.query.items()}
        state = query.get("state", "open")
        if state not in ("open", "closed", "all"):
            return _invalid("state must be open, closed or all.", DOC_PULLS_LIST)
        head, base = query.get("head"), query.get("base")
        with self._lock:
            found = [
                self._pull_obj(p)
                for (k, _), p in sorted(self._pulls.items())
                if k == repo.key
                and (state == "all" or p["state"] == state)
                and (head is None or f"{p['head']['user']['login']}:{p['head']['ref']}".lower() == head.lower())
                and (base is None or p["base"]["ref"] == base)
            ]
        return _json_resp(200, found[:30])

    def _h_pulls_create(self, ctx: _Ctx, owner: str, name: str) -> _Resp:
        auth = self._auth_repo(ctx, owner, name, "pull_requests", "write", DOC_PULLS_CREATE)
        if isinstance(auth, _Resp):
            return auth
        repo, _ = auth
        body = self._body_object(ctx, DOC_PULLS_CREATE, required=True)
        if isinstance(body, _Resp):
            return body
        title, head, base = body.get("title"), body.get("head"), body.get("base")
        if not all(isinstance(v, str) and v for v in (title, head, base)):
            return _invalid('"title", "head" and "base" are required strings.', DOC_PULLS_CREATE)
        assert isinstance(head, str) and isinstance(base, str)
        branch = head.split(":", 1)[-1]
        with self._lock:
            head_sha, base_sha = self._branches.get((repo.key, branch)), self._branches.get((repo.key, base))
            errors: list[dict[str, Any]] = []
            if head_sha is None:
                errors.append({"resource": "PullRequest", "field": "head", "code": "invalid"})
            if base_sha is None:
                errors.append({"resource": "PullRequest", "field": "base", "code": "invalid"})
            if not errors and head_sha == base_sha:
                errors.append(
                    {"resource": "PullRequest", "code": "custom", "message": f"No commits between {base} and {branch}"}
                )
            duplicate = any(
                k == repo.key and p["state"] == "open" and p["head"]["ref"] == branch
                for (k, _), p in self._pulls.items()
            )
            if duplicate:
                message = f"A pull request already exists for {repo.owner}:{branch}."
                errors.append({"resource": "PullRequest", "code": "custom", "message": message})
            if errors:
                return _json_resp(
                    422, {"message": "Validation Failed", "errors": errors, "documentation_url": DOC_PULLS_CREATE}
                )
            number = next(self._issue_numbers)
            now = _iso(self.clock())
            pull = {
                "number": number,
                "state": "open",
                "title": title,
                "body": body.get("body") or "",
                "user": {"login": f"{self.app_slug}[bot]", "type": "Bot"},
                "head": {"ref": branch, "sha": head_sha, "user": {"login": repo.owner}},
                "base": {"ref": base, "sha": base_sha},
                "labels": [],
                "merged": False,
                "created_at": now,
                "updated_at": now,
                "html_url": f"https://github.com/{repo.full_name}/pull/{number}",
            }
            self._pulls[(repo.key, number)] = pull
            self._issues[(repo.key, number)] = True
            return _json_resp(201, self._pull_obj(pull))

    def _h_pulls_update(self, ctx: _Ctx, owner: str, name: str, number: str) -> _Resp:
        auth = self._auth_repo(ctx, owner, name, "pull_requests", "write", DOC_PULLS_UPDATE)
        if isinstance(auth, _Resp):
            return auth
        repo, _ = auth
        body = self._body_object(ctx, DOC_PULLS_UPDATE, required=True)
        if isinstance(body, _Resp):
            return body
        with self._lock:
            pull = self._pulls.get((repo.key, int(number)))
            if pull is None:
                return _not_found(DOC_PULLS_UPDATE)
            if "state" in body and body["state"] not in ("open", "closed"):
                return _invalid("state must be open or closed.", DOC_PULLS_UPDATE)
            for key in ("title", "body", "state"):
                if key in body:
                    pull[key] = body[key]
            pull["updated_at"] = _iso(self.clock())
            return _json_resp(200, self._pull_obj(pull))

    def _h_runs_list(self, ctx: _Ctx, owner: str, name: str) -> _Resp:
        auth = self._auth_repo(ctx, owner, name, "actions", "read", DOC_RUNS_LIST)
        if isinstance(auth, _Resp):
            return auth
        repo, _ = auth
        query = {k: v[-1] for k, v in ctx.rec.query.items()}
        try:
            per_page = min(max(int(query.get("per_page", "30")), 1), 100)
            page = max(int(query.get("page", "1")), 1)
        except ValueError:
            return _invalid("per_page and page must be integers.", DOC_RUNS_LIST)
        low, high = None, None
        created = query.get("created")
        if created is not None:
            if created.startswith(">="):
                low = _parse_iso(created[2:])
            elif ".." in created:
                start, _, end = created.partition("..")
                low, high = _parse_iso(start), _parse_iso(end)
            else:
                return _invalid("created must be >=<date>, or <date>..<date>.", DOC_RUNS_LIST)
            if (created.startswith(">=") and low is None) or (".." in created and (low is None or high is None)):
                return _invalid("created is not a date and time.", DOC_RUNS_LIST)
        with self._lock:
            runs = [copy.deepcopy(r) for (k, _), r in self._workflow_runs.items() if k == repo.key]
        event = query.get("event")
        runs = [
            r
            for r in runs
            if (event is None or r["event"] == event)
            and (low is None or (_parse_iso(r["created_at"]) or 0) >= low)
            and (high is None or (_parse_iso(r["created_at"]) or 0) <= high)
        ]
        runs.sort(key=lambda r: r["id"], reverse=True)  # newest first
        chunk = runs[(page - 1) * per_page : page * per_page]
        return _json_resp(200, {"total_count": len(runs), "workflow_runs": chunk})

    def _h_pull_files(self, ctx: _Ctx, owner: str, name: str, number: str) -> _Resp:
        auth = self._auth_repo(ctx, owner, name, "pull_requests", "read", DOC_PULL_FILES)
        if isinstance(auth, _Resp):
            return auth
        repo, _ = auth
        query = {k: v[-1] for k, v in ctx.rec.query.items()}
        try:
            per_page = min(max(int(query.get("per_page", "30")), 1), 100)
            page = max(int(query.get("page", "1")), 1)
        except ValueError:
            return _invalid("per_page and page must be integers.", DOC_PULL_FILES)
        with self._lock:
            files = self._pull_files.get((repo.key, int(number)))
        if files is None:
            return _not_found(DOC_PULL_FILES)
        listed = files[:3000]  # GitHub lists at most 3,000 files of a pull request
        chunk = listed[(page - 1) * per_page : page * per_page]
        headers = {}
        if page * per_page < len(listed):
            base = f"{self.url}/repos/{repo.full_name}/pulls/{number}/files?per_page={per_page}"
            headers["link"] = f'<{base}&page={page + 1}>; rel="next"'
        return _json_resp(
            200, [{"sha": "0" * 40, "additions": 1, "deletions": 0, "changes": 1, **f} for f in chunk], headers
        )

    def _h_compare(self, ctx: _Ctx, owner: str, name: str, base: str, head: str) -> _Resp:
        auth = self._auth_repo(ctx, owner, name, "contents", "read", DOC_COMPARE)
        if isinstance(auth, _Resp):
            return auth
        repo, _ = auth
        with self._lock:
            files = self._head_files.get((repo.key, head.lower()))
            listed = self._compared_commits(repo.key, base.lower(), head.lower())
            behind = self._compared_commits(repo.key, head.lower(), base.lower()) if listed is None else None
        if listed is not None:
            return self._compare_history(repo, base, head, listed, ctx)
        if behind is not None:  # the head is an ancestor of the base: GitHub answers `behind`, listing nothing
            return _json_resp(200, {"status": "behind", "ahead_by": 0, "behind_by": len(behind), "total_commits": 0,
                                    "commits": [], "files": []})  # fmt: skip
        if files is None:
            return _not_found(DOC_COMPARE)  # GitHub: no such commit
        named = [
            {"sha": "0" * 40, "additions": 1, "deletions": 0, "changes": 1, "patch": "@@ -1 +1 @@", **f}
            for f in files[:MAX_COMPARE_FILES]
        ]
        return _json_resp(
            200,
            {
                "url": f"{self.url}/repos/{repo.full_name}/compare/{base}...{head}",
                "html_url": f"https://github.com/{repo.full_name}/compare/{base}...{head}",
                "status": "ahead",
                "ahead_by": 1,
                "behind_by": 0,
                "total_commits": 1,
                "commits": [],
                "files": named,
            },
        )

    def _compared_commits(self, repo_key: str, base: str, head: str) -> list[str] | None:
        """The commits after `base` up to `head` along first parents, oldest first; None when `head` has no history
        here (or `base` is not an ancestor of it: GitHub would say `diverged`, which this double does not model)."""
        if (repo_key, head) not in self._history:
            return None
        walked, at = [], head
        while at is not None and at != base and (repo_key, at) in self._history and len(walked) < 10_000:
            walked.append(at)
            at = self._history[(repo_key, at)][0]
        return list(reversed(walked)) if at == base else None

    def _compare_history(self, repo: _Repo, base: str, head: str, listed: list[str], ctx: _Ctx) -> _Resp:
        """GitHub lists at most 250 commits in a comparison (oldest first), `total_commits` naming them all."""
        commits = []
        for sha in listed[:250]:
            parent, message, login, date = self._history[(repo.key, sha)]
            person = {"name": login, "email": f"{login}@example.com", "date": date}
            commits.append({
                "sha": sha,
                "commit": {"author": person, "committer": person, "message": message},
                "author": {"login": login, "id": _login_number(login), "type": "User"},
                "parents": [{"sha": parent}] if parent else [],
                "html_url": f"https://github.com/{repo.full_name}/commit/{sha}",
            })  # fmt: skip
        body = {
            "url": f"{self.url}/repos/{repo.full_name}/compare/{base}...{head}",
            "html_url": f"https://github.com/{repo.full_name}/compare/{base}...{head}",
            "status": "ahead" if listed else "identical",
            "ahead_by": len(listed),
            "behind_by": 0,
            "total_commits": len(listed),
            "commits": commits,
            "files": [],
        }
        return _json_resp(200, body)

    def _h_search_issues(self, ctx: _Ctx) -> _Resp:
        query = {k: v[-1] for k, v in ctx.rec.query.items()}
        words = query.get("q", "").split()
        repos = [w.split(":", 1)[1] for w in words if w.lower().startswith("repo:")]
        if len(repos) != 1 or repos[0].count("/") != 1:
            return _error(
                422, "Validation Failed: the double searches one repository (repo:owner/name)", DOC_SEARCH_ISSUES
            )
        owner, name = repos[0].split("/")
        auth = self._auth_repo(ctx, owner, name, ("issues", "metadata"), "read", DOC_SEARCH_ISSUES)
        if isinstance(auth, _Resp):
            if auth.status != 404:
                return auth
            return _error(
                422,
                "Validation Failed: The listed users and repositories cannot be searched either because "
                "the resources do not exist or you do not have permission to view them.",
                DOC_SEARCH_ISSUES,
            )
        repo, info = auth
        ctx.count = False  # search has its own limit, apart from the core one
        minute = int(self.clock() // 60)
        with self._lock:
            hits = self._search_hits.get((info.installation_id, minute), 0) + 1
            self._search_hits[(info.installation_id, minute)] = hits
        limits = {
            "x-ratelimit-limit": str(self.search_rate_limit),
            "x-ratelimit-resource": "search",
            "x-ratelimit-remaining": str(max(0, self.search_rate_limit - hits)),
            "x-ratelimit-used": str(min(hits, self.search_rate_limit)),
            "x-ratelimit-reset": str((minute + 1) * 60),
        }
        if hits > self.search_rate_limit:
            message = f"API rate limit exceeded for installation ID {info.installation_id}."
            return _error(403, message, DOC_PRIMARY + "#about-secondary-rate-limits", limits)
        try:
            per_page = min(max(int(query.get("per_page", "30")), 1), 100)
            page = max(int(query.get("page", "1")), 1)
        except ValueError:
            return _invalid("per_page and page must be integers.", DOC_SEARCH_ISSUES)
        if (page - 1) * per_page >= 1000:
            return _error(422, "Only the first 1000 search results are available", DOC_SEARCH_ISSUES, limits)
        with self._lock:
            items = [copy.deepcopy(i) for i in self._searchable.get(repo.key, {}).values() if _search_match(i, words)]
        if query.get("sort") == "created":
            items.sort(key=lambda i: (i["created_at"], i["number"]), reverse=query.get("order", "desc") == "desc")
        else:
            items.sort(key=lambda i: -i["number"])
        listed = items[:1000]
        last = max(1, math.ceil(len(listed) / per_page))
        rest = "&".join(f"{quote(k)}={quote(v)}" for k, v in query.items() if k not in ("page", "per_page"))
        base = f"{self.url}/search/issues?{rest}&per_page={per_page}"
        links = [f'<{base}&page={page + 1}>; rel="next"', f'<{base}&page={last}>; rel="last"'] if page < last else []
        body = {
            "total_count": len(items),
            "incomplete_results": False,
            "items": listed[(page - 1) * per_page : page * per_page],
        }
        return _json_resp(200, body, limits | ({"link": ", ".join(links)} if links else {}))

    def _h_permission(self, ctx: _Ctx, owner: str, name: str, login: str) -> _Resp:
        auth = self._auth_repo(ctx, owner, name, "metadata", "read", DOC_COLLABORATOR_PERMISSION)
        if isinstance(auth, _Resp):
            return auth
        repo, _ = auth
        with self._lock:
            role = self._collaborators.get((repo.key, login.lower()))
        # Anyone is at least a reader of a public repository; the legacy `permission` folds triage into read and
        # maintain into write.
        role = role or ("read" if not repo.private else "none")
        legacy = {"maintain": "write", "triage": "read"}.get(role, role)
        user = {"login": login, "id": _login_number(login), "type": "User"}
        return _json_resp(200, {"permission": legacy, "role_name": role, "user": user})

    def _h_reaction_create(self, ctx: _Ctx, owner: str, name: str, comment_id: str) -> _Resp:
        auth = self._auth_repo(ctx, owner, name, ("issues", "pull_requests"), "write", DOC_REACTION_CREATE)
        if isinstance(auth, _Resp):
            return auth
        repo, _ = auth
        body = self._body_object(ctx, DOC_REACTION_CREATE, required=True)
        if isinstance(body, _Resp):
            return body
        content = body.get("content")
        if content not in REACTIONS:
            return _invalid(f"content must be one of {', '.join(REACTIONS)}.", DOC_REACTION_CREATE)
        with self._lock:
            where = self._comment_issue.get(int(comment_id))
            if where is None or where[0] != repo.key:
                return _not_found(DOC_REACTION_CREATE)
            mine = self._reactions.setdefault(int(comment_id), [])
            existing = next((r for r in mine if r["content"] == content), None)
            if existing is not None:
                return _json_resp(200, existing)  # the App already reacted so: GitHub answers 200 with it
            reaction = {"id": next(self._ids), "content": content, "user": {"login": f"{self.app_slug}[bot]"}}
            mine.append(reaction)
        return _json_resp(201, reaction)

    def _h_labels_add(self, ctx: _Ctx, owner: str, name: str, number: str) -> _Resp:
        auth = self._issue_auth(ctx, owner, name, int(number), "write", DOC_LABELS_ADD)
        if isinstance(auth, _Resp):
            return auth
        repo, _ = auth
        body = self._body_object(ctx, DOC_LABELS_ADD, required=True)
        if isinstance(body, _Resp):
            return body
        labels = body.get("labels")
        if not isinstance(labels, list) or not all(isinstance(x, str) and x for x in labels):
            return _invalid('"labels" must be a list of label names.', DOC_LABELS_ADD)
        with self._lock:
            pull = self._pulls.get((repo.key, int(number)))
            names = [lab["name"] for lab in (pull["labels"] if pull else [])]
            names += [x for x in labels if x not in names]
            if pull is not None:
                pull["labels"] = [{"name": x} for x in names]
        return _json_resp(200, [{"name": x, "color": "ededed", "default": False} for x in names])

    def _h_commit(self, ctx: _Ctx, owner: str, name: str, ref: str) -> _Resp:
        auth = self._auth_repo(ctx, owner, name, "contents", "read", DOC_COMMIT)
        if isinstance(auth, _Resp):
            return auth
        repo, _ = auth
        sha = self._resolve_commit(repo.key, ref)
        if sha is None:
            return _error(422, f"No commit found for SHA: {ref}", DOC_COMMIT)
        person = {"name": "Octo Cat", "email": "octocat@example.com", "date": _iso(self.clock())}
        obj = {
            "sha": sha,
            "node_id": base64.b64encode(f"Commit:{repo.id}:{sha}".encode()).decode(),
            "commit": {
                "author": person,
                "committer": person,
                "message": f"commit {sha[:7]}",
                "tree": {"sha": hashlib.sha1(sha.encode(), usedforsecurity=False).hexdigest()},
                "comment_count": 0,
            },
            "url": f"{self.url}/repos/{repo.full_name}/commits/{sha}",
            "html_url": f"https://github.com/{repo.full_name}/commit/{sha}",
            "parents": [],
            "stats": {"total": 0, "additions": 0, "deletions": 0},
            "files": [],
        }
        return _json_resp(200, obj, {"etag": f'W/"{sha}"'})

    # ---------------------------------------------------------------- object shapes

    def _owner_obj(self, login: str, account_id: int, kind: str) -> dict[str, Any]:
        return {
            "login": login,
            "id": account_id,
            "node_id": _node_id(kind, account_id),
            "type": kind,
            "site_admin": False,
            "url": f"{self.url}/users/{login}",
            "html_url": f"https://github.com/{login}",
        }

    def _repo_summary(self, repo: _Repo) -> dict[str, Any]:
        inst = self._installations[repo.installation_id]
        return {
            "id": repo.id,
            "node_id": _node_id("Repository", repo.id),
            "name": repo.name,
            "full_name": repo.full_name,
            "private": repo.private,
            "owner": self._owner_obj(inst.account, inst.account_id, inst.target_type),
            "html_url": f"https://github.com/{repo.full_name}",
            "url": f"{self.url}/repos/{repo.full_name}",
            "default_branch": repo.default_branch,
            "visibility": "private" if repo.private else "public",
        }

    def _installation_obj(self, inst: _Installation) -> dict[str, Any]:
        return {
            "id": inst.id,
            "account": self._owner_obj(inst.account, inst.account_id, inst.target_type),
            "repository_selection": inst.repository_selection,
            "access_tokens_url": f"{self.url}/app/installations/{inst.id}/access_tokens",
            "repositories_url": f"{self.url}/installation/repositories",
            "html_url": f"https://github.com/organizations/{inst.account}/settings/installations/{inst.id}",
            "app_id": int(self.app_id) if self.app_id.isdigit() else self.app_id,
            "app_slug": self.app_slug,
            "client_id": self.client_id,
            "target_id": inst.account_id,
            "target_type": inst.target_type,
            "permissions": dict(inst.permissions),
            "events": ["check_run", "check_suite", "push", "workflow_run"],
            "created_at": _iso(inst.created_at),
            "updated_at": _iso(inst.created_at),
            "single_file_name": None,
            "has_multiple_single_files": False,
            "single_file_paths": [],
            "suspended_by": None,
            "suspended_at": _iso(self.clock()) if inst.suspended else None,
        }

    def _app_obj(self, slug: str) -> dict[str, Any]:
        ours = slug == self.app_slug
        app_id = (int(self.app_id) if self.app_id.isdigit() else self.app_id) if ours else 15368
        return {
            "id": app_id,
            "slug": slug,
            "node_id": _node_id("App", app_id if isinstance(app_id, int) else 0),
            "name": slug,
            "client_id": self.client_id if ours else None,
            "html_url": f"https://github.com/apps/{slug}",
        }
