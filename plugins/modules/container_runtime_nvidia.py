#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) kubegpu.nvidia maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: container_runtime_nvidia
short_description: Configure containerd, Docker or CRI-O to know the NVIDIA container runtimes
version_added: 1.0.0
description:
  - Adds NVIDIA container runtimes to the configuration of containerd (config versions 1, 2 and 3),
    Docker (C(daemon.json)) or CRI-O (a drop-in file), optionally one of them as the default runtime and with CDI
    enabled, or removes them again. It does what C(nvidia-ctk runtime configure) and C(nvidia-ctk-installer) do,
    and also keeps a backup on request, keeps comments and formatting of TOML files, edits the templates of k3s and
    RKE2, edits through symbolic links, and is idempotent.
  - "One run manages one runtime (O(runtime_name), O(runtime_path)) or several together (O(runtimes), for example
    C(nvidia), C(nvidia-cdi) and C(nvidia-legacy) as the GPU Operator configures them). A run never removes a
    runtime it does not manage: runtimes another run (or a person) added, also in the same drop-in, stay."
  - "containerd: a new runtime starts as a copy of the default runtime's table when that runtime is runc-compatible
    (type C(io.containerd.runc.v2), C(io.containerd.runtime.v1.linux) or empty) and not an NVIDIA runtime, else of
    C(runc), else of C(crun), so C(SystemdCgroup) and other options carry over (RV(options_source) says which);
    then C(runtime_type = io.containerd.runc.v2) and C(options.BinaryName) are set (config version 1: also
    C(options.Runtime)). When the runtime already exists, only those keys are enforced, and C(SystemdCgroup) is
    added from the source runtime when it is missing."
  - "containerd: every valid TOML spelling of the file (tables, dotted keys, inline tables, tables out of order) is
    edited to the same configuration; the result is parsed again and must load exactly as planned, else the module
    fails and the file stays as it was."
  - "Docker: C(runtimes.<name>) is merged into C(daemon.json); every other key and runtime is kept, and the
    file's indentation is kept."
  - "CRI-O: the drop-in file belongs to this module and is written whole; new runtimes copy the options of
    CRI-O's default runtime found in C(crio.conf) and the files of the drop-in directory."
  - The module only writes files. Restart the runtime when RV(restart_required) is true.
author:
  - kubegpu.nvidia maintainers (@kubegpu)
requirements:
  - tomlkit (Debian/Ubuntu package C(python3-tomlkit)) on the managed node for containerd and CRI-O.
attributes:
  check_mode:
    support: full
    description: Reports what would change (with the diff when asked) and writes nothing.
  diff_mode:
    support: full
    description: Returns the before and after text of every file that changes, with credentials masked.
  idempotent:
    support: full
    description: A second run with the same options reports no change.
options:
  runtime:
    description: The container runtime to configure.
    type: str
    required: true
    choices: [containerd, docker, crio]
  path:
    description:
      - The configuration file to edit. A symbolic link is followed; the file it points to is replaced and the
        link stays.
      - "Defaults: C(/etc/containerd/config.toml) (containerd), C(/etc/docker/daemon.json) (docker),
        C(/etc/crio/crio.conf.d/99-nvidia.toml) (crio)."
      - For O(flavor=k3s) or O(flavor=rke2) the default is their C(config.toml.tmpl); a path naming their
        generated C(config.toml) is turned into the C(config.toml.tmpl) beside it.
    type: path
  mode:
    description:
      - containerd only. V(in_place) edits O(path).
      - V(drop_in) writes the runtimes to O(drop_in_path) and adds its directory to C(imports) in O(path) (unless a
        glob there already loads the drop-in). Because containerd before 2.1 replaces a whole plugin table per
        import, the drop-in carries the complete CRI table of O(path) plus the runtimes; run the module again after
        editing that table in O(path). Runtimes already in the drop-in that this run does not manage stay there.
        Needs config version 2 or 3.
    type: str
    choices: [in_place, drop_in]
    default: in_place
  drop_in_path:
    description:
      - containerd O(mode=drop_in) only. The drop-in file; C(imports) gets C(<its directory>/*.toml).
      - It must differ from O(path) and be a C(.toml) file containerd's import glob matches.
    type: path
    default: /etc/containerd/conf.d/99-nvidia.toml
  flavor:
    description:
      - containerd only. Which containerd distribution owns the configuration.
      - V(k3s) and V(rke2) regenerate C(config.toml) at every start, so the module edits C(config.toml.tmpl)
        (C(/var/lib/rancher/k3s/agent/etc/containerd/) or C(/var/lib/rancher/rke2/agent/etc/containerd/)) and,
        when the template does not exist yet, creates it from the generated C(config.toml).
        Whole-line Go template directives in a template (for example C({{ template "base" . }})) are kept.
      - V(auto) picks V(k3s) or V(rke2) when O(path) lies in their directory or, without O(path), when that
        directory exists on the node; otherwise V(containerd).
    type: str
    choices: [auto, containerd, k3s, rke2]
    default: auto
  runtime_name:
    description:
      - Name of the one runtime to manage (the RuntimeClass handler). Default V(nvidia).
      - "containerd and CRI-O: a DNS-1123 label (lowercase letters, digits and C(-), at most 63 characters), the
        rule of a Kubernetes RuntimeClass handler. Docker: letters, digits, C(_), C(.) and C(-), starting with a
        letter or digit, and not C(runc) or C(io.containerd.runc.v2), which dockerd reserves."
      - Mutually exclusive with O(runtimes).
    type: str
  runtime_path:
    description:
      - Absolute path of the NVIDIA container runtime binary of O(runtime_name) (containerd C(BinaryName), Docker
        C(path), CRI-O C(runtime_path)). Default C(/usr/bin/nvidia-container-runtime).
      - Mutually exclusive with O(runtimes).
    type: path
  runtimes:
    description:
      - Several runtimes managed together, in place or in one drop-in. Each name at most once, at most one default.
      - Mutually exclusive with O(runtime_name), O(runtime_path) and O(set_as_default=true).
    type: list
    elements: dict
    suboptions:
      name:
        description: The runtime's name (the same rules as O(runtime_name)).
        type: str
        required: true
      path:
        description:
          - Absolute path of its binary. Default by O(runtimes[].mode) as nvidia-ctk-installer names them
            C(/usr/bin/nvidia-container-runtime) (V(auto) or none), C(/usr/bin/nvidia-container-runtime.cdi)
            (V(cdi)), C(/usr/bin/nvidia-container-runtime.legacy) (V(legacy)).
        type: path
      mode:
        description:
          - The mode of nvidia-container-runtime this runtime stands for. It picks the default O(runtimes[].path) and
            is returned in RV(runtimes); it does not change the runtime's table.
        type: str
        choices: [auto, cdi, legacy]
      default:
        description: Make this runtime the default runtime.
        type: bool
        default: false
  set_as_default:
    description:
      - Make O(runtime_name) the default runtime.
      - "When V(false) and the default runtime is a managed runtime, the default is handed back
        (containerd: C(runc) when that runtime exists, else the key is removed; in drop-in mode the main file's
        default applies again; Docker and CRI-O: the key is removed). A default runtime naming another runtime is
        never touched. With O(runtimes), mark an entry O(runtimes[].default) instead."
    type: bool
    default: false
  cdi:
    description:
      - Enable (V(true)) or disable (V(false)) the Container Device Interface (containerd C(enable_cdi) in the CRI
        table, Docker C(features.cdi)). Not set leaves the setting as it is. CRI-O always has CDI on; ignored there.
      - O(state=absent) never changes it.
    type: bool
  state:
    description:
      - V(present) adds or refreshes the runtimes.
      - V(absent) removes the named runtimes and a default that names one of them; everything else stays. A
        drop-in (CRI-O, containerd drop-in mode) is deleted when no runtime is left in it; a symbolic link is
        deleted itself, the file it points to stays.
    type: str
    choices: [present, absent]
    default: present
  backup:
    description:
      - Keep a timestamped copy of every file before it is changed (as RV(backup_file)), beside the file (beside
        the file a symbolic link points to).
      - "CRI-O: in the directory above C(crio.conf.d), because CRI-O reads every file in that directory."
    type: bool
    default: false
  validate:
    description:
      - A command run on the new file before it replaces the old one; V(%s) stands for the new file (as in
        M(ansible.builtin.lineinfile)). When it fails the old file stays and the module fails with its output.
      - "For containerd: V(containerd --config %s config dump)."
    type: str
  config_source:
    description:
      - Where new runtimes take their options from.
      - V(file) reads the files (containerd O(path); CRI-O C(crio.conf) and the drop-in directory).
      - V(command) asks the runtime for its effective configuration (O(config_command)), so options set in
        imported files or elsewhere carry over. When the command is missing, fails or prints no TOML, the module
        warns and reads the files. Docker has no such command (C(daemon.json) is its whole configuration).
    type: str
    choices: [file, command]
    default: file
  config_command:
    description:
      - The command printing the effective configuration as TOML for O(config_source=command); V(%s) stands for
        O(path) (for k3s and RKE2 the generated C(config.toml)). It has 60 seconds.
      - "Default: V(containerd --config %s config dump) (containerd), V(crio status config) (CRI-O)."
    type: str
seealso:
  - name: NVIDIA Container Toolkit, configuring runtimes
    description: What C(nvidia-ctk runtime configure) writes.
    link: https://docs.nvidia.com/datacenter/cloud-native/container-toolkit/latest/install-guide.html
notes:
  - Files are replaced atomically (temp file in the same directory, then a rename) and keep their owner, mode and
    SELinux context; new files get mode C(0644). A file that cannot be replaced (a read-only bind mount, a read-only
    file system, an immutable file) fails with the reason, and nothing is left behind.
  - The causes of every failure message are listed in the collection's docs/container_runtime_nvidia.md.
"""

EXAMPLES = r"""
- name: Add the nvidia runtime to containerd, keeping the default runtime
  kubegpu.nvidia.container_runtime_nvidia:
    runtime: containerd
    backup: true
    validate: containerd --config %s config dump
  register: nvidia_runtime

- name: Restart containerd when the configuration changed
  ansible.builtin.systemd_service:
    name: containerd
    state: restarted
  when: nvidia_runtime.restart_required

- name: Make nvidia the default runtime of containerd 2.x with CDI, through a drop-in file
  kubegpu.nvidia.container_runtime_nvidia:
    runtime: containerd
    mode: drop_in
    set_as_default: true
    cdi: true

- name: The three runtimes of the GPU Operator in one drop-in, options as containerd itself resolves them
  kubegpu.nvidia.container_runtime_nvidia:
    runtime: containerd
    mode: drop_in
    config_source: command
    runtimes:
      - name: nvidia
        default: true
      - name: nvidia-cdi
        mode: cdi
      - name: nvidia-legacy
        mode: legacy

- name: Configure the containerd of k3s (edits config.toml.tmpl)
  kubegpu.nvidia.container_runtime_nvidia:
    runtime: containerd
    flavor: k3s

- name: Add the nvidia runtime to Docker
  kubegpu.nvidia.container_runtime_nvidia:
    runtime: docker
    runtime_path: /usr/bin/nvidia-container-runtime

- name: Remove the nvidia-legacy runtime from CRI-O again; the other runtimes stay
  kubegpu.nvidia.container_runtime_nvidia:
    runtime: crio
    runtimes:
      - name: nvidia-legacy
    state: absent
"""

RETURN = r"""
changed:
  description: Whether a file was (or, in check mode, would be) changed.
  returned: always
  type: bool
  sample: true
diff:
  description:
    - Before and after text of each changed file (one dict, or a list of two in drop-in mode).
    - Values of C(password), C(auth), C(identitytoken), C(token) and C(secret) settings and passwords in URLs show
      as C(********).
  returned: when diff mode is on and something changed
  type: raw
  sample: {"before": "version = 2\n", "after": "version = 2\n...", "before_header": "/etc/containerd/config.toml",
           "after_header": "/etc/containerd/config.toml"}
config_version:
  description: The containerd configuration version (1, 2 or 3) of O(path); null for Docker and CRI-O.
  returned: always
  type: int
  sample: 2
backup_file:
  description: The backup of O(path) made before changing it (or of the drop-in when only that changed).
  returned: when O(backup=true) and an existing file changed
  type: str
  sample: /etc/containerd/config.toml.12345.2026-01-01@10:00:00~
backup_files:
  description: Every backup made (main file and drop-in).
  returned: when O(backup=true) and an existing file changed
  type: list
  elements: str
restart_required:
  description: True when the runtime must be restarted to load the change (that is, when something changed).
  returned: always
  type: bool
  sample: true
path:
  description: The file edited (for k3s and RKE2 the template).
  returned: always
  type: str
  sample: /etc/containerd/config.toml
drop_in_path:
  description: The drop-in file (containerd O(mode=drop_in)).
  returned: when O(mode=drop_in)
  type: str
  sample: /etc/containerd/conf.d/99-nvidia.toml
flavor:
  description: The containerd distribution that was configured (V(containerd), V(k3s), V(rke2)); null for Docker and CRI-O.
  returned: always
  type: str
  sample: containerd
runtimes:
  description: The runtimes this run managed, with the binary path each got.
  returned: always
  type: list
  elements: dict
  sample: [{"name": "nvidia", "path": "/usr/bin/nvidia-container-runtime", "mode": null, "default": true},
           {"name": "nvidia-cdi", "path": "/usr/bin/nvidia-container-runtime.cdi", "mode": "cdi", "default": false}]
options_source:
  description:
    - The runtime whose table new runtimes copied (containerd, CRI-O; with O(state=present)); null when there was
      none and a bare table was written, and for Docker.
  returned: always
  type: str
  sample: runc
config_source:
  description: Where the options came from, V(command) or V(file) (also V(file) when the command could not be used).
  returned: always
  type: str
  sample: command
checksums:
  description:
    - The SHA-256 of each file the module manages (RV(path), and RV(drop_in_path) in drop-in mode) as it is after the
      run (in check mode, as it would be); null for a file that is not there.
    - The same as C(sha256sum) prints on the node, so that a later play can tell whether anything else changed the
      files since (the role C(kubegpu.nvidia.nvidia_container_toolkit) records them).
  returned: always
  type: dict
  sample: {"/etc/containerd/config.toml": "3f1c0e5b9a...", "/etc/containerd/conf.d/99-nvidia.toml": "9be2d1c7f0..."}
"""

import hashlib
import os
import shlex
import subprocess

from ansible.module_utils.basic import AnsibleModule, missing_required_lib
from ansible.module_utils.common.text.converters import to_bytes, to_text

from ansible_collections.kubegpu.nvidia.plugins.module_utils import (
    containerd_config,
    crio_config,
    docker_config,
)
from ansible_collections.kubegpu.nvidia.plugins.module_utils.config_file import (
    ConfigFileError,
    find_command,
    make_diff,
    read_text,
    remove_file,
    same_file,
    write_file,
)
from ansible_collections.kubegpu.nvidia.plugins.module_utils.errors import run_module

DEFAULT_PATHS = {
    "containerd": containerd_config.DEFAULT_PATH,
    "docker": docker_config.DEFAULT_PATH,
    "crio": crio_config.DEFAULT_PATH,
}
DEFAULT_RUNTIME_NAME = "nvidia"
DEFAULT_RUNTIME_PATH = "/usr/bin/nvidia-container-runtime"
# The binary of each nvidia-container-runtime mode, as nvidia-ctk-installer names them
# (cmd/nvidia-ctk-installer/container/operator/operator.go).
MODE_BINARIES = {None: DEFAULT_RUNTIME_PATH, "auto": DEFAULT_RUNTIME_PATH,
                 "cdi": DEFAULT_RUNTIME_PATH + ".cdi", "legacy": DEFAULT_RUNTIME_PATH + ".legacy"}
CONFIG_COMMANDS = {"containerd": "containerd --config %s config dump", "crio": "crio status config"}
CONFIG_COMMAND_TIMEOUT = 60

NEW_FILE_MODE = 0o644


class Change:
    """One file's planned change: path, old text (None: absent), new text (None: remove)."""

    def __init__(self, path, before, after, mode=NEW_FILE_MODE, backup_dir=None):
        self.path = path
        self.before = before
        self.after = after
        self.mode = mode
        self.backup_dir = backup_dir

    @property
    def changed(self):
        return self.before != self.after

    @property
    def checksum(self):
        """SHA-256 (hex) of the file after the change, as written (UTF-8); None when it is absent."""
        return None if self.after is None else hashlib.sha256(to_bytes(self.after)).hexdigest()


def managed_runtimes(params):
    """The runtimes this run manages, as a list of Runtime, from ``runtimes`` or the single-runtime options."""
    runtime = params["runtime"]
    check_name = {"docker": docker_config.check_name, "crio": crio_config.check_name}.get(
        runtime, containerd_config.check_name)
    if params["runtimes"] is not None:
        if params["set_as_default"]:
            raise ConfigFileError("set_as_default applies to runtime_name; with runtimes, mark one entry default: true")
        if not params["runtimes"]:
            raise ConfigFileError("runtimes must name at least one runtime")
        items = []
        for entry in params["runtimes"]:
            path = entry["path"] if entry["path"] is not None else MODE_BINARIES[entry["mode"]]
            items.append(containerd_config.runtime(entry["name"], path, entry["default"], entry["mode"]))
    else:
        name = params["runtime_name"]
        if name is not None and not name.strip():
            raise ConfigFileError("runtime_name must not be empty")
        path = params["runtime_path"]
        items = [containerd_config.runtime(name if name is not None else DEFAULT_RUNTIME_NAME,
                                           path if path is not None else DEFAULT_RUNTIME_PATH,
                                           params["set_as_default"])]
    seen = set()
    for item in items:
        check_name(item.name)
        if item.name in seen:
            raise ConfigFileError("runtime %s appears twice in runtimes: each name once" % containerd_config.show(item.name))
        seen.add(item.name)
        if params["state"] == "present":
            containerd_config.check_path(item.path, item.name)
    defaults = [item.name for item in items if item.default]
    if len(defaults) > 1:
        raise ConfigFileError("runtimes %s are all marked default: at most one runtime can be the default"
                              % ", ".join(containerd_config.show(n) for n in defaults))
    return items


def effective_config(module, params, path):
    """containerd's or CRI-O's own view of its configuration (config_source=command), parsed; None
    (with a warning) when the command is missing or fails: the files are read instead."""
    if params["config_source"] != "command":
        return None
    command = params["config_command"] or CONFIG_COMMANDS[params["runtime"]]
    fallback = "; runtime options are taken from the files instead"
    try:
        argv = [part.replace("%s", path or "") for part in shlex.split(command)]
    except ValueError as exc:  # shlex: an unterminated quote
        module.warn("config_source=command: config_command is not a valid command line (%s)%s" % (exc, fallback))
        return None
    binary = find_command(argv[0]) if argv else None
    if binary is None:
        module.warn("config_source=command: %s is not installed or not on PATH%s" % ((argv or [""])[0], fallback))
        return None
    argv[0] = binary
    try:
        proc = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=CONFIG_COMMAND_TIMEOUT,
                              check=False)
    except subprocess.TimeoutExpired:
        module.warn("config_source=command: %s did not answer within %d s%s"
                    % (" ".join(argv), CONFIG_COMMAND_TIMEOUT, fallback))
        return None
    except OSError as exc:
        module.warn("config_source=command: %s could not run (%s)%s" % (" ".join(argv), exc.strerror, fallback))
        return None
    if proc.returncode != 0:
        reason = to_text(proc.stderr).strip().splitlines()[-1:] or ["no output"]
        module.warn("config_source=command: %s failed (rc=%d: %s)%s"
                    % (" ".join(argv), proc.returncode, reason[0], fallback))
        return None
    try:
        return containerd_config.load(to_text(proc.stdout), "the output of %s" % " ".join(argv))
    except ConfigFileError as exc:
        module.warn("config_source=command: %s%s" % (exc.msg, fallback))
        return None


def plan_containerd(module, params, path, runtimes):
    """Work out the changes for containerd. Returns (changes, result fields)."""
    flavor = params["flavor"]
    if flavor == "auto":
        flavor = containerd_config.detect_flavor(path)
    fields = {"flavor": flavor}
    info = {}
    if flavor in ("k3s", "rke2"):
        if params["mode"] == "drop_in":
            raise ConfigFileError("mode=drop_in is not available for %s; it reads config.toml.tmpl only" % flavor)
        template, generated = containerd_config.template_paths(flavor, path)
        before = read_text(template)
        reference = read_text(generated)
        start = before
        mode = NEW_FILE_MODE
        if before is None:
            if reference is None and params["state"] == "present":
                raise ConfigFileError(
                    "%s has not generated %s yet and %s does not exist: start %s once, then run again"
                    % (flavor, generated, template, flavor))
            start = reference
            if reference is not None:
                mode = os.stat(generated).st_mode & 0o7777
        effective = effective_config(module, params, generated) if reference is not None else None
        after, version = containerd_config.edit_text(
            start, template, params["state"], runtimes, cdi=params["cdi"], reference_text=reference,
            reference_path=generated, effective=effective, info=info)
        if before is None and params["state"] == "absent":
            after = None
        fields.update(config_version=version, path=template, options_source=info.get("options_source"),
                      config_source="command" if effective is not None else "file")
        return [Change(template, before, after, mode)], fields

    main_before = read_text(path)
    effective = effective_config(module, params, path) if main_before is not None else None
    fields.update(path=path, config_source="command" if effective is not None else "file")
    if params["mode"] == "in_place":
        after, version = containerd_config.edit_text(main_before, path, params["state"], runtimes,
                                                     cdi=params["cdi"], effective=effective, info=info)
        fields.update(config_version=version, options_source=info.get("options_source"))
        return [Change(path, main_before, after)], fields

    drop_path = params["drop_in_path"]
    if same_file(drop_path, path):
        raise ConfigFileError("drop_in_path %s is the main configuration %s itself: the drop-in must be another file "
                              "(default %s)" % (drop_path, path, containerd_config.DEFAULT_DROP_IN))
    drop_before = read_text(drop_path)
    main_after, drop_after, version = containerd_config.edit_drop_in(
        main_before, path, drop_before, drop_path, params["state"], runtimes, cdi=params["cdi"],
        effective=effective, info=info)
    fields.update(config_version=version, drop_in_path=drop_path, options_source=info.get("options_source"))
    # the drop-in goes first so that the main file never imports a missing runtime
    return [Change(drop_path, drop_before, drop_after), Change(path, main_before, main_after)], fields


def plan(module, params, runtimes):
    runtime = params["runtime"]
    path = params["path"]
    if runtime == "containerd":
        return plan_containerd(module, params, path, runtimes)
    path = path or DEFAULT_PATHS[runtime]
    fields = {"path": path, "flavor": None, "config_version": None, "options_source": None,
              "config_source": "file"}
    if runtime == "docker":
        if params["config_source"] == "command":
            module.warn("config_source=command does not apply to Docker: daemon.json is its whole configuration")
        before = read_text(path)
        after = docker_config.edit_text(before, path, params["state"], runtimes, cdi=params["cdi"])
        return [Change(path, before, after)], fields
    crio_config.check_path(path)
    before = read_text(path)
    info = {}
    effective = effective_config(module, params, path) if params["state"] == "present" else None
    after = crio_config.edit_text(before, path, params["state"], runtimes, effective=effective, info=info)
    fields.update(options_source=info.get("options_source"),
                  config_source="command" if effective is not None else "file")
    # CRI-O reads every file under crio.conf.d: a backup there would be loaded after the drop-in
    backup_dir = os.path.dirname(os.path.dirname(os.path.abspath(path)))
    return [Change(path, before, after, backup_dir=backup_dir)], fields


def apply_changes(module, changes):
    """Write every changed file; when a later file fails, put the earlier ones back."""
    backups = {}
    done = []
    params = module.params
    try:
        for change in changes:
            if not change.changed:
                continue
            if change.after is None:
                backup = remove_file(module, change.path, params["backup"], backup_dir=change.backup_dir)
            else:
                backup = write_file(module, change.path, change.after, validate=params["validate"],
                                    backup=params["backup"], mode=change.mode, backup_dir=change.backup_dir)
            done.append(change)
            if backup:
                backups[change.path] = backup
    except ConfigFileError:
        for change in reversed(done):
            if change.before is None:
                remove_file(module, change.path)
            else:
                write_file(module, change.path, change.before)
        raise
    return backups


def run(module):
    params = module.params
    runtimes = managed_runtimes(params)
    if params["runtime"] == "containerd" and not params["path"] and params["flavor"] in ("auto", "containerd"):
        if params["flavor"] == "auto":
            flavor = containerd_config.detect_flavor()
            if flavor != "containerd":
                params["flavor"] = flavor
        if params["flavor"] in ("auto", "containerd"):
            params["path"] = containerd_config.DEFAULT_PATH
    changes, fields = plan(module, params, runtimes)
    if params["state"] == "present":
        for item in runtimes:
            if not os.path.exists(item.path):
                module.warn("the binary of runtime %s, %s%s, is not on the node (yet): containers of that runtime "
                            "cannot start until an installed NVIDIA Container Toolkit provides it"
                            % (item.name, item.path, " (mode %s)" % item.mode if item.mode else ""))
    changed = any(c.changed for c in changes)
    result = dict(changed=changed, restart_required=changed)
    result.update(fields)
    result["runtimes"] = [dict(name=r.name, path=r.path, mode=r.mode, default=r.default) for r in runtimes]
    result["checksums"] = dict((c.path, c.checksum) for c in changes)
    if module._diff and changed:
        diffs = [make_diff(c.path, c.before, c.after) for c in changes if c.changed]
        result["diff"] = diffs[0] if len(diffs) == 1 else diffs
    if changed and not module.check_mode:
        backups = apply_changes(module, changes)
        if backups:
            result["backup_file"] = backups.get(result["path"]) or list(backups.values())[0]
            result["backup_files"] = list(backups.values())
    return result


def main():
    module = AnsibleModule(
        argument_spec=dict(
            runtime=dict(type="str", required=True, choices=["containerd", "docker", "crio"]),
            path=dict(type="path"),
            mode=dict(type="str", default="in_place", choices=["in_place", "drop_in"]),
            drop_in_path=dict(type="path", default=containerd_config.DEFAULT_DROP_IN),
            flavor=dict(type="str", default="auto", choices=["auto", "containerd", "k3s", "rke2"]),
            runtime_name=dict(type="str"),
            runtime_path=dict(type="path"),
            runtimes=dict(type="list", elements="dict", options=dict(
                name=dict(type="str", required=True),
                path=dict(type="path"),
                mode=dict(type="str", choices=["auto", "cdi", "legacy"]),
                default=dict(type="bool", default=False),
            )),
            set_as_default=dict(type="bool", default=False),
            cdi=dict(type="bool"),
            state=dict(type="str", default="present", choices=["present", "absent"]),
            backup=dict(type="bool", default=False),
            validate=dict(type="str"),
            config_source=dict(type="str", default="file", choices=["file", "command"]),
            config_command=dict(type="str"),
        ),
        mutually_exclusive=[("runtimes", "runtime_name"), ("runtimes", "runtime_path")],
        supports_check_mode=True,
    )
    if module.params["runtime"] in ("containerd", "crio") and not containerd_config.HAS_TOMLKIT:
        module.fail_json(msg=missing_required_lib("tomlkit (python3-tomlkit)"), error_kind="dependency",
                         exception=containerd_config.TOMLKIT_IMPORT_ERROR)
    run_module(module, run)


if __name__ == "__main__":
    main()
