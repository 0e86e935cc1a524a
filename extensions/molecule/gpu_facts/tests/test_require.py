"""require: true fails clearly on the node without GPUs and passes on a GPU node."""
from conftest import run_facts

testinfra_hosts = ["ansible://gpu-facts-cpu", "ansible://gpu-facts-t4"]


def test_require(host, profile):
    name, _content = profile
    result = run_facts(host, "require=true")
    if name != "cpu":
        assert not result.get("failed"), result
        assert result["ansible_facts"]["nvidia_gpu"]["count"] == 1
        return
    assert result["failed"] is True
    assert result["msg"].startswith("No NVIDIA GPU found on this machine"), result["msg"]
    assert "\n" not in result["msg"]
    assert "Traceback" not in str(result)
    assert result["ansible_facts"]["nvidia_gpu"]["count"] == 0
