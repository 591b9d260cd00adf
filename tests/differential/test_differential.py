"""The differential conformance suite: each scenario (scenarios.py) on the real control plane and on the
sandbox, what a client sees compared step by step (harness.py); differences not in allowlist.yaml fail,
and so do allow-listed steps that no longer differ."""

from __future__ import annotations

import pytest

from .harness import Client, compare, load_allowlist
from .scenarios import PRIVATE, SCENARIOS

pytestmark = [pytest.mark.slow]


def _run(scenario: str, client: Client) -> None:
    try:
        SCENARIOS[scenario](client)
    except Exception as e:  # a scenario that breaks on one server is a difference, recorded as such
        client.record("<scenario raised>", f"{type(e).__name__}: {e}")


def _differ(scenario: str, real: Client, sandbox: Client) -> None:
    _run(scenario, real)
    _run(scenario, sandbox)
    outcome = compare(scenario, real, sandbox, load_allowlist())
    failure = outcome.failure()
    if failure:
        pytest.fail(failure, pytrace=False)


# Two runs (one per server) of eleven kubernetes.core tasks, waits included: over the
# default 300 s timeout when CI's stages load the machine.
LONG = {"kubernetes_core_modules"}


@pytest.mark.parametrize("scenario", [pytest.param(s, marks=pytest.mark.timeout(900)) if s in LONG else s
                                      for s in sorted(set(SCENARIOS) - PRIVATE)])
def test_sandbox_matches_the_real_api_server(scenario: str, clients: tuple[Client, Client]) -> None:
    _differ(scenario, *clients)


@pytest.mark.parametrize("scenario", sorted(PRIVATE))
def test_sandbox_matches_a_real_api_server_of_its_own(scenario: str,
                                                      private_clients: tuple[Client, Client]) -> None:
    _differ(scenario, *private_clients)
