# -*- coding: utf-8 -*-
# Copyright (c) kubegpu.nvidia maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""What the role ``kubegpu.nvidia.nvidia_container_toolkit`` decides about a node, in one place.

The module ``nvidia_container_toolkit_info`` reads the node (packages, the container runtimes'
services, the record of the runtime configuration, the CDI units) and hands what it read to these
functions; the role's tasks only run what they decide:

- ``select_runtimes``: which container runtimes to configure (named, or those whose service runs or
  is enabled), and which of their units to restart;
- ``configure_args``: the arguments of ``container_runtime_nvidia`` for each runtime;
- ``record_key`` / ``runtimes_in_place`` / ``record_text``: the record of the runtime configuration,
  so that a re-run whose settings and files are unchanged skips the module;
- ``packages_wanted`` / ``package_specs``: the toolkit packages to install or move to the pinned version;
- ``k3s_detection``: whether k3s or RKE2 find the NVIDIA runtime themselves (no template to write);
- ``cdi_plan``: how the CDI specification is kept current (``nvidia-cdi-refresh`` or ``nvidia-ctk``).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import hashlib
import json
import os
import re

from ansible_collections.kubegpu.nvidia.plugins.module_utils.errors import InputError, KubegpuError

# The collection's version (galaxy.yml; a unit test keeps the two equal). The record of the runtime
# configuration is keyed on it and on the module's arguments: another release of the collection, whose
# container_runtime_nvidia may write other files, runs the module again.
COLLECTION_VERSION = "1.0.0"
# Bumped when the record's meaning changes within a release (never needed so far).
RECORD_FORMAT = 2
RECORD_PATH = "/var/lib/kubegpu-nvidia-container-runtimes.record"
RECORD_HEADER = "# kubegpu.nvidia.nvidia_container_toolkit: the container runtime configuration it wrote (runtime, key, file, sha256)"

# What the role knows about each container runtime it configures.
RUNTIMES = {
    "containerd": {
        "module_runtime": "containerd", "flavor": "containerd", "services": ["containerd"],
        "path": "/etc/containerd/config.toml", "drop_in_path": "/etc/containerd/conf.d/99-nvidia.toml",
        "validate": "containerd --config %s config dump",
    },
    "docker": {"module_runtime": "docker", "services": ["docker"], "path": "/etc/docker/daemon.json"},
    "crio": {"module_runtime": "crio", "services": ["crio"], "path": "/etc/crio/crio.conf.d/99-nvidia.toml"},
    "k3s": {
        "module_runtime": "containerd", "flavor": "k3s", "services": ["k3s", "k3s-agent"],
        "path": "/var/lib/rancher/k3s/agent/etc/containerd/config.toml.tmpl",
        "generated": "/var/lib/rancher/k3s/agent/etc/containerd/config.toml",
        "config_dir": "/etc/rancher/k3s/config.yaml.d", "binary": "k3s",
    },
    "rke2": {
        "module_runtime": "containerd", "flavor": "rke2", "services": ["rke2-server", "rke2-agent"],
        "path": "/var/lib/rancher/rke2/agent/etc/containerd/config.toml.tmpl",
        "generated": "/var/lib/rancher/rke2/agent/etc/containerd/config.toml",
        "config_dir": "/etc/rancher/rke2/config.yaml.d", "binary": "rke2",
    },
}
# Configured and restarted in this order: containerd before Docker, which runs its containers through it.
ORDER = ("containerd", "k3s", "rke2", "crio", "docker")

# The nvidia-cdi-refresh units the toolkit ships since 1.18 (deployments/systemd/ of NVIDIA/nvidia-container-toolkit).
CDI_REFRESH_PATH = "nvidia-cdi-refresh.path"
CDI_REFRESH_SERVICE = "nvidia-cdi-refresh.service"
CDI_REFRESH_OUTPUT = "/var/run/cdi/nvidia.yaml"
CDI_REFRESH_SINCE = (1, 18, 0)

# k3s finds nvidia-container-runtime itself at start (the nvidia, nvidia-cdi and nvidia-experimental
# runtimes, by their binaries) and takes --default-runtime since v1.29.0+k3s1 (k3s PR 8936, backported to
# the December 2023 patch releases of 1.25 to 1.28); RKE2 runs the same agent code from its 1.29 line on.
K3S_DETECTION_SINCE = (1, 29, 0)
DETECTED_RUNTIMES = {
    "nvidia": "/usr/bin/nvidia-container-runtime",
    "nvidia-cdi": "/usr/bin/nvidia-container-runtime.cdi",
}
K3S_DROP_IN = "90-kubegpu-nvidia-runtime.yaml"

# The binary of each mode of nvidia-container-runtime, as nvidia-ctk-installer names them
# (cmd/nvidia-ctk-installer/container/operator/operator.go); container_runtime_nvidia's defaults too.
MODE_PATHS = {
    "auto": "/usr/bin/nvidia-container-runtime",
    "cdi": "/usr/bin/nvidia-container-runtime.cdi",
    "legacy": "/usr/bin/nvidia-container-runtime.legacy",
}
# container_runtime_nvidia reads the effective configuration (config_source: command) of these
CONFIG_COMMAND_RUNTIMES = ("containerd", "crio")


def unit_names():
    """The systemd services of every runtime, in ORDER (``<name>.service``)."""
    return ["%s.service" % service for name in ORDER for service in RUNTIMES[name]["services"]]


def parse_unit_states(text, units):
    """``systemctl show --property=LoadState,ActiveState,UnitFileState -- <units>`` output: {unit: {prop: value}}.

    systemctl prints one block of ``Key=value`` lines per unit, in the order the units were given, blocks
    separated by an empty line.
    """
    blocks = []
    current = {}
    for line in (text or "").splitlines():
        line = line.strip()
        if not line:
            if current:
                blocks.append(current)
                current = {}
            continue
        key, _sep, value = line.partition("=")
        current[key] = value
    if current:
        blocks.append(current)
    if len(blocks) != len(units):
        raise KubegpuError("systemctl show reported %d units for the %d asked (%s)" % (len(blocks), len(units), " ".join(units)))
    return dict(zip(units, blocks))


def present_units(states):
    """Units systemd knows (a unit file exists), without the ``.service`` suffix."""
    return [unit[:-len(".service")] if unit.endswith(".service") else unit
            for unit, props in states.items() if props.get("LoadState") not in (None, "", "not-found")]


def detect_runtimes(states):
    """Runtimes one of whose services runs or is enabled, in ORDER."""
    found = []
    for name in ORDER:
        for service in RUNTIMES[name]["services"]:
            props = states.get("%s.service" % service, {})
            if props.get("ActiveState") == "active" or props.get("UnitFileState") == "enabled":
                found.append(name)
                break
    return found


def select_runtimes(requested, states):
    """The runtimes to configure, in ORDER: those ``requested``, else those detected from the services' ``states``."""
    unknown = [name for name in requested if name not in RUNTIMES]
    if unknown:
        raise InputError("Unknown container runtime(s) %s in nvidia_container_toolkit_runtimes: choose from %s"
                         % (", ".join(unknown), ", ".join(ORDER)))
    wanted = requested or detect_runtimes(states)
    selected = [name for name in ORDER if name in wanted]
    if not selected:
        raise KubegpuError("No container runtime (containerd, Docker, CRI-O, k3s, RKE2) runs or is enabled on this node: "
                           "install one first or name it in nvidia_container_toolkit_runtimes")
    return selected


def service_for(runtime, present):
    """The unit to restart for ``runtime``: the first of its services systemd knows, else its first."""
    services = RUNTIMES[runtime]["services"]
    for service in services:
        if service in present:
            return service
    return services[0]


def nvidia_runtimes(settings):
    """The NVIDIA runtimes the role manages in each container runtime, each {name, path, mode, default}.

    ``settings["nvidia_runtimes"]`` (nvidia_container_toolkit_nvidia_runtimes: several runtimes together, for
    example nvidia, nvidia-cdi and nvidia-legacy as the GPU Operator configures them), else the one runtime of
    runtime_name, runtime_path and set_as_default.
    """
    entries = settings.get("nvidia_runtimes") or []
    if not entries:
        return [{"name": settings["runtime_name"], "path": settings["runtime_path"], "mode": None,
                 "default": bool(settings["set_as_default"])}]
    out = []
    for index, entry in enumerate(entries):
        if not isinstance(entry, dict) or not isinstance(entry.get("name"), str) or not entry["name"].strip():
            raise InputError("nvidia_container_toolkit_nvidia_runtimes[%d]: every runtime needs a name" % index)
        unknown = sorted(set(entry) - {"name", "path", "mode", "default"})
        if unknown:
            raise InputError("nvidia_container_toolkit_nvidia_runtimes[%d] (%s): unknown key(s) %s; a runtime has name, "
                             "path, mode and default" % (index, entry["name"], ", ".join(unknown)))
        mode = entry.get("mode")
        if mode not in (None, "auto", "cdi", "legacy"):
            raise InputError("nvidia_container_toolkit_nvidia_runtimes[%d] (%s): mode must be auto, cdi or legacy, not %r"
                             % (index, entry["name"], mode))
        out.append({"name": entry["name"], "path": entry.get("path") or MODE_PATHS[mode or "auto"], "mode": mode,
                    "default": bool(entry.get("default"))})
    names = [entry["name"] for entry in out]
    twice = sorted(set(name for name in names if names.count(name) > 1))
    if twice:
        raise InputError("nvidia_container_toolkit_nvidia_runtimes names %s more than once" % ", ".join(twice))
    if sum(entry["default"] for entry in out) > 1:
        raise InputError("nvidia_container_toolkit_nvidia_runtimes: at most one runtime can be the default (%s are)"
                         % ", ".join(entry["name"] for entry in out if entry["default"]))
    return out


def configure_args(runtime, settings):
    """The arguments of ``container_runtime_nvidia`` for ``runtime`` (an argument left out takes the module's default).

    ``settings``: runtime_name, runtime_path, set_as_default, cdi (None: leave), backup, validate (bool),
    containerd_mode, config_paths ({runtime: path}); optional nvidia_runtimes (several runtimes together, the
    module's ``runtimes``) and config_source (``command``: options from the runtime's effective configuration).
    """
    defs = RUNTIMES[runtime]
    containerd = defs["module_runtime"] == "containerd"
    drop_in = containerd and settings["containerd_mode"] == "drop_in"
    args = {
        "runtime": defs["module_runtime"],
        "path": (settings.get("config_paths") or {}).get(runtime) or defs["path"],
        "backup": bool(settings["backup"]),
        "state": "present",
    }
    if settings.get("nvidia_runtimes"):
        args["runtimes"] = [dict((key, value) for key, value in (("name", entry["name"]), ("path", entry.get("path")),
                                                                 ("mode", entry.get("mode")),
                                                                 ("default", bool(entry.get("default")))) if value is not None)
                            for entry in settings["nvidia_runtimes"]]
    else:
        args.update(runtime_name=settings["runtime_name"], runtime_path=settings["runtime_path"],
                    set_as_default=bool(settings["set_as_default"]))
    if settings.get("config_source") == "command" and runtime in CONFIG_COMMAND_RUNTIMES:
        args["config_source"] = "command"
    if "flavor" in defs:
        args["flavor"] = defs["flavor"]
    if containerd:
        args["mode"] = settings["containerd_mode"]
    if drop_in and "drop_in_path" in defs:
        args["drop_in_path"] = defs["drop_in_path"]
    if settings.get("cdi") is not None:
        args["cdi"] = bool(settings["cdi"])
    if "validate" in defs and settings.get("validate") and not drop_in:
        args["validate"] = defs["validate"]
    return args


# ------------------------------------------------------------------ the record of the runtime configuration
def record_key(args):
    """The key of one runtime's record: its module arguments and the collection's version (and the record format)."""
    text = "%s kubegpu.nvidia %s record-format %d" % (json.dumps(args, sort_keys=True), COLLECTION_VERSION, RECORD_FORMAT)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def parse_record(text):
    """The rows of a record: [runtime, key, path, sha256 or '-'] (comments and short lines skipped)."""
    rows = []
    for line in (text or "").splitlines():
        parts = line.split()
        if len(parts) < 4 or parts[0].startswith("#"):
            continue
        rows.append(parts[:4])
    return rows


def sha256_file(path):
    """SHA-256 (hex) of a file, or '-' when it is not a regular file."""
    if not os.path.isfile(path):
        return "-"
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(65536), b""):
            digest.update(block)
    return digest.hexdigest()


def runtimes_in_place(rows, keys, checksum=sha256_file):
    """Runtimes of ``keys`` ({runtime: key}) whose recorded rows all carry that key and whose files still match."""
    out = []
    for runtime, key in keys.items():
        mine = [row for row in rows if row[0] == runtime]
        if mine and all(row[1] == key and row[3] == checksum(row[2]) for row in mine):
            out.append(runtime)
    return out


def record_text(results, keys, rows):
    """The record after a run: for each configured runtime the module's checksums, for a skipped one its old rows.

    ``results``: the configuration task's loop results (``item`` with ``name``; ``checksums`` when it ran).
    """
    lines = [RECORD_HEADER]
    for result in results:
        item = result.get("item") or {}
        runtime = item.get("name") if isinstance(item, dict) else item
        if runtime not in keys:
            continue
        if result.get("checksums") is not None and not result.get("failed"):
            for path, digest in sorted(result["checksums"].items()):
                lines.append(" ".join([runtime, keys[runtime], path, digest or "-"]))
        else:
            lines.extend(" ".join(row) for row in rows if row[0] == runtime)
    return "\n".join(lines) + "\n"


# ------------------------------------------------------------------ packages
def packages_wanted(installed, packages, version):
    """Packages missing, or installed at another version than ``version`` (``""``: any version will do)."""
    return [name for name in packages if name not in installed or (version and installed[name] != version)]


def package_specs(packages, version, manager):
    """What apt (``name=version``) or dnf (``name-version``) is asked to install."""
    if not version:
        return list(packages)
    sep = "=" if manager == "apt" else "-"
    return ["%s%s%s" % (name, sep, version) for name in packages]


def parse_dpkg_query(text):
    """{package: version} of the packages dpkg-query lists as installed (``${Package} ${db:Status-Abbrev} ${Version}``)."""
    out = {}
    for line in (text or "").splitlines():
        parts = line.split()
        if len(parts) >= 3 and parts[1] == "ii":
            out[parts[0]] = parts[2]
    return out


def parse_rpm_query(text):
    """{package: version-release} of ``rpm -q --queryformat '%{NAME} %{VERSION}-%{RELEASE}\\n'`` output."""
    out = {}
    for line in (text or "").splitlines():
        parts = line.split()
        if len(parts) == 2 and "is not installed" not in line:
            out[parts[0]] = parts[1]
    return out


def version_tuple(text):
    """(major, minor, patch) of a version like ``1.20.0-1``, ``v1.29.4+k3s1`` or ``1.18.0~rc.1-1``; None if none."""
    match = re.search(r"(\d+)\.(\d+)(?:\.(\d+))?", text or "")
    if not match:
        return None
    return tuple(int(part or 0) for part in match.groups())


# ------------------------------------------------------------------ k3s and RKE2
def k3s_detection(runtime, mode, version_text, settings):
    """Whether ``runtime`` (k3s or rke2) is left to find the NVIDIA runtime itself, and why: (bool, reason).

    ``mode``: ``auto`` (by version and settings), ``always`` or ``never``. Detection needs the runtime name and
    binary k3s looks for (nvidia -> /usr/bin/nvidia-container-runtime, nvidia-cdi -> ...runtime.cdi), no CDI
    setting to write (k3s writes its own) and, in ``auto``, k3s or RKE2 v1.29.0 or newer.
    """
    if mode == "never":
        return False, "nvidia_container_toolkit_k3s_runtime_detection is never"
    for entry in nvidia_runtimes(settings):
        name, path = entry["name"], entry["path"]
        if DETECTED_RUNTIMES.get(name) != path:
            return False, "%s finds only %s; the runtime %s at %s needs the template" % (
                runtime, ", ".join("%s (%s)" % item for item in sorted(DETECTED_RUNTIMES.items())), name, path)
    if settings.get("cdi") is not None:
        return False, "nvidia_container_toolkit_cdi is set, which %s's own configuration does not take" % runtime
    if settings.get("config_paths", {}).get(runtime):
        return False, "a template path is set for %s in nvidia_container_toolkit_runtime_config_paths" % runtime
    if mode == "always":
        return True, "nvidia_container_toolkit_k3s_runtime_detection is always"
    version = version_tuple(version_text)
    if version is None:
        return False, "the %s version could not be read (%s)" % (runtime, (version_text or "no output").strip()[:80])
    if version < K3S_DETECTION_SINCE:
        return False, "%s %s is older than v%s, which finds the NVIDIA runtime and takes --default-runtime" % (
            runtime, ".".join(str(v) for v in version), ".".join(str(v) for v in K3S_DETECTION_SINCE))
    return True, "%s %s finds the NVIDIA runtime itself" % (runtime, ".".join(str(v) for v in version))


def k3s_drop_in(runtime, settings):
    """The config.yaml.d drop-in that makes the NVIDIA runtime k3s's or RKE2's default: (path, content or None)."""
    path = os.path.join(RUNTIMES[runtime]["config_dir"], K3S_DROP_IN)
    default = [entry["name"] for entry in nvidia_runtimes(settings) if entry["default"]]
    if not default:
        return path, None
    return path, "# Managed by kubegpu.nvidia.nvidia_container_toolkit\ndefault-runtime: %s\n" % default[0]


def generated_has_runtime(text, name, as_default=False):
    """Whether a containerd config (k3s/RKE2's generated config.toml) has the runtime table ``name``
    (and, with ``as_default``, names it as ``default_runtime_name``)."""
    pattern = r"""\.runtimes\.(?:"%s"|'%s'|%s)\]""" % ((re.escape(name),) * 3)
    if re.search(pattern, text or "") is None:
        return False
    if as_default:
        return re.search(r"""(?m)^\s*default_runtime_name\s*=\s*["']%s["']""" % re.escape(name), text or "") is not None
    return True


# ------------------------------------------------------------------ CDI
def cdi_plan(enabled, toolkit_version, units, spec_path, driver_version, spec_text, refresh_spec_present):
    """How the CDI specification is kept current: a dict with ``mode`` and ``action``.

    - ``mode`` ``refresh``: the toolkit ships ``nvidia-cdi-refresh.path`` (1.18 and newer): the path unit is
      enabled and started, and the service runs once when its spec (/var/run/cdi/nvidia.yaml) is missing;
      systemd then regenerates it when the driver or nvidia-ctk changes.
    - ``mode`` ``generate``: an older toolkit: ``nvidia-ctk cdi generate`` writes ``spec_path`` when it is
      missing or does not name the loaded driver version.
    - ``mode`` ``off``: not asked for.
    ``action`` says what the role has to do now (``none`` when everything is in place).
    """
    if not enabled:
        return {"mode": "off", "action": "none", "reason": "nvidia_container_toolkit_cdi_generate is false"}
    path_unit = units.get(CDI_REFRESH_PATH, {})
    version = version_tuple(toolkit_version) if toolkit_version else None
    has_unit = path_unit.get("LoadState") not in (None, "", "not-found")
    if has_unit or (version is not None and version >= CDI_REFRESH_SINCE):
        running = path_unit.get("ActiveState") == "active" and path_unit.get("UnitFileState") in ("enabled", "static")
        if running and refresh_spec_present:
            action, reason = "none", "%s is enabled and active and %s exists" % (CDI_REFRESH_PATH, CDI_REFRESH_OUTPUT)
        else:
            action, reason = "refresh", "enable %s and generate %s" % (CDI_REFRESH_PATH, CDI_REFRESH_OUTPUT)
        return {"mode": "refresh", "action": action, "reason": reason, "spec_path": CDI_REFRESH_OUTPUT}
    if spec_text is None:
        action, reason = "generate", "%s does not exist" % spec_path
    elif driver_version and driver_version not in spec_text:
        action, reason = "generate", "%s does not name the loaded driver %s" % (spec_path, driver_version)
    else:
        action, reason = "none", "%s is current" % spec_path
    return {"mode": "generate", "action": action, "reason": reason, "spec_path": spec_path}
