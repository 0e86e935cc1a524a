# -*- coding: utf-8 -*-
# Copyright (c) kubegpu.nvidia maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""containerd: runtime names, every TOML spelling, wrong shapes, options inheritance, several runtimes.

Cases marked "upstream" follow the NVIDIA Container Toolkit's own tests (NVIDIA/nvidia-container-toolkit):
pkg/config/engine/containerd/config_test.go (TestAddRuntime), pkg/config/engine/engine.go
(GetLowLevelRuntimes), cmd/nvidia-ctk-installer/container/runtime/containerd/config_test.go
(TestContainerdConfigLifecycle) and cmd/nvidia-ctk-installer/container/operator/operator.go (the three
runtimes nvidia, nvidia-cdi, nvidia-legacy). Where this module deliberately differs, the test says so.
"""

from __future__ import absolute_import, division, print_function

import tomllib

import pytest

from ansible_collections.kubegpu.nvidia.plugins.module_utils import containerd_config as cc
from ansible_collections.kubegpu.nvidia.plugins.module_utils.config_file import ConfigFileError

NV = "/usr/bin/nvidia-container-runtime"
CRI2 = "io.containerd.grpc.v1.cri"
THREE = [cc.runtime("nvidia", NV, default=True), cc.runtime("nvidia-cdi", NV + ".cdi", mode="cdi"),
         cc.runtime("nvidia-legacy", NV + ".legacy", mode="legacy")]


def load(text):
    return tomllib.loads(text)


def runtimes_of(text, version=2):
    return load(text)["plugins"][cc.CRI_PLUGIN[version]]["containerd"]["runtimes"]


def containerd_of(text, version=2):
    return load(text)["plugins"][cc.CRI_PLUGIN[version]]["containerd"]


# ------------------------------------------------------------- runtime names

@pytest.mark.parametrize("name", ['nv"idia', "nv.idia", "nv[idia]", "nvidia\n", "nv\tidia", "nv\x00idia", "NVIDIA",
                                  "nvidia_cdi", "-nvidia", "nvidia-", "a" * 64, "nv idia", "nvídia"])
def test_invalid_names_refused_with_the_rule(name):
    with pytest.raises(ConfigFileError) as err:
        cc.check_name(name)
    assert err.value.msg == "runtime name %s is not valid for containerd: %s" % (cc.show(name), cc.NAME_RULE)
    assert "\n" not in err.value.msg  # one line, a newline in the name shows as \n


@pytest.mark.parametrize("name", ["nvidia", "nvidia-cdi", "nvidia-legacy", "a", "9", "a" * 63, "nvidia-2"])
def test_valid_names(name):
    cc.check_name(name)


def test_empty_name():
    with pytest.raises(ConfigFileError, match="^runtime name must not be empty$"):
        cc.check_name("")


@pytest.mark.parametrize("path", ["", " ", "relative/bin", "/usr/bin/x\n", "/usr/bin/\x7f"])
def test_invalid_runtime_paths(path):
    with pytest.raises(ConfigFileError, match="runtime path .*of \"nvidia\""):
        cc.check_path(path, "nvidia")


# ------------------------------------------------------------- keys are quoted as TOML needs

@pytest.mark.parametrize("key", ["plain", "io.containerd.grpc.v1.cri", 'q"uote', "back\\slash", "new\nline", "tab\t",
                                 "ctrl\x01\x7f", "sp ace", "ünï", "trailing\n"])
def test_quote_key_round_trips(key):
    text = "%s = 1\n" % cc.quote_key(key)
    assert load(text) == {key: 1}
    table = cc.render_table(["plugins", key, "x"], {"k": "v", "sub": {key: True}}, 0, 2)
    assert load(table) == {"plugins": {key: {"x": {"k": "v", "sub": {key: True}}}}}


def test_render_table_omits_headers_of_tables_holding_only_tables():
    text = cc.render_table(["a", "b"], {"c": {"d": 1}}, 0, 0)
    assert text == "[a.b.c]\nd = 1\n"
    assert cc.render_table(["a"], {}, 0, 0) == "[a]\n"


def test_render_value_of_arrays_of_tables_and_inline_tables():
    text = "k = %s\nm = %s\n" % (cc.render_value([{"a": 1}, {"b": "x"}]), cc.render_value({"c": [1, 2]}))
    assert load(text) == {"k": [{"a": 1}, {"b": "x"}], "m": {"c": [1, 2]}}


# ------------------------------------------------------------- every TOML spelling loads the same

TABLES = '''version = 2
[plugins."io.containerd.grpc.v1.cri".containerd]
default_runtime_name = "runc"
[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
runtime_type = "io.containerd.runc.v2"
[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
SystemdCgroup = true
'''

SPELLINGS = {
    "dotted keys at the top level": '''version = 2
# kept
plugins."io.containerd.grpc.v1.cri".containerd.default_runtime_name = "runc"
plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options.SystemdCgroup = true
plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.runtime_type = "io.containerd.runc.v2"
''',
    "dotted keys under [plugins]": '''version = 2
[plugins]
"io.containerd.grpc.v1.cri".containerd.default_runtime_name = "runc"
"io.containerd.grpc.v1.cri".containerd.runtimes.runc.runtime_type = "io.containerd.runc.v2"
"io.containerd.grpc.v1.cri".containerd.runtimes.runc.options.SystemdCgroup = true
''',
    "inline table of runtimes": '''version = 2
[plugins."io.containerd.grpc.v1.cri".containerd]
default_runtime_name = "runc"
runtimes = { runc = { runtime_type = "io.containerd.runc.v2", options = { SystemdCgroup = true } } }
''',
    "inline runtime": '''version = 2
[plugins."io.containerd.grpc.v1.cri".containerd]
default_runtime_name = "runc"
[plugins."io.containerd.grpc.v1.cri".containerd.runtimes]
runc = { runtime_type = "io.containerd.runc.v2", options = { SystemdCgroup = true } }
''',
    "inline options": '''version = 2
[plugins."io.containerd.grpc.v1.cri".containerd]
default_runtime_name = "runc"
[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
runtime_type = "io.containerd.runc.v2"
options = { SystemdCgroup = true }
''',
    "mixed: dotted keys under the CRI table, inline options": '''version = 2
[plugins."io.containerd.grpc.v1.cri"]
  containerd.default_runtime_name = "runc"
  containerd.runtimes.runc.options = { SystemdCgroup = true }
  containerd.runtimes.runc.runtime_type = "io.containerd.runc.v2"
''',
    "whole plugins table inline": 'version = 2\nplugins = { "io.containerd.grpc.v1.cri" = { containerd = { '
                                  'default_runtime_name = "runc", runtimes = { runc = { runtime_type = '
                                  '"io.containerd.runc.v2", options = { SystemdCgroup = true } } } } } }\n',
    "tables out of order": '''version = 2
[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
SystemdCgroup = true
[metrics]
address = ""
[plugins."io.containerd.grpc.v1.cri".containerd]
default_runtime_name = "runc"
[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
runtime_type = "io.containerd.runc.v2"
''',
}


@pytest.mark.parametrize("spelling", sorted(SPELLINGS))
@pytest.mark.parametrize("state_args", [dict(runtimes=THREE, cdi=True),
                                        dict(runtimes=[cc.runtime("nvidia", NV)], cdi=None)])
def test_spellings_load_as_the_table_spelling(spelling, state_args):
    text = SPELLINGS[spelling]
    assert load(text)["plugins"] == load(TABLES)["plugins"]  # the same configuration, spelled differently
    expected, _v = cc.edit_text(TABLES, "tables", "present", **state_args)
    new, version = cc.edit_text(text, "spelled", "present", **state_args)
    assert version == 2
    data = load(new)
    data.pop("metrics", None)
    assert data == load(expected)
    assert cc.edit_text(new, "spelled", "present", **state_args)[0] is new  # idempotent
    if "# kept" in text:
        assert "# kept" in new  # what lies outside the CRI table keeps its text
    removed, _v = cc.edit_text(new, "spelled", "absent", state_args["runtimes"])
    back, _v = cc.edit_text(expected, "tables", "absent", state_args["runtimes"])
    data = load(removed)
    data.pop("metrics", None)
    assert data == load(back)


def test_dotted_keys_keep_the_other_plugins_and_tables():
    text = '''version = 2
plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options.SystemdCgroup = true
plugins."io.containerd.internal.v1.opt".path = "/opt/containerd"

[metrics]
address = "127.0.0.1:1338"
'''
    new, _v = cc.edit_text(text, "f", "present", THREE)
    data = load(new)
    assert data["plugins"]["io.containerd.internal.v1.opt"] == {"path": "/opt/containerd"}
    assert data["metrics"] == {"address": "127.0.0.1:1338"}
    assert 'plugins."io.containerd.internal.v1.opt".path = "/opt/containerd"\n' in new
    assert sorted(data["plugins"][CRI2]["containerd"]["runtimes"]) == ["nvidia", "nvidia-cdi", "nvidia-legacy", "runc"]


def test_unsupported_spelling_fails_with_file_and_key(monkeypatch):
    """When neither the in-place edit nor the rewrite loads as planned, one line names file and key."""
    monkeypatch.setattr(cc, "_loads_as", lambda *args: False)
    with pytest.raises(ConfigFileError) as err:
        cc.edit_text(SPELLINGS["dotted keys at the top level"], "/etc/containerd/config.toml", "present", THREE)
    assert err.value.msg.startswith(
        '/etc/containerd/config.toml: cannot write plugins."io.containerd.grpc.v1.cri".containerd.runtimes.nvidia: ')
    assert "\n" not in err.value.msg


def test_invalid_toml_is_refused_not_guessed():
    text = '''version = 2
[plugins."io.containerd.grpc.v1.cri".containerd]
runtimes.runc = { runtime_type = "io.containerd.runc.v2" }
[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
SystemdCgroup = true
'''
    with pytest.raises(ConfigFileError, match="^f is not valid TOML"):
        cc.edit_text(text, "f", "present", THREE)


# ------------------------------------------------------------- wrong shapes name the file and the key

SHAPES = [
    ('plugins = 3\n', 'plugins must be a table, found an integer'),
    ('version = 2\nplugins = 3\n', 'plugins must be a table, found an integer'),
    ('version = 2\n[plugins]\n"io.containerd.grpc.v1.cri" = "x"\n',
     'plugins."io.containerd.grpc.v1.cri" must be a table, found a string'),
    ('version = 2\n[plugins."io.containerd.grpc.v1.cri"]\ncontainerd = []\n',
     'plugins."io.containerd.grpc.v1.cri".containerd must be a table, found an array'),
    ('version = 2\n[plugins."io.containerd.grpc.v1.cri".containerd]\nruntimes = "x"\n',
     'plugins."io.containerd.grpc.v1.cri".containerd.runtimes must be a table, found a string'),
    ('version = 2\n[plugins."io.containerd.grpc.v1.cri".containerd.runtimes]\nrunc = 5\n',
     'plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc must be a table, found an integer'),
    ('version = 2\n[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]\noptions = "x"\n',
     'plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options must be a table, found a string'),
    ('version = 2\n[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]\nruntime_type = 1\n',
     'plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.runtime_type must be a string, found an integer'),
    ('version = 2\n[plugins."io.containerd.grpc.v1.cri".containerd]\ndefault_runtime_name = 1\n',
     'plugins."io.containerd.grpc.v1.cri".containerd.default_runtime_name must be a string, found an integer'),
    ('version = 2\n[plugins."io.containerd.grpc.v1.cri"]\nenable_cdi = "yes"\n',
     'plugins."io.containerd.grpc.v1.cri".enable_cdi must be a boolean, found a string'),
    ('version = 3\n[plugins."io.containerd.cri.v1.runtime".containerd.runtimes]\nrunc = []\n',
     'plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc must be a table, found an array'),
    ('[plugins.cri]\ncontainerd = 1\n', 'plugins.cri.containerd must be a table, found an integer'),
    ('version = 2\nimports = "x"\n', 'imports must be an array, found a string'),
    ('version = 2\nimports = [1]\n', 'imports[0] must be a string, found an integer'),
]


@pytest.mark.parametrize("text,message", SHAPES)
@pytest.mark.parametrize("state", ["present", "absent"])
def test_shapes_in_place(text, message, state):
    with pytest.raises(ConfigFileError) as err:
        cc.edit_text(text, "/etc/containerd/config.toml", state, THREE)
    assert err.value.msg == "/etc/containerd/config.toml: " + message


@pytest.mark.parametrize("text,message", [s for s in SHAPES if not s[0].startswith(("plugins", "[plugins.cri"))])
def test_shapes_of_main_and_drop_in(text, message):
    with pytest.raises(ConfigFileError) as err:
        cc.edit_drop_in(text, "/etc/containerd/config.toml", None, "/etc/containerd/conf.d/99-nvidia.toml",
                        "present", THREE)
    assert err.value.msg == "/etc/containerd/config.toml: " + message
    with pytest.raises(ConfigFileError) as err:
        cc.edit_drop_in("version = 2\n", "/etc/containerd/config.toml", text, "/etc/containerd/conf.d/99-nvidia.toml",
                        "present", THREE)
    assert err.value.msg == "/etc/containerd/conf.d/99-nvidia.toml: " + message


def test_shape_of_the_k3s_reference():
    with pytest.raises(ConfigFileError, match=r"^/k3s/config.toml: plugins.\"io.containerd.grpc.v1.cri\".containerd "
                                              r"must be a table"):
        cc.edit_text(None, "/k3s/config.toml.tmpl", "present", THREE[1:],
                     reference_text='version = 2\n[plugins."io.containerd.grpc.v1.cri"]\ncontainerd = 1\n',
                     reference_path="/k3s/config.toml")


# ------------------------------------------------------------- options inheritance

def v2(body):
    return 'version = 2\n' + body


RUNC = '''[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
runtime_type = "io.containerd.runc.v2"
privileged_without_host_devices = true
[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
BinaryName = "/usr/bin/runc"
SystemdCgroup = true
'''


def added(text, runtimes=None, **kwargs):
    info = {}
    new, _v = cc.edit_text(text, "f", "present", runtimes or [cc.runtime("test", "/usr/bin/test")], info=info, **kwargs)
    return runtimes_of(new, cc.config_version(load(new))), info["options_source"]


def test_upstream_empty_config_not_default():
    """upstream TestAddRuntime "empty config not default runtime" (runtime_engine/runtime_root are not written)."""
    rts, source = added(None)
    assert rts == {"test": {"privileged_without_host_devices": False, "runtime_type": "io.containerd.runc.v2",
                            "options": {"BinaryName": "/usr/bin/test"}}}
    assert source is None


def test_upstream_options_from_runc_are_imported():
    rts, source = added(v2(RUNC))
    assert source == "runc"
    assert rts["test"] == {"runtime_type": "io.containerd.runc.v2", "privileged_without_host_devices": True,
                           "options": {"BinaryName": "/usr/bin/test", "SystemdCgroup": True}}


def test_upstream_empty_runtime_type_is_replaced():
    """upstream "empty runtime_type copied from runc options is replaced with default"."""
    rts, source = added(v2(RUNC.replace('runtime_type = "io.containerd.runc.v2"', 'runtime_type = ""')))
    assert source == "runc" and rts["test"]["runtime_type"] == "io.containerd.runc.v2"
    assert rts["test"]["options"]["SystemdCgroup"] is True


DEFAULT = '''[plugins."io.containerd.grpc.v1.cri".containerd]
default_runtime_name = "default"
[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.default]
runtime_type = "%s"
runtime_root = "defaultroot"
[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.default.options]
BinaryName = "/usr/bin/default"
SystemdCgroup = false
NoPivotRoot = true
'''


@pytest.mark.parametrize("runtime_type", ["io.containerd.runc.v2", "io.containerd.runtime.v1.linux", ""])
def test_upstream_default_runtime_takes_precedence_over_runc(runtime_type):
    """upstream "options from the default runtime take precedence over runc", for each runc-compatible type."""
    rts, source = added(v2(DEFAULT % runtime_type + RUNC))
    assert source == "default"
    assert rts["test"]["runtime_root"] == "defaultroot"
    assert rts["test"]["options"] == {"BinaryName": "/usr/bin/test", "SystemdCgroup": False, "NoPivotRoot": True}
    assert rts["test"]["runtime_type"] == "io.containerd.runc.v2"  # differs: upstream keeps the default's type


def test_default_runtime_of_another_kind_is_not_copied():
    """Kata's options mean nothing to runc: the options come from runc (upstream would copy Kata's)."""
    rts, source = added(v2(DEFAULT % "io.containerd.kata.v2" + RUNC))
    assert source == "runc" and "runtime_root" not in rts["test"]
    assert rts["test"]["options"]["SystemdCgroup"] is True


def test_nvidia_default_is_skipped():
    """engine.go GetLowLevelRuntimes ignores a default whose name starts with nvidia."""
    text = v2(DEFAULT.replace('"default"', '"nvidia-old"').replace(".default]", ".nvidia-old]")
              .replace(".default.options]", ".nvidia-old.options]") % "io.containerd.runc.v2" + RUNC)
    assert added(text)[1] == "runc"


def test_crun_when_there_is_no_runc():
    text = v2(RUNC.replace(".runc]", ".crun]").replace(".runc.options]", ".crun.options]"))
    rts, source = added(text)
    assert source == "crun" and rts["test"]["options"]["BinaryName"] == "/usr/bin/test"


def test_managed_runtimes_are_never_a_source():
    text = v2(RUNC.replace(".runc]", ".nvidia-cdi]").replace(".runc.options]", ".nvidia-cdi.options]"))
    rts, source = added(text, runtimes=THREE)
    assert source is None
    assert rts["nvidia"]["options"] == {"BinaryName": NV}


def test_existing_runtime_gets_systemd_cgroup_from_the_default_runtime():
    text = v2(DEFAULT % "io.containerd.runtime.v1.linux" + RUNC + '''[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.test]
runtime_type = "io.containerd.runc.v2"
[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.test.options]
BinaryName = "/usr/bin/test"
''').replace("SystemdCgroup = false", "SystemdCgroup = true")
    rts, source = added(text)
    assert source == "default" and rts["test"]["options"] == {"BinaryName": "/usr/bin/test", "SystemdCgroup": True}


V1 = '''version = 1

[plugins]
  [plugins.cri]
    [plugins.cri.containerd]
      default_runtime_name = "custom"

      [plugins.cri.containerd.runtimes]
        [plugins.cri.containerd.runtimes.custom]
          runtime_type = "io.containerd.runtime.v1.linux"

          [plugins.cri.containerd.runtimes.custom.options]
            Runtime = "/usr/bin/custom-runtime"
            Root = "/custom/root"
            ShimDebug = false
            SystemdCgroup = true
            NoPivotRoot = true
            CustomOption = "custom-value"

        [plugins.cri.containerd.runtimes.runc]
          runtime_type = "io.containerd.runtime.v1.linux"

          [plugins.cri.containerd.runtimes.runc.options]
            Runtime = "/usr/bin/runc"
'''


def test_upstream_v1_options_inheritance_from_the_default_runtime():
    """upstream installer "v1: OPTIONS inheritance from default runtime specified by default_runtime_name":
    the three runtimes copy the custom default's options and options.Runtime points at their binary
    (runtime_type differs: this module runs them under runc.v2)."""
    info = {}
    new, version = cc.edit_text(V1, "f", "present", [r._replace(default=False) for r in THREE], info=info)
    assert version == 1 and info["options_source"] == "custom"
    rts = runtimes_of(new, 1)
    for name, binary in (("nvidia", NV), ("nvidia-cdi", NV + ".cdi"), ("nvidia-legacy", NV + ".legacy")):
        assert rts[name]["options"] == {"BinaryName": binary, "CustomOption": "custom-value", "NoPivotRoot": True,
                                        "Root": "/custom/root", "Runtime": binary, "ShimDebug": False,
                                        "SystemdCgroup": True}
    assert containerd_of(new, 1)["default_runtime_name"] == "custom"
    # cleanup gives back the original configuration
    removed, _v = cc.edit_text(new, "f", "absent", THREE)
    assert load(removed) == load(V1)


def test_v1_existing_runtime_gets_runtime_option():
    text = V1 + '''        [plugins.cri.containerd.runtimes.nvidia]
          runtime_type = "io.containerd.runc.v2"
          [plugins.cri.containerd.runtimes.nvidia.options]
            BinaryName = "%s"
            Runtime = "/usr/bin/runc"
''' % NV
    new, _v = cc.edit_text(text, "f", "present", "nvidia", NV)
    assert runtimes_of(new, 1)["nvidia"]["options"]["Runtime"] == NV


def test_effective_configuration_overlays_the_file():
    """Options set in an imported file (seen only in containerd config dump) carry over."""
    main = v2('imports = ["/etc/containerd/conf.d/*.toml"]\n'.join(["", ""]) + RUNC.replace("SystemdCgroup = true\n", ""))
    dump = {"version": 3, "plugins": {cc.CRI_PLUGIN[3]: {"containerd": {"default_runtime_name": "runc", "runtimes": {
        "runc": {"runtime_type": "io.containerd.runc.v2", "runtime_path": "", "options": {
            "BinaryName": "", "SystemdCgroup": True, "NoPivotRoot": False, "Root": "/run/runc"}}}}}}}
    info = {}
    new, _v = cc.edit_text(main, "f", "present", "nvidia", NV, effective=dump, info=info)
    nvidia = runtimes_of(new)["nvidia"]
    assert info["options_source"] == "runc"
    assert nvidia["options"] == {"BinaryName": NV, "SystemdCgroup": True, "Root": "/run/runc"}
    assert nvidia["privileged_without_host_devices"] is True  # from the file's table
    assert "runtime_path" not in nvidia  # zero values of the dump are not copied
    # without the dump, only the file's options
    plain, _v = cc.edit_text(main, "f", "present", "nvidia", NV)
    assert "SystemdCgroup" not in runtimes_of(plain)["nvidia"]["options"]


# ------------------------------------------------------------- several runtimes at once

def test_upstream_three_runtimes_in_place():
    """operator.go: nvidia, nvidia-cdi and nvidia-legacy with their binaries, nvidia the default."""
    text = v2(RUNC)
    new, _v = cc.edit_text(text, "f", "present", THREE, cdi=True)
    rts = runtimes_of(new)
    for item in THREE:
        assert rts[item.name]["options"] == {"BinaryName": item.path, "SystemdCgroup": True}
        assert rts[item.name]["runtime_type"] == "io.containerd.runc.v2"
    assert containerd_of(new)["default_runtime_name"] == "nvidia"
    assert cc.edit_text(new, "f", "present", THREE, cdi=True)[0] is new


def test_a_run_never_removes_runtimes_it_does_not_manage():
    first, _v = cc.edit_text(v2(RUNC), "f", "present", THREE)
    second, _v = cc.edit_text(first, "f", "present", [cc.runtime("nvidia-cdi", NV + ".cdi")])
    assert second is first  # the others stay, the default too
    gone, _v = cc.edit_text(first, "f", "absent", [cc.runtime("nvidia-cdi", NV)])
    assert sorted(runtimes_of(gone)) == ["nvidia", "nvidia-legacy", "runc"]
    assert containerd_of(gone)["default_runtime_name"] == "nvidia"
    handed_back, _v = cc.edit_text(gone, "f", "present", [cc.runtime("nvidia", NV)])
    assert containerd_of(handed_back)["default_runtime_name"] == "runc"


def test_one_runtime_per_run_builds_the_same_file():
    once, _v = cc.edit_text(v2(RUNC), "f", "present", THREE)
    step = v2(RUNC)
    for item in THREE:
        step, _v = cc.edit_text(step, "f", "present", [item])
    assert load(step) == load(once)


# ------------------------------------------------------------- drop-in mode with several runtimes

DROP = "/etc/containerd/conf.d/99-nvidia.toml"
MAIN = v2(RUNC)


def test_upstream_three_runtimes_in_one_drop_in():
    """upstream installer "v2: existing config without default runtime (SetAsDefault=true)"."""
    main, drop, _v = cc.edit_drop_in(MAIN, "/etc/containerd/config.toml", None, DROP, "present", THREE)
    assert load(main)["imports"] == ["/etc/containerd/conf.d/*.toml"]
    assert "nvidia" not in main
    rts = runtimes_of(drop)
    assert sorted(rts) == ["nvidia", "nvidia-cdi", "nvidia-legacy", "runc"]
    assert {n: rts[n]["options"]["BinaryName"] for n in ("nvidia", "nvidia-cdi", "nvidia-legacy")} == {
        "nvidia": NV, "nvidia-cdi": NV + ".cdi", "nvidia-legacy": NV + ".legacy"}
    assert containerd_of(drop)["default_runtime_name"] == "nvidia"


def test_runs_into_one_drop_in_keep_each_other():
    """Three runs, one runtime each (as issue 15 measured): every runtime and the first run's default stay."""
    main, drop = MAIN, None
    for item in THREE:
        main, drop, _v = cc.edit_drop_in(main, "/etc/containerd/config.toml", drop, DROP, "present", [item])
    rts = runtimes_of(drop)
    assert sorted(rts) == ["nvidia", "nvidia-cdi", "nvidia-legacy", "runc"]
    assert containerd_of(drop)["default_runtime_name"] == "nvidia"
    once_main, once_drop, _v = cc.edit_drop_in(MAIN, "/etc/containerd/config.toml", None, DROP, "present", THREE)
    assert load(drop) == load(once_drop) and main == once_main
    # a repeated run changes nothing
    again = cc.edit_drop_in(main, "/etc/containerd/config.toml", drop, DROP, "present", [THREE[1]])
    assert again[0] is main and again[1] is drop
    # absent removes only what it names; the drop-in goes with the last runtime
    main2, drop2, _v = cc.edit_drop_in(main, "/etc/containerd/config.toml", drop, DROP, "absent", [THREE[0]])
    assert sorted(runtimes_of(drop2)) == ["nvidia-cdi", "nvidia-legacy", "runc"]
    assert "default_runtime_name" not in containerd_of(drop2)
    main3, drop3, _v = cc.edit_drop_in(main2, "/etc/containerd/config.toml", drop2, DROP, "absent", THREE[1:])
    assert drop3 is None and main3 is main2


def test_drop_in_carries_main_file_edits():
    main, drop, _v = cc.edit_drop_in(MAIN, "/etc/containerd/config.toml", None, DROP, "present", THREE)
    edited = main.replace("SystemdCgroup = true", "SystemdCgroup = false")
    main2, drop2, _v = cc.edit_drop_in(edited, "/etc/containerd/config.toml", drop, DROP, "present", THREE)
    assert main2 is edited
    assert runtimes_of(drop2)["runc"]["options"]["SystemdCgroup"] is False


def test_hand_written_runtime_in_drop_in_stays():
    drop = v2('[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.gvisor]\nruntime_type = "io.containerd.runsc.v1"\n')
    _m, new_drop, _v = cc.edit_drop_in(MAIN, "/etc/containerd/config.toml", drop, DROP, "present", THREE)
    assert runtimes_of(new_drop)["gvisor"] == {"runtime_type": "io.containerd.runsc.v1"}


@pytest.mark.parametrize("drop_in", ["/etc/containerd/conf.d/99-nvidia.conf", "/etc/containerd/conf[1].d/99-nvidia.toml",
                                     "/etc/containerd/conf.d/99-nvidia.toml.bak"])
def test_drop_in_outside_every_import_glob(drop_in):
    with pytest.raises(ConfigFileError) as err:
        cc.edit_drop_in(MAIN, "/etc/containerd/config.toml", None, drop_in, "present", THREE)
    assert err.value.msg.startswith("drop_in_path %s would not be loaded: containerd imports files by glob and " % drop_in)


@pytest.mark.parametrize("imports", ['["/etc/containerd/conf.d/*"]', '["conf.d/*.toml"]', '["/etc/containerd/conf.d/99-*.toml"]'])
def test_an_existing_import_that_loads_the_drop_in_is_enough(imports):
    main_text = "imports = %s\n%s" % (imports, MAIN)
    main, _drop, _v = cc.edit_drop_in(main_text, "/etc/containerd/config.toml", None, DROP, "present", THREE)
    assert main is main_text


def test_import_glob_matching_is_go_filepath_match():
    assert cc.imported_by(["/etc/containerd/conf.d/*.toml"], DROP, "/etc/containerd/config.toml")
    assert not cc.imported_by(["/etc/containerd/*.toml"], DROP, "/etc/containerd/config.toml")  # * stops at /
    assert cc.imported_by(["conf.d/9?-*.toml"], DROP, "/etc/containerd/config.toml")
    assert not cc.imported_by([], DROP, "/etc/containerd/config.toml")


def test_apply_ops_data_leaves_its_input_alone():
    data = load(v2(RUNC))
    before = load(v2(RUNC))
    ops = cc.plan_present(data, 2, THREE, True, data["plugins"][CRI2]["containerd"]["runtimes"]["runc"])
    ops += [("append", ("imports",), "/x/*.toml"), ("delete", ("plugins", CRI2, "containerd", "runtimes", "runc")),
            ("delete", ("missing", "path"))]
    after = cc.apply_ops_data(data, ops)
    assert data == before
    assert sorted(after["plugins"][CRI2]["containerd"]["runtimes"]) == ["nvidia", "nvidia-cdi", "nvidia-legacy"]
    assert after["imports"] == ["/x/*.toml"] and "missing" not in after
    assert cc.apply_ops_data(data, []) is data
