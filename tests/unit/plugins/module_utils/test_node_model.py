"""The node model over the lab's GPU profiles and newer ones, under every sharing and MIG strategy.

Table-driven: for each GPU profile (tests/support/fakenvml/profiles: h100x8, a100x4-mig, t4x1; and a DGX B200,
a GB200 compute tray, an H100 with a media-extension MIG profile, an H100 pair with one MIG profile, an RTX 6000
Ada in graphics mode) and each device plugin config (sharing none / time-slicing x4 / MPS x2, renameByDefault
off and on, MIG strategy none / single / mixed), the complete label map GPU Feature Discovery v0.20 publishes
and the allocatable the device plugin v0.20 advertises, written out per case.

Where each expectation comes from (NVIDIA/k8s-device-plugin v0.20.0):

* [resource]  internal/lm/resource_test.go TestGPUResourceLabeler, TestMigResourceLabeler: product, count,
  replicas, sharing-strategy, memory and architecture labels; ``-SHARED`` only when shared and not renamed;
  a renamed resource keeps its replicas and strategy labels; MIG resources carry the MIG device attributes.
* [none]      internal/lm/mig-strategy_test.go TestMigStrategyNoneLabels: MIG-enabled GPUs get replicas 0 and
  sharing-strategy none; full GPUs next to them override that, counting both.
* [single]    mig-strategy_test.go TestMigStrategySingleLabels and cmd/gpu-feature-discovery/mig_test.go
  TestMigStrategySingle: the MIG devices become nvidia.com/gpu; an empty MIG-enabled GPU, MIG on next to MIG
  off, or two profiles give ``<model>-MIG-INVALID`` with count/replicas/memory 0 and sharing-strategy "".
* [mixed]     cmd/gpu-feature-discovery/mig_test.go TestMigStrategyMixed, tests/expected-output-mig-mixed.txt:
  nvidia.com/mig-<profile>.{product,count,replicas,sharing-strategy,memory,multiprocessors,engines.*,slices.*}
  next to the full GPU labels; a profile's ``+`` becomes ``.`` (internal/resource/nvml-mig-device.go GetName).
* [nvml]      internal/lm/nvml_test.go TestMigCapabilityLabeler, TestSharingLabeler (mps.capable true only
  with MPS replicas > 1; MIG-enabled GPUs make it an error), TestGPUModeLabeler (PCI class 0x030200 compute,
  0x030000 graphics); tests/expected-output.txt for the version and machine labels.
* [family]    internal/lm/resource.go getArchFamily (no test upstream lists 10, 12 and 13).
* [plugin]    internal/rm/device_map.go buildDeviceMapFromConfigResources / updateDeviceMapWithReplicas,
  internal/rm/rm.go AddDefaultResourcesToConfig: strategy none advertises every GPU as nvidia.com/gpu,
  single the MIG devices (and fails on an invalid layout), mixed the full GPUs plus nvidia.com/mig-<profile>
  for profiles with as many compute as GPU slices; each shared resource times its replicas, as
  ``<name>.shared`` with renameByDefault (api/config/v1/config.go DisableResourceNamingInConfig).
* [config]    cmd/nvidia-device-plugin/main.go validateFlags: MPS with mig-strategy mixed is refused.
"""
import copy

import pytest

from ansible_collections.kubegpu.nvidia.plugins.module_utils import device_plugin_config as dpc
from ansible_collections.kubegpu.nvidia.plugins.module_utils.errors import InputError
from ansible_collections.kubegpu.nvidia.plugins.module_utils.node_model import NodeModel, node_model

GPU = "nvidia.com/gpu"
SHARED = "nvidia.com/gpu.shared"


# ---------------------------------------------------------------- GPU profiles (nvidia_gpu facts)

def mig(profile, memory, multiprocessors, engines):
    """A MIG device as the facts list it, with NVML's attributes (nvmlDeviceGetAttributes_v2)."""
    parts = profile.split("+")[0].split(".")
    ci = int(parts[0][:-1]) if parts[0].endswith("c") else None
    gi = int(parts[-2][:-1]) if ci is not None else int(parts[0][:-1])
    copy_engines, decoder, encoder, jpeg, ofa = engines
    return {"slot": 0, "name": "MIG " + profile, "profile": profile, "uuid": "MIG-x", "memory_mib": memory,
            "multiprocessors": multiprocessors, "slices": {"gi": gi, "ci": ci or gi},
            "engines": {"copy": copy_engines, "decoder": decoder, "encoder": encoder, "jpeg": jpeg, "ofa": ofa}}


def gpu(name, memory, cc, mig_mode=0, migs=None, pci_class="0x030200"):
    mig_facts = ({"current": None, "pending": None, "devices": None} if mig_mode is None else
                 {"current": mig_mode, "pending": mig_mode, "devices": list(migs or []) if mig_mode else []})
    return {"name": name, "memory_mib": memory, "compute_capability": cc, "pci_class": pci_class, "mig": mig_facts}


def node(devices, driver="535.183.01", cuda="12.2", machine="KubeGPU Lab Node"):
    return {"present": True, "count": len(devices), "source": "nvml", "driver_version": driver,
            "cuda_driver_version": cuda, "machine": machine, "devices": devices}


H100 = "NVIDIA H100 80GB HBM3"
A100 = "NVIDIA A100-SXM4-40GB"
A100_3G = mig("3g.20gb", 20096, 42, (3, 2, 0, 0, 0))
H100_1G_ME = mig("1g.10gb+me", 9856, 16, (1, 1, 0, 1, 1))
H100_1G = mig("1g.10gb", 9856, 16, (1, 0, 0, 0, 0))
H100_2G = mig("2g.20gb", 19968, 32, (2, 1, 0, 1, 0))
H100_3G = mig("3g.40gb", 40192, 48, (3, 2, 0, 2, 0))
H100_7G = mig("7g.80gb", 80896, 112, (7, 7, 0, 7, 1))
GB200_1G_ME = mig("1g.23gb+me", 23296, 20, (1, 1, 0, 1, 1))
GB200_1G = mig("1g.23gb", 23296, 20, (1, 0, 0, 0, 0))
GB200_2G = mig("2g.46gb", 46848, 40, (2, 1, 0, 1, 0))
GB200_3G = mig("3g.93gb", 93952, 60, (3, 2, 0, 2, 0))

PROFILES = {
    # tests/support/fakenvml/profiles/h100x8.conf: a DGX H100, MIG capable, MIG off
    "h100x8": node([gpu(H100, 81559, "9.0") for _i in range(8)]),
    # a100x4-mig.conf: MIG on everywhere; GPU 0 holds two 3g.20gb, GPUs 1 to 3 none yet
    "a100x4-mig": node([gpu(A100, 40960, "8.0", 1, [A100_3G, A100_3G])] + [gpu(A100, 40960, "8.0", 1) for _i in range(3)],
                       driver="535.161.08"),
    # t4x1.conf: one Tesla T4, not MIG capable
    "t4x1": node([gpu("Tesla T4", 15360, "7.5", None)]),
    # a DGX B200: Blackwell, compute capability 10.0
    "b200x8": node([gpu("NVIDIA B200", 183359, "10.0") for _i in range(8)], driver="570.133.20", cuda="12.8"),
    # a GB200 NVL72 compute tray: GPU 0 with MIG (a media-extension instance among plain ones), 3 without
    "gb200x4": node([gpu("NVIDIA GB200", 189471, "10.0", 1, [GB200_1G_ME, GB200_1G, GB200_2G, GB200_3G])]
                    + [gpu("NVIDIA GB200", 189471, "10.0") for _i in range(3)], driver="570.133.20", cuda="12.8",
                    machine="NVIDIA GB200 NVL72"),
    # 2 H100 with MIG: GPU 0 four instances of three profiles, 1g.10gb+me among them; GPU 1 one 7g.80gb
    "h100x2-mig": node([gpu(H100, 81559, "9.0", 1, [H100_1G_ME, H100_1G, H100_2G, H100_3G]),
                        gpu(H100, 81559, "9.0", 1, [H100_7G])], driver="550.127.08", cuda="12.4"),
    # 2 H100 with MIG, seven 1g.10gb each: the one layout MIG strategy single accepts
    "h100x2-1g": node([gpu(H100, 81559, "9.0", 1, [H100_1G] * 7) for _i in range(2)], driver="550.127.08",
                      cuda="12.4"),
    # an RTX 6000 Ada in graphics mode (VGA controller class), not MIG capable
    "rtx6000ada": node([gpu("NVIDIA RTX 6000 Ada Generation", 49140, "8.9", None, pci_class="0x030000")],
                       driver="550.127.08", cuda="12.4", machine="Workstation"),
}


def versions(driver, cuda):
    """[nvml] the driver and CUDA version labels, deprecated and new names (tests/expected-output.txt)."""
    major, minor, rev = driver.split(".")
    cmajor, cminor = cuda.split(".")
    return {"nvidia.com/cuda.driver.major": major, "nvidia.com/cuda.driver.minor": minor,
            "nvidia.com/cuda.driver.rev": rev, "nvidia.com/cuda.driver-version.major": major,
            "nvidia.com/cuda.driver-version.minor": minor, "nvidia.com/cuda.driver-version.revision": rev,
            "nvidia.com/cuda.driver-version.full": driver, "nvidia.com/cuda.runtime.major": cmajor,
            "nvidia.com/cuda.runtime.minor": cminor, "nvidia.com/cuda.runtime-version.major": cmajor,
            "nvidia.com/cuda.runtime-version.minor": cminor, "nvidia.com/cuda.runtime-version.full": cuda}


def base(machine, mode, mig_capable, memory, family, major, minor, driver, cuda):
    labels = {"nvidia.com/gpu.present": "true", "nvidia.com/gpu.machine": machine, "nvidia.com/gpu.mode": mode,
              "nvidia.com/mig.capable": mig_capable, "nvidia.com/gpu.memory": memory,
              "nvidia.com/gpu.family": family, "nvidia.com/gpu.compute.major": major,
              "nvidia.com/gpu.compute.minor": minor}
    labels.update(versions(driver, cuda))
    return labels


# The labels of each profile that no sharing or MIG setting changes ([nvml], [resource], [family]).
BASE = {
    "h100x8": base("KubeGPU-Lab-Node", "compute", "true", "81559", "hopper", "9", "0", "535.183.01", "12.2"),
    "a100x4-mig": base("KubeGPU-Lab-Node", "compute", "true", "40960", "ampere", "8", "0", "535.161.08", "12.2"),
    "t4x1": base("KubeGPU-Lab-Node", "compute", "false", "15360", "turing", "7", "5", "535.183.01", "12.2"),
    "b200x8": base("KubeGPU-Lab-Node", "compute", "true", "183359", "blackwell", "10", "0", "570.133.20", "12.8"),
    "gb200x4": base("NVIDIA-GB200-NVL72", "compute", "true", "189471", "blackwell", "10", "0", "570.133.20", "12.8"),
    "h100x2-mig": base("KubeGPU-Lab-Node", "compute", "true", "81559", "hopper", "9", "0", "550.127.08", "12.4"),
    "h100x2-1g": base("KubeGPU-Lab-Node", "compute", "true", "81559", "hopper", "9", "0", "550.127.08", "12.4"),
    "rtx6000ada": base("Workstation", "graphics", "false", "49140", "ada-lovelace", "8", "9", "550.127.08", "12.4"),
}


def res(product, count, replicas, strategy, prefix=GPU):
    """[resource] the four base labels of one resource."""
    return {prefix + ".product": product, prefix + ".count": str(count), prefix + ".replicas": str(replicas),
            prefix + ".sharing-strategy": strategy}


def attributes(prefix, one):
    """[resource] TestMigResourceLabeler: a MIG resource's attribute labels, from its first MIG device."""
    labels = {prefix + ".memory": str(one["memory_mib"]), prefix + ".multiprocessors": str(one["multiprocessors"]),
              prefix + ".slices.gi": str(one["slices"]["gi"]), prefix + ".slices.ci": str(one["slices"]["ci"])}
    labels.update((prefix + ".engines." + k, str(v)) for k, v in one["engines"].items())
    return labels


def mixed_profile(model, profile, count, one, replicas=1, strategy="none", shared=False):
    """[mixed] the labels of one nvidia.com/mig-<profile> resource."""
    prefix = "nvidia.com/mig-" + profile.replace("+", ".")
    labels = res("%s-MIG-%s%s" % (model, profile.replace("+", "."), "-SHARED" if shared else ""), count, replicas,
                 strategy, prefix)
    labels.update(attributes(prefix, one))
    return labels


def merged(*parts):
    out = {}
    for part in parts:
        out.update(part)
    return out


# [single] the INVALID labels
INVALID_A100 = {"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-40GB-MIG-INVALID", "nvidia.com/gpu.count": "0",
                "nvidia.com/gpu.replicas": "0", "nvidia.com/gpu.sharing-strategy": "", "nvidia.com/gpu.memory": "0"}
INVALID_GB200 = dict(INVALID_A100, **{"nvidia.com/gpu.product": "NVIDIA-GB200-MIG-INVALID"})
INVALID_H100 = dict(INVALID_A100, **{"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3-MIG-INVALID"})

MIXED_A100 = mixed_profile("NVIDIA-A100-SXM4-40GB", "3g.20gb", 2, A100_3G)
MIXED_GB200 = merged(mixed_profile("NVIDIA-GB200", "1g.23gb+me", 1, GB200_1G_ME),
                     mixed_profile("NVIDIA-GB200", "1g.23gb", 1, GB200_1G),
                     mixed_profile("NVIDIA-GB200", "2g.46gb", 1, GB200_2G),
                     mixed_profile("NVIDIA-GB200", "3g.93gb", 1, GB200_3G))
MIXED_H100X2 = merged(mixed_profile("NVIDIA-H100-80GB-HBM3", "1g.10gb+me", 1, H100_1G_ME),
                      mixed_profile("NVIDIA-H100-80GB-HBM3", "1g.10gb", 1, H100_1G),
                      mixed_profile("NVIDIA-H100-80GB-HBM3", "2g.20gb", 1, H100_2G),
                      mixed_profile("NVIDIA-H100-80GB-HBM3", "3g.40gb", 1, H100_3G),
                      mixed_profile("NVIDIA-H100-80GB-HBM3", "7g.80gb", 1, H100_7G))
MIXED_H100_1G = mixed_profile("NVIDIA-H100-80GB-HBM3", "1g.10gb", 14, H100_1G)
# [plugin] what mixed advertises for the MIG devices
MIG_ALLOC_A100 = {"nvidia.com/mig-3g.20gb": 2}
MIG_ALLOC_GB200 = {"nvidia.com/mig-1g.23gb.me": 1, "nvidia.com/mig-1g.23gb": 1, "nvidia.com/mig-2g.46gb": 1,
                   "nvidia.com/mig-3g.93gb": 1}
MIG_ALLOC_H100X2 = {"nvidia.com/mig-1g.10gb.me": 1, "nvidia.com/mig-1g.10gb": 1, "nvidia.com/mig-2g.20gb": 1,
                    "nvidia.com/mig-3g.40gb": 1, "nvidia.com/mig-7g.80gb": 1}


def single_1g(product, replicas, strategy):
    """[single] the MIG devices of h100x2-1g as nvidia.com/gpu (14 of 1g.10gb)."""
    return merged(res(product, 14, replicas, strategy), attributes(GPU, H100_1G))


# config shorthands: sharing x rename
NONE, TS, TS_R, MPS, MPS_R = "none", "ts", "ts-rename", "mps", "mps-rename"
SHARING = {NONE: {}, TS: {"sharing_strategy": "time-slicing", "replicas": 4},
           TS_R: {"sharing_strategy": "time-slicing", "replicas": 4, "rename_by_default": True},
           MPS: {"sharing_strategy": "mps", "replicas": 2},
           MPS_R: {"sharing_strategy": "mps", "replicas": 2, "rename_by_default": True}}
REFUSED = "refused"  # InputError before anything is labelled

# (profile, mig strategy, sharing) -> (labels beyond BASE, mps.capable, allocatable); REFUSED for an InputError.
# Labels beyond BASE that are the same in every row of a profile are folded in by the helpers above.
CASES = {}


def case(profile, strategy, sharing, labels, alloc, mps="false"):
    CASES[(profile, strategy, sharing)] = (labels, mps, alloc)


def refused(profile, strategy, sharing):
    CASES[(profile, strategy, sharing)] = REFUSED


# Whole GPUs without MIG (h100x8, b200x8, t4x1, rtx6000ada): the MIG strategies change nothing but
# nvidia.com/mig.strategy ([single] "single non-mig device returns non-mig (none) labels"); [plugin] GPUs x replicas.
for _profile, _model, _n in (("h100x8", "NVIDIA-H100-80GB-HBM3", 8), ("b200x8", "NVIDIA-B200", 8),
                             ("t4x1", "Tesla-T4", 1), ("rtx6000ada", "NVIDIA-RTX-6000-Ada-Generation", 1)):
    for _strategy in ("none", "single", "mixed"):
        case(_profile, _strategy, NONE, res(_model, _n, 1, "none"), {GPU: _n})
        case(_profile, _strategy, TS, res(_model + "-SHARED", _n, 4, "time-slicing"), {GPU: 4 * _n})
        case(_profile, _strategy, TS_R, res(_model, _n, 4, "time-slicing"), {SHARED: 4 * _n})
        if _strategy == "mixed":  # [config]
            refused(_profile, _strategy, MPS)
            refused(_profile, _strategy, MPS_R)
        else:  # [nvml] TestSharingLabeler "config with mps replicas no-mig-devices": mps.capable true
            case(_profile, _strategy, MPS, res(_model + "-SHARED", _n, 2, "mps"), {GPU: 2 * _n}, mps="true")
            case(_profile, _strategy, MPS_R, res(_model, _n, 2, "mps"), {SHARED: 2 * _n}, mps="true")

# a100x4-mig: every GPU MIG-enabled. [none] replicas 0 whatever the sharing; [plugin] strategy none advertises
# the 4 GPUs (times the replicas); [single] empty MIG-enabled GPUs: INVALID, the plugin does not start;
# [mixed] the two 3g.20gb, nvidia.com/gpu has no device left to share.
A100_FULL = res("NVIDIA-A100-SXM4-40GB", 4, 0, "none")
for _sharing, _alloc in ((NONE, {GPU: 4}), (TS, {GPU: 16}), (TS_R, {SHARED: 16})):
    case("a100x4-mig", "none", _sharing, A100_FULL, _alloc)
    case("a100x4-mig", "single", _sharing, merged(A100_FULL, INVALID_A100), {})
    case("a100x4-mig", "mixed", _sharing, merged(A100_FULL, MIXED_A100), MIG_ALLOC_A100)
for _strategy in ("none", "single", "mixed"):  # [nvml] "config with mps replicas mig-devices": an error
    refused("a100x4-mig", _strategy, MPS)
    refused("a100x4-mig", _strategy, MPS_R)

# gb200x4: GPU 0 MIG-enabled, GPUs 1 to 3 not. [none] "sharing is applied to MIG device and non-MIG device": the
# full GPUs' labels win and count all 4; [plugin] none advertises 4 GPUs, mixed the 3 full ones and a resource
# per profile (1g.23gb+me as nvidia.com/mig-1g.23gb.me); [single] MIG on next to MIG off: INVALID.
for _sharing, _labels, _alloc_none, _alloc_mixed in (
        (NONE, res("NVIDIA-GB200", 4, 1, "none"), {GPU: 4}, {GPU: 3}),
        (TS, res("NVIDIA-GB200-SHARED", 4, 4, "time-slicing"), {GPU: 16}, {GPU: 12}),
        (TS_R, res("NVIDIA-GB200", 4, 4, "time-slicing"), {SHARED: 16}, {SHARED: 12})):
    case("gb200x4", "none", _sharing, _labels, _alloc_none)
    case("gb200x4", "single", _sharing, merged(_labels, INVALID_GB200), {})
    case("gb200x4", "mixed", _sharing, merged(_labels, MIXED_GB200), dict(_alloc_mixed, **MIG_ALLOC_GB200))
for _strategy in ("none", "single", "mixed"):
    refused("gb200x4", _strategy, MPS)
    refused("gb200x4", _strategy, MPS_R)

# h100x2-mig: both MIG-enabled, five profiles. [single] more than one profile: INVALID; [mixed] a resource and
# labels per profile, 1g.10gb+me as mig-1g.10gb.me.
H100X2_FULL = res("NVIDIA-H100-80GB-HBM3", 2, 0, "none")
for _sharing, _alloc in ((NONE, {GPU: 2}), (TS, {GPU: 8}), (TS_R, {SHARED: 8})):
    case("h100x2-mig", "none", _sharing, H100X2_FULL, _alloc)
    case("h100x2-mig", "single", _sharing, merged(H100X2_FULL, INVALID_H100), {})
    case("h100x2-mig", "mixed", _sharing, merged(H100X2_FULL, MIXED_H100X2), MIG_ALLOC_H100X2)
for _strategy in ("none", "single", "mixed"):
    refused("h100x2-mig", _strategy, MPS)
    refused("h100x2-mig", _strategy, MPS_R)

# h100x2-1g: [single] TestMigStrategySingle: the 14 MIG devices are nvidia.com/gpu, shared by the nvidia.com/gpu
# entry (TestMigResourceLabeler "shared appends suffix", "renamed does not append suffix").
H100_1G_FULL = res("NVIDIA-H100-80GB-HBM3", 2, 0, "none")
for _sharing, _single, _alloc_none, _alloc_single in (
        (NONE, single_1g("NVIDIA-H100-80GB-HBM3-MIG-1g.10gb", 1, "none"), {GPU: 2}, {GPU: 14}),
        (TS, single_1g("NVIDIA-H100-80GB-HBM3-MIG-1g.10gb-SHARED", 4, "time-slicing"), {GPU: 8}, {GPU: 56}),
        (TS_R, single_1g("NVIDIA-H100-80GB-HBM3-MIG-1g.10gb", 4, "time-slicing"), {SHARED: 8}, {SHARED: 56})):
    case("h100x2-1g", "none", _sharing, H100_1G_FULL, _alloc_none)
    case("h100x2-1g", "single", _sharing, merged(H100_1G_FULL, _single), _alloc_single)
    case("h100x2-1g", "mixed", _sharing, merged(H100_1G_FULL, MIXED_H100_1G), {"nvidia.com/mig-1g.10gb": 14})
for _strategy in ("none", "single", "mixed"):
    refused("h100x2-1g", _strategy, MPS)
    refused("h100x2-1g", _strategy, MPS_R)


def resolved_for(strategy, sharing):
    """A configuration whose default config is plain and whose config "c", node n1's, has these settings."""
    return dpc.resolve(configs={"c": dict(SHARING[sharing], mig_strategy=strategy)}, node_configs={"n1": "c"})


def test_the_table_covers_every_profile_strategy_and_sharing():
    assert set(CASES) == set((p, m, s) for p in PROFILES for m in ("none", "single", "mixed") for s in SHARING)


@pytest.mark.parametrize("profile, strategy, sharing", sorted(CASES), ids=["-".join(key) for key in sorted(CASES)])
def test_labels_and_allocatable(profile, strategy, sharing):
    want = CASES[(profile, strategy, sharing)]
    if want == REFUSED:
        with pytest.raises(InputError, match="MPS"):
            node_model(PROFILES[profile], resolved_for(strategy, sharing), "n1")
        return
    labels, mps, alloc = want
    model = node_model(PROFILES[profile], resolved_for(strategy, sharing), "n1")
    expected = merged(BASE[profile], {"nvidia.com/mps.capable": mps}, labels)
    if strategy != "none":
        expected["nvidia.com/mig.strategy"] = strategy
    assert model["labels"] == expected
    assert model["allocatable"] == alloc
    assert model["config"] == "c"
    # the plugin cannot start where it advertises nothing for GPUs that are there ([single] INVALID)
    assert (model["problem"] is not None) == (alloc == {})


def test_mixed_shares_each_profile_by_its_own_entry():
    """[mixed][resource] TestMigResourceLabeler "mig mixed appends shared" / "mig mixed rename does not append"."""
    entries = [{"name": "nvidia.com/mig-1g.10gb.me", "replicas": 2}, {"name": "nvidia.com/mig-3g.40gb", "replicas": 3}]
    for rename, suffix in ((False, "-SHARED"), (True, "")):
        resolved = dpc.resolve(configs={"c": {"mig_strategy": "mixed", "sharing_strategy": "time-slicing",
                                              "sharing_resources": entries, "rename_by_default": rename}},
                               default_config="c")
        model = node_model(PROFILES["h100x2-mig"], resolved)
        labels = model["labels"]
        assert res("NVIDIA-H100-80GB-HBM3-MIG-1g.10gb.me" + suffix, 1, 2, "time-slicing",
                   "nvidia.com/mig-1g.10gb.me").items() <= labels.items()
        assert res("NVIDIA-H100-80GB-HBM3-MIG-3g.40gb" + suffix, 1, 3, "time-slicing",
                   "nvidia.com/mig-3g.40gb").items() <= labels.items()
        # a profile without an entry is not shared, and nvidia.com/gpu has no entry
        assert res("NVIDIA-H100-80GB-HBM3-MIG-2g.20gb", 1, 1, "none", "nvidia.com/mig-2g.20gb").items() <= labels.items()
        assert labels["nvidia.com/gpu.replicas"] == "0"
        shared = ".shared" if rename else ""
        assert model["allocatable"] == {"nvidia.com/mig-1g.10gb.me" + shared: 2, "nvidia.com/mig-3g.40gb" + shared: 3,
                                        "nvidia.com/mig-1g.10gb": 1, "nvidia.com/mig-2g.20gb": 1,
                                        "nvidia.com/mig-7g.80gb": 1}


def test_a_compute_instance_profile_stops_the_plugin_under_mixed():
    """[plugin] rm.go: mixed has resource patterns only for profiles with c == g; device_map.go then fails."""
    facts = node([gpu(A100, 40960, "8.0", 1, [mig("1c.3g.20gb", 20096, 14, (3, 2, 0, 0, 0)), A100_3G])])
    model = node_model(facts, resolved_for("mixed", NONE), "n1")
    # GFD labels every MIG device it finds ([mixed]); the plugin advertises nothing
    assert model["labels"]["nvidia.com/mig-1c.3g.20gb.slices.ci"] == "1"
    assert model["labels"]["nvidia.com/mig-1c.3g.20gb.count"] == "1"
    assert model["allocatable"] == {}
    assert "1c.3g.20gb" in model["problem"]


def test_mig_devices_not_listed_leave_the_allocatable_unknown():
    facts = copy.deepcopy(PROFILES["h100x2-1g"])
    for device in facts["devices"]:
        device["mig"]["devices"] = None  # facts from nvidia-smi
    for strategy in ("single", "mixed"):
        model = node_model(facts, resolved_for(strategy, NONE), "n1")
        assert model["allocatable"] is None
        assert "do not list the MIG devices" in model["problem"]
    assert node_model(facts, resolved_for("none", TS), "n1")["allocatable"] == {GPU: 8}


def test_mig_attributes_the_facts_do_not_know_are_left_out_and_slices_come_from_the_profile():
    facts = copy.deepcopy(PROFILES["h100x2-1g"])
    for device in facts["devices"]:
        device["mig"]["devices"] = [{"profile": "1g.10gb", "memory_mib": 9856}] * 7
    labels = node_model(facts, resolved_for("single", NONE), "n1")["labels"]
    assert {k: v for k, v in labels.items() if k.startswith("nvidia.com/gpu.") and k not in BASE["h100x2-1g"]} == {
        "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3-MIG-1g.10gb", "nvidia.com/gpu.count": "14",
        "nvidia.com/gpu.replicas": "1", "nvidia.com/gpu.sharing-strategy": "none",
        "nvidia.com/gpu.slices.gi": "1", "nvidia.com/gpu.slices.ci": "1"}
    assert labels["nvidia.com/gpu.memory"] == "9856"


@pytest.mark.parametrize("cc, family", [("10.0", "blackwell"), ("12.0", "blackwell"), ("13.0", "rubin"),
                                        ("11.0", "undefined")])
def test_family_of_blackwell_and_later(cc, family):
    """[family] getArchFamily of v0.20: 10 and 12 blackwell, 13 rubin, 11 undefined."""
    facts = node([gpu("NVIDIA Next", 100000, cc)])
    assert node_model(facts, resolved_for("none", NONE))["labels"]["nvidia.com/gpu.family"] == family


@pytest.mark.parametrize("classes, mode", [
    (["0x030200", "0x030200"], "compute"), (["0x030000"], "graphics"), (["0x030000", "0x030200"], "unknown"),
    (["0x068000"], "unknown"), ([None], "unknown"), ([0x030200], "compute")])
def test_gpu_mode_from_the_pci_classes(classes, mode):
    """[nvml] TestGPUModeLabeler."""
    facts = node([gpu(H100, 81559, "9.0", pci_class=one) for one in classes])
    assert node_model(facts, resolved_for("none", NONE))["labels"]["nvidia.com/gpu.mode"] == mode


def test_the_node_config_wins_over_the_product_and_the_default():
    resolved = dpc.resolve(configs={"t4-shared": SHARING[TS], "pinned": {}},
                           product_configs={"Tesla T4": "t4-shared"}, node_configs={"special": "pinned"})
    model = NodeModel(resolved)
    t4 = PROFILES["t4x1"]
    assert model.node(t4, "t4")["config"] == "t4-shared"  # "Tesla T4" is matched as GFD's product Tesla-T4
    assert model.node(t4, "special")["config"] == "pinned"
    assert model.node(PROFILES["h100x8"], "h100")["config"] == "default"
    assert model.desired_labels(t4, "t4")["nvidia.com/device-plugin.config"] == "t4-shared"
    assert model.desired_labels(t4, "t4")["nvidia.com/gpu.product"] == "Tesla-T4-SHARED"


def test_mps_on_mig_names_the_node_and_the_config():
    resolved = dpc.resolve(configs={"mps": SHARING[MPS]}, default_config="mps")
    with pytest.raises(InputError) as err:
        node_model(PROFILES["a100x4-mig"], resolved, "gpu-a100-1")
    assert str(err.value) == (
        "node gpu-a100-1 gets device plugin config mps: MPS sharing is not supported on MIG-enabled GPUs (GPU Feature "
        "Discovery and the device plugin refuse it); give it a config without MPS (node_configs or product_configs) "
        "or turn MIG off")


def test_facts_without_devices_count_whole_gpus():
    resolved = dpc.resolve(configs={"c": SHARING[TS]}, default_config="c")
    model = node_model({"present": True, "count": 2}, resolved)
    assert model["allocatable"] == {GPU: 8}
    assert model["labels"] == {}
    assert node_model({"present": False, "count": 0}, resolved)["allocatable"] == {}


def test_a_dra_node_keeps_gfds_labels_and_the_device_plugin_advertises_nothing():
    """The issue's contract: a DRA node still gets the GFD-exact labels; its GPUs are in a ResourceSlice."""
    model = NodeModel(dpc.resolve())
    device_plugin = model.node(PROFILES["h100x8"], "h100")
    dra = model.node(PROFILES["h100x8"], "h100", allocation="dra")
    assert dra["labels"] == device_plugin["labels"]
    assert (device_plugin["allocatable"], device_plugin["allocation"]) == ({"nvidia.com/gpu": 8}, "device_plugin")
    assert (dra["allocatable"], dra["allocation"], dra["problem"]) == ({}, "dra", None)
