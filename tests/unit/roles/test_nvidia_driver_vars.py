"""Packages and repositories kubegpu.nvidia.nvidia_driver renders for each OS family and version.

The role's defaults, vars/main.yml and the distribution's vars file (picked with the same
first_found candidates as tasks/main.yml) are templated with Ansible's templar for the
facts of each supported platform; the deb822 sources file is rendered from the role's template.
"""
import os

import pytest
import yaml
from ansible.parsing.dataloader import DataLoader

import role_render

ROLE_DIR = os.path.join(role_render.ROLES, "nvidia_driver")

PLATFORMS = {
    "ubuntu2204": {"distribution": "Ubuntu", "os_family": "Debian", "distribution_major_version": "22",
                   "distribution_version": "22.04", "distribution_release": "jammy",
                   "architecture": "x86_64", "kernel": "5.15.0-126-generic"},
    "ubuntu2404": {"distribution": "Ubuntu", "os_family": "Debian", "distribution_major_version": "24",
                   "distribution_version": "24.04", "distribution_release": "noble",
                   "architecture": "x86_64", "kernel": "6.8.0-49-generic"},
    "debian12": {"distribution": "Debian", "os_family": "Debian", "distribution_major_version": "12",
                 "distribution_version": "12.8", "distribution_release": "bookworm",
                 "architecture": "x86_64", "kernel": "6.1.0-28-amd64"},
    "rhel8": {"distribution": "RedHat", "os_family": "RedHat", "distribution_major_version": "8",
              "distribution_version": "8.10", "distribution_release": "Ootpa",
              "architecture": "x86_64", "kernel": "4.18.0-553.el8_10.x86_64"},
    "rocky9": {"distribution": "Rocky", "os_family": "RedHat", "distribution_major_version": "9",
               "distribution_version": "9.5", "distribution_release": "Blue Onyx",
               "architecture": "x86_64", "kernel": "5.14.0-503.14.1.el9_5.x86_64"},
}
CUDA = "https://developer.download.nvidia.com/compute/cuda/repos"


def vars_file(facts):
    """The vars file tasks/main.yml's first_found picks for these facts."""
    with open(os.path.join(ROLE_DIR, "tasks", "main.yml"), encoding="utf-8") as handle:
        tasks = yaml.safe_load(handle)
    task = next(t for t in tasks if t["name"] == "Load the variables for this distribution")
    candidates = task["ansible.builtin.include_vars"]["file"]
    assert "first_found" in candidates
    names = task["vars"]["_nvidia_driver_vars_candidates"]["files"]
    for name in names:
        path = os.path.join(ROLE_DIR, "vars", role_render.render("nvidia_driver", name, {"ansible_facts": facts}))
        if os.path.exists(path):
            return path
    raise AssertionError("no vars file for %s" % facts)


def render(platform, expression, overrides=None, facts=None):
    facts = dict(PLATFORMS[platform], **(facts or {}))
    # loaded as include_vars loads it: trusted as templates, as the role's own files are
    distro_vars = DataLoader().load_from_file(vars_file(facts), trusted_as_template=True)
    variables = dict(distro_vars, ansible_facts=facts, inventory_hostname="gpu1", ansible_managed="Ansible managed")
    variables.update(overrides or {})
    # a machine with kernel images of its own in /boot (a container has none: see the container test)
    info = dict(variables.get("_nvidia_driver_info") or {})
    info["kernel"] = dict({"installed": [facts["kernel"]]}, **(info.get("kernel") or {}))
    variables["_nvidia_driver_info"] = info
    return role_render.render("nvidia_driver", expression, variables)


@pytest.mark.parametrize("platform,expected", [
    ("ubuntu2204", "Ubuntu.yml"), ("ubuntu2404", "Ubuntu.yml"), ("debian12", "Debian.yml"),
    ("rhel8", "RedHat.yml"), ("rocky9", "RedHat.yml")])
def test_vars_file_per_distribution(platform, expected):
    assert os.path.basename(vars_file(PLATFORMS[platform])) == expected
    assert render(platform, "{{ _nvidia_driver_supported and ansible_facts.distribution_major_version "
                            "in _nvidia_driver_supported_versions }}") is True


def test_unsupported_distribution_gets_the_refusing_vars_file():
    facts = dict(PLATFORMS["debian12"], distribution="Archlinux", os_family="Archlinux")
    assert os.path.basename(vars_file(facts)) == "default.yml"


# ------------------------------------------------------------------ Ubuntu
def test_ubuntu_defaults_to_the_open_server_driver_of_branch_580():
    assert render("ubuntu2204", "{{ _nvidia_driver_packages }}") == [
        "nvidia-driver-580-server-open", "linux-headers-5.15.0-126-generic"]
    assert render("ubuntu2204", "{{ _nvidia_driver_apt_repositories }}") == []


def decided(flavour, precompiled=False, **more):
    """What tasks/main.yml keeps of the plan (filter nvidia_driver_plan) for the package lists."""
    return {"_nvidia_driver_decided": dict({"flavour": flavour, "precompiled": precompiled, "error": ""}, **more)}


def test_ubuntu_proprietary_branch_pinned_version_and_fabric_manager():
    # the bug fix: Fabric Manager is pinned to the driver's version like the driver
    packages = render("ubuntu2404", "{{ _nvidia_driver_packages }}", dict(decided("proprietary"), **{
        "nvidia_driver_version": "570.195.03",
        "nvidia_driver_fabric_manager": True, "nvidia_driver_extra_packages": ["nvidia-utils-570-server"]}))
    assert packages == ["nvidia-driver-570-server=570.195.03*", "nvidia-fabricmanager-570=570.195.03*",
                        "linux-headers-6.8.0-49-generic", "nvidia-utils-570-server"]


def test_ubuntu_branch_install_pins_to_the_resolved_version():
    over = dict(decided("open"), nvidia_driver_fabric_manager=True,
                _nvidia_driver_resolved={"version": "580.95.05", "error": ""})
    assert render("ubuntu2204", "{{ _nvidia_driver_packages[:2] }}", over) == [
        "nvidia-driver-580-server-open=580.95.05*", "nvidia-fabricmanager-580=580.95.05*"]
    assert render("ubuntu2204", "{{ _nvidia_driver_resolvable }}", over) == [
        "nvidia-driver-580-server-open", "nvidia-fabricmanager-580"]


def test_ubuntu_headers_for_the_running_and_the_next_kernel():
    over = {"_nvidia_driver_info": {"kernel": {"next": "6.8.0-51-generic"}}}
    assert render("ubuntu2404", "{{ _nvidia_driver_packages }}", over) == [
        "nvidia-driver-580-server-open", "linux-headers-6.8.0-49-generic", "linux-headers-6.8.0-51-generic"]
    assert render("ubuntu2404", "{{ _nvidia_driver_next_kernel_packages }}", over) == ["linux-headers-6.8.0-51-generic"]


@pytest.mark.parametrize("flavour,suffix", [("open", "-open"), ("proprietary", "")])
def test_ubuntu_secure_boot_takes_the_signed_precompiled_modules(flavour, suffix):
    over = dict(decided(flavour, precompiled=True), nvidia_driver_version="570.195.03",
                _nvidia_driver_info={"kernel": {"next": "6.8.0-51-generic"}})
    assert render("ubuntu2404", "{{ _nvidia_driver_packages }}", over) == [
        "nvidia-headless-no-dkms-570-server%s=570.195.03*" % suffix, "nvidia-utils-570-server=570.195.03*",
        "linux-modules-nvidia-570-server%s-generic" % suffix,
        "linux-modules-nvidia-570-server%s-6.8.0-49-generic" % suffix]
    # a kernel update: its precompiled modules, no headers
    assert render("ubuntu2404", "{{ _nvidia_driver_next_kernel_packages }}", over) == [
        "linux-modules-nvidia-570-server%s-6.8.0-51-generic" % suffix]
    assert render("ubuntu2404", "{{ _nvidia_driver_precompiled_offered | sort }}", over) == ["open", "proprietary"]


def test_ubuntu_kernel_flavour_of_the_precompiled_meta_package():
    over = decided("open", precompiled=True)
    aws = {"kernel": "6.8.0-1015-aws"}
    assert render("ubuntu2404", "{{ _nvidia_driver_ubuntu_flavour }}", over, aws) == "aws"
    assert render("ubuntu2404", "{{ _nvidia_driver_ubuntu_flavour }}", dict(
        over, nvidia_driver_ubuntu_kernel_flavour="generic-hwe-22.04")) == "generic-hwe-22.04"


@pytest.mark.parametrize("platform,slug", [("ubuntu2204", "ubuntu2204"), ("ubuntu2404", "ubuntu2404")])
def test_ubuntu_cuda_repository(platform, slug):
    over = {"nvidia_driver_source": "cuda", "nvidia_driver_branch": "580"}
    assert render(platform, "{{ _nvidia_driver_packages[0] }}", over) == "nvidia-open-580"
    repos = render(platform, "{{ _nvidia_driver_apt_repositories }}", over)
    assert repos == [{"name": "kubegpu-nvidia-cuda", "enabled": True, "uris": "%s/%s/x86_64/" % (CUDA, slug),
                      "suites": ["/"], "components": [], "signed_by": "%s/%s/x86_64/3bf863cc.pub" % (CUDA, slug)}]
    assert render(platform, "{{ _nvidia_driver_apt_keys_to_store | map(attribute='name') }}", over) == [
        "kubegpu-nvidia-cuda"]
    sources = render(platform, "{{ lookup('ansible.builtin.template', 'repository.sources.j2') }}",
                     dict(over, item=repos[0]))
    assert sources.splitlines()[2:] == [
        "Types: deb", "URIs: %s/%s/x86_64/" % (CUDA, slug), "Suites: /",
        "Signed-By: /etc/apt/keyrings/kubegpu-nvidia-cuda.asc"]


def test_ubuntu_cuda_proprietary_on_arm_uses_sbsa():
    over = dict(decided("proprietary"), nvidia_driver_source="cuda")
    facts = {"architecture": "aarch64"}
    assert render("ubuntu2204", "{{ _nvidia_driver_packages[0] }}", over, facts) == "cuda-drivers-580"
    assert render("ubuntu2204", "{{ _nvidia_driver_cuda_repo_url }}", over, facts) == CUDA + "/ubuntu2204/sbsa/"


# ------------------------------------------------------------------ Debian
def test_debian_installs_non_free_driver_firmware_headers_and_persistenced():
    assert render("debian12", "{{ _nvidia_driver_packages }}") == [
        "nvidia-driver", "nvidia-kernel-dkms", "firmware-misc-nonfree", "nvidia-persistenced", "linux-headers-amd64",
        "linux-headers-6.1.0-28-amd64"]
    assert render("debian12", "{{ _nvidia_driver_precompiled_offered }}") == []
    assert render("debian12", "{{ _nvidia_driver_branch }}") == "535"
    repos = render("debian12", "{{ _nvidia_driver_apt_repositories }}")
    assert repos == [{"name": "kubegpu-debian-non-free", "enabled": True, "uris": "http://deb.debian.org/debian",
                      "suites": ["bookworm"], "components": ["non-free", "non-free-firmware"], "signed_by": ""}]
    sources = render("debian12", "{{ lookup('ansible.builtin.template', 'repository.sources.j2') }}",
                     {"item": repos[0]})
    assert sources.splitlines()[2:] == ["Types: deb", "URIs: http://deb.debian.org/debian", "Suites: bookworm",
                                        "Components: non-free non-free-firmware"]
    assert render("debian12", "{{ _nvidia_driver_apt_keys_to_store }}") == []
    assert render("debian12", "{{ _nvidia_driver_initramfs_command }}") == ["update-initramfs", "-u", "-k", "all"]


def test_debian_pinned_open_modules_without_headers():
    packages = render("debian12", "{{ _nvidia_driver_packages }}", dict(decided("open"), **{
        "nvidia_driver_version": "535.183.01",
        "nvidia_driver_kernel_headers": False, "nvidia_driver_persistenced": False}))
    assert packages == ["nvidia-driver=535.183.01*", "nvidia-open-kernel-dkms=535.183.01*", "firmware-misc-nonfree"]


def test_a_node_without_a_kernel_image_of_its_own_gets_no_headers_for_its_host_s_kernel():
    # a container: its running kernel is its host's, which it can neither get headers for nor build against
    over = {"_nvidia_driver_info": {"kernel": {"installed": [], "next": "6.18.44-host"}}}
    assert render("debian12", "{{ _nvidia_driver_kernels }}", over) == []
    assert render("debian12", "{{ _nvidia_driver_header_packages }}", over) == ["linux-headers-amd64"]
    assert render("ubuntu2404", "{{ _nvidia_driver_header_packages }}", over) == []
    assert render("debian12", "{{ _nvidia_driver_check_kernels }}", over) is False


def test_debian_headers_for_the_kernel_that_boots_next():
    over = {"_nvidia_driver_info": {"kernel": {"next": "6.1.0-31-amd64"}}}
    assert render("debian12", "{{ _nvidia_driver_packages[-3:] }}", over) == [
        "linux-headers-amd64", "linux-headers-6.1.0-28-amd64", "linux-headers-6.1.0-31-amd64"]
    assert render("debian12", "{{ _nvidia_driver_next_kernel_packages }}", over) == ["linux-headers-6.1.0-31-amd64"]
    assert render("debian12", "{{ _nvidia_driver_next_kernel_packages }}",
                  dict(over, nvidia_driver_kernel_headers=False)) == []


def test_debian_air_gapped_mirror_with_its_key():
    over = {"nvidia_driver_debian_repo_url": "https://mirror.example.internal/debian",
            "nvidia_driver_debian_repo_suites": ["bookworm", "bookworm-updates"],
            "nvidia_driver_debian_repo_key": "https://mirror.example.internal/key.asc"}
    repo = render("debian12", "{{ _nvidia_driver_apt_repositories[0] }}", over)
    assert render("debian12", "{{ _nvidia_driver_apt_keys_to_store | map(attribute='signed_by') }}", over) == [
        "https://mirror.example.internal/key.asc"]
    sources = render("debian12", "{{ lookup('ansible.builtin.template', 'repository.sources.j2') }}",
                     dict(over, item=repo))
    assert "URIs: https://mirror.example.internal/debian" in sources.splitlines()
    assert "Suites: bookworm bookworm-updates" in sources.splitlines()
    assert "Signed-By: /etc/apt/keyrings/kubegpu-debian-non-free.asc" in sources.splitlines()
    # a keyring already on the node is referenced where it is, not copied
    over["nvidia_driver_debian_repo_key"] = "/usr/share/keyrings/mirror.gpg"
    repo = render("debian12", "{{ _nvidia_driver_apt_repositories[0] }}", over)
    assert render("debian12", "{{ _nvidia_driver_apt_keys_to_store }}", over) == []
    assert "Signed-By: /usr/share/keyrings/mirror.gpg" in render(
        "debian12", "{{ lookup('ansible.builtin.template', 'repository.sources.j2') }}", dict(over, item=repo))


def test_debian_repository_left_alone_when_not_managed():
    over = {"nvidia_driver_debian_repo_manage": False}
    assert render("debian12", "{{ _nvidia_driver_apt_repositories | selectattr('enabled') | list }}", over) == []


def test_debian_cuda_repository():
    over = {"nvidia_driver_source": "cuda", "nvidia_driver_cuda_repo_base_url": "http://mirror.internal/cuda/repos/"}
    assert render("debian12", "{{ _nvidia_driver_packages }}", over) == [
        "cuda-drivers-535", "linux-headers-amd64", "linux-headers-6.1.0-28-amd64"]
    assert render("debian12", "{{ _nvidia_driver_apt_repositories[0].uris }}", over) == \
        "http://mirror.internal/cuda/repos/debian12/x86_64/"


# ------------------------------------------------------------------ RHEL / Rocky
@pytest.mark.parametrize("platform,major", [("rhel8", "8"), ("rocky9", "9")])
def test_redhat_uses_the_cuda_repository_and_the_open_module_stream(platform, major):
    kernel = PLATFORMS[platform]["kernel"]
    assert render(platform, "{{ _nvidia_driver_source }}") == "cuda"
    assert render(platform, "{{ _nvidia_driver_packages }}") == [
        "@nvidia-driver:580-open", "python3-dnf-plugin-versionlock", "nvidia-persistenced", "kernel-devel-" + kernel,
        "kernel-headers-" + kernel]
    assert render(platform, "{{ _nvidia_driver_yum_repositories }}") == [{
        "name": "kubegpu-nvidia-cuda", "description": "NVIDIA CUDA repository",
        "baseurl": "%s/rhel%s/x86_64/" % (CUDA, major), "gpgkey": "%s/rhel%s/x86_64/D42D0685.pub" % (CUDA, major)}]
    assert render(platform, "{{ _nvidia_driver_initramfs_command }}") == ["dracut", "--force", "--regenerate-all"]


@pytest.mark.parametrize("platform", ["rhel8", "rocky9"])
def test_redhat_dkms_stream_exact_open_version_and_mirror(platform):
    assert render(platform, "{{ _nvidia_driver_packages[0] }}", dict(
        decided("proprietary"), nvidia_driver_branch="570")) == "@nvidia-driver:570-dkms"
    assert render(platform, "{{ _nvidia_driver_packages[0] }}", {
        "nvidia_driver_version": "580.95.05"}) == "nvidia-open-580.95.05"
    repo = render(platform, "{{ _nvidia_driver_yum_repositories[0] }}", {
        "nvidia_driver_cuda_repo_url": "https://mirror.internal/cuda/el/",
        "nvidia_driver_cuda_repo_key": "https://mirror.internal/cuda/key.pub"})
    assert (repo["baseurl"], repo["gpgkey"]) == ("https://mirror.internal/cuda/el/", "https://mirror.internal/cuda/key.pub")
    # Fabric Manager at the driver's version: the exact one, else the package that ties it to the branch's driver
    fabric = {"nvidia_driver_fabric_manager": True, "nvidia_driver_kernel_headers": False}
    assert render(platform, "{{ _nvidia_driver_pinned_names }}", fabric) == [
        "@nvidia-driver:580-open", "cuda-drivers-fabricmanager-580"]
    assert render(platform, "{{ _nvidia_driver_pinned_names }}", dict(fabric, nvidia_driver_version="580.95.05")) == [
        "nvidia-open-580.95.05", "nvidia-fabric-manager-580.95.05"]
    assert render(platform, "{{ _nvidia_driver_pin }}", dict(fabric, nvidia_driver_version="580.95.05")) == ""


@pytest.mark.parametrize("platform", ["rhel8", "rocky9"])
def test_redhat_precompiled_stream_for_the_proprietary_modules(platform):
    over = dict(decided("proprietary", precompiled=True), nvidia_driver_branch="570")
    assert render(platform, "{{ _nvidia_driver_packages }}", over) == ["@nvidia-driver:570", "nvidia-persistenced"]
    assert render(platform, "{{ _nvidia_driver_precompiled_offered }}", over) == ["proprietary"]
    assert render(platform, "{{ _nvidia_driver_next_kernel_packages }}", dict(
        over, _nvidia_driver_info={"kernel": {"next": "5.14.0-570.el9.x86_64"}})) == []
    dkms = dict(decided("open"), _nvidia_driver_info={"kernel": {"next": "5.14.0-570.el9.x86_64"}})
    assert render(platform, "{{ _nvidia_driver_next_kernel_packages }}", dkms) == ["kernel-devel-5.14.0-570.el9.x86_64"]


# ------------------------------------------------------------------ decisions
GPU = {"present": True, "count": 8, "source": "nvml", "driver_version": "535.183.01"}


@pytest.mark.parametrize("gpu,over,loaded", [
    (GPU, {"nvidia_driver_version": "535.183.01"}, True),
    (GPU, {"nvidia_driver_version": "535.216.01"}, False),
    (GPU, {}, True),                                   # Debian's default branch 535
    (GPU, {"nvidia_driver_branch": "550"}, False),
    (dict(GPU, driver_version=None), {}, False),       # installed, not loaded
    ({"present": False, "count": 0, "source": "none", "driver_version": None}, {}, False),
    (None, {}, False),
])
def test_wanted_driver_loaded(gpu, over, loaded):
    facts = {"nvidia_gpu": gpu} if gpu else {}
    assert render("debian12", "{{ _nvidia_driver_now_loaded | bool }}", over, facts) is loaded
    assert render("debian12", "{{ _nvidia_driver_plan.install }}", over, facts) is not loaded


def test_the_plan_gets_the_roles_settings():
    """The filter sees the variables as the role names them (the decisions themselves: test_driver_plan.py)."""
    b200 = {"present": True, "count": 8, "driver_version": None,
            "devices": [{"name": None, "pci_device_id": "0x290110DE", "compute_capability": None}]}
    facts = {"nvidia_gpu": b200}
    assert render("debian12", "{{ _nvidia_driver_plan.error }}", {}, facts) == (
        "driver branch 535 cannot drive NVIDIA B200 (0x2901, blackwell): the lowest branch that supports it is 570")
    plan = render("debian12", "{{ _nvidia_driver_plan }}", {"nvidia_driver_version": "570.195.03"}, facts)
    assert (plan["flavour"], plan["branch"], plan["install"]) == ("open", "570", True)
    # the older variable still wins
    plan = render("ubuntu2204", "{{ _nvidia_driver_plan }}", {"nvidia_driver_kernel_modules": "proprietary"},
                  {"nvidia_gpu": GPU})
    assert plan["flavour"] == "proprietary"
    assert render("ubuntu2204", "{{ _nvidia_driver_plan.error }}", {"nvidia_driver_kernel_module_type": "proprietary",
                                                                    "nvidia_driver_mok_key": "/nonexistent.key",
                                                                    "nvidia_driver_mok_cert": "/nonexistent.pem"},
                  {"nvidia_gpu": GPU}) == "nvidia_driver_mok_key: /nonexistent.key does not exist on the controller"


@pytest.mark.parametrize("virt,role,conn,host,blocker", [
    ("docker", "guest", "community.docker.docker", "gpu1", "the node is a container (docker)"),
    ("kvm", "guest", "ssh", "gpu1", ""),
    ("kvm", "guest", "local", "gpu1", "Ansible runs on the node itself (local connection)"),
    ("", "", "ssh", "localhost", "Ansible runs on the node itself (local connection)"),
])
def test_reboot_blockers(virt, role, conn, host, blocker):
    facts = {"virtualization_type": virt, "virtualization_role": role}
    over = {"ansible_connection": conn, "inventory_hostname": host}
    assert render("debian12", "{{ _nvidia_driver_reboot_blocker }}", over, facts) == blocker
    assert render("debian12", "{{ _nvidia_driver_reboot_blocker }}",
                  dict(over, nvidia_driver_reboot=False), facts) == (blocker or "nvidia_driver_reboot is false")


FACTS_STATE = {"installed": {"nvidia-driver": "570.172.08-1"}, "kernel": {"next": "6.1.0-28-amd64", "installed": []}}


def preflight_options():
    """The driver options the preflight role's facts task reads with by default."""
    return role_render.render("preflight", "{{ preflight_driver_options }}")


@pytest.mark.parametrize("overrides, from_facts", [
    # the facts play of this run read the state with the preflight's default options: taken
    ({}, True),
    # the role's second run in the same playbook, or switched off: it reads the node itself
    ({"_nvidia_driver_node_read_used": True}, False),
    ({"nvidia_driver_state_from_facts": False}, False),
    # other EFI variables than the facts read
    ({"nvidia_driver_efivars_dir": "/tmp/efivars"}, False),
])
def test_the_role_takes_the_driver_state_of_this_runs_facts(overrides, from_facts):
    state = dict(FACTS_STATE, options=preflight_options())
    over = dict({"preflight_node_facts": {"ansible_facts": {"nvidia_gpu": {"driver_state": state}}}}, **overrides)
    found = render("debian12", "{{ _nvidia_driver_facts_state }}", over)
    assert found == (FACTS_STATE if from_facts else None)


def test_without_the_facts_play_the_role_reads_the_node():
    # the role run alone: no preflight result (a driver state in the fact cache is not this run's)
    over = {"ansible_facts": dict(PLATFORMS["debian12"], nvidia_gpu={"driver_state": dict(
        FACTS_STATE, options=preflight_options())})}
    assert render("debian12", "{{ _nvidia_driver_facts_state }}", over) is None
    # the read then has the options the facts would need
    options = render("debian12", "{{ _nvidia_driver_read_options }}")
    assert options["read_files"] == preflight_options()["read_files"]
    assert options["efivars_dir"] == preflight_options()["efivars_dir"]
