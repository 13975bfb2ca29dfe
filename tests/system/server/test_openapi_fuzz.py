"""API fuzzing with schemathesis: every operation of a live server's
``/api/openapi.json``, with a valid workspace key and with no key, on SQLite and PostgreSQL.

Each operation gets requests that follow the document (positive) and requests that break it
(negative), with random path ids and with the ids of a real agent and job, so both the 404
paths and the deep paths run. Every answer must be free of 5xx and conform to the document: a
declared status code, the declared content type, headers and body schema; a request that breaks
the document must be refused. Without a key every ``/api/v1`` request is a 401 with the error
shape. ``JOBAGENTCTL_FUZZ_EXAMPLES`` raises the examples per operation and variant.

The run that gates the suite draws the same examples every time (hypothesis' ``derandomize``,
as the lease model does): a landing is never blocked by chance. A second, bounded run draws
new examples from a random seed and reports what it finds (the test is then marked xfail, with
the seed to replay: ``JOBAGENTCTL_FUZZ_SEED``) without failing the suite; what it finds
becomes a fixed regression test once understood.
"""

from __future__ import annotations

import os
import random
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest
import schemathesis
from hypothesis import HealthCheck, Phase, given, seed, settings
from hypothesis.errors import Unsatisfiable
from schemathesis import GenerationMode
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    negative_data_rejection,
    response_headers_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from jobagentctl.server.http.app import create_app
from jobagentctl.server.settings import ServerSettings
from tests.fixtures.live_server import LiveServer

EXAMPLES = int(os.environ.get("JOBAGENTCTL_FUZZ_EXAMPLES", "8"))
# The random run: a few examples per operation, from this seed (a random one when unset).
RANDOM_EXAMPLES = 3
RANDOM_SEED = os.environ.get("JOBAGENTCTL_FUZZ_SEED")
API = "/api/v1/"
POSITIVE, NEGATIVE = GenerationMode.POSITIVE, GenerationMode.NEGATIVE

# The V1 and V2 operations the product contract lists (method, path): the document holds each.
SPEC_OPERATIONS = {
    ("PUT", "/api/v1/workspaces/{ws}/job-agents/{agentId}"),
    ("GET", "/api/v1/workspaces/{ws}/job-agents"),
    ("GET", "/api/v1/workspaces/{ws}/job-agents/{agentId}"),
    ("DELETE", "/api/v1/workspaces/{ws}/job-agents/{agentId}"),
    ("GET", "/api/v1/workspaces/{ws}/job-agents/{agentId}/jobs"),
    ("POST", "/api/v1/workspaces/{ws}/job-agents/{agentId}/jobs/{jobId}/claim"),
    ("GET", "/api/v1/workspaces/{ws}/jobs"),
    ("GET", "/api/v1/workspaces/{ws}/jobs/{jobId}"),
    ("PUT", "/api/v1/workspaces/{ws}/jobs/{jobId}/status"),
    ("POST", "/api/v1/workspaces/{ws}/job-agents/{agentId}/claim"),
    ("POST", "/api/v1/workspaces/{ws}/jobs/{jobId}/heartbeat"),
    ("GET", "/api/v1/workspaces/{ws}/job-claims"),
    ("GET", "/api/v1/workspaces/{ws}/jobs/{jobId}/attempts"),
    ("POST", "/api/v1/workspaces/{ws}/job-agents/{agentId}/jobs"),
    ("GET", "/healthz"),
    ("GET", "/readyz"),
    ("GET", "/metrics"),
}
METRICS_PATH = "/metrics"


def _document() -> dict[str, Any]:
    """The OpenAPI document as the app builds it (no database needed)."""
    app = create_app(ServerSettings(database="sqlite:///unused.db"))
    document: dict[str, Any] = app.framework.openapi()
    return document


# --- the document -----------------------------------------------------------------------------


def test_the_document_declares_every_operation_and_its_errors() -> None:
    document = _document()
    paths = document["paths"]
    found = {(method.upper(), path) for path, ops in paths.items() for method in ops}
    assert found >= SPEC_OPERATIONS, SPEC_OPERATIONS - found
    scheme = document["components"]["securitySchemes"]["ApiKey"]
    assert (scheme["type"], scheme["in"], scheme["name"]) == ("apiKey", "header", "X-API-Key")
    error_body = {"$ref": "#/components/schemas/ErrorBody"}
    for path, ops in paths.items():
        if not path.startswith(API):
            continue
        for method, op in ops.items():
            assert op["security"] == [{"ApiKey": []}], (method, path)
            for status in ("400", "401", "404", "413"):
                declared = op["responses"].get(status)
                assert declared is not None, f"{method} {path} does not declare {status}"
                schema = declared["content"]["application/json"]["schema"]
                assert schema == error_body, (method, path, status)
            if method in ("post", "put") and ("/claim" in path or "/status" in path):
                assert "409" in op["responses"] or path.endswith("/job-agents/{agentId}/claim")


def test_regression_metrics_content_type_is_documented() -> None:
    content = _document()["paths"][METRICS_PATH]["get"]["responses"]["200"]["content"]
    assert any(media.startswith("text/plain") for media in content), content


def test_regression_the_document_declares_no_422() -> None:
    declared = [
        f"{method.upper()} {path}"
        for path, ops in _document()["paths"].items()
        for method, op in ops.items()
        if "422" in op.get("responses", {})
    ]
    assert declared == []


# --- fuzzing ----------------------------------------------------------------------------------


@dataclass
class Target:
    server: LiveServer
    schema: Any  # schemathesis' OpenApiSchema

    def operations(self) -> list[Any]:
        return [result.ok() for result in self.schema.get_all_operations()]

    def real_ids(self) -> dict[str, str]:
        """A fresh agent with one queued job, per operation: a DELETE or a claim made while
        fuzzing one operation must not starve the next one of its deep paths."""
        agent = self.server.create_agent("fuzz", config={"leaseSeconds": 30})
        job = self.server.enqueue(agent, metadata={"k": "v"})
        return {"ws": self.server.workspace_id, "agentId": agent, "jobId": job["id"]}


@pytest.fixture
def target(live_server_factory: Any) -> Iterator[Target]:
    # No long-poll waits: a generated waitSeconds would only stall the run (the cap is the server's
    # setting; the waits themselves are tested in tests/integration/server/test_longpoll.py).
    server: LiveServer = live_server_factory(max_wait_seconds=0)
    yield Target(server, schemathesis.openapi.from_url(f"{server.url}/api/openapi.json"))


def _checks(mode: GenerationMode) -> list[Any]:
    checks = [
        not_a_server_error,
        status_code_conformance,
        content_type_conformance,
        response_headers_conformance,
        response_schema_conformance,
    ]
    if mode == NEGATIVE:
        checks.append(negative_data_rejection)
    return checks


@dataclass(frozen=True)
class Draw:
    """How examples are drawn: ``seed`` None = the same examples every run (derandomized)."""

    examples: int = EXAMPLES
    seed: int | None = None


FIXED = Draw()


def _run(
    operation: Any, strategy: Any, call: Callable[[Any], None], draw: Draw = FIXED
) -> tuple[int, str | None]:
    """``call`` on up to ``draw.examples`` generated cases: (cases run, the failure or None)."""
    ran = 0

    @settings(
        max_examples=draw.examples,
        deadline=None,
        database=None,
        derandomize=draw.seed is None,
        # No shrinking: a failure comes with its curl command; shrinking over HTTP costs time.
        phases=[Phase.explicit, Phase.generate],
        suppress_health_check=list(HealthCheck),
    )
    @given(case=strategy)
    def run(case: Any) -> None:
        nonlocal ran
        ran += 1
        call(case)

    if draw.seed is not None:
        run = seed(draw.seed)(run)

    try:
        run()
    except Unsatisfiable:
        # Negative mode with nothing to break (no parameters, or only the fixed path ids).
        return ran, None
    except (Exception, BaseExceptionGroup) as exc:  # schemathesis raises a BaseExceptionGroup
        return ran, f"{operation.label}: {type(exc).__name__}: {exc}"[:3000]
    return ran, None


def _with_key(
    target: Target, mode: GenerationMode, real_ids: bool, draw: Draw = FIXED
) -> tuple[int, list[str]]:
    headers = {"X-API-Key": target.server.api_key}
    total, failures = 0, []
    for operation in target.operations():
        fixed = None
        if real_ids:
            wanted = {p.name for p in operation.path_parameters}
            fixed = {k: v for k, v in target.real_ids().items() if k in wanted}
        strategy = operation.as_strategy(
            generation_mode=mode, headers=headers, path_parameters=fixed
        )
        checks = _checks(mode)

        def call(case: Any, checks: list[Any] = checks) -> None:
            case.headers = {**(case.headers or {}), **headers}
            response = case.call(timeout=30)
            case.validate_response(response, checks=checks)

        ran, failure = _run(operation, strategy, call, draw)
        total += ran
        failures += [failure] if failure else []
    return total, failures


def _without_key(target: Target, mode: GenerationMode) -> tuple[int, list[str]]:
    total, failures = 0, []
    for operation in target.operations():
        strategy = operation.as_strategy(generation_mode=mode)
        # Whatever the request holds, no key means 401: only the generic checks apply.
        checks = _checks(POSITIVE)

        def call(case: Any, path: str = operation.path, checks: list[Any] = checks) -> None:
            case.headers = {
                k: v for k, v in (case.headers or {}).items() if k.lower() != "x-api-key"
            }
            response = case.call(timeout=30)
            case.validate_response(response, checks=checks)
            if path.startswith(API):
                assert response.status_code == 401, (response.status_code, response.text)
                assert response.json()["code"] == "UNAUTHORIZED"

        ran, failure = _run(operation, strategy, call)
        total += ran
        failures += [failure] if failure else []
    return total, failures


# About 860 requests and a server: ~100 s on a loaded 2-core machine, on the edge of the suite's
# 120 s default; a timeout firing inside an example reads as a "flaky" fuzz failure.
@pytest.mark.timeout(600)
def test_fuzz_every_operation(target: Target) -> None:
    operations = target.operations()
    assert len(operations) >= len(SPEC_OPERATIONS)
    variants: dict[str, Callable[[], tuple[int, list[str]]]] = {
        "workspace key, positive, random ids": lambda: _with_key(target, POSITIVE, False),
        "workspace key, positive, real ids": lambda: _with_key(target, POSITIVE, True),
        "workspace key, negative, random ids": lambda: _with_key(target, NEGATIVE, False),
        "workspace key, negative, real ids": lambda: _with_key(target, NEGATIVE, True),
        "no key, positive": lambda: _without_key(target, POSITIVE),
        "no key, negative": lambda: _without_key(target, NEGATIVE),
    }
    failures: list[str] = []
    counts: dict[str, int] = {}
    for name, variant in variants.items():
        counts[name], found = variant()
        failures += [f"[{name}] {failure}" for failure in found]
    print(f"{len(operations)} operations; requests per variant: {counts}")
    assert not failures, "\n\n".join(failures)
    # Every variant sent requests (a strategy that generates nothing would pass vacuously).
    assert all(counts.values()), counts


@pytest.mark.timeout(300)
def test_fuzz_random_examples_report_without_failing(target: Target) -> None:
    """New examples each run (bounded): what they find is reported, not a failed suite."""
    chosen = int(RANDOM_SEED) if RANDOM_SEED else random.randrange(2**32)
    draw = Draw(examples=RANDOM_EXAMPLES, seed=chosen)
    counts: dict[str, int] = {}
    failures: list[str] = []
    for mode in (POSITIVE, NEGATIVE):
        counts[mode.value], found = _with_key(target, mode, True, draw)
        failures += [f"[{mode.value}, seed {chosen}] {failure}" for failure in found]
    print(f"random fuzz, seed {chosen}: requests {counts}, failures {len(failures)}")
    assert all(counts.values()), counts
    if failures:
        print("\n\n".join(failures))
        pytest.xfail(
            f"random fuzz found {len(failures)} failure(s); replay with "
            f"JOBAGENTCTL_FUZZ_SEED={chosen}; first: {failures[0][:500]}"
        )


def test_the_gating_run_draws_the_same_examples_every_time() -> None:
    """What made the suite fail now and then: each run drew new examples. Two fixed draws over
    every operation's negative strategy give the same requests, case for case."""
    schema: Any = schemathesis.openapi.from_dict(_document())

    def drawn() -> list[str]:
        seen: list[str] = []
        for result in schema.get_all_operations():
            operation = result.ok()
            strategy = operation.as_strategy(generation_mode=NEGATIVE)

            def call(case: Any) -> None:
                seen.append(repr((case.path_parameters, case.query, case.headers, case.body)))

            _run(operation, strategy, call)
        return seen

    first = drawn()
    assert first and drawn() == first
