"""What the nvidia_container_toolkit role reads from its one probe of a node.

The probe (tasks/node.yml) prints, on Debian, dpkg-query's lines, then the apt source file's mode,
owner and content, then the signing key's mode and owner, then (every family) systemctl's states of
the container runtimes' services; the role skips writing the key and the source when they are in
place, installs only the packages that are missing or at another version, and picks the runtimes.
"""
import os

import pytest
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
