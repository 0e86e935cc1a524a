"""tests/support/fakenvml/xidlog.py: the lab nodes' kernel logs, read as nvidia_gpu_health reads them.

The lines follow what NVIDIA's driver prints (R535: ``NVRM: Xid (PCI:0000:cb:00): 13, pid='<unknown>',
name=<unknown>, Graphics SM Warp Exception ...``, as captured in leptonai/gpud's documentation of its Xid
component and in NVIDIA's Xid catalog, docs.nvidia.com/deploy/xid-errors; shared/REFERENCE.md 8.2). Each case
renders the lab's lines for a lab profile and hands them to the module's own reader, parser and attribution
(plugins/module_utils/gpu_health_xid.py, gpu_health_module.py): if the lab's format and the module's parser
drift apart, these fail.
"""
import pathlib
import re

import pytest
import yaml

from ansible_collections.kubegpu.nvidia.plugins.module_utils import gpu_health_xid as gx
from ansible_collections.kubegpu.nvidia.plugins.module_utils import gpu_health_module as ghm
from ansible_collections.kubegpu.nvidia.plugins.module_utils.gpu_health import classify_xid
from fakenvml import xidlog
from fakenvml.profile import load_profile

ROOT = pathlib.Path(__file__).resolve().parents[3]
LAB_PROFILES = ("h100x8", "a100x4-mig", "t4x1")


def gpus_of(profile):
    """The GPUs as the module's NVML reading lists them: index and NVML bus id."""
    return [{"index": index, "pci_bus_id": gpu["pci_bus_id"]} for index, gpu in enumerate(load_profile(profile)["gpus"])]


def read_back(tmp_path, text):
    """What the module reads from a kernel_log=file log with this text (no since)."""
    log = tmp_path / "kern.log"
    log.write_text(text)
    lines, source, problem = gx.read_kernel_log("file", path=str(log))
    assert (source, problem) == ("file", None)
    return gx.parse_xids(lines)


@pytest.mark.parametrize("profile", LAB_PROFILES)
def test_every_gpu_of_a_lab_node_gets_its_xid(tmp_path, profile):
    gpus = gpus_of(profile)
    items = [{"xid": 79, "gpu": gpu["index"]} for gpu in gpus]
    events = read_back(tmp_path, xidlog.render(profile, items))
    assert [event["xid"] for event in events] == [79] * len(gpus)
    per_gpu, stray = ghm._attribute(events, gpus)
    assert stray == []
    assert {index: [event["xid"] for event in found] for index, found in per_gpu.items()} == \
        {gpu["index"]: [79] for gpu in gpus}


@pytest.mark.parametrize("profile, items, expected", [
    # the T4's only GPU, NVML bus id 00000000:00:1E.0 (profiles/t4x1.conf)
    ("t4x1", [79], [(79, "0000:00:1e", 0, "GPU has fallen off the bus.")]),
    ("t4x1", ["48"], [(48, "0000:00:1e", 0, xidlog.MESSAGES[48])]),
    # "<xid>:<gpu>" and {xid, gpu}: the H100's GPU 3 is 00000000:5D:00.0 (profiles/h100x8.conf)
    ("h100x8", ["94:3", {"xid": 63, "gpu": 7}],
     [(94, "0000:5d:00", 3, xidlog.MESSAGES[94]), (63, "0000:db:00", 7, xidlog.MESSAGES[63])]),
    # an Xid without a catalog message still parses
    ("a100x4-mig", [{"xid": 999, "gpu": 1}], [(999, "0000:47:00", 1, xidlog.OTHER_MESSAGE)]),
])
def test_lines_parse_to_the_xid_and_the_gpu(tmp_path, profile, items, expected):
    events = read_back(tmp_path, xidlog.render(profile, items))
    per_gpu, stray = ghm._attribute(events, gpus_of(profile))
    assert stray == []
    found = [(event["xid"], event["pci"], index, event["message"])
             for index, evs in sorted(per_gpu.items()) for event in evs]
    expected = [(xid, pci, index, "pid='<unknown>', name=<unknown>, " + message)
                for xid, pci, index, message in expected]
    assert sorted(found) == sorted(expected)


def test_the_lab_flow_xids_classify_as_documented(tmp_path):
    """docs/lab.md's flow: Xid 79 on the T4 makes it unhealthy (reboot the node); 94 only degrades it."""
    for xid, severity, action in ((79, "unhealthy", "reboot_node"), (48, "unhealthy", "reset_gpu"),
                                  (94, "degraded", "restart_application")):
        events = read_back(tmp_path, xidlog.render("t4x1", [xid]))
        findings = classify_xid(events[0]["xid"], 1, ())
        assert [(item["severity"], item["action"]) for item in findings] == [(severity, action)]


def test_no_xid_is_an_empty_log(tmp_path):
    assert xidlog.render("t4x1", []) == ""
    assert xidlog.render("cpu", []) == ""
    assert read_back(tmp_path, "") == []


@pytest.mark.parametrize("profile, items, message", [
    ("cpu", [79], "Xid 79 on GPU 0: the profile cpu has no GPU"),
    ("t4x1", ["79:1"], "Xid 79 on GPU 1: the profile t4x1 has GPUs 0 to 0"),
    ("t4x1", [0], "an Xid must be from 1 to 99999, got 0"),
    ("t4x1", ["seventy-nine"], 'an Xid must be a number, got "seventy-nine"'),
    ("t4x1", [True], "an Xid must be a number, got true"),
    ("t4x1", [{"xid": 79, "node": 1}], 'an Xid item has the keys xid and gpu, got {"node": 1, "xid": 79}'),
    ("t4x1", ["79:x"], 'the GPU index of Xid 79 must be a number, got "x"'),
    ("t4x1", 79, "the Xids must be a list, got 79"),
    ("nope", [79], "cannot read the GPU profile nope: No such file or directory"),
])
def test_bad_input_is_one_line(profile, items, message):
    with pytest.raises(xidlog.XidLogError) as raised:
        xidlog.render(profile, items)
    assert str(raised.value) == message


def test_command_line(capsys):
    assert xidlog.main(["t4x1", '["79"]']) == 0
    assert capsys.readouterr().out == \
        "NVRM: Xid (PCI:0000:00:1e): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus.\n"
    assert xidlog.main(["t4x1", "[79"]) == 2
    assert capsys.readouterr().err.startswith("the Xids are not JSON: ")


def test_the_lab_reads_the_log_prepare_writes():
    """lab/prepare.yml writes the log where lab/cluster.yml's site vars point the health read."""
    prepare = yaml.safe_load((ROOT / "lab" / "prepare.yml").read_text())[0]
    cluster = yaml.safe_load((ROOT / "lab" / "cluster.yml").read_text())[0]
    written = next(task for task in cluster["tasks"] if task["name"] == "Write the variables site.yml needs in the lab")
    # the file's other values are templates of the play: none of them here
    site_vars = yaml.safe_load(re.sub(r"\{\{.*?\}\}", "null", written["ansible.builtin.copy"]["content"]))
    assert site_vars["kubegpu_health_options"] == {"kernel_log": "file",
                                                   "kernel_log_path": prepare["vars"]["lab_kernel_log_path"]}
    rendered = next(task for task in prepare["tasks"] if task["name"] == "Render the node's kernel log")
    assert rendered["ansible.builtin.command"]["argv"][1].endswith("/tests/support/fakenvml/xidlog.py")
