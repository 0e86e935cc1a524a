"""A Kubernetes API server for tests: real HTTP(S), real semantics, a small kubelet stand-in.

See docs/testing.md. `from kubeapi import KubeAPIServer`.
"""

from .server import BlackHole, KubeAPIServer  # noqa: F401
from .store import SIMULATED_GPUS  # noqa: F401

__all__ = ["BlackHole", "KubeAPIServer", "SIMULATED_GPUS"]
