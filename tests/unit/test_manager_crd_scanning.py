"""``ansible-operator run`` asks (SelfSubjectAccessReview) whether it may list and watch CRDs before kopf
starts: the Operator SDK scaffold's RBAC grants no access to them, and kopf would otherwise retry the
forbidden watch with ERROR lines for ~20 s before giving up."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from ansible_operator.kube import Forbidden, NotFound
from ansible_operator.manager import _may_watch_crds

SSAR_PATH = "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews"


class ReviewKube:
    def __init__(self, allowed: dict[str, bool] | None = None, error: Exception | None = None) -> None:
        self.allowed = allowed or {}
        self.error = error
        self.asked: list[str] = []

    async def request(self, method: str, path: str, *, body: Any = None, **_: Any) -> Any:
        assert (method, path) == ("POST", SSAR_PATH)
        attrs = body["spec"]["resourceAttributes"]
        assert (attrs["group"], attrs["resource"]) == ("apiextensions.k8s.io", "customresourcedefinitions")
        self.asked.append(attrs["verb"])
        if self.error is not None:
            raise self.error
        return {
            "kind": "SelfSubjectAccessReview",
            "status": {"allowed": self.allowed.get(attrs["verb"], False)},
        }


@pytest.mark.parametrize(
    "allowed,want",
    [
        ({"list": True, "watch": True}, True),
        ({"list": True, "watch": False}, False),  # kopf lists, then watches: both are needed
        ({}, False),  # the SDK scaffold's role.yaml
    ],
)
def test_answer_follows_the_reviews(allowed: dict[str, bool], want: bool) -> None:
    kube = ReviewKube(allowed)
    assert asyncio.run(_may_watch_crds(kube)) is want
    assert kube.asked[0] == "list"


@pytest.mark.parametrize(
    "error",
    [
        Forbidden(403, "Forbidden", "no reviews here"),
        NotFound(404, "NotFound", "the server could not find the requested resource"),
    ],
)
def test_a_failed_review_leaves_kopf_to_try(error: Exception) -> None:
    # an API server without the review API (or refusing it): kopf keeps its own retry-then-warn behaviour
    assert asyncio.run(_may_watch_crds(ReviewKube(error=error))) is True
