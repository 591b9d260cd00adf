"""In-cluster credentials (kube.load_client_config's last resort): the service-account directory override
and a token file re-read as soon as it changes (the kubelet rotates projected tokens by replacing the
file)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from ansible_operator import kube


@pytest.fixture
def sa_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    d = tmp_path / "serviceaccount"
    d.mkdir()
    (d / "token").write_text("first-token\n")
    (d / "ca.crt").write_text("-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n")
    (d / "namespace").write_text("operators")
    monkeypatch.setenv(kube.SERVICE_ACCOUNT_DIR_ENV, str(d))
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "10.96.0.1")
    monkeypatch.setenv("KUBERNETES_SERVICE_PORT", "443")
    monkeypatch.delenv("KUBECONFIG", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))  # no ~/.kube/config
    return d


def test_in_cluster_config_from_the_override_directory(sa_dir: Path) -> None:
    cfg = kube.load_client_config()
    assert cfg.host == "https://10.96.0.1:443"
    assert cfg.ssl_ca_cert == str(sa_dir / "ca.crt")
    assert cfg.get_api_key_with_prefix("authorization") == "bearer first-token"
    assert kube.service_account_dir() == sa_dir


def test_rotated_token_is_used_at_once_and_a_missing_file_keeps_the_last(sa_dir: Path) -> None:
    cfg = kube.load_client_config()
    assert cfg.get_api_key_with_prefix("authorization") == "bearer first-token"
    fresh = sa_dir / "token.tmp"
    fresh.write_text("second-token")
    os.replace(fresh, sa_dir / "token")  # atomic, as the kubelet's ..data swap
    assert cfg.get_api_key_with_prefix("authorization") == "bearer second-token"
    (sa_dir / "token").unlink()  # mid-swap: keep what we have
    assert cfg.get_api_key_with_prefix("authorization") == "bearer second-token"
    (sa_dir / "token").write_text("")  # empty: not a token
    assert cfg.get_api_key_with_prefix("authorization") == "bearer second-token"


def test_no_configuration_at_all_is_a_clear_error(sa_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST")
    with pytest.raises(kube.ConfigError, match="run inside a pod with a service account"):
        kube.load_client_config()
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "10.96.0.1")
    (sa_dir / "token").unlink()
    with pytest.raises(kube.ConfigError):
        kube.load_client_config()
