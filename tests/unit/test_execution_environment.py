"""requirements.txt, bindep.txt and meta/execution-environment.yml stay in step with the collection.

Every third-party module a plugin imports (any file under plugins/, read with ``ast``) must come from a
distribution requirements.txt names, and every distribution there must be imported by some plugin. The
execution environment's definition must follow ansible-builder's schema version 3 and name the dependency files
relative to the collection root, as ansible-builder's introspection of installed collections reads them
(ansible/ansible-builder ``src/ansible_builder/_target_scripts/introspect.py``, ``CollectionDefinition``).
``scripts/test.sh build`` runs ``ansible-builder create`` on it (scripts/ee_context.py).
"""
import ast
import pathlib
import re
import sys

import pytest
import yaml

ROOT = pathlib.Path(__file__).resolve().parents[2]
# import name -> the distribution on PyPI that provides it
DISTRIBUTIONS = {
    "celpy": "cel-python",
    "kubernetes": "kubernetes",
    "pynvml": "nvidia-ml-py",
    "tomlkit": "tomlkit",
    "urllib3": "urllib3",
    "yaml": "PyYAML",
}
NOT_THIRD_PARTY = {"__future__", "ansible", "ansible_collections"}


def imported_modules(path):
    """Top-level names of the modules a file imports (absolute imports only)."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module.split(".")[0])
    return names


def third_party_imports():
    found = {}
    for path in sorted((ROOT / "plugins").rglob("*.py")):
        for name in imported_modules(path):
            if name in NOT_THIRD_PARTY or name in sys.stdlib_module_names:
                continue
            found.setdefault(name, []).append(str(path.relative_to(ROOT)))
    return found


def requirement_names(path):
    names = []
    for line in path.read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            names.append(re.split(r"[<>=!~\[; ]", line, 1)[0].lower())
    return names


def test_every_third_party_import_of_the_plugins_is_in_requirements_txt():
    required = requirement_names(ROOT / "requirements.txt")
    imports = third_party_imports()
    assert imports, "no third-party import found: the scan is broken"
    for name, files in sorted(imports.items()):
        assert name in DISTRIBUTIONS, "%s imports %s: add its distribution to requirements.txt and DISTRIBUTIONS" % (
            ", ".join(files), name)
        assert DISTRIBUTIONS[name].lower() in required, "%s imports %s, but requirements.txt lacks %s" % (
            ", ".join(files), name, DISTRIBUTIONS[name])
    # and nothing more: each requirement is imported by some plugin
    provided = {DISTRIBUTIONS[name].lower() for name in imports}
    assert sorted(set(required) - provided) == []


def test_the_scan_finds_the_libraries_the_plugins_are_known_to_use():
    imports = third_party_imports()
    assert "plugins/module_utils/k8s_client.py" in imports["kubernetes"]
    assert "plugins/module_utils/gpu_discovery_nvml.py" in imports["pynvml"]


@pytest.fixture(name="definition", scope="module")
def fixture_definition():
    return yaml.safe_load((ROOT / "meta" / "execution-environment.yml").read_text())


def test_the_definition_is_ansible_builder_v3_with_files_relative_to_the_collection_root(definition):
    assert definition["version"] == 3
    assert definition["images"]["base_image"]["name"]
    deps = definition["dependencies"]
    assert deps["python"] == "requirements.txt" and (ROOT / "requirements.txt").is_file()
    assert deps["system"] == "bindep.txt" and (ROOT / "bindep.txt").is_file()
    assert set(definition) <= {"version", "images", "dependencies", "options", "build_arg_defaults",
                               "additional_build_files", "additional_build_steps"}


def test_the_definition_installs_the_tested_ansible_core_and_every_collection_needed(definition):
    pins = dict(line.split("==", 1) for line in (ROOT / "requirements" / "test.txt").read_text().splitlines()
                if "==" in line and not line.startswith("#"))
    deps = definition["dependencies"]
    assert deps["ansible_core"]["package_pip"] == "ansible-core==%s" % pins["ansible-core"]
    galaxy = yaml.safe_load((ROOT / "galaxy.yml").read_text())
    collections = {entry["name"]: entry.get("version") for entry in deps["galaxy"]["collections"]}
    assert "%s.%s" % (galaxy["namespace"], galaxy["name"]) in collections
    for name, version in galaxy["dependencies"].items():
        assert collections.get(name) == version, name


def test_bindep_entries_are_bindep_lines():
    # bindep: "<package> [<profile> ...]" per line (opendev/bindep README)
    for line in (ROOT / "bindep.txt").read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            assert re.match(r"^[A-Za-z0-9][A-Za-z0-9.+_-]*( \[[a-z0-9:!_ -]+\])?$", line), line


def test_ansible_builder_is_pinned_for_the_build_stage():
    assert "ansible-builder==" in (ROOT / "requirements" / "test.txt").read_text()
    constraints = (ROOT / "requirements" / "constraints.txt").read_text()
    for name in ("ansible-builder", "bindep", "Parsley", "pbr"):
        assert re.search(r"^%s==" % re.escape(name), constraints, re.M | re.I), name
