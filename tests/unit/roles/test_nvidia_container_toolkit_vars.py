"""What the nvidia_container_toolkit role reads from its one probe of a node.

The probe (tasks/node.yml) prints, on Debian, dpkg-query's lines, then the apt source file's mode,
owner and content, then the signing key's mode and owner, then (every family) systemctl's states of
the container runtimes' services; the role skips writing the key and the source when they are in
place, installs only the packages that are missing or at another version, and picks the runtimes.
"""
import hashlib
import os
import subprocess

import pytest
import yaml
from ansible.parsing.dataloader import DataLoader

import role_render

DEBIAN_VARS = os.path.join(role_render.ROLES, "nvidia_container_toolkit", "vars", "Debian.yml")
URL = "http://mirror.example/stable/deb/$(ARCH)"
SOURCE = ["644 root root",
          "# Managed by kubegpu.nvidia.nvidia_container_toolkit",
          "deb [signed-by=/etc/apt/keyrings/nvidia-container-toolkit.asc] %s /" % URL]
PACKAGES = ["nvidia-container-toolkit ii  1.17.8-1", "nvidia-container-toolkit-base ii  1.17.8-1",
            "libnvidia-container-tools ii  1.17.8-1", "libnvidia-container1 ii  1.17.8-1",
            "python3-tomlkit ii  0.11.7-1"]


UNITS = ["LoadState=loaded", "ActiveState=active", "UnitFileState=enabled", "",
         "LoadState=not-found", "ActiveState=inactive", "UnitFileState="]


def probe(packages=None, source=None, key=("present 644 root root",), units=None):
    lines = list(PACKAGES if packages is None else packages) + ["### source"]
    lines += list(SOURCE if source is None else source) + ["### key"] + list(key)
    return lines + ["### units"] + list(UNITS if units is None else units)


def render(expression, lines, **overrides):
    variables = DataLoader().load_from_file(DEBIAN_VARS, trusted_as_template=True)
    variables.update({"nvidia_container_toolkit_repo_deb_url": URL,
                      "_nvidia_container_toolkit_probe": {"stdout_lines": lines}}, **overrides)
    return role_render.render("nvidia_container_toolkit", expression, variables)


def test_everything_in_place_skips_the_writes():
    lines = probe()
    assert render("{{ _nvidia_container_toolkit_source_in_place }}", lines) is True
    assert render("{{ _nvidia_container_toolkit_key_in_place }}", lines) is True
    assert render("{{ _nvidia_container_toolkit_packages_wanted }}", lines) == []


@pytest.mark.parametrize("source", [
    [],                                                   # no source file
    ["600 root root"] + SOURCE[1:],                       # wrong mode
    SOURCE[:2] + [SOURCE[2].replace("mirror.example", "other.example")],  # another mirror
    SOURCE + ["deb http://extra.example/ /"],             # a line added by hand
])
def test_a_missing_or_different_source_is_written(source):
    assert render("{{ _nvidia_container_toolkit_source_in_place }}", probe(source=source)) is False


@pytest.mark.parametrize("key", [(), ("present 600 root root",), ("present 644 nobody root",)])
def test_a_missing_key_or_one_with_other_mode_or_owner_is_fetched(key):
    assert render("{{ _nvidia_container_toolkit_key_in_place }}", probe(key=key)) is False


def test_nothing_to_install_skips_the_install_tasks():
    assert render("{{ _nvidia_container_toolkit_install_needed }}", probe()) is False
    # without managing the repository, the key and the source are not looked at
    assert render("{{ _nvidia_container_toolkit_install_needed }}", probe(source=[], key=()),
                  nvidia_container_toolkit_repo_manage=False) is False


@pytest.mark.parametrize("lines, overrides", [
    (probe(packages=PACKAGES[:-1]), {}),                                   # tomlkit missing
    (probe(packages=PACKAGES[1:]), {}),                                    # a toolkit package missing
    (probe(), {"nvidia_container_toolkit_version": "1.18.0-1"}),           # another version pinned
    (probe(source=[]), {}),                                                # no apt source
    (probe(key=()), {}),                                                   # no key
    (probe(), {"nvidia_container_toolkit_repo_gpg_key_checksum": "sha256:00"}),  # the key's checksum to check
    (probe(), {"nvidia_container_toolkit_package_files": ["/tmp/nvidia-container-toolkit.deb"]}),
])
def test_anything_to_install_runs_the_install_tasks(lines, overrides):
    assert render("{{ _nvidia_container_toolkit_install_needed }}", lines, **overrides) is True


def test_packages_missing_or_at_another_version_are_wanted():
    lines = probe(packages=["nvidia-container-toolkit ii  1.17.8-1", "nvidia-container-toolkit-base ii  1.16.0-1",
                            "libnvidia-container1 rc  1.17.8-1"])
    assert render("{{ _nvidia_container_toolkit_installed }}", lines) == {
        "nvidia-container-toolkit": "1.17.8-1", "nvidia-container-toolkit-base": "1.16.0-1"}
    assert sorted(render("{{ _nvidia_container_toolkit_packages_wanted }}", lines,
                         nvidia_container_toolkit_version="1.17.8-1")) == [
        "libnvidia-container-tools", "libnvidia-container1", "nvidia-container-toolkit-base"]


def test_the_source_lines_are_never_read_as_packages():
    # a source line whose second word is "ii" must not count as an installed package
    lines = probe(packages=[], source=["644 root root", "deb ii 1.0"])
    assert render("{{ _nvidia_container_toolkit_installed }}", lines) == {}


def test_the_service_states_follow_the_units_marker():
    assert render("{{ _nvidia_container_toolkit_unit_lines }}", probe()) == UNITS
    # RedHat's probe prints the units section only
    assert render("{{ _nvidia_container_toolkit_unit_lines }}", ["### units"] + UNITS) == UNITS
    # the key section ends where the units start
    assert render("{{ _nvidia_container_toolkit_key_in_place }}", probe(units=["present 644 root root"])) is True


def test_the_probe_scripts_print_every_section_marker():
    debian = DataLoader().load_from_file(DEBIAN_VARS)["_nvidia_container_toolkit_probe_script"]
    redhat = DataLoader().load_from_file(DEBIAN_VARS.replace("Debian", "RedHat"))["_nvidia_container_toolkit_probe_script"]
    assert [m for m in ("### source", "### key", "### units") if m in debian] == ["### source", "### key", "### units"]
    assert "### units" in redhat and "### source" not in redhat
    # both end with the record's rows, after the units
    for script in (debian, redhat):
        assert script.index("### units") < script.index("{{ _nvidia_container_toolkit_probe_record }}")
    assert "echo '### record'" in render("{{ _nvidia_container_toolkit_probe_record }}", [])


# ---------------------------------------------------------------- the record of the runtime configuration
def key(runtime="containerd", **overrides):
    return render("{{ _nvidia_container_toolkit_record_keys[%r] }}" % runtime, [], **overrides)


def record_probe(rows):
    return probe() + ["### record"] + [" ".join(row) for row in rows]


def test_a_runtime_is_in_place_when_its_key_and_every_checksum_match_the_record():
    k = key()
    one = ["containerd", k, "/etc/containerd/config.toml", "a" * 64, "a" * 64]
    drop_in = ["containerd", k, "/etc/containerd/conf.d/99-nvidia.toml", "b" * 64, "b" * 64]
    docker = ["docker", key("docker"), "/etc/docker/daemon.json", "c" * 64, "c" * 64]
    in_place = "{{ _nvidia_container_toolkit_config_in_place }}"
    assert render(in_place, record_probe([one, drop_in, docker])) == ["containerd", "docker"]
    # the units section ends where the record starts
    assert render("{{ _nvidia_container_toolkit_unit_lines }}", record_probe([one])) == UNITS
    # a file changed, or gone, since; another key (settings, module); no record: the module runs
    assert render(in_place, record_probe([one, drop_in[:4] + ["d" * 64], docker])) == ["docker"]
    assert render(in_place, record_probe([one[:4] + ["-"], docker])) == ["docker"]
    assert render(in_place, record_probe([["containerd", "0" * 64] + one[2:], docker])) == ["docker"]
    assert render(in_place, probe()) == [] and render(in_place, record_probe([])) == []
    # turned off: never in place
    assert render(in_place, record_probe([one, docker]), nvidia_container_toolkit_record_configuration=False) == []


def test_every_setting_the_module_reads_changes_the_key():
    base = key()
    assert key() == base and len(base) == 64
    for overrides in ({"nvidia_container_toolkit_runtime_name": "nv"}, {"nvidia_container_toolkit_set_as_default": True},
                      {"nvidia_container_toolkit_cdi": True}, {"nvidia_container_toolkit_backup": False},
                      {"nvidia_container_toolkit_containerd_mode": "drop_in"},
                      {"nvidia_container_toolkit_runtime_config_paths": {"containerd": "/etc/k8s/containerd.toml"}}):
        assert key(**overrides) != base, overrides
    # a setting of another runtime does not
    assert key(nvidia_container_toolkit_runtime_config_paths={"docker": "/etc/d.json"}) == base


def test_the_configuration_task_passes_every_module_option_from_the_recorded_arguments():
    with open(os.path.join(role_render.ROLES, "nvidia_container_toolkit", "tasks", "node.yml")) as handle:
        tasks = yaml.safe_load(handle)
    (task,) = [t for t in tasks if t["name"] == "Configure the nvidia runtime in each container runtime"]
    args = task["kubegpu.nvidia.container_runtime_nvidia"]
    with open(os.path.join(role_render.ROOT, "plugins", "modules", "container_runtime_nvidia.py")) as handle:
        source = handle.read()
    options = yaml.safe_load(source.split('DOCUMENTATION = r"""')[1].split('"""')[0])["options"]
    # every option the module has, each from the arguments the record's key digests
    assert sorted(args) == sorted(options)
    for name, value in args.items():
        assert value.startswith("{{ _nvidia_container_toolkit_args.%s " % name) or \
            value == "{{ _nvidia_container_toolkit_args.%s }}" % name, (name, value)
    rendered = render("{{ _nvidia_container_toolkit_configure_args }}", [])
    assert rendered["containerd"] == {
        "runtime": "containerd", "flavor": "containerd", "path": "/etc/containerd/config.toml", "mode": "in_place",
        "runtime_name": "nvidia", "runtime_path": "/usr/bin/nvidia-container-runtime", "set_as_default": False,
        "backup": True, "validate": "containerd --config %s config dump", "state": "present"}
    assert rendered["docker"] == {
        "runtime": "docker", "path": "/etc/docker/daemon.json", "runtime_name": "nvidia",
        "runtime_path": "/usr/bin/nvidia-container-runtime", "set_as_default": False, "backup": True, "state": "present"}
    drop_in = render("{{ _nvidia_container_toolkit_configure_args.containerd }}", [],
                     nvidia_container_toolkit_containerd_mode="drop_in")
    assert drop_in["drop_in_path"] == "/etc/containerd/conf.d/99-nvidia.toml" and "validate" not in drop_in


def test_the_record_probe_prints_each_row_with_the_file_s_checksum_now(tmp_path):
    present = tmp_path / "config.toml"
    present.write_text("version = 2\n")
    record = tmp_path / "record"
    record.write_text("# comment\n\ncontainerd k1 %s %s\ncontainerd k1 %s -\n" % (present, "x" * 64, tmp_path / "gone"))
    script = render("{{ _nvidia_container_toolkit_probe_record }}", [])
    out = subprocess.run(["/bin/sh", "-c", script], env={"KUBEGPU_RECORD": str(record), "PATH": os.environ["PATH"]},
                         capture_output=True, text=True, check=True).stdout.splitlines()
    assert out == ["### record",
                   "containerd k1 %s %s %s" % (present, "x" * 64, hashlib.sha256(b"version = 2\n").hexdigest()),
                   "containerd k1 %s - -" % (tmp_path / "gone")]
    # no record: the marker only
    out = subprocess.run(["/bin/sh", "-c", script], env={"KUBEGPU_RECORD": str(tmp_path / "none"), "PATH": os.environ["PATH"]},
                         capture_output=True, text=True, check=False).stdout.splitlines()
    assert out == ["### record"]


def test_the_record_keeps_the_rows_of_runtimes_the_module_skipped():
    k = key()
    rows = [["docker", "kd", "/etc/docker/daemon.json", "c" * 64, "c" * 64]]
    configured = {"results": [{"item": "containerd", "changed": True, "checksums": {"/etc/containerd/config.toml": "a" * 64}},
                              {"item": "docker", "skipped": True}]}
    lines = render("{{ _nvidia_container_toolkit_record_lines }}", record_probe(rows),
                   _nvidia_container_toolkit_configured=configured)
    assert lines[1:] == ["containerd %s /etc/containerd/config.toml %s" % (k, "a" * 64),
                         "docker kd /etc/docker/daemon.json %s" % ("c" * 64)]
    assert lines[0].startswith("# kubegpu.nvidia.nvidia_container_toolkit")
