# -*- coding: utf-8 -*-
# Copyright (c) kubegpu.nvidia maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The read of ``nvidia_container_toolkit_info``, split in two: what is on the node, and what the role does there.

- ``read(module, family, ...)`` reads the node without any of the role's options: the installed versions of the
  toolkit packages, the container runtimes' and the CDI units, the repository definition and its key, apt's
  cached index for the repository the node has, the record of the runtime configuration (with the SHA-256 of
  every file it names), k3s/RKE2's version and files, the CDI specification's state. The ``toolkit`` entry of
  ``nvidia_gpu_facts``' ``gather_subset`` returns it as ``ansible_facts.nvidia_gpu.toolkit_state``.
- ``plan(state, params)`` decides, from that state, the role's options (``ARGUMENT_SPEC``) and the loaded
  driver version, what ``nvidia_container_toolkit_info`` returns; the module runs ``plan(read(...))``, the
  role's filter ``toolkit_plan`` runs it on the controller on the state of this run's facts.
- ``state_for(state, params)``: whether a state answers a read with ``params`` (same OS family, every package,
  the record and the CDI specification asked for were read).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import base64
import os
import platform
import re

from ansible.module_utils.common.arg_spec import ArgumentSpecValidator
from ansible.module_utils.common.text.converters import to_text

from ansible_collections.kubegpu.nvidia.plugins.module_utils import toolkit_node as node
from ansible_collections.kubegpu.nvidia.plugins.module_utils import toolkit_repo as repo
from ansible_collections.kubegpu.nvidia.plugins.module_utils.errors import InputError, KubegpuError

TOMLKIT_PACKAGE = "python3-tomlkit"
PACKAGES = ["nvidia-container-toolkit", "nvidia-container-toolkit-base", "libnvidia-container-tools", "libnvidia-container1"]
CDI_SPEC_PATH = "/etc/cdi/nvidia.yaml"
K3S_BIN_DIRS = ["/usr/local/bin", "/usr/bin", "/opt/bin"]
K3S_RUNTIMES = ("k3s", "rke2")

ARGUMENT_SPEC = dict(
    family=dict(type="str", required=True),
    packages=dict(type="list", elements="str", default=list(PACKAGES)),
    version=dict(type="str", default=""),
    install_tomlkit=dict(type="bool", default=True),
    package_files=dict(type="list", elements="path", default=[]),
    repo_manage=dict(type="bool", default=True),
    repo_deb_url=dict(type="str", default=""),
    repo_rpm_url=dict(type="str", default=""),
    repo_key_fingerprints=dict(type="list", elements="str", default=[], no_log=False),
    repo_key_checksum=dict(type="str", default="", no_log=False),
    repo_validate_certs=dict(type="bool", default=True),
    runtimes=dict(type="list", elements="str", default=[]),
    runtime_name=dict(type="str", default="nvidia"),
    runtime_path=dict(type="str", default="/usr/bin/nvidia-container-runtime"),
    set_as_default=dict(type="bool", default=False),
    cdi=dict(type="bool"),
    backup=dict(type="bool", default=True),
    validate=dict(type="bool", default=True),
    containerd_mode=dict(type="str", default="in_place", choices=["in_place", "drop_in"]),
    config_paths=dict(type="dict", default={}),
    nvidia_runtimes=dict(type="list", elements="dict", default=[]),
    config_source=dict(type="str", default="file", choices=["file", "command"]),
    record=dict(type="bool", default=True),
    record_path=dict(type="path", default=node.RECORD_PATH),
    k3s_runtime_detection=dict(type="str", default="auto", choices=["auto", "always", "never"]),
    cdi_generate=dict(type="bool", default=False),
    cdi_spec_path=dict(type="path", default=CDI_SPEC_PATH),
    driver_version=dict(type="str", default=""),
)


def check_params(options):
    """``options`` (the role's, as ``nvidia_container_toolkit_info`` takes them) with the defaults filled in, or an
    InputError naming the first bad one."""
    checked = ArgumentSpecValidator(ARGUMENT_SPEC).validate(dict(options or {}))
    if checked.error_messages:
        raise InputError("nvidia_container_toolkit_info options: %s" % checked.error_messages[0])
    return checked.validated_parameters


def read_names(params):
    """The packages a read for ``params`` reports: the toolkit's, and tomlkit when the role installs it."""
    return list(params["packages"]) + ([TOMLKIT_PACKAGE] if params["install_tomlkit"] else [])


# ------------------------------------------------------------------ the node read
def read_text(path):
    data = repo.read_bytes(path)
    return None if data is None else to_text(data, errors="surrogate_or_replace")


def family_of(module):
    """The OS family the node's package manager says (``Debian``: dpkg, ``RedHat``: rpm), or None."""
    if module.get_bin_path("dpkg-query"):
        return "Debian"
    if module.get_bin_path("rpm"):
        return "RedHat"
    return None


def installed_packages(module, manager, names):
    if manager == "apt":
        rc, out, err = module.run_command(
            ["dpkg-query", "--show", "--showformat=${Package} ${db:Status-Abbrev} ${Version}\\n", "--"] + names)
        # rc 1: some package was never installed (dpkg-query says so on stderr)
        if rc not in (0, 1):
            raise KubegpuError("dpkg-query failed (rc %d): %s" % (rc, (err or out).strip()))
        return node.parse_dpkg_query(out)
    rc, out, err = module.run_command(["rpm", "-q", "--queryformat", "%{NAME} %{VERSION}-%{RELEASE}\\n"] + names)
    return node.parse_rpm_query(out)


def unit_states(module, units):
    systemctl = module.get_bin_path("systemctl")
    if systemctl is None:
        raise KubegpuError("Cannot read the services of the container runtimes: systemctl is not installed. "
                           "The role needs systemd on the node.")
    rc, out, err = module.run_command([systemctl, "show", "--property=LoadState,ActiveState,UnitFileState", "--"] + units)
    if rc != 0:
        last = ((err or out).strip().splitlines() or ["no output"])[-1]
        raise KubegpuError("Cannot read the services of the container runtimes (systemctl show, rc %d): %s. "
                           "The role needs systemd on the node." % (rc, last))
    return node.parse_unit_states(out, units)


def source_urls(family, text):
    """The repository URLs a repository definition names (apt's ``deb`` lines, dnf's ``baseurl``)."""
    urls = []
    for line in (text or "").splitlines():
        if family == "Debian":
            match = re.match(r"^\s*deb\s+(?:\[[^\]]*\]\s+)?(\S+)", line)
        else:
            match = re.match(r"^\s*baseurl\s*=\s*(\S+)", line)
        if match:
            urls.append(match.group(1))
    return urls


def read_repo(family, arch, names):
    """The repository definition and key files as they are, and (apt) the cached index of the sources it names."""
    defaults = repo.family_defaults(family)
    source = read_text(defaults["source_path"])
    key = repo.read_bytes(defaults["key_path"])
    out = {
        "source_path": defaults["source_path"], "source": source,
        "source_attributes_ok": source is not None and repo.file_attributes_ok(defaults["source_path"]),
        "key_path": defaults["key_path"], "key": None if key is None else to_text(base64.b64encode(key)),
        "key_attributes_ok": key is not None and repo.file_attributes_ok(defaults["key_path"]),
        "index": {},
    }
    if defaults["manager"] == "apt":
        for url in source_urls(family, source):
            versions = repo.cached_versions(url, arch)
            out["index"][repo.apt_lists_prefix(url, arch)] = dict(
                (name, sorted(versions[name])) for name in names if name in versions)
    return out


def read_k3s(module, runtime):
    """k3s's or RKE2's version (when its binary is installed), its generated containerd config and drop-in."""
    defs = node.RUNTIMES[runtime]
    binary = module.get_bin_path(defs["binary"], opt_dirs=K3S_BIN_DIRS)
    version_text = ""
    if binary:
        rc, out, _err = module.run_command([binary, "--version"])
        version_text = out if rc == 0 else ""
    path = os.path.join(defs["config_dir"], node.K3S_DROP_IN)
    return {"installed": bool(binary), "version_text": version_text, "generated": read_text(defs["generated"]),
            "drop_in_path": path, "drop_in": read_text(path)}


def dotted_numbers(text):
    """The runs of digits and dots (with a dot) in ``text``, joined by spaces: a version such as a driver's is a
    substring of ``text`` exactly when it is a substring of this string, much smaller than a CDI specification."""
    if text is None:
        return None
    return " ".join(sorted(set(run for run in re.findall(r"[0-9.]+", text) if "." in run)))


def read(module, family, packages=None, record_path=None, cdi_spec_path=None):
    """The node's toolkit state: what ``plan`` decides from, read with ``module.run_command`` / ``get_bin_path``.

    Without arguments past ``family`` it reads what the role reads with its defaults; ``packages``,
    ``record_path`` and ``cdi_spec_path`` read others (``options`` says what was read).
    """
    defaults = repo.family_defaults(family)
    manager = defaults["manager"]
    arch = repo.debian_arch(platform.machine()) if manager == "apt" else platform.machine()
    names = list(PACKAGES) + [TOMLKIT_PACKAGE] if packages is None else list(packages)
    names = [name for index, name in enumerate(names) if name not in names[:index]]
    record_path = record_path or node.RECORD_PATH
    cdi_spec_path = cdi_spec_path or CDI_SPEC_PATH
    installed = installed_packages(module, manager, names)
    units = node.unit_names() + [node.CDI_REFRESH_PATH]
    record = read_text(record_path)
    spec = read_text(cdi_spec_path)
    return {
        "family": family,
        "manager": manager,
        "arch": arch,
        "packages": dict((name, installed[name]) for name in names if name in installed),
        "units": unit_states(module, units),
        "repo": read_repo(family, arch, names),
        "k3s": dict((runtime, read_k3s(module, runtime)) for runtime in K3S_RUNTIMES),
        "record": {"text": record, "checksums": dict((row[2], node.sha256_file(row[2]))
                                                     for row in node.parse_record(record))},
        "cdi": {"spec_present": spec is not None, "spec_versions": dotted_numbers(spec),
                "refresh_output_present": os.path.exists(node.CDI_REFRESH_OUTPUT)},
        "options": {"packages": names, "record_path": record_path, "cdi_spec_path": cdi_spec_path},
    }


def node_state(module):
    """``nvidia_gpu.toolkit_state`` (``nvidia_gpu_facts``' ``toolkit`` subset): ``read`` with the role's defaults,
    the family from the package manager; ``error`` (one line) instead where the node cannot be read (no systemd,
    neither dpkg nor rpm): the role then reads the node itself and stops with that message."""
    family = family_of(module)
    if family is None:
        return {"family": None, "error": "neither dpkg nor rpm is installed"}
    try:
        return read(module, family)
    except KubegpuError as exc:
        return {"family": family, "error": str(exc)}


def state_for(state, params):
    """The toolkit state ``state`` when it answers a read with ``params`` (checked: ``check_params``), else None."""
    if not isinstance(state, dict) or state.get("error") or not isinstance(state.get("options"), dict):
        return None
    if state.get("family") != params["family"]:
        return None
    have = state["options"]
    if [name for name in read_names(params) if name not in have.get("packages", [])]:
        return None
    if have.get("record_path") != params["record_path"] or have.get("cdi_spec_path") != params["cdi_spec_path"]:
        return None
    return state


# ------------------------------------------------------------------ the plan
def repo_state(state, params):
    found = state["repo"]
    url = params["repo_deb_url"] if state["manager"] == "apt" else params["repo_rpm_url"]
    info = {"managed": params["repo_manage"], "url": url, "source_path": found["source_path"],
            "key_path": found["key_path"], "source_in_place": True, "key_in_place": True,
            "key_fingerprints": [], "key_problem": None}
    if not params["repo_manage"] or params["package_files"]:
        info["managed"] = False
        return info
    allowed = repo.allowed_fingerprints(params["repo_key_fingerprints"])
    want = repo.source_text(params["family"], url, found["key_path"], params["repo_validate_certs"])
    info["source_in_place"] = found["source"] == want and found["source_attributes_ok"]
    if found["key"] is None:
        info["key_in_place"] = False
        info["key_problem"] = "%s does not exist" % found["key_path"]
    else:
        key = base64.b64decode(found["key"])
        info["key_fingerprints"] = repo.key_fingerprints(key)
        info["key_problem"] = repo.key_problem(key, allowed, params["repo_key_checksum"], found["key_path"])
        info["key_in_place"] = info["key_problem"] is None and found["key_attributes_ok"]
    if state["manager"] == "apt":
        versions = found["index"].get(repo.apt_lists_prefix(url, state["arch"]), {})
        info["cached"] = repo.available(versions, params["packages"], params["version"])
    return info


def k3s_state(found, runtime, settings, mode):
    detection, reason = node.k3s_detection(runtime, mode, found["version_text"], settings)
    path, content = node.k3s_drop_in(runtime, settings)
    generated = found["generated"]
    wanted = node.nvidia_runtimes(settings)
    default = [entry["name"] for entry in wanted if entry["default"]]
    return {
        "detection": detection, "reason": reason, "version": (found["version_text"].splitlines() or [""])[0].strip(),
        "generated": node.RUNTIMES[runtime]["generated"], "drop_in_path": path, "drop_in_content": content,
        "drop_in_in_place": found["drop_in"] == content,
        "detected": all(node.generated_has_runtime(generated, entry["name"]) for entry in wanted) and (
            not default or node.generated_has_runtime(generated, default[0], as_default=True)),
    }


def plan(state, params):
    """What ``nvidia_container_toolkit_info`` returns (without ``changed``) for the node state ``state`` (``read``'s)
    and the options ``params`` (``check_params``'s); InputError / KubegpuError with one line where the role stops."""
    manager = state["manager"]
    names = read_names(params)
    installed = state["packages"]
    toolkit_installed = dict((name, installed[name]) for name in params["packages"] if name in installed)
    wanted = node.packages_wanted(toolkit_installed, params["packages"], params["version"])
    tomlkit_missing = params["install_tomlkit"] and TOMLKIT_PACKAGE not in installed

    states = state["units"]
    selected = node.select_runtimes(params["runtimes"], states)
    present = node.present_units(states)
    settings = dict((key, params[key]) for key in (
        "runtime_name", "runtime_path", "set_as_default", "cdi", "backup", "validate", "containerd_mode", "config_paths",
        "nvidia_runtimes", "config_source"))
    managed = node.nvidia_runtimes(settings)

    k3s = {}
    for runtime in selected:
        if runtime in K3S_RUNTIMES:
            k3s[runtime] = k3s_state(state["k3s"][runtime], runtime, settings, params["k3s_runtime_detection"])
    templated = [runtime for runtime in selected if not k3s.get(runtime, {}).get("detection")]
    # k3s/RKE2 that find the runtime themselves: the default-runtime drop-in to write (or remove), and a restart
    # when it changes or when their generated config.toml does not have the runtime yet
    k3s_actions = [{"name": runtime, "path": k3s[runtime]["drop_in_path"], "content": k3s[runtime]["drop_in_content"],
                    "write": not k3s[runtime]["drop_in_in_place"]}
                   for runtime in selected if k3s.get(runtime, {}).get("detection")
                   and not (k3s[runtime]["drop_in_in_place"] and k3s[runtime]["detected"])]
    args = dict((runtime, node.configure_args(runtime, settings)) for runtime in templated)
    keys = dict((runtime, node.record_key(value)) for runtime, value in args.items())
    rows = node.parse_record(state["record"]["text"]) if params["record"] else []
    checksums = state["record"]["checksums"]
    in_place = node.runtimes_in_place(rows, keys, checksum=lambda path: checksums.get(path, "-")) if params["record"] else []

    repo_info = repo_state(state, params)
    repo_info["needed"] = bool(repo_info["managed"] and (
        not repo_info["source_in_place"] or not repo_info["key_in_place"] or wanted))
    # what check mode's package manager can answer from: the repository as written, its index on the node
    repo_info["index_ready"] = bool(not repo_info["managed"] or (
        repo_info["source_in_place"] and repo_info["key_in_place"] and repo_info.get("cached", True)))
    install_needed = bool(params["package_files"] or tomlkit_missing or repo_info["needed"] or wanted)

    toolkit_version = params["version"] or installed.get("nvidia-container-toolkit-base") or ""
    cdi = node.cdi_plan(params["cdi_generate"], toolkit_version, states, params["cdi_spec_path"],
                        params["driver_version"], state["cdi"]["spec_versions"], state["cdi"]["refresh_output_present"])
    if cdi["action"] == "none" and params["cdi_generate"] and wanted:
        cdi.update(action=cdi["mode"], reason="the toolkit packages change in this run")

    return {
        "manager": manager,
        "packages": dict((name, installed.get(name)) for name in names),
        "packages_wanted": wanted,
        "package_specs": node.package_specs(params["packages"], params["version"], manager),
        "tomlkit_missing": bool(tomlkit_missing),
        "install_needed": install_needed,
        "repo": repo_info,
        "runtimes": selected,
        "nvidia_runtimes": [{"name": entry["name"], "path": entry["path"]} for entry in managed],
        "services": dict((runtime, node.service_for(runtime, present)) for runtime in selected),
        "configure": [{"name": runtime, "args": args[runtime]} for runtime in templated if runtime not in in_place],
        "in_place": in_place,
        "record": {"enabled": params["record"], "path": params["record_path"], "keys": keys, "rows": rows},
        "k3s": k3s,
        "k3s_actions": k3s_actions,
        "cdi": cdi,
    }
