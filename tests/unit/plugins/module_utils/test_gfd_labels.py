"""Unit tests for the GFD label rules (plugins/module_utils/gfd_labels.py)."""
import pytest

from ansible_collections.kubegpu.nvidia.plugins.module_utils import gfd_labels as gl
from ansible_collections.kubegpu.nvidia.plugins.module_utils.errors import InputError


def mig_devices(gpu_name, *profiles):
    """The facts' MIG devices of a GPU: one per profile, in slots 0, 1, ..., without NVML's attributes."""
    return [{"slot": slot, "name": "%s MIG %s" % (gpu_name, profile), "profile": profile, "uuid": "MIG-%d" % slot,
             "memory_mib": int(profile.split("g.")[-1].split("gb")[0]) * 1024, "multiprocessors": None,
             "slices": None, "engines": None} for slot, profile in enumerate(profiles)]


def device(index=0, name="NVIDIA H100 80GB HBM3", memory=81559, cc="9.0", mig=(0, 0), migs=(), pci_class="0x030200"):
    return {
        "index": index,
        "name": name,
        "product": gl.sanitise_label_value(name),
        "uuid": "GPU-%d" % index,
        "memory_mib": memory,
        "pci_bus_id": "00000000:%02X:00.0" % index,
        "pci_class": pci_class,
        "compute_capability": cc,
        "family": gl.gpu_family(cc),
        "mig": ({"current": mig[0], "pending": mig[1], "devices": mig_devices(name, *migs) if mig[0] == 1 else []}
                if mig else {"current": None, "pending": None, "devices": None}),
    }


def facts(devices, source="nvml", driver="535.183.01", cuda="12.2", machine="DGX H100"):
    return {
        "present": bool(devices),
        "count": len(devices),
        "source": source,
        "driver_version": driver,
        "cuda_driver_version": cuda,
        "devices": devices,
        "machine": machine,
    }


# Examples from GFD's own sources, docs and tests (k8s-device-plugin internal/lm, README).
@pytest.mark.parametrize("raw, expected", [
    ("Tesla T4", "Tesla-T4"),
    ("Tesla V100-SXM2-16GB", "Tesla-V100-SXM2-16GB"),
    ("NVIDIA A100-SXM4-40GB", "NVIDIA-A100-SXM4-40GB"),
    ("NVIDIA H100 80GB HBM3", "NVIDIA-H100-80GB-HBM3"),
    ("NVIDIA A100 80GB PCIe", "NVIDIA-A100-80GB-PCIe"),
    ("Quadro RTX 6000", "Quadro-RTX-6000"),
    ("GeForce GTX 1080 Ti", "GeForce-GTX-1080-Ti"),
    ("  Tesla   K80  ", "Tesla-K80"),
    # a tab is outside the kept set, so it is dropped before spaces are joined
    ("NVIDIA GeForce RTX\t4090", "NVIDIA-GeForce-RTX4090"),
    ("A100 (SXM4) 40GB/MIG", "A100-SXM4-40GBMIG"),
    ("Tesla_P4.x", "Tesla_P4.x"),
])
def test_sanitise_matches_gfd(raw, expected):
    assert gl.sanitise_label_value(raw) == expected


def test_sanitise_gives_valid_label_values():
    assert gl.sanitise_label_value("-_.weird name._-") == "weird-name"
    long_value = gl.sanitise_label_value("A" * 62 + " -B")
    assert len(long_value) <= 63 and long_value[-1].isalnum()
    assert gl.sanitise_label_value(None) == ""
    assert gl.sanitise_label_value("(+)") == ""


@pytest.mark.parametrize("cc, family", [
    ("1.3", "tesla"), ("2.1", "fermi"), ("3.7", "kepler"), ("5.2", "maxwell"), ("6.0", "pascal"),
    ("7.0", "volta"), ("7.2", "volta"), ("7.5", "turing"), ("8.0", "ampere"), ("8.6", "ampere"),
    ("8.7", "ampere"), ("8.9", "ada-lovelace"), ("9.0", "hopper"), ("10.0", "blackwell"),
    ("12.0", "blackwell"), ("4.0", "undefined"), ((9, 0), "hopper"), (None, None), ("x", None), ("9", None),
    # GFD v0.20 internal/lm/resource.go getArchFamily: 13 is rubin, 11 has no family
    ("13.0", "rubin"), ("11.0", "undefined"),
])
def test_gpu_family(cc, family):
    assert gl.gpu_family(cc) == family


@pytest.mark.parametrize("name, value", [
    ("Tesla T4", "nvidia-tesla-t4"),
    ("Tesla P100-PCIE-16GB", "nvidia-tesla-p100-pcie-16gb"),
    ("NVIDIA H100 80GB HBM3", "nvidia-h100-80gb-hbm3"),
    ("NVIDIA A100-SXM4-40GB", "nvidia-a100-sxm4-40gb"),
])
def test_accelerator_label_value(name, value):
    assert gl.accelerator_label_value(name) == value


def test_h100x8_labels():
    labels = gl.gfd_labels(facts([device(i) for i in range(8)]))
    assert labels == {
        "nvidia.com/gpu.present": "true",
        "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3",
        "nvidia.com/gpu.count": "8",
        "nvidia.com/gpu.memory": "81559",
        "nvidia.com/gpu.family": "hopper",
        "nvidia.com/gpu.compute.major": "9",
        "nvidia.com/gpu.compute.minor": "0",
        "nvidia.com/gpu.replicas": "1",
        "nvidia.com/gpu.sharing-strategy": "none",
        "nvidia.com/gpu.machine": "DGX-H100",
        "nvidia.com/gpu.mode": "compute",
        "nvidia.com/mig.capable": "true",
        "nvidia.com/mps.capable": "false",
        "nvidia.com/cuda.driver-version.full": "535.183.01",
        "nvidia.com/cuda.driver-version.major": "535",
        "nvidia.com/cuda.driver-version.minor": "183",
        "nvidia.com/cuda.driver-version.revision": "01",
        "nvidia.com/cuda.driver.major": "535",
        "nvidia.com/cuda.driver.minor": "183",
        "nvidia.com/cuda.driver.rev": "01",
        "nvidia.com/cuda.runtime-version.full": "12.2",
        "nvidia.com/cuda.runtime-version.major": "12",
        "nvidia.com/cuda.runtime-version.minor": "2",
        "nvidia.com/cuda.runtime.major": "12",
        "nvidia.com/cuda.runtime.minor": "2",
    }
    assert all(key.startswith(gl.MANAGED_LABEL_PREFIX) for key in labels)


def test_no_gpu_no_labels():
    assert gl.gfd_labels(facts([], source="none")) == {}
    assert gl.gfd_labels({}) == {}
    assert gl.gfd_labels(None) == {}


def test_mig_not_supported_is_not_capable():
    labels = gl.gfd_labels(facts([device(name="Tesla T4", memory=15360, cc="7.5", mig=None)]))
    assert labels["nvidia.com/mig.capable"] == "false"
    assert labels["nvidia.com/gpu.product"] == "Tesla-T4"
    assert labels["nvidia.com/gpu.family"] == "turing"
    assert "nvidia.com/mig.strategy" not in labels


def test_time_slicing_shares_the_product():
    labels = gl.gfd_labels(facts([device(0), device(1)]), sharing_strategy="time-slicing", replicas=4)
    assert labels["nvidia.com/gpu.product"] == "NVIDIA-H100-80GB-HBM3-SHARED"
    assert labels["nvidia.com/gpu.replicas"] == "4"
    assert labels["nvidia.com/gpu.sharing-strategy"] == "time-slicing"
    assert labels["nvidia.com/gpu.count"] == "2"


def test_mps_shares_the_product():
    labels = gl.gfd_labels(facts([device(0)]), sharing_strategy="mps", replicas=2)
    assert labels["nvidia.com/gpu.product"] == "NVIDIA-H100-80GB-HBM3-SHARED"
    assert labels["nvidia.com/gpu.sharing-strategy"] == "mps"


def test_sharing_with_one_replica_is_not_shared():
    labels = gl.gfd_labels(facts([device(0)]), sharing_strategy="time-slicing", replicas=1)
    assert labels["nvidia.com/gpu.product"] == "NVIDIA-H100-80GB-HBM3"
    assert labels["nvidia.com/gpu.sharing-strategy"] == "none"
    assert labels["nvidia.com/gpu.replicas"] == "1"


def a100_mig(count=4):
    return facts([device(i, "NVIDIA A100-SXM4-40GB", 40960, "8.0", (1, 1)) for i in range(count)])


def test_mig_enabled_gpus_carry_no_sharing():
    labels = gl.gfd_labels(a100_mig(), sharing_strategy="time-slicing", replicas=4)
    assert labels["nvidia.com/gpu.product"] == "NVIDIA-A100-SXM4-40GB"
    assert labels["nvidia.com/gpu.replicas"] == "0"
    assert labels["nvidia.com/gpu.sharing-strategy"] == "none"
    assert labels["nvidia.com/gpu.count"] == "4"
    assert labels["nvidia.com/mig.capable"] == "true"
    assert "nvidia.com/mig.strategy" not in labels


def test_mig_single_with_empty_mig_gpus_is_invalid():
    labels = gl.gfd_labels(a100_mig(), mig_strategy="single")
    assert labels["nvidia.com/mig.strategy"] == "single"
    assert labels["nvidia.com/gpu.product"] == "NVIDIA-A100-SXM4-40GB-MIG-INVALID"
    assert labels["nvidia.com/gpu.count"] == "0"
    assert labels["nvidia.com/gpu.replicas"] == "0"
    assert labels["nvidia.com/gpu.memory"] == "0"


A100 = ("NVIDIA A100-SXM4-40GB", 40960, "8.0", (1, 1))


def test_mig_single_labels_the_mig_devices_as_the_gpu_resource():
    base = gl.gfd_labels(facts([device(0, *A100, migs=["3g.20gb", "3g.20gb"]), device(1, *A100, migs=["3g.20gb"])]))
    labels = gl.gfd_labels(facts([device(0, *A100, migs=["3g.20gb", "3g.20gb"]), device(1, *A100, migs=["3g.20gb"])]),
                           mig_strategy="single")
    changed = dict((key, value) for key, value in labels.items() if base.get(key) != value)
    assert changed == {
        "nvidia.com/mig.strategy": "single",
        "nvidia.com/gpu.product": "NVIDIA-A100-SXM4-40GB-MIG-3g.20gb",
        "nvidia.com/gpu.count": "3",
        "nvidia.com/gpu.replicas": "1",
        "nvidia.com/gpu.memory": "20480",
        "nvidia.com/gpu.slices.gi": "3",
        "nvidia.com/gpu.slices.ci": "3",
    }
    # the architecture labels stay those of the GPUs
    assert labels["nvidia.com/gpu.family"] == "ampere" and labels["nvidia.com/gpu.compute.major"] == "8"


def test_mig_single_shared_by_time_slicing():
    labels = gl.gfd_labels(facts([device(0, *A100, migs=["1g.5gb"] * 7)]), mig_strategy="single",
                           sharing_strategy="time-slicing", replicas=2)
    assert labels["nvidia.com/gpu.product"] == "NVIDIA-A100-SXM4-40GB-MIG-1g.5gb-SHARED"
    assert (labels["nvidia.com/gpu.count"], labels["nvidia.com/gpu.replicas"]) == ("7", "2")


@pytest.mark.parametrize("devices", [
    # one MIG-enabled GPU without MIG devices (GFD: "at least one MIG device is enabled but empty")
    [device(0, *A100, migs=["3g.20gb"]), device(1, *A100)],
    # MIG enabled on one GPU, disabled on the other
    [device(0, *A100, migs=["3g.20gb"]), device(1, "NVIDIA A100-SXM4-40GB", 40960, "8.0", (0, 0))],
    # two profiles
    [device(0, *A100, migs=["3g.20gb", "2g.10gb"])],
    # MIG devices not known (nvidia-smi as source)
    [dict(device(0, *A100, migs=["3g.20gb"]), mig={"current": 1, "pending": 1, "devices": None})],
], ids=["empty", "enabled-and-disabled", "two-profiles", "unknown"])
def test_mig_single_invalid_cases(devices):
    labels = gl.gfd_labels(facts(devices), mig_strategy="single")
    assert labels["nvidia.com/gpu.product"] == "NVIDIA-A100-SXM4-40GB-MIG-INVALID"
    assert (labels["nvidia.com/gpu.count"], labels["nvidia.com/gpu.replicas"], labels["nvidia.com/gpu.memory"]) == (
        "0", "0", "0")
    assert "nvidia.com/gpu.slices.gi" not in labels


def test_mig_mixed_labels_each_profile():
    devices = [device(0, *A100, migs=["3g.20gb", "2g.10gb", "1g.5gb", "1g.5gb"]), device(1, *A100, migs=["1g.5gb"]),
               device(2, *A100), device(3, "NVIDIA A100-SXM4-40GB", 40960, "8.0", (0, 0))]
    base = gl.gfd_labels(facts(devices))
    labels = gl.gfd_labels(facts(devices), mig_strategy="mixed")
    added = dict((key, value) for key, value in labels.items() if key not in base)
    assert added == {
        "nvidia.com/mig.strategy": "mixed",
        "nvidia.com/mig-3g.20gb.product": "NVIDIA-A100-SXM4-40GB-MIG-3g.20gb",
        "nvidia.com/mig-3g.20gb.count": "1",
        "nvidia.com/mig-3g.20gb.replicas": "1",
        "nvidia.com/mig-3g.20gb.sharing-strategy": "none",
        "nvidia.com/mig-3g.20gb.memory": "20480",
        "nvidia.com/mig-3g.20gb.slices.gi": "3",
        "nvidia.com/mig-3g.20gb.slices.ci": "3",
        "nvidia.com/mig-2g.10gb.product": "NVIDIA-A100-SXM4-40GB-MIG-2g.10gb",
        "nvidia.com/mig-2g.10gb.count": "1",
        "nvidia.com/mig-2g.10gb.replicas": "1",
        "nvidia.com/mig-2g.10gb.sharing-strategy": "none",
        "nvidia.com/mig-2g.10gb.memory": "10240",
        "nvidia.com/mig-2g.10gb.slices.gi": "2",
        "nvidia.com/mig-2g.10gb.slices.ci": "2",
        "nvidia.com/mig-1g.5gb.product": "NVIDIA-A100-SXM4-40GB-MIG-1g.5gb",
        "nvidia.com/mig-1g.5gb.count": "3",
        "nvidia.com/mig-1g.5gb.replicas": "1",
        "nvidia.com/mig-1g.5gb.sharing-strategy": "none",
        "nvidia.com/mig-1g.5gb.memory": "5120",
        "nvidia.com/mig-1g.5gb.slices.gi": "1",
        "nvidia.com/mig-1g.5gb.slices.ci": "1",
    }
    # the full GPU labels stay
    assert labels["nvidia.com/gpu.count"] == "4" and labels["nvidia.com/gpu.product"] == "NVIDIA-A100-SXM4-40GB"


def test_mig_mixed_compute_instance_profile():
    labels = gl.gfd_labels(facts([device(0, *A100, migs=["1c.3g.20gb"])]), mig_strategy="mixed")
    assert labels["nvidia.com/mig-1c.3g.20gb.slices.gi"] == "3"
    assert labels["nvidia.com/mig-1c.3g.20gb.slices.ci"] == "1"
    assert labels["nvidia.com/mig-1c.3g.20gb.product"] == "NVIDIA-A100-SXM4-40GB-MIG-1c.3g.20gb"


def test_mig_single_without_mig_enabled_gpus_is_like_none():
    base = gl.gfd_labels(facts([device(0)]))
    labels = gl.gfd_labels(facts([device(0)]), mig_strategy="single")
    assert labels.pop("nvidia.com/mig.strategy") == "single"
    assert labels == base


def test_mig_mixed_keeps_full_gpu_labels():
    labels = gl.gfd_labels(a100_mig(), mig_strategy="mixed")
    assert labels["nvidia.com/mig.strategy"] == "mixed"
    assert labels["nvidia.com/gpu.product"] == "NVIDIA-A100-SXM4-40GB"
    assert labels["nvidia.com/gpu.count"] == "4"


def test_full_gpus_override_mig_enabled_ones():
    devices = [device(0, "NVIDIA A100-SXM4-40GB", 40960, "8.0", (1, 1)),
               device(1, "NVIDIA A100-SXM4-40GB", 40960, "8.0", (0, 0))]
    labels = gl.gfd_labels(facts(devices), sharing_strategy="time-slicing", replicas=2)
    assert labels["nvidia.com/gpu.product"] == "NVIDIA-A100-SXM4-40GB-SHARED"
    assert labels["nvidia.com/gpu.count"] == "2"
    assert labels["nvidia.com/gpu.replicas"] == "2"


def test_mixed_models_lowest_index_wins():
    devices = [device(0, "Tesla T4", 15360, "7.5", None), device(1), device(2)]
    labels = gl.gfd_labels(facts(devices))
    assert labels["nvidia.com/gpu.product"] == "Tesla-T4"
    assert labels["nvidia.com/gpu.count"] == "1"
    assert labels["nvidia.com/gpu.memory"] == "15360"
    assert labels["nvidia.com/gpu.family"] == "turing"
    assert labels["nvidia.com/mig.capable"] == "true"
    assert gl.multiple_models(facts(devices)) == ["Tesla T4", "NVIDIA H100 80GB HBM3"]
    assert gl.multiple_models(facts(devices[1:])) == []


def test_unknown_fields_leave_their_labels_out():
    dev = device(0, name=None, memory=None, cc=None, mig=None, pci_class=None)
    labels = gl.gfd_labels(facts([dev], source="pci", driver=None, cuda=None, machine=None))
    assert labels == {
        "nvidia.com/gpu.present": "true",
        "nvidia.com/gpu.machine": "unknown",
        "nvidia.com/gpu.mode": "unknown",
        "nvidia.com/mps.capable": "false",
        "nvidia.com/gpu.count": "1",
        "nvidia.com/gpu.replicas": "1",
        "nvidia.com/gpu.sharing-strategy": "none",
    }


def test_compute_major_zero_has_no_architecture_labels():
    labels = gl.gfd_labels(facts([device(0, cc="0.0")]))
    assert "nvidia.com/gpu.family" not in labels
    assert "nvidia.com/gpu.compute.major" not in labels


def test_two_part_driver_version_has_empty_revision():
    labels = gl.gfd_labels(facts([device(0)], driver="550.54"))
    assert labels["nvidia.com/cuda.driver.rev"] == ""
    assert labels["nvidia.com/cuda.driver-version.revision"] == ""
    assert labels["nvidia.com/cuda.driver-version.full"] == "550.54"


def test_malformed_driver_version_gives_no_driver_labels():
    labels = gl.gfd_labels(facts([device(0)], driver="535"))
    assert not [key for key in labels if "cuda.driver" in key]


def test_machine_is_sanitised():
    labels = gl.gfd_labels(facts([device(0)], machine="Standard PC (Q35 + ICH9, 2009)"))
    assert labels["nvidia.com/gpu.machine"] == "Standard-PC-Q35-ICH9-2009"


@pytest.mark.parametrize("kwargs, message", [
    (dict(mig_strategy="all"), "mig_strategy must be one of"),
    (dict(sharing_strategy="mig"), "sharing_strategy must be one of"),
    (dict(replicas=0), "replicas must be an integer of at least 1"),
    (dict(replicas=True), "replicas must be an integer"),
    (dict(replicas=2), "replicas=2 needs sharing_strategy"),
])
def test_invalid_options(kwargs, message):
    assert message in gl.validate_label_options(**kwargs)
    with pytest.raises(InputError, match=message):
        gl.gfd_labels(facts([device(0)]), **kwargs)


def test_valid_options():
    assert gl.validate_label_options("mixed", "mps", 3) is None


@pytest.mark.parametrize("replicas, sharing, product", [
    (1, "none", "MOCKMODEL"),
    (2, "time-slicing", "MOCKMODEL-SHARED"),
])
def test_gfd_resource_labeler_examples(replicas, sharing, product):
    """GFD's TestGPUResourceLabeler: MOCKMODEL, 300 MiB, compute capability 8.0, count 1."""
    labels = gl.gfd_labels(facts([device(0, "MOCKMODEL", 300, "8.0", None)]),
                           sharing_strategy=sharing, replicas=replicas)
    resource = dict((k, v) for k, v in labels.items() if k.startswith("nvidia.com/gpu.")
                    and k not in ("nvidia.com/gpu.present", "nvidia.com/gpu.machine", "nvidia.com/gpu.sharing-strategy",
                                  "nvidia.com/gpu.mode"))
    assert resource == {
        "nvidia.com/gpu.count": "1",
        "nvidia.com/gpu.replicas": str(replicas),
        "nvidia.com/gpu.memory": "300",
        "nvidia.com/gpu.product": product,
        "nvidia.com/gpu.family": "ampere",
        "nvidia.com/gpu.compute.major": "8",
        "nvidia.com/gpu.compute.minor": "0",
    }


# --- the managed label set (what stale-label removal may delete) ----------------------------

ENGINES = {"copy": 1, "decoder": 1, "encoder": 0, "jpeg": 1, "ofa": 0}


def with_attributes(dev, multiprocessors=14):
    """``dev`` with NVML's attributes on each MIG device (nvmlDeviceGetAttributes_v2)."""
    for mig in dev["mig"]["devices"] or []:
        parts = gl.mig_profile_parts(mig["profile"])
        mig.update(multiprocessors=multiprocessors * parts[1], slices={"gi": parts[0], "ci": parts[1]},
                   engines=dict(ENGINES))
    return dev


def _every_produced_key():
    keys = set()
    fact_sets = [
        facts([device()]),
        facts([device(mig=None)], source="pci", driver=None, cuda=None),
        facts([device(i, "NVIDIA A100-SXM4-40GB", 40960, "8.0", (1, 1)) for i in range(2)]),
        facts([device(0, "NVIDIA A100-SXM4-40GB", 40960, "8.0", (1, 1)), device(1, "Tesla T4", 15360, "7.5")]),
        facts([with_attributes(device(i, *A100, migs=["3g.20gb", "3g.20gb"])) for i in range(2)]),
        facts([with_attributes(device(0, *A100, migs=["1g.5gb", "1c.2g.10gb", "1g.10gb+me"]))]),
    ]
    for one in fact_sets:
        for mig in gl.MIG_STRATEGIES:
            for sharing, replicas in (("none", 1), ("time-slicing", 4), ("mps", 2)):
                try:
                    keys.update(gl.gfd_labels(one, mig_strategy=mig, sharing_strategy=sharing, replicas=replicas))
                except gl.LabelError:
                    assert sharing == "mps"  # MPS with MIG-enabled GPUs: GFD refuses
    return keys


def test_managed_keys_are_exactly_the_keys_the_rules_produce():
    produced = _every_produced_key()
    per_profile = set(key for key in produced if key.startswith(gl.MIG_RESOURCE_PREFIX))
    assert gl.MANAGED_LABEL_KEYS == frozenset(produced - per_profile)
    assert all(gl.is_managed_label(key) for key in gl.MANAGED_LABEL_KEYS)
    # the per-profile keys of mig_strategy mixed: every suffix, for each profile seen ("+" written ".")
    assert per_profile == set("nvidia.com/mig-%s.%s" % (profile, suffix)
                              for profile in ("3g.20gb", "1g.5gb", "1c.2g.10gb", "1g.10gb.me")
                              for suffix in gl.MIG_LABEL_SUFFIXES)
    assert all(gl.is_managed_label(key) for key in per_profile)


@pytest.mark.parametrize("key", ["nvidia.com/mig-1g.5gb.count", "nvidia.com/mig-1c.3g.20gb.slices.ci",
                                 "nvidia.com/mig-1g.10gb.me.count", "nvidia.com/mig-1g.10gb.me.all.engines.ofa",
                                 "nvidia.com/mig-1g.24gb-me.multiprocessors", "nvidia.com/mig-1g.5gb.sharing-strategy"])
def test_per_profile_mig_labels_are_managed(key):
    assert gl.is_managed_label(key, "1") is True


def test_a_profile_with_an_extension_is_labelled_with_a_dot():
    # GFD's MIG device name is the profile with "+" replaced by "." (internal/resource/nvml-mig-device.go GetName)
    labels = gl.gfd_labels(facts([device(0, *A100, migs=["1g.10gb+me", "3g.20gb"])]), mig_strategy="mixed")
    suffixes = ("product", "count", "replicas", "sharing-strategy", "memory", "slices.gi", "slices.ci")
    assert sorted(key for key in labels if key.startswith("nvidia.com/mig-1g.10gb")) == sorted(
        "nvidia.com/mig-1g.10gb.me.%s" % suffix for suffix in suffixes)
    assert labels["nvidia.com/mig-1g.10gb.me.product"] == "NVIDIA-A100-SXM4-40GB-MIG-1g.10gb.me"


@pytest.mark.parametrize("key, value", [
    ("nvidia.com/device-plugin.config", "t4-shared"),
    ("nvidia.com/gfd.timestamp", "1700000000"),
    ("nvidia.com/gpu.clique", "7b3f.1"),
    ("nvidia.com/mig-custom.count", "1"),
    ("nvidia.com/gpu.deploy.driver", "true"),
    ("feature.node.kubernetes.io/pci-10de.present", "true"),
    ("team", "ml"),
    ("accelerator", "tpu-v4"),
    ("accelerator", None),
])
def test_labels_of_others_are_not_managed(key, value):
    assert gl.is_managed_label(key, value) is False


def test_accelerator_is_managed_when_it_holds_a_value_the_rules_write():
    assert gl.is_managed_label("accelerator", gl.accelerator_label_value("Tesla T4")) is True


LABEL_SETS = [
    ("8x H100", [device(i) for i in range(8)]),
    ("4x A100 MIG", [device(i, "NVIDIA A100-SXM4-40GB", 40960, "8.0", (1, 1)) for i in range(4)]),
    ("A100 one MIG, one full", [device(0, "NVIDIA A100-SXM4-40GB", 40960, "8.0", (1, 1)),
                                device(1, "NVIDIA A100-SXM4-40GB", 40960, "8.0", (0, 0))]),
    ("T4 then 2x H100", [device(0, "Tesla T4", 15360, "7.5", None), device(1), device(2)]),
]


@pytest.mark.parametrize("name, devices", LABEL_SETS, ids=[n for n, _d in LABEL_SETS])
@pytest.mark.parametrize("options", [{}, {"mig_strategy": "single"}, {"mig_strategy": "mixed"},
                                     {"sharing_strategy": "time-slicing", "replicas": 4}])
def test_devices_merged_with_a_count_give_the_same_labels(name, devices, options):
    # what the filter gpu_node_requests passes: identical neighbours as one entry with count
    from ansible_collections.kubegpu.nvidia.plugins.filter.gpu_node_requests import label_facts

    full = facts(devices)
    merged = label_facts(full)
    assert len(merged["devices"]) < len(devices) or len(devices) == 1 or name == "A100 one MIG, one full", name
    assert gl.gfd_labels(merged, **options) == gl.gfd_labels(full, **options)
    assert gl.multiple_models(merged) == gl.multiple_models(full)


@pytest.mark.parametrize("count", [0, -1, "2", True, 1.5])
def test_a_bad_device_count_is_refused(count):
    with pytest.raises(InputError, match="count must be a positive integer"):
        gl.gfd_labels(facts([dict(device(0), count=count)]))
