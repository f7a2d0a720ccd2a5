"""The upstream default branch in the state table: the order of the commits pushed to it (for baselines and
blamelists), and what GitHub said of commits a scheduled report named."""

from __future__ import annotations

import json
from typing import Any

from crcr.adapters.item_codec import from_dynamo, to_dynamo
from crcr.adapters.table import BRANCH_TTL_S, MISSING_COMMIT_TTL_S, branch_pk, key, lookup_key, lookup_pk, query_all
from crcr.domain.ids import repo_key
from crcr.domain.regressions import BranchCommit


def _order_sk(committed_at: float, place: int = 0, sha: str = "") -> str:
    return f"O#{max(0, round(committed_at * 1000)):015d}#{place:05d}#{sha}"


def _ordered(commit: BranchCommit) -> dict[str, Any]:
    info = {"sha": commit.sha, "t": commit.committed_at, "i": commit.place, "parent": commit.parent, "pr": commit.pr}
    info |= {"title": commit.title, "author": commit.author, "files": commit.files}
    return {
        "sk": _order_sk(commit.committed_at, commit.place, commit.sha),
        "c": json.dumps(info, separators=(",", ":")),
    }


def _commit(item: dict[str, Any]) -> BranchCommit:
    info = json.loads(from_dynamo(item)["c"])
    files = info.get("files")
    return BranchCommit(
        info["sha"],
        float(info["t"]),
        place=int(info.get("i") or 0),
        parent=info.get("parent"),
        pr=info.get("pr"),
        title=info.get("title"),
        author=info.get("author"),
        files=tuple(files) if files is not None else None,
    )


class DynamoBranch:
    """The BranchLog, BranchOrder, BranchCommits and CommitMemory ports."""

    def __init__(self, client: Any, table: str) -> None:
        self._ddb = client
        self._table = table

    def record_commits(self, upstream: str, commits: list[BranchCommit]) -> None:
        """Each commit as two items in the branch's partition: `C#<sha>` (its time, read by SHA) and
        `O#<ms>#<place>#<sha>` (its place in the branch's order with what a blamelist shows of it, read as a range)."""
        expires = int(max((c.committed_at for c in commits), default=0)) + BRANCH_TTL_S
        pk = branch_pk(upstream)
        items: list[dict[str, Any]] = [{"sk": f"C#{c.sha}", "t": c.committed_at} for c in commits]
        items += [_ordered(c) for c in commits]
        requests = [{"PutRequest": {"Item": to_dynamo({"pk": pk} | item | {"expires_at": expires})}} for item in items]
        for start in range(0, len(requests), 25):  # BatchWriteItem takes 25 at a time
            pending: dict[str, Any] = {self._table: requests[start : start + 25]}
            for _ in range(5):
                left = self._ddb.batch_write_item(RequestItems=pending).get("UnprocessedItems") or {}
                if not left:
                    break
                pending = left

    def commit_times(self, upstream: str, shas: list[str]) -> dict[str, float]:
        found: dict[str, float] = {}
        wanted = list(dict.fromkeys(shas))
        for start in range(0, len(wanted), 100):  # BatchGetItem takes 100 keys
            keys = [key(branch_pk(upstream), f"C#{sha}") for sha in wanted[start : start + 100]]
            pending: dict[str, Any] = {self._table: {"Keys": keys, "ProjectionExpression": "sk, t"}}
            for _ in range(5):
                got = self._ddb.batch_get_item(RequestItems=pending)
                for item in map(from_dynamo, got.get("Responses", {}).get(self._table, [])):
                    found[item["sk"].removeprefix("C#")] = float(item["t"])
                pending = got.get("UnprocessedKeys") or {}
                if not pending:
                    break
        return found

    def commits_between(self, upstream: str, start: float, end: float) -> list[BranchCommit]:
        """The commits pushed with times from `start` to `end` (both included), in the branch's order, each once."""
        items = query_all(
            self._ddb,
            TableName=self._table,
            KeyConditionExpression="pk = :p AND sk BETWEEN :a AND :b",
            ExpressionAttributeValues=to_dynamo(
                {":p": branch_pk(upstream), ":a": _order_sk(start), ":b": _order_sk(end, 99_999, "~")}
            ),
        )
        found: dict[str, BranchCommit] = {}
        for item in items:
            commit = _commit(item)
            found.setdefault(commit.sha, commit)
        return sorted(found.values(), key=lambda c: c.order)

    def commit_seen(self, upstream: str, sha: str, now: float, repo: str) -> bool | None:
        missing = f"MISSING#{repo_key(repo)}"  # what `repo`'s own report was told
        answered = lookup_pk(upstream, sha)
        keys = [key(branch_pk(upstream), f"C#{sha}"), lookup_key(upstream, sha), key(answered, missing)]
        got = self._ddb.batch_get_item(RequestItems={self._table: {"Keys": keys, "ConsistentRead": True}})
        items = [from_dynamo(item) for item in got.get("Responses", {}).get(self._table, [])]
        if got.get("UnprocessedKeys"):
            return None  # throttled: look it up as if never seen (the lookup's own budget still holds)
        if any(item["pk"].startswith("BRANCH#") for item in items):
            return True
        # An answer past its time is no answer (DynamoDB deletes expired items only within a day or two). A commit
        # found is found for everyone; "no such commit" answers only the downstream whose report asked (a LOOKUP item
        # saying not found, as kept before 2026-12-07, answers no one).
        answers = {
            item["sk"]: bool(item["found"])
            for item in items
            if item["pk"].startswith("SHA#") and float(item.get("expires_at", "inf")) > now
        }
        if answers.get("LOOKUP"):
            return True
        return False if missing in answers else None

    def remember_commit(self, upstream: str, sha: str, found: bool, now: float, repo: str) -> None:
        ttl = BRANCH_TTL_S if found else MISSING_COMMIT_TTL_S
        answer = "LOOKUP" if found else f"MISSING#{repo_key(repo)}"
        self._ddb.put_item(
            TableName=self._table,
            Item=key(lookup_pk(upstream, sha), answer) | to_dynamo({"found": found, "expires_at": int(now) + ttl}),
        )
