"""kubegpu.nvidia.health end to end: local-connection GPU hosts with the fake NVML, the Kubernetes API test server.

Four GPU hosts, each this machine with the fake NVML library and its own profile (a per-host Python wrapper sets
FAKENVML_CONFIG): three healthy T4s and one T4 whose profile has uncorrectable volatile ECC errors. The playbook
reads the health (one facts run per node), taints and labels the faulty node and says why in the summary; once the
fault is cleared (the profile switched back), the next run removes that taint, and nothing else.
"""
import json
import os
import pathlib
import subprocess
import sys

import pytest
import yaml

kubernetes = pytest.importorskip("kubernetes")

ROOT = pathlib.Path(__file__).resolve().parents[2]
HEALTHY = (ROOT / "tests" / "support" / "fakenvml" / "profiles" / "t4x1.conf").read_text()
# the per-GPU override of the fake NVML (tests/support/fakenvml, docs/health.md "Testing without a GPU")
FAULTY = HEALTHY + "ecc_volatile_uncorrected = 2\n"
WRITES = {"create", "update", "patch", "delete", "deletecollection"}
HEALTH_TAINT = ("nvidia.com/gpu.health", "unhealthy", "NoSchedule")


@pytest.fixture(scope="module", name="fake_nvml")
def fixture_fake_nvml():
    out = subprocess.run([str(ROOT / "scripts" / "build-fakenvml.sh")], check=True, capture_output=True, text=True)
    return pathlib.Path(out.stdout.strip().splitlines()[-1]) / "full"


class Lab:
    def __init__(self, kube, tmp_path, fake_nvml):
        self.kube, self.dir, self.fake_nvml = kube, tmp_path, fake_nvml
        self.hosts = [kube.unique("health-gpu") for dummy in range(4)]
        for host in self.hosts:
            kube.node(host, labels={"kubernetes.io/hostname": host})
            self.profile(host, HEALTHY)

    def profile(self, host, text):
        """The host's fake NVML profile, and a Python that runs the host's modules with it."""
        conf = self.dir / ("%s.conf" % host)
        conf.write_text(text)
        python = self.dir / ("python-%s" % host)
        python.write_text("#!/bin/sh\nFAKENVML_CONFIG=%s exec %s \"$@\"\n" % (conf, sys.executable))
        python.chmod(0o755)
        return python

    def run(self, *extra):
        inventory = self.dir / "inventory.yml"
        inventory.write_text(yaml.safe_dump({
            "gpu_nodes": {"hosts": dict(
                (h, {"ansible_connection": "local", "ansible_python_interpreter": str(self.dir / ("python-%s" % h))})
                for h in self.hosts)},
            "k8s_control": {"hosts": {"localhost": {"ansible_connection": "local",
                                                    "ansible_python_interpreter": sys.executable}}},
        }))
        summary = self.dir / "summary.json"
        env = dict(os.environ, ANSIBLE_STDOUT_CALLBACK="ansible.posix.json", ANSIBLE_LOAD_CALLBACK_PLUGINS="1",
                   ANSIBLE_LOCALHOST_WARNING="false", LD_LIBRARY_PATH=str(self.fake_nvml))
        for name in ("KUBECONFIG", "K8S_AUTH_KUBECONFIG", "FAKENVML_CONFIG"):
            env.pop(name, None)
        self.kube.server.reset_counts()
        cmd = ["ansible-playbook", "-i", str(inventory), "kubegpu.nvidia.health",
               "-e", "kubegpu_kubeconfig=%s" % self.kube.kubeconfig, "-e", "kubegpu_summary_path=%s" % summary,
               "-e", json.dumps({"kubegpu_health_options": {"kernel_log": "none"}})] + list(extra)
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600, check=False)
        out = json.loads(proc.stdout)
        assert proc.returncode == 0, (proc.stdout[-4000:], proc.stderr[-2000:])
        rows = json.loads(summary.read_text()) if summary.exists() else None
        return out, rows

    def node(self, host):
        node = self.kube.core().read_node(host)
        taints = [(t.key, t.value, t.effect) for t in node.spec.taints or []]
        return node.metadata.labels.get("nvidia.com/gpu.health"), taints


def gate_result(out):
    return [res for p in out["plays"] for t in p["tasks"] for res in t["hosts"].values()
            if t["task"]["name"] == "kubegpu.nvidia.gpu_health : Label and taint the GPU nodes by their health"][0]


def test_faulty_node_tainted_then_untainted_once_the_fault_is_cleared(kube_server, kube, tmp_path, fake_nvml):
    lab = Lab(kube, tmp_path, fake_nvml)
    sick = lab.hosts[0]
    lab.profile(sick, FAULTY)
    # someone else's taint on the sick node, which the gate must never touch
    kube.core().patch_node(sick, {"spec": {"taints": [{"key": "team", "value": "a", "effect": "NoSchedule"}]}})

    preview, _rows = lab.run("--check", "--diff")
    assert not WRITES & set(kube_server.request_counts())
    assert any(line.startswith("%s: would taint nvidia.com/gpu.health=unhealthy:NoSchedule (unhealthy: GPU 0" % sick)
               for line in gate_result(preview)["report"])
    assert lab.node(sick) == (None, [("team", "a", "NoSchedule")])

    _out, rows = lab.run()
    # one LIST (the gate's), one write per node (its first label); nothing else is read or written
    assert kube_server.request_counts() == {"list": 1, "patch": 4}
    assert lab.node(sick) == ("unhealthy", [("team", "a", "NoSchedule"), HEALTH_TAINT])
    for host in lab.hosts[1:]:
        assert lab.node(host) == ("healthy", [])
    row = [r for r in rows if r["host"] == sick][0]
    assert row["health"].startswith("unhealthy: GPU 0 (00000000:00:1E.0): 2 uncorrectable ECC errors")
    assert row["health"].endswith("(reset the GPU); tainted")
    assert [f["signal"] for f in row["health_findings"]] == ["ecc"]

    lab.profile(sick, HEALTHY)
    out, rows = lab.run()
    assert gate_result(out)["api_requests"] == {"list": 1, "patch": 1}
    assert kube_server.request_counts().get("patch") == 1
    assert lab.node(sick) == ("healthy", [("team", "a", "NoSchedule")])
    assert [r["health"] for r in rows if r["host"] == sick] == ["healthy; untainted"]

    out, _rows = lab.run()
    assert kube_server.request_counts() == {"list": 1}
    assert gate_result(out)["changed"] is False
    # a scheduled run of a healthy, gated cluster reports no change at all
    assert not [t["task"]["name"] for p in out["plays"] for t in p["tasks"] for res in t["hosts"].values()
                if res.get("changed")]
