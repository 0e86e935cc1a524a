"""Dynamic Resource Allocation (`resource.k8s.io/v1`, Kubernetes 1.34) in the test server.

What each part follows upstream (kubernetes/kubernetes unless said otherwise):

* shapes, limits and names: staging/src/k8s.io/api/resource/v1/types.go (ResourceSliceMaxDevices = 128,
  ResourceSliceMaxAttributesAndCapacitiesPerDevice = 32, DeviceRequestsMaxSize = 32,
  FirstAvailableDeviceRequestMaxSize = 8, DeviceSelectorsMaxSize = 32, ResourceClaimReservedForMaxSize = 256,
  Finalizer `resource.kubernetes.io/delete-protection`);
* defaulting: pkg/apis/resource/v1/defaults.go (`allocationMode: ExactCount`, `count: 1` for ExactCount, on
  `exactly` and on each `firstAvailable` entry);
* validation: pkg/apis/resource/validation/validation.go (one of `exactly`/`firstAvailable`, request and
  device names, one of nodeName/nodeSelector/allNodes/perDeviceNodeSelection, one attribute value, CEL
  compiled on write: cel.py), immutability from pkg/registry/resource/*/strategy.go;
* field selectors of ResourceSlices (`spec.nodeName`, `spec.driver`): pkg/registry/resource/resourceslice/
  strategy.go; ResourceClaims select on metadata only (resourceclaim/strategy.go);
* the kubelet plugin of kubernetes-sigs/dra-driver-nvidia-gpu (cmd/gpu-kubelet-plugin/deviceinfo.go): one
  slice per node, pool = node name, devices `gpu-<minor>` with attributes `type`, `uuid`, `productName`,
  `brand`, `architecture`, `cudaComputeCapability`, `driverVersion`, `cudaDriverVersion` and
  `resource.kubernetes.io/pciBusID`, capacity `memory`; a GPU with MIG on is published as its MIG devices only
  (nvlib.go GetPerGpuAllocatableDevices; names, attributes and capacities of mig.go and deviceinfo.go
  MigDeviceInfo.GetDevice, `mig_devices`), from the node's MIG layout as the device plugin stand-in reads it
  (kubelet.py `mig_instances`: its fake NVML, `kubegpu.io/simulated-nvml`, or `kubegpu.io/simulated-mig-devices`);
  the slice is owned by its Node, named from
  `<node>-<driver>-` and starts at pool generation 1 (dynamic-resource-allocation/resourceslice/
  resourceslicecontroller.go as of 1.34);
* the resourceclaim controller (pkg/controller/resourceclaim/controller.go): a claim per template entry of a
  pod (`<pod>-<claim>-`, owned by the pod, annotation `resource.kubernetes.io/pod-claim-name`),
  `pod.status.resourceClaimStatuses`; reservations of done or deleted pods dropped; a claim reserved by no
  pod loses its allocation and finalizer; a generated claim whose pod is done is deleted;
* the scheduler plugin (pkg/scheduler/framework/plugins/dynamicresources/dynamicresources.go) and the
  structured allocator (staging/src/k8s.io/dynamic-resource-allocation/structured/): DeviceClass selectors
  then request selectors per device, devices allocated to other claims excluded, `status.allocation`
  (results and a node selector on metadata.name), the finalizer, `status.reservedFor`; a node where the
  claims cannot be allocated counts as "cannot allocate all claims".

The simulated GPUs of a node: the annotation `kubegpu.io/simulated-gpus` (count) and, optionally,
`kubegpu.io/simulated-gpu-devices`: a JSON list, one object per GPU, with any of `productName`, `uuid`,
`memory` (a quantity), `architecture`, `brand`, `cudaComputeCapability`, `driverVersion`,
`cudaDriverVersion`, `pciBusID`, `minor`. What is not given comes from the node's GFD labels
(`nvidia.com/gpu.product` with dashes read as spaces, `nvidia.com/gpu.memory` in MiB, `nvidia.com/gpu.family`,
`nvidia.com/gpu.compute.major/minor`, `nvidia.com/cuda.driver-version.*`, `nvidia.com/cuda.runtime-version.*`),
else from an H100 80GB HBM3 on driver 570.124.06.
"""

import hashlib
import json
import re

from . import cel
from .errors import ApiError
from .resources import BY_PATH
from .store import SIMULATED_GPUS
from .util import clone

GROUP = "resource.k8s.io"
DEVICECLASSES = BY_PATH[(GROUP, "v1", "deviceclasses")]
SLICES = BY_PATH[(GROUP, "v1", "resourceslices")]
CLAIMS = BY_PATH[(GROUP, "v1", "resourceclaims")]
TEMPLATES = BY_PATH[(GROUP, "v1", "resourceclaimtemplates")]
PODS = BY_PATH[("", "v1", "pods")]
DAEMONSETS = BY_PATH[("apps", "v1", "daemonsets")]

DRIVER = "gpu.nvidia.com"
FINALIZER = "resource.kubernetes.io/delete-protection"
POD_CLAIM_NAME = "resource.kubernetes.io/pod-claim-name"
PCI_BUS_ID = "resource.kubernetes.io/pciBusID"
SIMULATED_GPU_DEVICES = "kubegpu.io/simulated-gpu-devices"
# images of the NVIDIA DRA driver (kubelet plugin): nvcr.io/nvidia/k8s-dra-driver-gpu, and the
# kubernetes-sigs project's registry.k8s.io/dra-driver-nvidia/dra-driver-nvidia-gpu
PLUGIN_IMAGES = ("k8s-dra-driver-gpu", "dra-driver-nvidia-gpu")
CANNOT_ALLOCATE = "cannot allocate all claims"

MAX_DEVICES = 128
MAX_ATTRIBUTES_AND_CAPACITIES = 32
MAX_REQUESTS = 32
MAX_SUBREQUESTS = 8
MAX_SELECTORS = 32
MAX_RESERVED_FOR = 256
MAX_DRIVER_NAME = 63
MAX_ATTRIBUTE_VALUE = 64

_DNS1123_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_DNS1123_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_C_IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
C_IDENTIFIER_MSG = (
    "a valid C identifier must start with alphabetic character or '_', followed by a string of "
    "alphanumeric characters or '_' (e.g. 'my_name',  or 'MY_NAME',  or 'MyName', regex used for "
    "validation is '[A-Za-z_][A-Za-z0-9_]*')")

# defaults when neither the annotation nor GFD labels say (an H100 80GB HBM3 as NVML reports it)
H100 = {"productName": "NVIDIA H100 80GB HBM3", "memory": "81559Mi", "architecture": "Hopper",
        "brand": "Nvidia", "cudaComputeCapability": "9.0.0", "driverVersion": "570.124.6",
        "cudaDriverVersion": "12.8.0"}
PCI_BUSES = (0x18, 0x2A, 0x3A, 0x5D, 0x9A, 0xAB, 0xBA, 0xDB)


def is_dra_resource(res):
    return res.group == GROUP


# ------------------------------------------------------------------ defaulting
def _default_selection(sel):
    if not isinstance(sel, dict):
        return
    sel.setdefault("allocationMode", "ExactCount")
    if sel["allocationMode"] == "ExactCount":
        sel.setdefault("count", 1)


def _default_claim_spec(spec):
    for request in ((spec or {}).get("devices") or {}).get("requests") or []:
        if not isinstance(request, dict):
            continue
        _default_selection(request.get("exactly"))
        for sub in request.get("firstAvailable") or []:
            _default_selection(sub)


def apply_defaults(res, obj):
    """pkg/apis/resource/v1/defaults.go: SetDefaults_ExactDeviceRequest, SetDefaults_DeviceSubRequest."""
    if res is CLAIMS:
        _default_claim_spec(obj.get("spec"))
    elif res is TEMPLATES:
        _default_claim_spec(((obj.get("spec") or {}).get("spec")))


# ------------------------------------------------------------------ validation
def _required(path, detail=""):
    return (path, "Required value" + (": " + detail if detail else ""), "FieldValueRequired")


def _invalid(path, value, detail):
    return (path, 'Invalid value: %s: %s' % (json.dumps(value) if not isinstance(value, str) else
                                             '"%s"' % value, detail), "FieldValueInvalid")


def _too_many(path, count, limit):
    return (path, "Too many: %d: must have at most %d items" % (count, limit), "FieldValueTooMany")


def _name_causes(path, name, pattern, message, limit):
    if not name:
        return [_required(path)]
    causes = []
    if not isinstance(name, str) or not pattern.match(name):
        causes.append(_invalid(path, name, message))
    if isinstance(name, str) and len(name) > limit:
        causes.append(_invalid(path, name, "must be no more than %d characters" % limit))
    return causes


def _label(path, name):
    from .validation import DNS_LABEL_MSG
    return _name_causes(path, name, _DNS1123_LABEL, DNS_LABEL_MSG, 63)


def _subdomain(path, name, limit=253):
    from .validation import SUBDOMAIN_MSG
    return _name_causes(path, name, _DNS1123_SUBDOMAIN, SUBDOMAIN_MSG, limit)


def _selectors(path, selectors):
    causes = []
    if selectors is None:
        return causes
    if len(selectors) > MAX_SELECTORS:
        causes.append(_too_many(path, len(selectors), MAX_SELECTORS))
    for i, selector in enumerate(selectors):
        where = "%s[%d]" % (path, i)
        expression = ((selector or {}).get("cel") or {}).get("expression") if isinstance(selector, dict) else None
        if not isinstance(selector, dict) or not selector.get("cel"):
            causes.append(_required(where + ".cel"))
        elif not expression:
            causes.append(_required(where + ".cel.expression"))
        else:
            try:
                cel.compile_expression(expression)
            except cel.CelError as exc:
                causes.append(_invalid(where + ".cel.expression", expression, str(exc)))
    return causes


def _selection(path, sel, sub_name=None):
    """ExactDeviceRequest / DeviceSubRequest (validateDeviceClassName, validateSelectorSlice, mode and count)."""
    causes = []
    if sub_name is not None:
        causes.extend(_label(path + ".name", sub_name))
    causes.extend(_subdomain(path + ".deviceClassName", sel.get("deviceClassName")))
    causes.extend(_selectors(path + ".selectors", sel.get("selectors")))
    mode = sel.get("allocationMode")
    count = sel.get("count")
    if mode == "All":
        if count:
            causes.append(_invalid(path + ".count", count, "must not be specified when allocationMode is 'All'"))
    elif mode == "ExactCount":
        if not isinstance(count, int) or count <= 0:
            causes.append(_invalid(path + ".count", count, "must be greater than zero"))
    elif not mode:
        causes.append(_required(path + ".allocationMode"))
    else:
        causes.append((path + ".allocationMode", 'Unsupported value: "%s": supported values: "All", "ExactCount"'
                       % mode, "FieldValueNotSupported"))
    return causes


def validate_claim_spec(path, spec):
    causes = []
    requests = ((spec or {}).get("devices") or {}).get("requests") or []
    rpath = path + ".devices.requests"
    if len(requests) > MAX_REQUESTS:
        causes.append(_too_many(rpath, len(requests), MAX_REQUESTS))
    seen = set()
    for i, request in enumerate(requests):
        where = "%s[%d]" % (rpath, i)
        if not isinstance(request, dict):
            causes.append(_invalid(where, request, "must be an object"))
            continue
        name = request.get("name")
        causes.extend(_label(where + ".name", name))
        if name in seen:
            causes.append((where + ".name", 'Duplicate value: "%s"' % name, "FieldValueDuplicate"))
        seen.add(name)
        exactly, first = request.get("exactly"), request.get("firstAvailable") or []
        if exactly is None and not first:
            causes.append(_required(where, "exactly one of `exactly` or `firstAvailable` is required"))
        elif exactly is not None and first:
            causes.append((where, "Invalid value: null: exactly one of `exactly` or `firstAvailable` is required, "
                           "but multiple fields are set", "FieldValueInvalid"))
        elif exactly is not None:
            causes.extend(_selection(where + ".exactly", exactly))
        else:
            if len(first) > MAX_SUBREQUESTS:
                causes.append(_too_many(where + ".firstAvailable", len(first), MAX_SUBREQUESTS))
            subs = set()
            for j, sub in enumerate(first):
                swhere = "%s.firstAvailable[%d]" % (where, j)
                causes.extend(_selection(swhere, sub or {}, (sub or {}).get("name")))
                if (sub or {}).get("name") in subs:
                    causes.append((swhere + ".name", 'Duplicate value: "%s"' % sub["name"], "FieldValueDuplicate"))
                subs.add((sub or {}).get("name"))
    return causes


def _qualified_name(path, name):
    """validateQualifiedName: an optional DNS subdomain domain (at most 63 characters) and a C identifier."""
    domain, sep, ident = name.partition("/")
    if not sep:
        domain, ident = "", name
    causes = []
    if not ident:
        causes.append(_required(path))
    elif len(ident) > 32:
        causes.append(_invalid(path, ident, "must be no more than 32 characters"))
    elif not _C_IDENTIFIER.match(ident):
        causes.append((path, 'Invalid value: "%s": %s' % (ident, C_IDENTIFIER_MSG), "FieldValueTypeInvalid"))
    if sep:
        causes.extend(_subdomain(path, domain, limit=63))
    return causes


def _attribute(path, attr):
    if not isinstance(attr, dict):
        return [_invalid(path, attr, "must be an object")]
    present = [k for k in ("int", "bool", "string", "version") if attr.get(k) is not None]
    if not present:
        return [_required(path, "exactly one value must be specified")]
    if len(present) > 1:
        return [(path, "Invalid value: %s: exactly one value must be specified" % json.dumps(attr, sort_keys=True),
                 "FieldValueInvalid")]
    kind = present[0]
    value = attr[kind]
    if kind in ("string", "version") and len(str(value)) > MAX_ATTRIBUTE_VALUE:
        return [(path + "." + kind, "Too long: may not be more than %d bytes" % MAX_ATTRIBUTE_VALUE,
                 "FieldValueTooLong")]
    if kind == "version":
        try:
            cel.Semver(value)
        except ValueError:
            return [_invalid(path + ".version", value, "must be a string compatible with semver.org spec 2.0.0")]
    return []


def validate_slice(obj):
    causes = []
    spec = obj.get("spec") or {}
    driver = spec.get("driver")
    causes.extend(_subdomain("spec.driver", driver, limit=MAX_DRIVER_NAME))
    pool = spec.get("pool") or {}
    if not pool.get("name"):
        causes.append(_required("spec.pool.name"))
    if not isinstance(pool.get("generation", 0), int) or pool.get("generation", 0) < 0:
        causes.append(_invalid("spec.pool.generation", pool.get("generation"), "must be greater than or equal to 0"))
    if not isinstance(pool.get("resourceSliceCount"), int) or pool["resourceSliceCount"] <= 0:
        causes.append(_invalid("spec.pool.resourceSliceCount", pool.get("resourceSliceCount", 0),
                               "must be greater than zero"))
    chosen = ["`%s`" % key for key in ("nodeName", "nodeSelector", "allNodes", "perDeviceNodeSelection")
              if spec.get(key) not in (None, "", False)]
    if not chosen:
        causes.append(_required("spec", "exactly one of `nodeName`, `nodeSelector`, `allNodes`, "
                                "`perDeviceNodeSelection` is required"))
    elif len(chosen) > 1:
        causes.append(("spec", 'Invalid value: "{%s}": exactly one of `nodeName`, `nodeSelector`, `allNodes`, '
                       '`perDeviceNodeSelection` is required, but multiple fields are set' % ", ".join(chosen),
                       "FieldValueInvalid"))
    if spec.get("nodeName"):
        causes.extend(_subdomain("spec.nodeName", spec["nodeName"]))
    devices = spec.get("devices") or []
    if len(devices) > MAX_DEVICES:
        causes.append(_too_many("spec.devices", len(devices), MAX_DEVICES))
    names = set()
    for i, device in enumerate(devices[:MAX_DEVICES]):
        where = "spec.devices[%d]" % i
        if not isinstance(device, dict):
            causes.append(_invalid(where, device, "must be an object"))
            continue
        causes.extend(_label(where + ".name", device.get("name")))
        if device.get("name") in names:
            causes.append((where + ".name", 'Duplicate value: "%s"' % device["name"], "FieldValueDuplicate"))
        names.add(device.get("name"))
        attributes = device.get("attributes") or {}
        capacity = device.get("capacity") or {}
        for key, attr in attributes.items():
            apath = "%s.attributes[%s]" % (where, key)
            causes.extend(_qualified_name(apath, key))
            causes.extend(_attribute(apath, attr))
        for key, cap in capacity.items():
            cpath = "%s.capacity[%s]" % (where, key)
            causes.extend(_qualified_name(cpath, key))
            try:
                cel.parse_quantity((cap or {}).get("value"))
            except (ValueError, TypeError):
                causes.append(_invalid(cpath + ".value", (cap or {}).get("value"),
                                       "quantities must match the regular expression "
                                       "'^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'"))
        if len(attributes) + len(capacity) > MAX_ATTRIBUTES_AND_CAPACITIES:
            causes.append((where, "Too many: %d: must have at most %d attributes and capacities combined"
                           % (len(attributes) + len(capacity), MAX_ATTRIBUTES_AND_CAPACITIES), "FieldValueTooMany"))
    return causes


def validate(res, obj):
    """Causes [(field, message, reason)] for a resource.k8s.io object (validation.go)."""
    if res is DEVICECLASSES:
        return _selectors("spec.selectors", (obj.get("spec") or {}).get("selectors"))
    if res is CLAIMS:
        return validate_claim_spec("spec", obj.get("spec"))
    if res is TEMPLATES:
        return validate_claim_spec("spec.spec", (obj.get("spec") or {}).get("spec"))
    if res is SLICES:
        return validate_slice(obj)
    return []


def immutable(res, old, new):
    """strategy.go ValidateUpdate: a claim's (and a template's) spec, a slice's driver and nodeName."""
    causes = []
    if res in (CLAIMS, TEMPLATES) and (old.get("spec") or {}) != (new.get("spec") or {}):
        causes.append(("spec", "Invalid value: field is immutable", "FieldValueInvalid"))
    if res is SLICES:
        for key in ("driver", "nodeName"):
            if (old.get("spec") or {}).get(key) != (new.get("spec") or {}).get(key):
                causes.append(("spec." + key, "Invalid value: field is immutable", "FieldValueInvalid"))
    if res is CLAIMS and len(((new.get("status") or {}).get("reservedFor") or [])) > MAX_RESERVED_FOR:
        causes.append(_too_many("status.reservedFor", len(new["status"]["reservedFor"]), MAX_RESERVED_FOR))
    return causes


# ------------------------------------------------------------------ the kubelet plugin: ResourceSlices
def is_dra_plugin(ds):
    spec = ((ds.get("spec") or {}).get("template") or {}).get("spec") or {}
    return any(any(name in (c.get("image") or "") for name in PLUGIN_IMAGES)
               for c in (spec.get("containers") or []) + (spec.get("initContainers") or []))


def _label_int(labels, key):
    try:
        return int(labels.get(key, ""))
    except ValueError:
        return None


def _semver_text(text):
    """A version as the driver publishes it (Masterminds semver: missing parts are 0, leading zeros dropped)."""
    parts = [str(int(p)) for p in re.findall(r"\d+", str(text))[:3]]
    return ".".join(parts + ["0"] * (3 - len(parts)))


def _from_labels(labels):
    out = {}
    product = labels.get("nvidia.com/gpu.product")
    if product:
        out["productName"] = product.split("-SHARED")[0].replace("-", " ")
    memory = _label_int(labels, "nvidia.com/gpu.memory")
    if memory:
        out["memory"] = "%dMi" % memory
    family = labels.get("nvidia.com/gpu.family")
    if family:
        out["architecture"] = family.capitalize()
    major, minor = _label_int(labels, "nvidia.com/gpu.compute.major"), _label_int(labels, "nvidia.com/gpu.compute.minor")
    if major is not None:
        out["cudaComputeCapability"] = "%d.%d.0" % (major, minor or 0)
    if labels.get("nvidia.com/cuda.driver-version.full"):
        out["driverVersion"] = _semver_text(labels["nvidia.com/cuda.driver-version.full"])
    cuda_major = _label_int(labels, "nvidia.com/cuda.runtime-version.major")
    if cuda_major is not None:
        out["cudaDriverVersion"] = "%d.%d.0" % (cuda_major, _label_int(labels, "nvidia.com/cuda.runtime-version.minor") or 0)
    return out


def node_gpus(node):
    """The simulated GPUs of a node, one dict each (see the module docstring), or [] for none."""
    meta = node["metadata"]
    annotations = meta.get("annotations") or {}
    try:
        count = int(annotations.get(SIMULATED_GPUS, "0"))
    except ValueError:
        count = 0
    try:
        given = json.loads(annotations.get(SIMULATED_GPU_DEVICES, "[]"))
    except ValueError:
        given = []
    if not isinstance(given, list):
        given = []
    base = dict(H100)
    base.update(_from_labels(meta.get("labels") or {}))
    gpus = []
    for index in range(max(count, 0)):
        gpu = dict(base)
        if index < len(given) and isinstance(given[index], dict):
            gpu.update(given[index])
        digest = hashlib.sha256(("%s/%d" % (meta["name"], index)).encode()).hexdigest()
        gpu.setdefault("uuid", "GPU-%s-%s-%s-%s-%s" % (
            digest[:8], digest[8:12], digest[12:16], digest[16:20], digest[20:32]))
        gpu.setdefault("minor", index)
        bus = PCI_BUSES[index] if index < len(PCI_BUSES) else 0x100 + index
        gpu.setdefault("pciBusID", "0000:%02x:00.0" % bus if bus < 0x100 else "0001:%02x:00.0" % (bus - 0x100))
        gpus.append(gpu)
    return gpus


def mig_uuid(parent_uuid, index):
    """The UUID the fake NVML gives a GPU's MIG device ``index`` (fakenvml.c add_mig: ``MIG-`` and the parent
    UUID's digits with the instance number in the last group), so that the slice and the node's facts agree."""
    return "MIG-%s%04x" % (str(parent_uuid)[4:36], index + 1)


def mig_device_name(minor, profile, profile_id, start):
    """MigSpecTuple.ToCanonicalName (cmd/gpu-kubelet-plugin/mig.go, v0.4.1): ``gpu-<parent minor>-mig-<profile
    without dots, RFC 1123>-<GPU-instance profile id>-<placement start>``, e.g. ``gpu-0-mig-1g5gb-19-0``."""
    name = re.sub(r"[^a-z0-9-.]", "-", profile.replace(".", "").lower()).strip("-")
    return "gpu-%d-mig-%s-%d-%d" % (minor, name, profile_id, start)


def _media_engines(slices, profile):
    """(decoders, jpeg, ofa) of a GPU-instance profile as the fake NVML's profile info gives them (an A100's)."""
    decoders, jpeg, ofa = (0, 0, 1, 2, 2, 2, 2, 5)[slices], int(slices == 7), int(slices == 7)
    if profile.endswith("+me"):
        decoders, jpeg, ofa = decoders + 1, jpeg + 1, ofa + 1
    return decoders, jpeg, ofa


def _common_attributes(gpu, kind):
    return {
        "type": {"string": kind},
        "uuid": {"string": gpu["uuid"]},
        "productName": {"string": gpu["productName"]},
        "brand": {"string": gpu["brand"]},
        "architecture": {"string": gpu["architecture"]},
        "cudaComputeCapability": {"version": _semver_text(gpu["cudaComputeCapability"])},
        "driverVersion": {"version": _semver_text(gpu["driverVersion"])},
        "cudaDriverVersion": {"version": _semver_text(gpu["cudaDriverVersion"])},
        PCI_BUS_ID: {"string": gpu["pciBusID"]},
    }


def mig_devices(gpu, instances, multiprocessors_per_slice=14):
    """MigDeviceInfo.GetDevice (cmd/gpu-kubelet-plugin/deviceinfo.go and CommonAttributesMig /
    CommonCapacitiesMig in mig.go, v0.4.1) for the MIG devices ``instances`` (kubelet.mig_instances) of ``gpu``:
    the parent's attributes with ``type: mig``, the MIG device's ``uuid``, ``parentUUID`` and ``profile``;
    capacity of its GPU-instance profile (multiprocessors, copy engines, decoders, encoders, JPEG and OFA engines,
    memory in bytes) and ``memorySlice<i>: 1`` for each memory slice of its placement."""
    devices = []
    for index, inst in enumerate(instances):
        attributes = _common_attributes(gpu, "mig")
        attributes["uuid"] = {"string": mig_uuid(gpu["uuid"], index)}
        attributes["parentUUID"] = {"string": gpu["uuid"]}
        attributes["profile"] = {"string": inst["profile"]}
        decoders, jpeg, ofa = _media_engines(inst["slices"], inst["gi_profile"])
        capacity = {
            "multiprocessors": {"value": str(inst["slices"] * multiprocessors_per_slice)},
            "copyEngines": {"value": str(inst["slices"])},
            "decoders": {"value": str(decoders)},
            "encoders": {"value": "0"},
            "jpegEngines": {"value": str(jpeg)},
            "ofaEngines": {"value": str(ofa)},
            "memory": {"value": "%dMi" % inst["memory_mib"]},
        }
        for memory_slice in range(inst["start"], inst["start"] + inst["size"]):
            capacity["memorySlice%d" % memory_slice] = {"value": "1"}
        devices.append((mig_device_name(int(gpu["minor"]), inst["profile"], inst["profile_id"], inst["start"]),
                        attributes, capacity))
    return [{"name": name, "attributes": attributes, "capacity": capacity}
            for name, attributes, capacity in sorted(devices, key=lambda one: one[0])]


def slice_devices(node):
    """The devices the NVIDIA kubelet plugin publishes for the node's GPUs (GpuInfo.GetDevice,
    MigDeviceInfo.GetDevice): a GPU with MIG off as ``gpu-<minor>``; a GPU with MIG on as its MIG devices only,
    never as a whole (cmd/gpu-kubelet-plugin/nvlib.go GetPerGpuAllocatableDevices, v0.4.1: "Announce physical
    GPU to be allocatable" only when MIG is disabled), none when it has no MIG device yet."""
    from .kubelet import mig_instances, mig_multiprocessors_per_slice
    devices = []
    gpus = node_gpus(node)
    for gpu, instances in zip(gpus, mig_instances(node, gpus)):
        if instances is not None:
            devices.extend(mig_devices(gpu, instances, mig_multiprocessors_per_slice(node, int(gpu["minor"]))))
            continue
        devices.append({
            "name": "gpu-%d" % int(gpu["minor"]),
            "attributes": _common_attributes(gpu, "gpu"),
            "capacity": {"memory": {"value": str(gpu["memory"])}},
        })
    return devices


def _owned_by_node(obj):
    return any(ref.get("kind") == "Node" for ref in obj["metadata"].get("ownerReferences") or [])


def _pod_ready(pod):
    return any(c.get("type") == "Ready" and c.get("status") == "True"
               for c in (pod.get("status") or {}).get("conditions") or [])


def publish_slices(store, nodes):
    """The kubelet plugin's slices: one per node running a ready plugin pod; gone when the pod is."""
    plugins = [ds for ds in store.all(DAEMONSETS) if is_dra_plugin(ds)]
    published = {}
    for obj in store.all(SLICES):
        spec = obj.get("spec") or {}
        if spec.get("driver") == DRIVER and spec.get("nodeName") and _owned_by_node(obj):
            published.setdefault(spec["nodeName"], []).append(obj)
    if not plugins and not published:
        return
    uids = set(ds["metadata"]["uid"] for ds in plugins)
    serving = set()
    if uids:
        for pod in store.all(PODS):
            refs = pod["metadata"].get("ownerReferences") or []
            if any(r.get("uid") in uids for r in refs) and not pod["metadata"].get("deletionTimestamp") \
                    and (pod.get("status") or {}).get("phase") == "Running" and _pod_ready(pod):
                serving.add(pod["spec"].get("nodeName"))
    cache = store.__dict__.setdefault("_dra_devices", {})
    for node in nodes:
        name = node["metadata"]["name"]
        current = published.pop(name, [])
        if name not in serving or SIMULATED_GPUS not in (node["metadata"].get("annotations") or {}):
            for obj in current:
                store.delete(SLICES, None, obj["metadata"]["name"], internal=True)
            continue
        cached = cache.get(name)
        if cached is None or cached[0] != node["metadata"]["resourceVersion"]:
            cached = cache[name] = (node["metadata"]["resourceVersion"], slice_devices(node))
        devices = cached[1]
        if len(current) == 1 and current[0]["spec"].get("devices") == devices:
            continue
        # resourceslicecontroller.go syncPool: a new pool starts at generation 1; a change that is one update
        # keeps the generation
        generation = max([(o["spec"].get("pool") or {}).get("generation", 0) for o in current] or [0]) or 1
        for obj in current[1:]:
            store.delete(SLICES, None, obj["metadata"]["name"], internal=True)
        spec = {"driver": DRIVER, "nodeName": name,
                "pool": {"name": name, "generation": generation, "resourceSliceCount": 1},
                "devices": devices}
        if current:
            new = clone(current[0])
            new["spec"] = spec
            store.update(SLICES, None, new["metadata"]["name"], new, internal=True)
        else:
            store.create(SLICES, None, {
                "metadata": {"generateName": "%s-%s-" % (name, DRIVER), "ownerReferences": [{
                    "apiVersion": "v1", "kind": "Node", "name": name, "uid": node["metadata"]["uid"],
                    "controller": True}]},
                "spec": spec}, internal=True)
    for objs in published.values():  # slices of nodes that are gone
        for obj in objs:
            store.delete(SLICES, None, obj["metadata"]["name"], internal=True)


# ------------------------------------------------------------------ the resourceclaim controller
def _pod_done(pod):
    return (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed")


def _owner_pod(claim):
    for ref in claim["metadata"].get("ownerReferences") or []:
        if ref.get("kind") == "Pod" and ref.get("apiVersion") == "v1" and ref.get("controller"):
            return ref
    return None


def claim_controller(store):
    """Create claims from pods' templates; release claims of pods that are done or gone."""
    pods = [p for p in store.all(PODS) if (p.get("spec") or {}).get("resourceClaims")]
    for pod in pods:
        if pod["metadata"].get("deletionTimestamp") or _pod_done(pod):
            continue
        statuses = list((pod.get("status") or {}).get("resourceClaimStatuses") or [])
        known = set(s.get("name") for s in statuses)
        changed = False
        ns = pod["metadata"]["namespace"]
        for entry in pod["spec"]["resourceClaims"]:
            template_name = entry.get("resourceClaimTemplateName")
            if not template_name or entry.get("name") in known:
                continue
            claim = next((c for c in store.all(CLAIMS, ns)
                          if (_owner_pod(c) or {}).get("uid") == pod["metadata"]["uid"]
                          and (c["metadata"].get("annotations") or {}).get(POD_CLAIM_NAME) == entry["name"]), None)
            if claim is None:
                template = store.find(TEMPLATES, ns, template_name)
                if template is None:
                    continue  # the controller retries; the scheduler says the claim is missing
                tmeta = (template.get("spec") or {}).get("metadata") or {}
                annotations = dict(tmeta.get("annotations") or {})
                annotations[POD_CLAIM_NAME] = entry["name"]
                owner = {"apiVersion": "v1", "kind": "Pod", "name": pod["metadata"]["name"],
                         "uid": pod["metadata"]["uid"], "controller": True, "blockOwnerDeletion": True}
                metadata = {"generateName": "%s-%s-" % (pod["metadata"]["name"][:28], entry["name"][:28]),
                            "namespace": ns, "annotations": annotations, "ownerReferences": [owner]}
                body = {"metadata": metadata, "spec": clone((template.get("spec") or {}).get("spec") or {})}
                if tmeta.get("labels"):
                    body["metadata"]["labels"] = dict(tmeta["labels"])
                claim = store.create(CLAIMS, ns, body, internal=True)
            statuses.append({"name": entry["name"], "resourceClaimName": claim["metadata"]["name"]})
            changed = True
        if changed:
            new = clone(pod)
            new.setdefault("status", {})["resourceClaimStatuses"] = statuses
            store.put_internal(PODS, new)
    release_claims(store)


def release_claims(store):
    """controller.go syncClaim: drop reservations of pods that are done or gone, deallocate, delete."""
    for claim in store.all(CLAIMS):
        status = claim.get("status") or {}
        meta = claim["metadata"]
        ns = meta["namespace"]
        reserved = status.get("reservedFor") or []
        valid = []
        for ref in reserved:
            if ref.get("resource") != "pods" or ref.get("apiGroup"):
                valid.append(ref)
                continue
            pod = store.find(PODS, ns, ref.get("name"))
            if pod is not None and pod["metadata"]["uid"] == ref.get("uid") and not _pod_done(pod):
                valid.append(ref)
        new = clone(claim)
        if valid != reserved:
            if valid:
                new["status"]["reservedFor"] = valid
            else:
                new["status"].pop("reservedFor", None)
        finalizers = meta.get("finalizers") or []
        if not valid and FINALIZER in finalizers:
            # not reserved any more: deallocate (the allocation was made by the scheduler, which set the finalizer)
            new.setdefault("status", {}).pop("allocation", None)
            rest = [f for f in finalizers if f != FINALIZER]
            if rest:
                new["metadata"]["finalizers"] = rest
            else:
                new["metadata"].pop("finalizers", None)
        if new.get("status") == {}:
            new.pop("status")
        if new != claim:
            claim = store.update(CLAIMS, ns, meta["name"], new, internal=True)
            if store.find(CLAIMS, ns, meta["name"]) is None:
                continue
        owner = _owner_pod(claim)
        if owner is not None and not valid and not claim["metadata"].get("deletionTimestamp"):
            pod = store.find(PODS, ns, owner.get("name"))
            if pod is None or pod["metadata"]["uid"] != owner.get("uid") or _pod_done(pod):
                try:
                    store.delete(CLAIMS, ns, meta["name"], internal=True)
                except ApiError:
                    pass


# ------------------------------------------------------------------ the scheduler plugin and the allocator
class AllocationError(Exception):
    """The allocator failed for a reason that is not "does not fit" (missing class, CEL runtime error)."""


def _node_matches(selector, node):
    from .kubelet import node_selected
    return node_selected({"affinity": {"nodeAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": selector}}}, node)


class Cluster:
    """What the scheduler knows of DRA during one pass: slices by node, allocated devices."""

    def __init__(self, store):
        self.store = store
        self.by_node = {}
        self.shared = []
        for obj in store.all(SLICES):
            spec = obj.get("spec") or {}
            if spec.get("nodeName"):
                self.by_node.setdefault(spec["nodeName"], []).append(obj)
            elif spec.get("allNodes") or spec.get("nodeSelector"):
                self.shared.append(obj)
        self.allocated = set()
        for claim in store.all(CLAIMS):
            for result in (((claim.get("status") or {}).get("allocation") or {}).get("devices") or {}).get("results") or []:
                self.allocated.add((result.get("driver"), result.get("pool"), result.get("device")))
        self.results_cache = {}

    def devices(self, node):
        """(driver, pool, device dict, slice) of the devices the node can reach, in a stable order."""
        out = []
        slices = sorted(self.by_node.get(node["metadata"]["name"], []), key=lambda o: o["metadata"]["name"])
        shared = [o for o in self.shared
                  if o["spec"].get("allNodes") or _node_matches(o["spec"]["nodeSelector"], node)]
        for obj in slices + shared:
            spec = obj["spec"]
            for device in spec.get("devices") or []:
                out.append((spec["driver"], (spec.get("pool") or {}).get("name"), device, obj))
        return out

    def matches(self, expressions, driver, device, obj, where):
        for i, expression in enumerate(expressions):
            key = (expression, obj["metadata"]["name"], obj["metadata"]["resourceVersion"], device.get("name"))
            result = self.results_cache.get(key)
            if result is None:
                try:
                    result = cel.compile_expression(expression).matches(driver, device)
                except cel.CelError as exc:
                    raise AllocationError("%s: selector #%d: CEL runtime error: %s" % (where, i, exc)) from None
                self.results_cache[key] = result
            if not result:
                return False
        return True


def _expressions(sel):
    return [((s or {}).get("cel") or {}).get("expression") for s in sel.get("selectors") or []
            if ((s or {}).get("cel") or {}).get("expression")]


class PodClaims:
    """The claims of one pending pod: `error` (pod-level), `fits(node)` and `commit(node)`."""

    def __init__(self, store, cluster, pod):
        self.store = store
        self.cluster = cluster
        self.pod = pod
        self.error = None
        self.claims = []
        self._plans = {}
        ns = pod["metadata"]["namespace"]
        statuses = {s.get("name"): s.get("resourceClaimName")
                    for s in (pod.get("status") or {}).get("resourceClaimStatuses") or []}
        for entry in pod["spec"].get("resourceClaims") or []:
            name = entry.get("resourceClaimName") or statuses.get(entry.get("name"))
            if not name:
                self.error = 'waiting for dynamic resource controller to create the resourceclaim "%s-%s"' % (
                    pod["metadata"]["name"], entry.get("name"))
                return
            claim = store.find(CLAIMS, ns, name)
            if claim is None:
                self.error = 'resourceclaim.resource.k8s.io "%s" not found' % name
                return
            if claim["metadata"].get("deletionTimestamp"):
                self.error = 'resourceclaim "%s" is being deleted' % name
                return
            owner = _owner_pod(claim)
            if entry.get("resourceClaimTemplateName") and (owner or {}).get("uid") != pod["metadata"]["uid"]:
                self.error = 'ResourceClaim %s was not created for pod %s/%s (pod is not owner)' % (
                    name, ns, pod["metadata"]["name"])
                return
            reserved = (claim.get("status") or {}).get("reservedFor") or []
            if len(reserved) >= MAX_RESERVED_FOR and not any(r.get("uid") == pod["metadata"]["uid"] for r in reserved):
                self.error = 'resourceclaim "%s" cannot be reserved for the pod: %d pods already use it' % (
                    name, MAX_RESERVED_FOR)
                return
            self.claims.append(claim)

    def _plan(self, node):
        """{claim name: allocation} for the claims not yet allocated, or None when they do not fit."""
        taken = set()
        plan = {}
        candidates = None
        for claim in self.claims:
            allocation = (claim.get("status") or {}).get("allocation")
            if allocation:
                selector = allocation.get("nodeSelector")
                if selector and not _node_matches(selector, node):
                    return None
                continue
            if candidates is None:
                candidates = [c for c in self.cluster.devices(node)
                              if (c[0], c[1], c[2].get("name")) not in self.cluster.allocated]
            results = []
            where_claim = "claim %s/%s" % (claim["metadata"]["namespace"], claim["metadata"]["name"])
            for request in ((claim.get("spec") or {}).get("devices") or {}).get("requests") or []:
                options = [(request["name"], request["exactly"])] if request.get("exactly") else \
                    [("%s/%s" % (request["name"], sub.get("name")), sub) for sub in request.get("firstAvailable") or []]
                for result_name, sel in options:
                    picked = self._pick(candidates, taken, sel, "%s, request %s" % (where_claim, result_name))
                    if picked is not None:
                        for driver, pool, device, _obj in picked:
                            taken.add((driver, pool, device["name"]))
                            results.append({"request": result_name, "driver": driver, "pool": pool,
                                            "device": device["name"]})
                        break
                else:
                    return None
            plan[claim["metadata"]["name"]] = {
                "devices": {"results": results},
                "nodeSelector": {"nodeSelectorTerms": [{"matchFields": [
                    {"key": "metadata.name", "operator": "In", "values": [node["metadata"]["name"]]}]}]}}
        return plan

    def _pick(self, candidates, taken, sel, where):
        cls = self.store.find(DEVICECLASSES, None, sel.get("deviceClassName") or "")
        if cls is None:
            raise AllocationError('%s: could not retrieve device class %s: deviceclass.resource.k8s.io "%s" not found'
                                  % (where, sel.get("deviceClassName"), sel.get("deviceClassName")))
        class_exprs = _expressions(cls.get("spec") or {})
        request_exprs = _expressions(sel)
        mode = sel.get("allocationMode") or "ExactCount"
        want = sel.get("count") or 1
        picked = []
        for driver, pool, device, obj in candidates:
            if (driver, pool, device.get("name")) in taken:
                continue
            # DeviceClass selectors first, then the request's (allocator.go isSelectable / selectorsMatch)
            if not self.cluster.matches(class_exprs, driver, device, obj, "class %s" % cls["metadata"]["name"]):
                continue
            if not self.cluster.matches(request_exprs, driver, device, obj, where):
                continue
            picked.append((driver, pool, device, obj))
            if mode == "ExactCount" and len(picked) == want:
                return picked
        if mode == "All" and picked:
            return picked
        return None

    def fits(self, node):
        """None when the pod's claims can be allocated on the node, else the scheduler's reason."""
        plan = self._plan(node)
        if plan is None:
            return CANNOT_ALLOCATE
        self._plans[node["metadata"]["name"]] = plan
        return None

    def commit(self, node):
        """Allocate (finalizer, status.allocation) and reserve the claims for the pod on `node`."""
        plan = self._plans.get(node["metadata"]["name"])
        if plan is None:
            plan = self._plan(node) or {}
        ref = {"resource": "pods", "name": self.pod["metadata"]["name"], "uid": self.pod["metadata"]["uid"]}
        for claim in self.claims:
            name = claim["metadata"]["name"]
            new = clone(self.store.find(CLAIMS, claim["metadata"]["namespace"], name))
            finalizers = new["metadata"].setdefault("finalizers", [])
            if FINALIZER not in finalizers:
                finalizers.append(FINALIZER)
            status = new.setdefault("status", {})
            if name in plan:
                status["allocation"] = plan[name]
                for result in plan[name]["devices"]["results"]:
                    self.cluster.allocated.add((result["driver"], result["pool"], result["device"]))
            reserved = status.setdefault("reservedFor", [])
            if not any(r.get("uid") == ref["uid"] for r in reserved):
                reserved.append(dict(ref))
            self.store.update(CLAIMS, new["metadata"]["namespace"], name, new, internal=True)


def for_pod(store, cluster_holder, pod):
    """PodClaims for a pod with `spec.resourceClaims`, else None; `cluster_holder` is a one-item list cache."""
    if not (pod.get("spec") or {}).get("resourceClaims"):
        return None
    if not cluster_holder:
        cluster_holder.append(Cluster(store))
    return PodClaims(store, cluster_holder[0], pod)


def reconcile(store, nodes):
    """The DRA side of the cluster: the kubelet plugins' slices, then the resourceclaim controller."""
    publish_slices(store, nodes)
    if store.all(CLAIMS) or any((p.get("spec") or {}).get("resourceClaims") for p in store.all(PODS)):
        claim_controller(store)
