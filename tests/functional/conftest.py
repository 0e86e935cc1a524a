"""Fixtures for tests against real parts.

`kube`: a Kubernetes cluster. By default a fresh Kubernetes API test server
(tests/support/kubeapi) per test; with `--kubeconfig PATH` or `KUBECONFIG` set, the real
cluster that kubeconfig names (tests that need the test server skip themselves there).
"""

import os

import pytest


def pytest_addoption(parser):
    parser.addoption("--kubeconfig", action="store", default=None,
                     help="run the Kubernetes tests against this cluster instead of the test server "
                          "(default: $KUBECONFIG when set)")


def _real_kubeconfig(config):
    path = config.getoption("--kubeconfig") or os.environ.get("KUBECONFIG")
    return os.path.abspath(os.path.expanduser(path)) if path else None


@pytest.fixture
def kube(request, tmp_path):
    """The cluster a test talks to; see tests/support/kubeapi/testing.py for its helpers."""
    from kubeapi.testing import Kube

    real = _real_kubeconfig(request.config)
    if real:
        handle = Kube(real)
        yield handle
        handle.cleanup()
        return
    from kubeapi import KubeAPIServer

    server = KubeAPIServer(tls=True, kubeconfig_path=str(tmp_path / "kubeconfig")).start()
    handle = Kube(server.kubeconfig_path, server)
    try:
        yield handle
    finally:
        server.stop()


@pytest.fixture
def kube_server(kube):
    """The test server itself; skips the test on a real cluster."""
    if not kube.is_test_server:
        pytest.skip("needs the Kubernetes API test server (simulated GPUs, fault injection)")
    return kube.server
