"""docs/openapi.yaml is a valid OpenAPI 3.1 document, and says what the relay's code answers.

The fuzzing (test_http.py) checks live answers against it; these check it as a document, and hold its error
answers to the one place that maps errors to HTTP (crcr.api), for every error each route can raise.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import jsonschema_rs
import pytest
import schemathesis
import yaml

from crcr.api import error_response, internal_error, json_response
from crcr.domain.errors import (
    BadRequest,
    BadSignature,
    Conflict,
    CrcrError,
    Forbidden,
    PayloadTooLarge,
    TooManyRequests,
    Unauthorized,
    Unavailable,
)

DOC_PATH = Path(__file__).resolve().parents[2] / "docs" / "openapi.yaml"
DOC: dict[str, Any] = yaml.safe_load(DOC_PATH.read_text())
DRAFT = "https://json-schema.org/draft/2020-12/schema"

# What each route's code can raise (functions/*/handler.py through crcr.api), one instance per kind.
RAISED: dict[str, list[CrcrError]] = {
    "/webhook": [
        BadSignature("signature does not match the body", field="X-Hub-Signature-256"),
        BadRequest("missing X-GitHub-Event header", field="X-GitHub-Event"),
        BadRequest("pull_request payload is malformed", field="pull_request.head.sha"),
        PayloadTooLarge("body is 10485761 bytes; the limit is 10485760", field="body"),
    ],
    "/callback": [
        Unauthorized("missing Authorization: Bearer <OIDC token>", field="Authorization"),
        Unauthorized("the ticket's dispatch is not in the ledger", field="ticket"),
        Unauthorized("token expired"),
        Forbidden("this ticket was issued to org/other", field="ticket"),
        Forbidden("org/repo is no longer on the allowlist"),
        BadRequest("invalid callback: Field required", field="workflow.url"),
        PayloadTooLarge("the report is too large to store; shorten its summary", field="summary"),
        Conflict("job build already reported completed differently"),
        TooManyRequests("too many callbacks from org/repo", retry_after_s=7),
        Unavailable("cannot fetch the issuer's keys now", retry_after_s=30),
    ],
}
# And what each answers when it succeeds (functions/*/handler.py).
ANSWERED: dict[str, list[tuple[int, dict[str, Any]]]] = {
    "/webhook": [
        (202, {"status": "accepted", "delivery_id": "72d3162e-cc78-11e3-81ab-4c9367dc0958"}),
        *((200, {"status": s, "delivery_id": "d-1"}) for s in ("pong", "ignored", "duplicate")),
    ],
    "/callback": [(200, {"status": s}) for s in ("recorded", "duplicate", "ignored")],
}
# The HTTP API's own refusals (crcr.local.front, as API Gateway answers them), on either route.
EDGE = [(400, "Bad Request"), (413, "Request Entity Too Large"), (431, "Request Header Fields Too Large")]


def pointer(*parts: str) -> str:
    return "#/" + "/".join(p.replace("~", "~0").replace("/", "~1") for p in parts)


def validator(ref: str) -> Any:
    """A JSON Schema 2020-12 validator for the schema at `ref`, resolving the document's own references."""
    return jsonschema_rs.validator_for({**DOC, "$schema": DRAFT, "$ref": ref})


def response_of(route: str, status: int) -> dict[str, Any]:
    responses = DOC["paths"][route]["post"]["responses"]
    assert str(status) in responses, f"{route} answers {status}, which the document does not list"
    answer = responses[str(status)]
    if "$ref" in answer:
        answer = DOC["components"]["responses"][answer["$ref"].rsplit("/", 1)[1]]
    return dict(answer)


def assert_documented(route: str, answer: dict[str, Any]) -> None:
    status = answer["statusCode"]
    documented = response_of(route, status)
    body = json.loads(answer["body"])
    listed = DOC["paths"][route]["post"]["responses"][str(status)]
    where = (
        ("components", "responses", listed["$ref"].rsplit("/", 1)[1])
        if "$ref" in listed
        else ("paths", route, "post", "responses", str(status))
    )
    errors = [e.message for e in validator(pointer(*where, "content", "application/json", "schema")).iter_errors(body)]
    assert errors == [], f"{route} {status} {body} is not as documented: {errors}"
    for name, listed_header in (documented.get("headers") or {}).items():
        spec = listed_header
        if "$ref" in spec:
            spec = DOC["components"]["headers"][spec["$ref"].rsplit("/", 1)[1]]
        value = {k.lower(): v for k, v in answer["headers"].items()}.get(name.lower())
        if spec.get("required"):
            assert value is not None, f"{route} {status} lacks the documented {name} header"
        if value is not None:
            assert re.fullmatch(spec["schema"]["pattern"].strip("^$"), value), f"{name}: {value!r}"


def test_the_document_is_valid_openapi_3_1_with_valid_json_schemas() -> None:
    schema = schemathesis.openapi.from_path(DOC_PATH)
    schema.validate()  # the OpenAPI 3.1 meta-schema
    assert sorted((op.ok().method, op.ok().path) for op in schema.get_all_operations()) == [
        ("post", "/callback"),
        ("post", "/webhook"),
    ]
    for name in DOC["components"]["schemas"]:
        jsonschema_rs.meta.validate({"$schema": DRAFT, **DOC["components"]["schemas"][name]})
        validator(pointer("components", "schemas", name))  # every $ref in it resolves
    for text in re.findall(r"pattern: \"(.+)\"", DOC_PATH.read_text()):
        re.compile(yaml.safe_load(f'"{text}"'))  # and every pattern is a regular expression


@pytest.mark.parametrize("route", sorted(RAISED))
def test_every_error_a_route_raises_is_answered_as_documented(route: str) -> None:
    for exc in RAISED[route]:
        assert_documented(route, error_response(exc))
    assert_documented(route, internal_error())
    for status, message in EDGE:
        assert_documented(route, json_response(status, {"message": message}))


@pytest.mark.parametrize("route", sorted(ANSWERED))
def test_every_success_a_route_answers_is_documented(route: str) -> None:
    for status, body in ANSWERED[route]:
        assert_documented(route, json_response(status, body))


def test_only_what_the_routes_answer_is_documented() -> None:
    webhook = set(DOC["paths"]["/webhook"]["post"]["responses"])
    callback = set(DOC["paths"]["/callback"]["post"]["responses"])
    assert webhook == {"200", "202", "400", "401", "413", "431", "500", "503"}
    assert callback == {"200", "400", "401", "403", "409", "413", "429", "431", "500", "503"}


@pytest.mark.parametrize(("route", "name"), [("/webhook", n) for n in ("pull_request", "push")])
def test_the_documented_request_examples_are_valid_bodies(route: str, name: str) -> None:
    media = DOC["paths"][route]["post"]["requestBody"]["content"]["application/json"]
    ref = pointer("paths", route, "post", "requestBody", "content", "application/json", "schema")
    assert validator(ref).is_valid(media["examples"][name]["value"])


@pytest.mark.parametrize("name", ["ours", "pytorch", "scheduled"])
def test_the_documented_callback_examples_are_valid_bodies(name: str) -> None:
    media = DOC["paths"]["/callback"]["post"]["requestBody"]["content"]["application/json"]
    ref = pointer("paths", "/callback", "post", "requestBody", "content", "application/json", "schema")
    errors = [e.message for e in validator(ref).iter_errors(media["examples"][name]["value"])]
    assert errors == []
