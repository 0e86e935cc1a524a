# -*- coding: utf-8 -*-
# Copyright: kubegpu.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type


class ModuleDocFragment:
    """Options of the GPU facts modules (nvidia_gpu_facts, nvidia_gpu_host_facts)."""

    DOCUMENTATION = r"""
options:
  require:
    description:
      - Fail when no usable GPU and driver are found, that is when the facts come from the
        V(pci) source (GPUs without a usable driver) or from V(none).
      - The failure's C(error_kind) is V(timeout) when a source was given up because it ran out of time
        (O(nvml_timeout), O(command_timeout)), else V(runtime).
    type: bool
    default: false
  mig_strategy:
    description:
      - MIG strategy of the device plugin, used for C(ansible_facts.nvidia_gpu.labels)
        exactly as GPU Feature Discovery applies it.
      - V(none) labels full GPUs only, V(single) and V(mixed) add C(nvidia.com/mig.strategy).
      - V(single) labels the MIG devices as C(nvidia.com/gpu) when every GPU is MIG-enabled and holds
        MIG devices of one profile, else GPU Feature Discovery's C(<model>-MIG-INVALID) labels (also when
        the MIG devices are not known, with facts from C(nvidia-smi) or the PCI bus).
      - V(mixed) adds C(nvidia.com/mig-<profile>.product|count|replicas|memory|slices.gi|slices.ci) per MIG
        profile.
    type: str
    choices: [none, single, mixed]
    default: none
  sharing_strategy:
    description:
      - GPU sharing configured in the device plugin, used for the labels C(nvidia.com/gpu.sharing-strategy)
        and C(nvidia.com/gpu.product) (suffix C(-SHARED)) when O(replicas) is above 1.
    type: str
    choices: [none, time-slicing, mps]
    default: none
  replicas:
    description:
      - Replicas per GPU configured for sharing, used for the label C(nvidia.com/gpu.replicas).
      - Must be 1 when O(sharing_strategy=none).
    type: int
    default: 1
  command_timeout:
    description:
      - Seconds each external command (C(nvidia-smi), C(mokutil)) may run. A command still running then
        is stopped (its whole process group), and the module warns and goes on with the next source.
      - At least 1.
    type: int
    default: 10
  nvml_timeout:
    description:
      - Seconds the NVML session (initialisation, every query, shutdown) may take. A driver or GPU that does
        not answer by then is given up, with a warning, for the next source.
      - NVML calls cannot be interrupted; the call keeps waiting in a thread of the module process until
        that process ends (right after the module returns).
      - NVML can take several seconds per GPU to initialise when the driver is not kept loaded
        (C(nvidia-persistenced) not running); raise this on large nodes without persistence.
      - At least 1.
    type: int
    default: 30
  gather_subset:
    description:
      - Also gather these subsets of Ansible's own host facts in the same run, with the collectors, subset
        rules and names of M(ansible.builtin.setup) (for example C(ansible_facts.distribution)).
      - A play that needs a few host facts as well as the GPU facts then makes one module run per host instead
        of two; the C(kubegpu.nvidia.site) playbook gathers its facts this way.
      - As for M(ansible.builtin.setup), the minimal subset is added unless the list holds V(!min);
        V([]) (the default) gathers no host facts.
      - M(kubegpu.nvidia.nvidia_gpu_facts) runs M(kubegpu.nvidia.nvidia_gpu_host_facts) for this (its action
        plugin picks it), so that a run without host facts does not carry their collectors.
      - The entry V(health) is not a host fact subset; it adds the GPU health to the facts as
        C(ansible_facts.nvidia_gpu.health), what M(kubegpu.nvidia.nvidia_gpu_health) returns as
        RV(kubegpu.nvidia.nvidia_gpu_health#module:health) (the same code, in the same module run), with the options
        O(health_options). It is read only when the GPU facts come from NVML; otherwise (no GPU, no driver yet) its C(severity) is V(unknown) with the reason,
        and the health gate (role C(kubegpu.nvidia.gpu_health)) leaves that node as it is. V(health) alone
        needs no host fact collector.
      - The entry V(driver) is not a host fact subset either; it adds the node's driver state as
        C(ansible_facts.nvidia_gpu.driver_state), what M(kubegpu.nvidia.nvidia_driver_info) returns (the same
        code, in the same module run) for the options O(driver_options), and under C(options) the options it was
        read with (the role C(kubegpu.nvidia.nvidia_driver) uses this state instead of reading the node again
        when these are the options it reads with). V(driver) needs no host fact collector.
      - The entry V(toolkit) adds the node's NVIDIA Container Toolkit state as
        C(ansible_facts.nvidia_gpu.toolkit_state), read without options, as M(kubegpu.nvidia.nvidia_container_toolkit_info)
        reads (the same code) with its defaults (installed toolkit packages, the container runtimes' and CDI units,
        the repository files, apt's index of that repository, the runtime configuration record, k3s/RKE2, the CDI
        specification), the OS family from the package manager, and under C(options) what was read. The filter
        C(kubegpu.nvidia.toolkit_plan) decides from it what that module would return; C(error) (one line) replaces
        the state where the node cannot be read. V(toolkit) needs no host fact collector.
    type: list
    elements: str
    default: []
  health_options:
    description:
      - With V(health) in O(gather_subset), the options of the health read, as M(kubegpu.nvidia.nvidia_gpu_health)
        takes them (C(kernel_log), C(kernel_log_path), C(since), C(ignore_xids), C(unknown_xid_severity),
        C(thresholds), C(nvml_timeout), C(command_timeout)); unset ones keep that module's defaults
        (C(nvml_timeout) this module's O(nvml_timeout)).
      - A bad option fails the task with one line before anything is read; set without V(health) in
        O(gather_subset), it is refused.
    type: dict
    default: {}
  driver_options:
    description:
      - With V(driver) in O(gather_subset), the options of the driver state read, as
        M(kubegpu.nvidia.nvidia_driver_info) takes them (C(packages), C(available), C(mok_certificate),
        C(read_files), C(efivars_dir)); unset ones keep that module's defaults.
      - A bad option fails the task with one line before anything is read; set without V(driver) in
        O(gather_subset), it is refused.
    type: dict
    default: {}
  gather_timeout:
    description:
      - Seconds each host fact collector may take (as for M(ansible.builtin.setup)). At least 1.
    type: int
    default: 10
requirements:
  - The Python library C(pynvml) (PyPI C(nvidia-ml-py), Debian C(python3-pynvml)) on the target
    for the V(nvml) source. Without it the module falls back to C(nvidia-smi) and warns.
notes:
  - Label values follow GPU Feature Discovery's sanitising; C(nvidia.com/gpu.machine) is also
    sanitised so that every value is a valid Kubernetes label value.
  - With several GPU models on one node, the model of the lowest-index GPU names the
    C(nvidia.com/gpu.*) labels and the module warns (GPU Feature Discovery picks one model too).
  - C(nvidia-smi) does not report the CUDA driver version, so that source leaves
    C(ansible_facts.nvidia_gpu.cuda_driver_version) V(null).
  - A string from the driver or from C(nvidia-smi) that is not valid UTF-8 (a corrupt board name) is decoded
    with U+FFFD for each invalid byte, and a warning shows the raw bytes.
"""
