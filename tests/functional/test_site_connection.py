"""kubegpu.nvidia.site checks its cluster connection in the preflight, on every run that talks to the API.

Each fault of the Kubernetes connection (the kubeconfig, the context, the server, its certificate, the
credentials) must stop ``ansible-playbook kubegpu.nvidia.site`` in its first play with the collection's one-line
message, before the facts play starts on any node and without one write to the API: with a GPU host in the
inventory, and with every host CPU-only (the run then has no node to label, and used to go on to the device plugin
play and fail there with kubernetes.core's words) in check mode. The preflight's cluster read runs on the control
host before any node is looked at, so one run per fault covers both the CPU-only inventory and check mode (a
column each cost 10 more playbook runs). The good twins show the same inventories pass with a working connection, and
that a run of the node plays alone does not talk to the API.
"""
import base64
import pathlib

import pytest
import yaml
from cryptography.hazmat.primitives import serialization

from test_site_preflight import (  # noqa: F401  pylint: disable=import-error,unused-import
    CLUSTER_READ, FACTS_PLAY, WRITE_VERBS, fixture_fake_nvml, fixture_site, local)

PREFLIGHT_PLAY = "Check the inventory, the control host and the cluster settings"
# the inventories and modes each fault is tried with: a GPU host in a real run, and every host CPU-only in
# check mode
MODES = {
    "gpu-host": {"gpu": True, "check": False},
    "cpu-only-check-mode": {"gpu": False, "check": True},
}


def _config(site):
    return yaml.safe_load(pathlib.Path(site.kube.kubeconfig).read_text())


def _write(site, name, config):
    path = site.dir / name
    path.write_text(config if isinstance(config, str) else yaml.safe_dump(config))
    return str(path)


def missing(site):
    path = str(site.dir / "no-such-kubeconfig")
    return dict(kubeconfig=path), "kubeconfig %s does not exist" % path


def unreadable(site):
    path = site.dir / "kubeconfig.d"
    path.mkdir()
    return dict(kubeconfig=str(path)), "kubeconfig %s is not a file" % path


def invalid(site):
    path = _write(site, "kubeconfig-broken", "apiVersion: v1\nclusters: [{name: a\n")
    return dict(kubeconfig=path), "kubeconfig %s is not valid YAML at line" % path


def unknown_context(site):
    contexts = ", ".join(sorted(c["name"] for c in _config(site)["contexts"]))
    return (dict(extra=["-e", "kubegpu_context=no-such-context"]),
            "kubeconfig %s has no context no-such-context (contexts: %s)" % (site.kube.kubeconfig, contexts))


def unreachable(site):
    config = _config(site)
    for cluster in config["clusters"]:
        cluster["cluster"]["server"] = "https://127.0.0.1:1"
    return (dict(kubeconfig=_write(site, "kubeconfig-dead", config)),
            "reading the API server's version failed: cannot connect to the API server at https://127.0.0.1:1")


def black_holed(site):
    # accepts the connection and never answers; the preflight's read is bounded by preflight_cluster_timeout
    from kubeapi import BlackHole

    hole = BlackHole()
    site.cleanups.append(hole.close)
    config = _config(site)
    for cluster in config["clusters"]:
        cluster["cluster"]["server"] = hole.url
    return (dict(kubeconfig=_write(site, "kubeconfig-silent", config), extra=["-e", "preflight_cluster_timeout=3"]),
            "reading the API server's version failed: the API server at %s did not answer within 3s" % hole.url)


def unsigned_certificate(site):
    # the kubeconfig trusts another CA than the one that signed the server's certificate
    from kubeapi import tlsutil

    other_ca = tlsutil._authority("kubegpu-other-ca")[0]  # pylint: disable=protected-access
    config = _config(site)
    for cluster in config["clusters"]:
        cluster["cluster"].pop("certificate-authority", None)
        cluster["cluster"]["certificate-authority-data"] = base64.b64encode(
            other_ca.public_bytes(serialization.Encoding.PEM)).decode()
    return (dict(kubeconfig=_write(site, "kubeconfig-other-ca", config)),
            "the server's certificate is not signed by the CA of the kubeconfig or ca_cert")


def refused_token(site):
    config = _config(site)
    for user in config["users"]:
        user["user"] = {"token": "not-a-token-the-server-knows"}
    return (dict(kubeconfig=_write(site, "kubeconfig-bad-token", config)),
            "reading the API server's version failed: 401 Unauthorized: Unauthorized (the API server does not "
            "accept the credentials")


def no_kubeconfig_anywhere(site):
    # no kubegpu_* connection variable, no $KUBECONFIG, no ~/.kube/config, not in a pod
    home = site.dir / "home"
    home.mkdir()
    return (dict(kubeconfig="", env={"HOME": str(home)}),
            "no Kubernetes connection: give kubeconfig or host (or K8S_AUTH_KUBECONFIG / K8S_AUTH_HOST)")


FAULTS = [missing, unreadable, invalid, unknown_context, unreachable, black_holed, unsigned_certificate,
          refused_token, no_kubeconfig_anywhere]


@pytest.fixture(name="connection_site")
def fixture_connection_site(site):
    site.cleanups = []
    yield site
    for cleanup in site.cleanups:
        cleanup()


def _run(site, setup, mode, *tags):
    site.kube.node(site.gpu_host)
    extra = list(setup.get("extra", [])) + list(tags) + (["--check", "--diff"] if mode["check"] else [])
    return site.run(site.inventory(control={"localhost": local()}), setup.get("kubeconfig"), *extra,
                    env=setup.get("env"), gpu=mode["gpu"])


@pytest.mark.parametrize("mode", sorted(MODES))
@pytest.mark.parametrize("fault", FAULTS, ids=[f.__name__ for f in FAULTS])
def test_a_connection_fault_stops_the_run_in_its_preflight(connection_site, kube_server, fault, mode):
    site = connection_site
    setup, message = fault(site)
    result = _run(site, setup, MODES[mode])
    assert result.rc != 0, result.out
    # one failure, the preflight's cluster read, with the collection's message
    assert [(task, host) for task, host, _msg in result.failures] == [(CLUSTER_READ, "localhost")], result.failures
    msg = result.failures[0][2]
    assert message in msg, msg
    assert "\n" not in msg and "Traceback" not in msg and "kubernetes.core" not in msg
    # nothing ran on any node: the facts play never started; no change, no write
    assert result.plays == [PREFLIGHT_PLAY], result.plays
    assert not result.changed, result.changed
    assert not set(kube_server.request_counts()) & WRITE_VERBS, kube_server.request_counts()


@pytest.mark.parametrize("mode", sorted(MODES))
def test_the_same_runs_pass_the_preflight_with_a_working_connection(connection_site, mode):
    # the good twin: the cluster is read once, its version kept, and the facts play runs (the device plugin and
    # validation plays are left out: only the checks are asked for)
    site = connection_site
    result = _run(site, {}, MODES[mode], "--tags", "preflight")
    assert result.rc == 0, (result.failures, result.stderr[-2000:])
    assert result.plays[:2] == [PREFLIGHT_PLAY, FACTS_PLAY]
    (cluster,) = [res for p in result.out["plays"] for t in p["tasks"]
                  if t["task"]["name"] == CLUSTER_READ for res in t["hosts"].values()]
    assert cluster["version"].count(".") == 2 and cluster["api_requests"] == {"get": 1}
    (facts,) = [res for p in result.out["plays"] for t in p["tasks"] if p["play"]["name"] == FACTS_PLAY
                and t["task"]["name"].endswith("Gather the GPU facts and the host facts the roles need")
                for res in t["hosts"].values()]
    assert facts["ansible_facts"]["nvidia_gpu"]["present"] is MODES[mode]["gpu"]


@pytest.mark.parametrize("tags", ["facts", "driver,toolkit"])
def test_a_run_of_the_node_plays_alone_does_not_talk_to_the_api(connection_site, kube_server, tags):
    # --tags facts / driver / toolkit prepare nodes, also before they join a cluster: no cluster read, no node match,
    # so a kubeconfig that does not exist is no fault there. (Check mode and a CPU-only host: this machine is the
    # host, and the driver and toolkit roles must not change it.)
    site = connection_site
    setup, _message = missing(site)
    result = _run(site, setup, {"gpu": False, "check": True}, "--tags", tags)
    assert result.rc == 0, (result.failures, result.stderr[-2000:])
    assert result.plays[:2] == [PREFLIGHT_PLAY, FACTS_PLAY]
    skipped = [res for p in result.out["plays"] for t in p["tasks"] if t["task"]["name"] == CLUSTER_READ
               for res in t["hosts"].values()]
    assert skipped and all(res.get("skipped") for res in skipped)
    assert kube_server.requests() == [], kube_server.requests()
