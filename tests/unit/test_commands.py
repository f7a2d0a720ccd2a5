"""PR comment commands: what is read as `@<app> rerun …`, and what is not."""

from __future__ import annotations

import pytest

from crcr.domain.commands import RerunCommand, looks_like_command, may_rerun, parse_command, stranger


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        ("@crcr rerun intel/torch-xpu-ops", RerunCommand(("intel/torch-xpu-ops",), False)),
        ("@CRCR Rerun ALL failed", RerunCommand(None, True)),
        (
            "Looks flaky.\n\n  @crcr rerun rocm/pytorch-rocm-ci failed  \nthanks",
            RerunCommand(("rocm/pytorch-rocm-ci",), True),
        ),
        ("> @crcr rerun all\nquoted, not asked", None),  # a quote of someone else's command
        ("```\n@crcr rerun all\n```", None),  # inside a code block
        ("please @crcr rerun all", None),  # the command is the whole line
        ("@crcr-bot rerun all", None),  # another App's slug
        ("@crcr rerun all now", None),
        ("@crcr rerun not-a-repo", None),
        ("@crcr retry all", None),
        # What GitHub shows as nothing, or as code, or as one line, is no command.
        ("<!-- @crcr rerun all -->", None),
        ("<!--\n@crcr rerun all\n-->", None),
        ("text <!-- never closed\n@crcr rerun all", None),
        ("some prose\n\n    @crcr rerun all", None),  # indented code
        ("\t@crcr rerun all", None),
        ("ok\u2028@crcr rerun all", None),  # U+2028 does not start a line
        ("ok\x85@crcr rerun all", None),
        ("@crcr rerun\u2028all", None),
        ("@crcr\x0brerun all", None),
        ("<!-- note -->\r\n@crcr rerun all", RerunCommand(None, False)),  # a comment before a real line end
        ("   @crcr rerun all", RerunCommand(None, False)),  # three spaces are still a paragraph
    ],
)
def test_a_command_is_one_line_addressed_to_the_app(body: str, expected: RerunCommand | None) -> None:
    assert parse_command(body, "crcr") == expected


def test_most_comments_are_not_even_queued() -> None:
    assert not looks_like_command("LGTM, thanks!")
    assert looks_like_command("@crcr rerun all")


ROLES = [("admin", True), ("maintain", True), ("write", True), ("triage", True), ("read", False), ("none", False)]


@pytest.mark.parametrize(("role", "allowed"), [*ROLES, (None, False)])
def test_only_write_or_triage_access_may_rerun(role: str | None, allowed: bool) -> None:
    assert may_rerun(role) is allowed


@pytest.mark.parametrize(
    ("association", "refused"),
    [("NONE", True), ("FIRST_TIMER", True), ("first_time_contributor", True), ("CONTRIBUTOR", False),
     ("COLLABORATOR", False), ("MEMBER", False), ("OWNER", False), (None, False), ("", False)],
)  # fmt: skip
def test_a_stranger_is_known_from_the_comment_alone(association: str | None, refused: bool) -> None:
    assert stranger(association) is refused
