"""Which searched `DISABLED` issues count: their author is a bot named in the settings or has write access upstream."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Protocol

from crcr.app.ports import Metrics
from crcr.app.ports.github import GitHubError
from crcr.domain.known import LOGIN, NO_ACCESS_ASSOCIATIONS, DisableIssue, may_disable

# test-infra's verifyDisableTestIssueBot accepts PyTorch's bot (its user id 54816060, the App `pytorch-bot`) besides
# anyone with write access; a login ending `[bot]` is an App's and no person can take it.
DEFAULT_BOTS = ("pytorch-bot[bot]",)
ANSWER_TTL_S = 3600.0  # a person's access is asked again after this: one who loses it stops counting within the hour
# GitHub lookups a refresh may make (each ~0.2 s, inside a reporter batch): with a refresh every 30 minutes, 100 an
# hour, shared by every instance through the state table. A login past them waits for the next refresh.
LOOKUPS_PER_REFRESH = 50


class AuthorPermissions(Protocol):
    def permission(self, upstream: str, login: str) -> tuple[str | None, str | None]:
        """GitHub's `permission` and `role_name` of `login` on the upstream ((None, None): no such user); raises
        GitHubError when GitHub does not answer."""
        ...


@dataclass(frozen=True)
class AuthorAnswer:
    may_disable: bool
    checked_at: float


class AuthorAnswers(Protocol):
    def answers(self, upstream: str) -> dict[str, AuthorAnswer]:
        """Every answer kept for the upstream's issue authors, by login in lower case (stale ones too)."""
        ...

    def remember(self, upstream: str, login: str, answer: AuthorAnswer) -> None: ...


@dataclass
class DisableAuthors:
    """The door every searched issue goes through before it may make a failure `known`."""

    permissions: AuthorPermissions
    kept: AuthorAnswers
    metrics: Metrics
    clock: Callable[[], float]
    bots: frozenset[str] = frozenset(DEFAULT_BOTS)  # lower case
    lookups_per_refresh: int = LOOKUPS_PER_REFRESH

    def accepted(self, upstream: str, issues: Iterable[DisableIssue]) -> list[DisableIssue]:
        """The issues whose author may disable a test; each other one is counted with why (`no_author`,
        `association`: refused without a lookup, `permission`: no write access, `unchecked`: not looked up yet,
        `lookup_failed`)."""
        issues = list(issues)
        refused = self._refusals(upstream, [i for i in issues if i.author and LOGIN.fullmatch(i.author)])
        kept = []
        for issue in issues:
            reason = refused.get(issue.author.lower(), "no_author") if issue.author else "no_author"
            if reason is None:
                kept.append(issue)
            else:
                self.metrics.count("DisabledIssueRefused", reason=reason)
        return kept

    def _refusals(self, upstream: str, issues: list[DisableIssue]) -> dict[str, str | None]:
        """Per author (lower case): None when their issues count, else why not."""
        found: dict[str, str | None] = {}
        ask: dict[str, str] = {}  # lower case -> as GitHub spells it
        for issue in issues:
            login = str(issue.author)
            key = login.lower()
            if key in found or key in ask:
                continue
            if key in self.bots:
                found[key] = None
            elif (issue.association or "").upper() in NO_ACCESS_ASSOCIATIONS:
                found[key] = "association"
            else:
                ask[key] = login
        if not ask:
            return found
        now = self.clock()
        answers = self.kept.answers(upstream)
        due: list[tuple[float, str]] = []
        for key in ask:
            answer = answers.get(key)
            if answer is not None and 0 <= now - answer.checked_at < ANSWER_TTL_S:
                found[key] = None if answer.may_disable else "permission"
            else:
                due.append((answer.checked_at if answer is not None else float("-inf"), key))
        lookups = 0
        for _, key in sorted(due):  # never asked first, then the oldest answer
            if lookups >= self.lookups_per_refresh:
                found[key] = "unchecked"
                continue
            lookups += 1
            try:
                permission, role = self.permissions.permission(upstream, ask[key])
            except GitHubError:
                self.metrics.count("IssueAuthorLookupFailed")
                found[key] = "lookup_failed"
                lookups = self.lookups_per_refresh  # GitHub is not answering: the rest wait for the next refresh
                continue
            self.metrics.count("IssueAuthorLookedUp")
            may = may_disable(permission, role)
            self.kept.remember(upstream, key, AuthorAnswer(may, now))
            found[key] = None if may else "permission"
        return found
