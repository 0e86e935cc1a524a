"""require: true fails clearly on the node without GPUs and passes on a GPU node."""
import pytest
from conftest import MODULE, run_module_on

NODES = ["gpu-facts-cpu", "gpu-facts-t4"]
testinfra_hosts = ["ansible://%s" % name for name in NODES]
_RESULTS = {}


@pytest.fixture(name="required")
def fixture_required(host):
    """nvidia_gpu_facts with require=true, run once on both nodes."""
    inventory = host.backend.ansible_inventory
    if inventory not in _RESULTS:
        _RESULTS[inventory] = run_module_on(inventory, ":".join(NODES), MODULE, "require=true")
    return _RESULTS[inventory][host.backend.host]


def test_require(profile, required):
    name, _content = profile
    result = required
    if name != "cpu":
        assert not result.get("failed"), result
        assert result["ansible_facts"]["nvidia_gpu"]["count"] == 1
        return
    assert result["failed"] is True
    assert result["msg"].startswith("No NVIDIA GPU found on this machine"), result["msg"]
    assert "\n" not in result["msg"]
    assert "Traceback" not in str(result)
    assert result["ansible_facts"]["nvidia_gpu"]["count"] == 0
