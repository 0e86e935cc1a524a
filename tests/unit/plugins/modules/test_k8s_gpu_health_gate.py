"""The k8s_gpu_health_gate module file: its documentation parses and documents the gate's options and results."""
import yaml

from ansible_collections.kubegpu.nvidia.plugins.module_utils import gpu_health_gate
from ansible_collections.kubegpu.nvidia.plugins.modules import k8s_gpu_health_gate as module


def test_documentation_parses_and_names_the_defaults():
    doc = yaml.safe_load(module.DOCUMENTATION)
    options = doc["options"]
    assert set(options) == {"nodes", "taint", "cordon", "max_unhealthy_percent", "conflict_retries"}
    assert options["max_unhealthy_percent"]["default"] == gpu_health_gate.DEFAULT_MAX_UNHEALTHY_PERCENT
    assert "nvidia.com/gpu.health=unhealthy:NoSchedule" in " ".join(options["taint"]["description"])
    returned = yaml.safe_load(module.RETURN)
    assert set(returned["nodes"]["contains"]) >= {"name", "host", "severity", "taint", "label", "why", "changed"}
    assert yaml.safe_load(module.EXAMPLES)[0]["kubegpu.nvidia.k8s_gpu_health_gate"]["nodes"]
