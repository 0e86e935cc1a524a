"""The inventory plugin kubegpu.nvidia.k8s_nodes, run by the real ``ansible-inventory`` against the API test server.

Each test registers Node objects on a fresh test server (tests/support/kubeapi), writes a plugin configuration
and runs ``ansible-inventory -i <config> --list`` (and ``--graph``) as a user would, with only this plugin
enabled and an unparsed source made fatal (``ANSIBLE_INVENTORY_UNPARSED_FAILED``, as AWX runs its inventory
updates). Bad input must come out as one line naming what is wrong, with no traceback. The last test runs
``ansible-playbook kubegpu.nvidia.site --tags preflight`` over the inventory the plugin makes.
"""
import json
import os
import pathlib
import socket
import subprocess
import sys

import pytest
import yaml

ROOT = pathlib.Path(__file__).resolve().parents[2]
PLUGIN = "kubegpu.nvidia.k8s_nodes"
NFD = "feature.node.kubernetes.io/pci-10de.present"
PRESENT = "nvidia.com/gpu.present"
PRODUCT = "nvidia.com/gpu.product"
CONTROL_PLANE = "node-role.kubernetes.io/control-plane"


def ip(address, kind="InternalIP"):
    return {"type": kind, "address": address}


def unwrap(value):
    """ansible-inventory --list writes plugin values in its legacy form: {"__ansible_unsafe": "x"} for "x"."""
    if isinstance(value, dict):
        if set(value) == {"__ansible_unsafe"}:
            return value["__ansible_unsafe"]
        return {key: unwrap(item) for key, item in value.items()}
    if isinstance(value, list):
        return [unwrap(item) for item in value]
    return value


class Inventory:
    """One plugin configuration in a test's directory, and runs of ansible-inventory over it."""

    def __init__(self, kube, tmp_path):
        self.kube = kube
        self.dir = tmp_path
        self.path = tmp_path / "cluster.k8s_nodes.yml"

    def write(self, **options):
        config = {"plugin": PLUGIN, "kubeconfig": self.kube.kubeconfig}
        config.update(options)
        config = {key: value for key, value in config.items() if value is not None}
        self.path.write_text(yaml.safe_dump(config))
        return self

    def run(self, *args, env=None):
        env = dict(os.environ, ANSIBLE_INVENTORY_ENABLED=PLUGIN, ANSIBLE_INVENTORY_UNPARSED_FAILED="true",
                   **(env or {}))
        for name in ("KUBECONFIG", "K8S_AUTH_KUBECONFIG", "K8S_AUTH_HOST"):
            env.pop(name, None)
        return subprocess.run(["ansible-inventory", "-i", str(self.path)] + list(args or ["--list"]), env=env,
                              capture_output=True, text=True, timeout=120, check=False)

    def list(self, *args, env=None):
        proc = self.run("--list", *args, env=env)
        assert proc.returncode == 0, proc.stderr
        assert "Traceback" not in proc.stderr
        data = unwrap(json.loads(proc.stdout))
        return data, proc.stderr

    def refused(self, *args, env=None):
        """The one line the plugin failed with (the run must fail, without a traceback)."""
        proc = self.run("--list", *args, env=env)
        assert proc.returncode != 0, proc.stdout
        assert "Traceback" not in proc.stderr, proc.stderr
        lines = [line for line in proc.stderr.splitlines() if line.startswith(PLUGIN + ": ")]
        assert lines, proc.stderr
        return lines[0]


def hosts(data, group):
    return sorted((data.get(group) or {}).get("hosts") or [])


def hostvars(data, host):
    return data["_meta"]["hostvars"][host]


def warnings(stderr):
    return [line.split("[WARNING]: ", 1)[1] for line in stderr.splitlines() if "[WARNING]: " in line]


@pytest.fixture(name="inv")
def fixture_inv(kube_server, kube, tmp_path):
    return Inventory(kube, tmp_path)


def cluster(kube):
    """A cluster of two NFD-labelled GPU nodes (one also labelled by the collection), a CPU worker and a
    control-plane node; each has an InternalIP, an ExternalIP and a Hostname."""
    nodes = {
        "gpu-a100": ({NFD: "true", PRESENT: "true", PRODUCT: "NVIDIA-A100-SXM4-40GB"}, "10.0.0.11"),
        "gpu-t4": ({NFD: "true", PRODUCT: "Tesla-T4"}, "10.0.0.12"),
        "cpu-1": ({}, "10.0.0.21"),
        "cp-1": ({CONTROL_PLANE: ""}, "10.0.0.1"),
    }
    for name, (labels, address) in nodes.items():
        external = "203.0.113.%s" % address.rsplit(".", 1)[1]
        kube.node(name, labels=labels, addresses=[ip(address), ip(external, "ExternalIP"), ip(name, "Hostname")])


def test_gpu_nodes_with_addresses_names_groups_and_the_control_host(inv):
    cluster(inv.kube)
    inv.write(keyed_groups=[{"key": "kubegpu_node.labels['%s']" % PRODUCT, "prefix": "gpu"}],
              groups={"collection_labelled": "kubegpu_node.labels.get('%s') == 'true'" % PRESENT},
              compose={"gpu_product": "kubegpu_node.labels['%s']" % PRODUCT,
                       "kubelet_pods": "kubegpu_node.allocatable.pods | int"})
    data, stderr = inv.list()
    assert not warnings(stderr), stderr
    # default selection: NFD's NVIDIA PCI label or the collection's nvidia.com/gpu.present
    assert hosts(data, "gpu_nodes") == ["gpu-a100", "gpu-t4"]
    assert hosts(data, "gpu_NVIDIA_A100_SXM4_40GB") == ["gpu-a100"]
    assert hosts(data, "gpu_Tesla_T4") == ["gpu-t4"]
    assert hosts(data, "collection_labelled") == ["gpu-a100"]
    a100 = hostvars(data, "gpu-a100")
    assert a100["ansible_host"] == "10.0.0.11"
    assert a100["kubegpu_node_name"] == "gpu-a100"
    assert a100["gpu_product"] == "NVIDIA-A100-SXM4-40GB"
    assert a100["kubelet_pods"] == 110
    assert a100["kubegpu_node"]["addresses"] == {
        "InternalIP": "10.0.0.11", "ExternalIP": "203.0.113.11", "Hostname": "gpu-a100"}
    assert a100["kubegpu_node"]["node_info"]["kubeletVersion"]
    # the control host: localhost, local, with the connection the inventory was read with
    assert hosts(data, "k8s_control") == ["localhost"]
    control = hostvars(data, "localhost")
    assert control["ansible_connection"] == "local"
    assert control["ansible_python_interpreter"] == sys.executable
    assert control["kubegpu_kubeconfig"] == inv.kube.kubeconfig
    graph = inv.run("--graph")
    assert graph.returncode == 0, graph.stderr
    assert "@gpu_nodes:\n  |  |--gpu-a100\n  |  |--gpu-t4\n" in graph.stdout


@pytest.mark.parametrize("options, expected", [
    ({"gpu_selection": "nfd"}, ["gpu-a100", "gpu-t4"]),
    ({"gpu_selection": "gpu_present"}, ["gpu-a100"]),
    ({"gpu_selection": "workers"}, ["cpu-1", "gpu-a100", "gpu-t4"]),
    ({"gpu_selection": "label_selector", "label_selector": "%s in (Tesla-T4)" % PRODUCT}, ["gpu-t4"]),
    ({"gpu_selection": "label_selector", "label_selector": "!%s" % CONTROL_PLANE}, ["cpu-1", "gpu-a100", "gpu-t4"]),
])
def test_each_selection_picks_its_nodes(inv, options, expected):
    cluster(inv.kube)
    data, stderr = inv.write(**options).list()
    assert hosts(data, "gpu_nodes") == expected
    assert not warnings(stderr), stderr


@pytest.mark.parametrize("address_type, expected", [
    ("ExternalIP", "203.0.113.11"),
    ("Hostname", "gpu-a100"),
])
def test_the_address_type_chosen_becomes_ansible_host(inv, address_type, expected):
    cluster(inv.kube)
    data = inv.write(address_type=address_type).list()[0]
    assert hostvars(data, "gpu-a100")["ansible_host"] == expected


def test_a_named_control_host_with_its_variables_and_no_token_in_the_inventory(inv):
    cluster(inv.kube)
    data = inv.write(control_host="bastion", control_host_vars={"ansible_host": "192.0.2.5"},
                     api_key=inv.kube.server.token).list()[0]
    assert hosts(data, "k8s_control") == ["bastion"]
    bastion = hostvars(data, "bastion")
    assert bastion["ansible_host"] == "192.0.2.5"
    assert "ansible_connection" not in bastion
    assert inv.kube.server.token not in json.dumps(data)
    data = inv.write(control_host="").list()[0]
    assert "k8s_control" not in data


# ---------------------------------------------------------------------------------------------- bad input
def free_port():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_a_kubeconfig_the_plugin_cannot_use(inv):
    bad = inv.dir / "broken-kubeconfig"
    bad.write_text("clusters: [\n")
    line = inv.write(kubeconfig=str(bad)).refused()
    assert line.startswith("%s: kubeconfig %s is not valid YAML at line 2" % (PLUGIN, bad)), line
    line = inv.write(context="elsewhere").refused()
    assert line == "%s: kubeconfig %s has no context elsewhere (contexts: kubeapi, kubeapi-readonly)" % (
        PLUGIN, inv.kube.kubeconfig)


def test_an_api_that_is_down(inv):
    url = "https://127.0.0.1:%d" % free_port()
    line = inv.write(host=url).refused()
    assert line.startswith("%s: listing nodes failed: cannot connect to the API server at %s: " % (PLUGIN, url)), line
    assert "Connection refused" in line


def test_an_api_that_answers_500(inv, kube_server):
    kube_server.inject(method="GET", path_regex="/api/v1/nodes$", status=500, times=0)
    line = inv.write(retries=1).refused()
    assert line.startswith("%s: listing nodes failed after 2 attempts: 500 Internal Server Error" % PLUGIN), line


def test_a_node_without_the_address_type_is_left_out_with_a_warning_or_fails_under_strict(inv):
    cluster(inv.kube)
    inv.kube.node("gpu-noip", labels={NFD: "true"}, addresses=[ip("gpu-noip", "Hostname")])
    data, stderr = inv.write().list()
    assert hosts(data, "gpu_nodes") == ["gpu-a100", "gpu-t4"]
    assert warnings(stderr) == [
        "%s: node gpu-noip has no InternalIP address (addresses: Hostname): left out of gpu_nodes (address_type "
        "chooses another type; strict: true fails instead)" % PLUGIN]
    line = inv.write(strict=True).refused()
    assert line == ("%s: node gpu-noip has no InternalIP address (addresses: Hostname) and strict is true "
                    "(address_type chooses another type)" % PLUGIN)


def test_two_nodes_with_one_address_fail(inv):
    inv.kube.node("gpu-1", labels={PRESENT: "true"}, addresses=[ip("10.0.0.5")])
    inv.kube.node("gpu-2", labels={PRESENT: "true"}, addresses=[ip("10.0.0.5")])
    line = inv.write().refused()
    assert line == ("%s: nodes gpu-1 and gpu-2 both have the InternalIP 10.0.0.5: one address cannot be two "
                    "inventory hosts (choose another address_type, or fix the nodes' addresses)" % PLUGIN)


def test_a_selection_that_matches_no_node_warns_and_leaves_gpu_nodes_empty(inv):
    cluster(inv.kube)
    data, stderr = inv.write(gpu_selection="label_selector", label_selector="pool=h100").list()
    assert hosts(data, "gpu_nodes") == []
    assert "gpu_nodes" in data["all"]["children"]
    assert warnings(stderr) == ["%s: no node matches the label selector pool=h100: gpu_nodes is empty" % PLUGIN]
    inv.kube.kubectl("label", "node", "gpu-a100", "gpu-t4", "%s-" % NFD, "%s-" % PRESENT, check=True)
    data, stderr = inv.write().list()
    assert hosts(data, "gpu_nodes") == []
    assert warnings(stderr) == [
        "%s: no node matches the GPU selection (%s=true or %s=true) among the cluster's 4 nodes: gpu_nodes is empty"
        % (PLUGIN, NFD, PRESENT)]


@pytest.mark.parametrize("options, message", [
    ({"gpu_selection": "label_selector"}, "gpu_selection: label_selector needs the option label_selector"),
    ({"label_selector": "pool=a"}, "label_selector 'pool=a' is used only with gpu_selection: label_selector "
                                   "(gpu_selection is gpu_labels)"),
    ({"gpu_selection": "label_selector", "label_selector": "pool in a,b"},
     "listing the nodes of label selector pool in a,b failed: 400 Bad Request"),
])
def test_a_selection_that_cannot_work(inv, options, message):
    line = inv.write(**options).refused()
    assert line.startswith("%s: %s" % (PLUGIN, message)), line


# ---------------------------------------------------------------------------------------------- cache
def test_the_cache_serves_the_nodes_and_a_failed_refresh_says_what_is_used(inv, kube_server):
    cache = inv.dir / "cache"
    options = dict(cache=True, cache_plugin="ansible.builtin.jsonfile", cache_connection=str(cache),
                   cache_timeout=3600)
    inv.kube.node("gpu-1", labels={PRESENT: "true"}, addresses=[ip("10.0.0.5")])
    kube_server.reset_counts()
    data = inv.write(**options).list()[0]
    assert hosts(data, "gpu_nodes") == ["gpu-1"]
    assert kube_server.request_counts("nodes") == {"list": 1}
    # a node the autoscaler adds: the cache (younger than cache_timeout) is served, without a request
    inv.kube.node("gpu-2", labels={PRESENT: "true"}, addresses=[ip("10.0.0.6")])
    kube_server.reset_counts()
    data = inv.list()[0]
    assert hosts(data, "gpu_nodes") == ["gpu-1"]
    assert kube_server.request_counts("nodes") == {}
    # --flush-cache reads the cluster again: the new node appears, and the cache holds it
    data = inv.list("--flush-cache")[0]
    assert hosts(data, "gpu_nodes") == ["gpu-1", "gpu-2"]
    assert kube_server.request_counts("nodes") == {"list": 1}
    (entry,) = [json.loads(path.read_text()) for path in cache.iterdir()]
    if "__payload__" in entry:  # ansible-core 2.19's jsonfile cache wraps the value in a serialization profile
        entry = json.loads(entry["__payload__"])
    read_at = entry["read_at"]
    assert [node["name"] for node in entry["nodes"]] == ["gpu-1", "gpu-2"]

    # the API fails: a refresh that fails is not hidden behind the cache
    kube_server.inject(method="GET", path_regex="/api/v1/nodes$", status=503, times=0)
    failure = "listing nodes failed after 3 attempts: 503 Service Unavailable"
    line = inv.refused("--flush-cache")
    assert line.startswith("%s: %s" % (PLUGIN, failure)), line
    assert line.endswith("(the cached inventory from %s is not used: cache_fallback: true uses it)" % read_at), line
    # ... or, with cache_fallback, the cached nodes are used with a warning saying from when and why
    data, stderr = inv.write(cache_fallback=True, **options).list("--flush-cache")
    assert hosts(data, "gpu_nodes") == ["gpu-1", "gpu-2"]
    (warning,) = warnings(stderr)
    assert warning.startswith("%s: using the cached inventory from %s because the refresh failed: %s"
                              % (PLUGIN, read_at, failure)), warning
    # a cache of another listing (the selection changed since) is not used
    kube_server.clear_faults()
    data = inv.write(gpu_selection="label_selector", label_selector="none-such", **options).list()[0]
    assert hosts(data, "gpu_nodes") == []
    data = inv.write(**options).list()[0]
    assert hosts(data, "gpu_nodes") == ["gpu-1", "gpu-2"]
    kube_server.inject(method="GET", path_regex="/api/v1/nodes$", status=503, times=0)
    # a cache older than cache_timeout is gone: nothing to fall back on, the failure alone
    inv.write(cache_fallback=True, **dict(options, cache_timeout=1))
    os.utime(next(cache.iterdir()), (0, 0))
    line = inv.refused()
    assert line.startswith("%s: %s" % (PLUGIN, failure)) and "cached" not in line, line


def test_without_the_cache_option_every_run_reads_the_cluster(inv, kube_server):
    inv.kube.node("gpu-1", labels={PRESENT: "true"}, addresses=[ip("10.0.0.5")])
    inv.write()
    inv.list()
    inv.kube.node("gpu-2", labels={PRESENT: "true"}, addresses=[ip("10.0.0.6")])
    kube_server.reset_counts()
    data = inv.list()[0]
    assert hosts(data, "gpu_nodes") == ["gpu-1", "gpu-2"]
    assert kube_server.request_counts("nodes") == {"list": 1}


# ---------------------------------------------------------------------------------------------- site.yml
@pytest.fixture(scope="module", name="fake_nvml")
def fixture_fake_nvml():
    out = subprocess.run([str(ROOT / "scripts" / "build-fakenvml.sh")], check=True, capture_output=True, text=True)
    return pathlib.Path(out.stdout.strip().splitlines()[-1]) / "full"


def test_site_preflight_runs_over_the_plugin_s_inventory(inv, fake_nvml):
    # the node's host is this machine (local connection) with the fake NVML's T4, as in test_site_preflight.py
    inv.kube.node("gpu-local", labels={NFD: "true"})
    inv.kube.node("cp-1", labels={CONTROL_PLANE: ""})
    inv.write(compose={"ansible_connection": "'local'", "ansible_python_interpreter": "'%s'" % sys.executable})
    env = dict(os.environ, ANSIBLE_INVENTORY_ENABLED=PLUGIN, ANSIBLE_INVENTORY_UNPARSED_FAILED="true",
               ANSIBLE_STDOUT_CALLBACK="ansible.posix.json", ANSIBLE_LOAD_CALLBACK_PLUGINS="1",
               LD_LIBRARY_PATH=str(fake_nvml),
               FAKENVML_CONFIG=str(ROOT / "tests" / "support" / "fakenvml" / "profiles" / "t4x1.conf"))
    for name in ("KUBECONFIG", "K8S_AUTH_KUBECONFIG"):
        env.pop(name, None)
    proc = subprocess.run(["ansible-playbook", "-i", str(inv.path), "kubegpu.nvidia.site", "--tags", "preflight"],
                          env=env, capture_output=True, text=True, timeout=600, check=False)
    assert proc.returncode == 0, (proc.stdout[-3000:], proc.stderr[-3000:])
    out = json.loads(proc.stdout)
    assert out["stats"].keys() == {"gpu-local", "localhost"}
    assert all(not stats["failures"] and not stats["unreachable"] for stats in out["stats"].values())
    # the labels role's dry run matched the inventory host to its node (by kubegpu_node_name)
    matched = [res for play in out["plays"] for task in play["tasks"] for res in task["hosts"].values()
               if task["task"]["name"].endswith("Label and taint the GPU nodes in one API batch")]
    assert matched and matched[0]["hosts"] == {"gpu-local": "gpu-local"}


def test_the_example_configuration_works(inv):
    cluster(inv.kube)
    example = yaml.safe_load((ROOT / "playbooks" / "inventory.cluster.example" / "k8s_nodes.yml").read_text())
    example.update(kubeconfig=inv.kube.kubeconfig, cache_connection=str(inv.dir / "cache"))
    inv.path.write_text(yaml.safe_dump(example))
    data, stderr = inv.list()
    assert hosts(data, "gpu_nodes") == ["gpu-a100", "gpu-t4"]
    assert hosts(data, "gpu_Tesla_T4") == ["gpu-t4"]
    assert hostvars(data, "gpu-t4")["ansible_user"] == "ubuntu"
    assert not warnings(stderr), stderr
