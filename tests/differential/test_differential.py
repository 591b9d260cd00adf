"""The differential conformance suite: each scenario (scenarios.py) on the real control plane and on the
sandbox, what a client sees compared step by step (harness.py); differences not in allowlist.yaml fail,
and so do allow-listed steps that no longer differ."""

from __future__ import annotations

import pytest

from .harness import Client, compare, load_allowlist
from .scenarios import SCENARIOS

pytestmark = [pytest.mark.slow]


def _run(scenario: str, client: Client) -> None:
    try:
        SCENARIOS[scenario](client)
    except Exception as e:  # a scenario that breaks on one server is a difference, recorded as such
        client.record("<scenario raised>", f"{type(e).__name__}: {e}")


@pytest.mark.parametrize("scenario", sorted(SCENARIOS))
def test_sandbox_matches_the_real_api_server(scenario: str, clients: tuple[Client, Client]) -> None:
    real, sandbox = clients
    _run(scenario, real)
    _run(scenario, sandbox)
    outcome = compare(scenario, real, sandbox, load_allowlist())
    failure = outcome.failure()
    if failure:
        pytest.fail(failure, pytrace=False)
