# -*- coding: utf-8 -*-
# Copyright (c) kubegpu.nvidia maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Add or remove NVIDIA runtimes in a containerd configuration (versions 1, 2 and 3).

Every edit goes in three steps:

1. ``plan_present`` / ``plan_absent`` decide, on the file's plain data, what must change: a short
   list of operations (set this key, delete that one). No operation means nothing to do: the
   no-change path parses with the standard library's fast parser only and never loads tomlkit's.
2. The operations are applied to the tomlkit document, so comments, key order and formatting of
   everything else survive byte for byte; the same operations applied to the plain data give the
   configuration the file must load as.
3. The new text is parsed again and must load exactly as that configuration. Where tomlkit cannot
   keep a spelling (dotted keys, tables out of order), the CRI plugin's table is written anew in
   table form and checked the same way; a shape even that cannot express fails
   with one line naming the file and the key.

Every function here works on text and returns text; reading and writing files is the module's job.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import copy
import fnmatch
import json
import os
import re

from collections import namedtuple
from collections.abc import Mapping, MutableMapping

try:
    import tomlkit
    from tomlkit.exceptions import ParseError, TOMLKitError
    HAS_TOMLKIT = True
    TOMLKIT_IMPORT_ERROR = None
except ImportError as exc:  # pragma: no cover - exercised on nodes without python3-tomlkit
    HAS_TOMLKIT = False
    TOMLKIT_IMPORT_ERROR = exc

try:
    import tomllib  # Python >= 3.11: a fast parser for the no-change check and for checking results
except ImportError:  # pragma: no cover - older Pythons take the tomlkit path
    tomllib = None

from ansible_collections.kubegpu.nvidia.plugins.module_utils.config_file import ConfigFileError

RUNC_V2 = "io.containerd.runc.v2"
# Runtime types whose options are runc's (runc.v1/v2 shims and the legacy v1 linux runtime); an empty
# or missing type means runc.v2 to containerd.
RUNC_COMPATIBLE = ("io.containerd.runc.v2", "io.containerd.runc.v1", "io.containerd.runtime.v1.linux", "")
CRI_PLUGIN = {1: "cri", 2: "io.containerd.grpc.v1.cri", 3: "io.containerd.cri.v1.runtime"}
DEFAULT_VERSION = 2
DEFAULT_PATH = "/etc/containerd/config.toml"
DEFAULT_DROP_IN = "/etc/containerd/conf.d/99-nvidia.toml"
FLAVOR_DIRS = {
    "k3s": "/var/lib/rancher/k3s/agent/etc/containerd",
    "rke2": "/var/lib/rancher/rke2/agent/etc/containerd",
}
DROP_IN_HEADER = (
    "# Managed by kubegpu.nvidia.container_runtime_nvidia: the NVIDIA runtimes for containerd.\n"
    "# containerd before 2.1 replaces a whole plugin table per import, so this file\n"
    "# carries the complete CRI table of the main configuration. Edit that file, not this one.\n"
)
# Whole-line Go template directives in k3s/RKE2 config.toml.tmpl files.
_TEMPLATE_LINE = re.compile(r"^[ \t]*\{\{.*\}\}[ \t]*$")
_TEMPLATE_MARK = "#kubegpu-template-line-%d"
_BARE_KEY = re.compile(r"^[A-Za-z0-9_-]+$")
# A Kubernetes RuntimeClass handler (and so a CRI runtime name): a DNS-1123 label.
_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
NAME_RULE = ("a CRI runtime is chosen by the handler of a Kubernetes RuntimeClass, which must be a DNS-1123 label: "
             "lowercase letters, digits and '-', starting and ending with a letter or digit, at most 63 characters")

# One runtime to manage: its name, the NVIDIA binary, whether it becomes the default, and the mode
# of nvidia-container-runtime it stands for (informational).
Runtime = namedtuple("Runtime", ["name", "path", "default", "mode"])


def runtime(name, path, default=False, mode=None):
    return Runtime(name, path, bool(default), mode)


def as_runtimes(runtimes, runtime_path=None, set_as_default=False):
    """A list of Runtime from a list, or from one name with its path (the single-runtime options)."""
    if isinstance(runtimes, str):
        return [runtime(runtimes, runtime_path, set_as_default)]
    return list(runtimes)


def show(value):
    """A name as a message shows it: quoted, with control characters escaped."""
    return json.dumps(value)


def check_name(name, what="containerd"):
    """ConfigFileError unless ``name`` can name a CRI runtime (containerd or CRI-O)."""
    if not isinstance(name, str) or not name:
        raise ConfigFileError("runtime name must not be empty")
    if len(name) > 63 or not _DNS_LABEL.fullmatch(name):
        raise ConfigFileError("runtime name %s is not valid for %s: %s" % (show(name), what, NAME_RULE))


def check_path(path, name):
    """ConfigFileError unless ``path`` is an absolute path without control characters."""
    if not isinstance(path, str) or not path.strip():
        raise ConfigFileError("runtime path of %s must not be empty" % show(name))
    if not path.startswith("/") or any(ord(c) < 32 or ord(c) == 127 for c in path):
        raise ConfigFileError("runtime path %s of %s must be an absolute path without control characters"
                              % (show(path), show(name)))


# ---------------------------------------------------------------- parsing

def parse(text, path):
    """Parse TOML text; ConfigFileError with path, line and column when it does not parse."""
    try:
        return tomlkit.parse(text or "")
    except ParseError as exc:
        reason = str(exc)
        reason = re.sub(r"\s+at line \d+ col \d+$", "", reason)
        raise ConfigFileError(
            "%s is not valid TOML: line %s, column %s: %s" % (path, exc.line, exc.col, reason),
            line=exc.line, column=exc.col,
        )
    except (TOMLKitError, ValueError) as exc:
        raise ConfigFileError("%s is not valid TOML: %s" % (path, exc))


def load(text, path):
    """Plain data of a TOML text: the standard library's parser where there is one, else tomlkit."""
    if tomllib is not None:
        try:
            return tomllib.loads(text or "")
        except tomllib.TOMLDecodeError:
            pass  # tomlkit names line and column
    return plain(parse(text, path))


def mask_template(text):
    """Turn whole-line Go template directives into comments so the rest parses as TOML."""
    if "{{" not in (text or ""):
        return text or "", []
    lines = text.split("\n")
    saved = []
    for index, line in enumerate(lines):
        if _TEMPLATE_LINE.match(line):
            lines[index] = _TEMPLATE_MARK % len(saved)
            saved.append(line)
    return "\n".join(lines), saved


def unmask_template(text, saved):
    for index, line in enumerate(saved):
        text = text.replace(_TEMPLATE_MARK % index, line, 1)
    return text


def config_version(data, path="config"):
    """containerd's rule: empty file -> 2, no ``version`` key -> 1, else the key (1, 2 or 3)."""
    if not len(data):
        return DEFAULT_VERSION
    version = data.get("version")
    if version is None:
        return 1
    version = plain(version)
    if isinstance(version, bool) or not isinstance(version, int) or version not in CRI_PLUGIN:
        raise ConfigFileError("%s: unsupported containerd config version %r (expected 1, 2 or 3)" % (path, version))
    return version


# ---------------------------------------------------------------- helpers

def plain(value):
    """tomlkit items -> plain Python values (dict, list, str, int, bool ...)."""
    if isinstance(value, Mapping):
        return dict((str(k), plain(v)) for k, v in value.items())
    if isinstance(value, list):
        return [plain(v) for v in value]
    if hasattr(value, "unwrap"):
        return value.unwrap()
    return value


def quote_key(key):
    """One TOML key: bare when it can be, else a basic string with every escape TOML needs."""
    if _BARE_KEY.fullmatch(key):
        return key
    out = []
    for char in key:
        if char in ('"', "\\"):
            out.append("\\" + char)
        elif char in "\b\t\n\f\r":
            out.append({"\b": "\\b", "\t": "\\t", "\n": "\\n", "\f": "\\f", "\r": "\\r"}[char])
        elif ord(char) < 32 or ord(char) == 127:
            out.append("\\u%04X" % ord(char))
        else:
            out.append(char)
    return '"%s"' % "".join(out)


def dotted(keys):
    """``plugins."io.containerd.grpc.v1.cri".containerd``: a key path as TOML writes it."""
    return ".".join(quote_key(k) for k in keys)


def render_value(value, literal=False):
    if literal and isinstance(value, str) and "'" not in value and not any(ord(c) < 32 for c in value):
        return "'%s'" % value
    if isinstance(value, dict):
        return "{%s}" % ", ".join("%s = %s" % (quote_key(k), render_value(v, literal)) for k, v in value.items())
    if isinstance(value, list) and (literal or any(isinstance(v, dict) for v in value)):
        return "[%s]" % ", ".join(render_value(v, literal) for v in value)
    line = tomlkit.dumps({"k": value}).strip()
    return line.split("=", 1)[1].strip()


def _string_kind(value):
    """'SLL' for a 'literal' string, 'SLB' for a "basic" one (tomlkit 0.11 keeps it in ``_t``)."""
    kind = getattr(value, "type", None) or getattr(value, "_t", None)
    return getattr(kind, "name", None)


def _uses_literal(table):
    """True when the strings of ``table`` are written 'literal' (containerd 2.x style)."""
    if not isinstance(table, Mapping):
        return False
    for value in table.values():
        kind = _string_kind(value)
        if kind is not None and isinstance(value, str):
            return kind == "SLL"
        if isinstance(value, Mapping) and _uses_literal(value):
            return True
    return False


def render_table(keys, data, indent, step=2, literal=False):
    """TOML text for a table and its sub-tables at an absolute indentation.

    A table holding only sub-tables gets no header of its own (TOML defines it implicitly).
    """
    pad = " " * indent
    lines = []
    subtables = []
    for key, value in data.items():
        if isinstance(value, dict):
            subtables.append((key, value))
        else:
            lines.append("%s%s = %s" % (" " * (indent + step), quote_key(key), render_value(value, literal)))
    text = ""
    if lines or not subtables:
        text = "\n".join(["%s[%s]" % (pad, dotted(keys))] + lines) + "\n"
    for key, value in subtables:
        text += render_table(keys + [key], value, indent + step, step, literal)
    return text


def get(data, keys, default=None):
    """The value at ``keys`` in nested mappings, ``default`` when any step is missing or not a mapping."""
    for key in keys:
        if not isinstance(data, Mapping) or key not in data:
            return default
        data = data[key]
    return data


def _kind(value):
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int):
        return "an integer"
    if isinstance(value, float):
        return "a float"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "an array"
    if isinstance(value, Mapping):
        return "a table"
    return "a %s" % type(value).__name__


def expect(data, keys, kind, path, default=None):
    """The value at ``keys`` when it is of ``kind`` (dict, list, str, bool); ``default`` when missing.

    A value of another type is a ConfigFileError naming the file and the dotted key.
    """
    node = data
    for index, key in enumerate(keys):
        if not isinstance(node, Mapping):
            raise ConfigFileError("%s: %s must be a table, found %s" % (path, dotted(keys[:index]), _kind(node)))
        if key not in node:
            return default
        node = node[key]
    wanted = {dict: Mapping, list: list, str: str, bool: bool}[kind]
    if not isinstance(node, wanted) or (kind is not bool and isinstance(node, bool)):
        name = {dict: "a table", list: "an array", str: "a string", bool: "a boolean"}[kind]
        raise ConfigFileError("%s: %s must be %s, found %s" % (path, dotted(keys), name, _kind(node)))
    return node


def check_shape(data, path, version):
    """Every table on the way to the runtimes is a table, and the keys the module reads have their type.

    Raises ConfigFileError naming the file and the dotted key of the first value of the wrong type.
    """
    cri = ("plugins", CRI_PLUGIN[version])
    expect(data, ("plugins",), dict, path)
    expect(data, cri, dict, path)
    expect(data, cri + ("enable_cdi",), bool, path)
    expect(data, cri + ("containerd",), dict, path)
    expect(data, cri + ("containerd", "default_runtime_name"), str, path)
    runtimes = expect(data, cri + ("containerd", "runtimes"), dict, path, {})
    for name in runtimes:
        keys = cri + ("containerd", "runtimes", name)
        expect(data, keys, dict, path)
        expect(data, keys + ("runtime_type",), str, path)
        expect(data, keys + ("options",), dict, path)
    imports = expect(data, ("imports",), list, path, [])
    for index, item in enumerate(imports):
        if not isinstance(item, str):
            raise ConfigFileError("%s: imports[%d] must be a string, found %s" % (path, index, _kind(item)))


# ---------------------------------------------------------------- which options a new runtime starts from

def nonzero(value):
    """``value`` without Go's zero values (what ``containerd config dump`` prints for unset keys)."""
    if isinstance(value, dict):
        kept = dict((k, nonzero(v)) for k, v in value.items())
        return dict((k, v) for k, v in kept.items() if v not in (None, "", 0, False, [], {}) or isinstance(v, float))
    return value


def choose_source(containerd, managed):
    """The runtime whose table a new runtime starts from, as containerd resolves the default.

    The default runtime (``default_runtime_name``, containerd's own default is runc) when its type is
    runc-compatible (``io.containerd.runc.v2``, ``io.containerd.runtime.v1.linux``, empty) and it is not
    an NVIDIA runtime itself, else ``runc``, else ``crun``; runtimes managed in this run never count.
    As nvidia-ctk's GetLowLevelRuntimes (pkg/config/engine/engine.go), but by runtime type rather
    than by name alone. Returns the name or None.
    """
    runtimes = containerd.get("runtimes") if isinstance(containerd, Mapping) else None
    if not isinstance(runtimes, Mapping):
        return None
    return low_level_runtime(containerd.get("default_runtime_name") or "runc", runtimes, managed, RUNC_COMPATIBLE)


def low_level_runtime(default, runtimes, managed, types):
    """The default runtime when its ``runtime_type`` is one of ``types`` and it is not an NVIDIA runtime,
    else ``runc``, else ``crun``: the first of these that is configured and not in ``managed``, or None.
    (nvidia-ctk's GetLowLevelRuntimes, pkg/config/engine/engine.go; shared with CRI-O's configuration.)"""
    candidates = []
    if isinstance(default, str) and default and not default.startswith("nvidia"):
        table = runtimes.get(default)
        if isinstance(table, Mapping) and (table.get("runtime_type") or "") in types:
            candidates.append(default)
    candidates.extend(["runc", "crun"])
    for candidate in candidates:
        if candidate not in managed and isinstance(runtimes.get(candidate), Mapping):
            return candidate
    return None


def resolve_source(version, data, managed, effective=None, reference=None):
    """(name, table) of the runtime new runtimes copy, or (None, None).

    ``effective`` is the configuration containerd itself loads (``containerd config dump``): the
    source is chosen there and its non-zero settings overlay the file's table, so options set in
    imported files carry over. ``reference`` is a second file to look in when ``data`` has no source
    (the generated config.toml of a k3s/RKE2 template).
    """
    cri_keys = ("plugins", CRI_PLUGIN[version], "containerd")
    if effective is not None:
        eff_version = effective.get("version", 2) if isinstance(effective.get("version", 2), int) else 2
        eff_containerd = get(effective, ("plugins", CRI_PLUGIN.get(eff_version, CRI_PLUGIN[2]), "containerd")) or {}
        name = choose_source(eff_containerd, managed)
        if name is not None:
            table = copy.deepcopy(get(data, cri_keys + ("runtimes", name)) or {})
            overlay = nonzero(eff_containerd["runtimes"][name])
            table.update(dict((k, v) for k, v in overlay.items() if k != "options"))
            if "options" in overlay or "options" in table:
                options = dict(table.get("options") or {})
                options.update(overlay.get("options") or {})
                table["options"] = options
            return name, table
    for candidate in (data, reference):
        if candidate is None:
            continue
        containerd = get(candidate, cri_keys) or {}
        name = choose_source(containerd, managed)
        if name is not None:
            return name, containerd["runtimes"][name]
    return None, None


def new_runtime_table(source, runtime_path, version):
    """The table of a new runtime: a copy of ``source`` (or a bare one) pointed at ``runtime_path``."""
    data = copy.deepcopy(dict(source)) if source is not None else {"privileged_without_host_devices": False}
    data["runtime_type"] = RUNC_V2
    options = dict(data.pop("options", None) or {})
    options["BinaryName"] = runtime_path
    if version == 1:
        options["Runtime"] = runtime_path
    ordered = dict((k, v) for k, v in data.items() if not isinstance(v, dict))
    ordered["options"] = options
    ordered.update((k, v) for k, v in data.items() if isinstance(v, dict))
    return ordered


# ---------------------------------------------------------------- planning: what must change

def plan_present(data, version, runtimes, cdi=None, source=None):
    """Operations that add or refresh ``runtimes`` (a list of Runtime) in ``data``.

    New runtimes start from ``source`` (a table, see resolve_source). An existing one is refreshed,
    not replaced: ``runtime_type`` and ``options.BinaryName`` (version 1: also ``options.Runtime``) are
    enforced and ``SystemdCgroup`` is added from the source when it has none. Returns a list of
    ``("set", keys, value)`` and ``("delete", keys)``; empty when nothing changes.
    """
    ops = []
    cri = ("plugins", CRI_PLUGIN[version])
    containerd = cri + ("containerd",)
    rkeys = containerd + ("runtimes",)
    existing = get(data, rkeys) or {}
    source_options = (source or {}).get("options") or {}
    for item in runtimes:
        current = existing.get(item.name)
        if current is None:
            ops.append(("set", rkeys + (item.name,), new_runtime_table(source, item.path, version)))
            continue
        keys = rkeys + (item.name,)
        if current.get("runtime_type") != RUNC_V2:
            ops.append(("set", keys + ("runtime_type",), RUNC_V2))
        options = current.get("options")
        wanted = {"BinaryName": item.path}
        if version == 1:
            wanted["Runtime"] = item.path
        if "SystemdCgroup" in source_options:
            wanted["SystemdCgroup"] = source_options["SystemdCgroup"]
        if options is None:
            ops.append(("set", keys + ("options",), wanted))
            continue
        for key, value in wanted.items():
            if key == "SystemdCgroup" and key in options:
                continue  # an explicit setting of ours stays
            if options.get(key) != value:
                ops.append(("set", keys + ("options", key), value))
    ops.extend(_default_ops(data, version, runtimes, existing))
    if cdi is not None and get(data, cri + ("enable_cdi",)) is not bool(cdi):
        ops.append(("set", cri + ("enable_cdi",), bool(cdi)))
    return ops


def _default_ops(data, version, runtimes, existing, removed=()):
    """Set the default to the runtime marked default; hand a default back that a managed runtime holds.

    Handing back: to ``runc`` when that runtime exists (containerd's own default), else the key goes.
    """
    keys = ("plugins", CRI_PLUGIN[version], "containerd", "default_runtime_name")
    current = get(data, keys)
    defaults = [r.name for r in runtimes if r.default]
    if defaults:
        return [] if current == defaults[0] else [("set", keys, defaults[0])]
    if current is not None and current in [r.name for r in runtimes] + list(removed):
        if "runc" in existing and "runc" not in removed:
            return [] if current == "runc" else [("set", keys, "runc")]
        return [("delete", keys)]
    return []


def plan_absent(data, version, names):
    """Operations that remove the runtimes ``names`` and a default that names one of them.

    Tables that only existed to hold them are removed as well; everything else stays.
    """
    ops = []
    cri = ("plugins", CRI_PLUGIN[version])
    rkeys = cri + ("containerd", "runtimes")
    existing = get(data, rkeys) or {}
    gone = [name for name in names if name in existing]
    for name in gone:
        ops.append(("delete", rkeys + (name,)))
    ops.extend(_default_ops(data, version, [], existing, removed=names))
    if gone:
        after = apply_ops_data(data, ops)
        keys = rkeys
        while keys:
            table = get(after, keys)
            if not isinstance(table, Mapping) or len(table):
                break
            ops.append(("delete", keys))
            after = apply_ops_data(after, [("delete", keys)])
            keys = keys[:-1]
    return ops


def apply_ops_data(data, ops):
    """``data`` with the operations applied, as a new value: only the tables on the operations' paths are
    copied (the rest is shared with ``data``, which stays as it was); ``data`` itself when there is none."""
    if not ops:
        return data
    data = dict(data)
    fresh = {id(data)}
    for op in ops:
        keys = op[1]
        node = data
        for key in keys[:-1]:
            child = node.get(key)
            if not isinstance(child, dict):
                if op[0] == "delete":
                    node = None
                    break
                child = {}
            if id(child) not in fresh:
                child = dict(child)
                fresh.add(id(child))
            node[key] = child
            node = child
        if node is None:
            continue
        if op[0] == "delete":
            node.pop(keys[-1], None)
        elif op[0] == "append":
            node[keys[-1]] = list(node.get(keys[-1]) or []) + [op[2]]
        else:
            node[keys[-1]] = copy.deepcopy(op[2])
    return data


# ---------------------------------------------------------------- applying to the tomlkit document

class _Style:
    """How new lines are written: header indentation step, quoting, where a new runtime sits."""

    def __init__(self, step=0, literal=False, runtime_indent=None, runtime_key_step=None):
        self.step = step
        self.literal = literal
        self.runtime_indent = runtime_indent
        self.runtime_key_step = runtime_key_step


def _is_inline(table):
    return type(table).__name__ == "InlineTable"


def _ensure(table, keys, step=0, depth=0):
    """Walk ``keys`` under ``table``, creating missing tables (headers only where needed).

    ``depth`` is the number of keys above ``table``; a created header is indented ``step``
    spaces per level, as containerd writes its own files. Inside an inline table the missing
    tables are inline as well.
    """
    for key in keys:
        depth += 1
        if key not in table:
            if _is_inline(table):
                new = tomlkit.inline_table()
            else:
                new = tomlkit.table(is_super_table=True)
                if step:
                    new.trivia.indent = "\n" + " " * (step * (depth - 1))
            table[key] = new
        child = table[key]
        if not isinstance(child, MutableMapping):
            raise ConfigFileError("%s is %s, expected a table" % (key, _kind(plain(child))))
        table = child
    return table


def _set(table, key, value, indent=None):
    """Set ``key`` only when its value differs; keep the file's string quoting style.

    A new key gets the indentation of its table's other keys, else ``indent``."""
    if key in table and plain(table[key]) == value:
        return False
    if isinstance(value, str) and key in table:
        literal = _string_kind(table[key]) == "SLL"
        if literal and "'" not in value and "\n" not in value:
            table[key] = tomlkit.string(value, literal=True)
            return True
    if key not in table and _is_super(table):
        # a table that only held sub-tables gets a visible header once it holds a key
        table._is_super_table = False  # pylint: disable=protected-access
    new_key = key not in table
    table[key] = value
    if new_key and not _is_inline(table):
        _match_key_indent(table, key, indent)
    return True


def _match_key_indent(table, key, fallback=None):
    """Give a new key the indentation of the keys already in its table."""
    body = getattr(getattr(table, "value", None), "body", None)
    if not body:
        return
    indent = None
    target = None
    for item_key, item in body:
        if item_key is None or isinstance(item, MutableMapping) or not hasattr(item, "trivia"):
            continue
        if getattr(item_key, "key", item_key) == key:
            target = item
        else:
            indent = item.trivia.indent
    if indent is None:
        indent = fallback
    if indent is not None and target is not None:
        target.trivia.indent = indent


def _is_super(table):
    check = getattr(table, "is_super_table", None)
    return bool(check()) if callable(check) else False


def _header_indent(table):
    try:
        return len(table.trivia.indent.replace("\n", "").replace("\r", ""))
    except AttributeError:
        return 0


def _key_step(table, header_indent, default):
    """How far the keys of ``table`` sit right of its header."""
    body = getattr(getattr(table, "value", None), "body", None) or []
    for item_key, item in body:
        if item_key is not None and not isinstance(item, MutableMapping) and hasattr(item, "trivia"):
            return max(0, len(item.trivia.indent.replace("\n", "")) - header_indent)
    return default


def _style_for(doc, masked, version, source_name):
    """Indentation and quoting of the file, taken from the source runtime's table where there is one."""
    step = 2 if re.search(r"^[ \t]+\[", masked or "", re.M) else 0
    style = _Style(step=step)
    runtimes = get(doc, ("plugins", CRI_PLUGIN[version], "containerd", "runtimes"))
    if source_name and isinstance(runtimes, Mapping) and source_name in runtimes:
        table = runtimes[source_name]
        style.literal = _uses_literal(table)
        style.runtime_indent = _header_indent(table)
        style.runtime_key_step = _key_step(table, style.runtime_indent, step)
    return style


def _add_table(parent, keys, value, style):
    """Append a whole new table (a runtime) to ``parent`` in the file's layout."""
    if _is_inline(parent):
        parent[keys[-1]] = value
        return
    depth = len(keys) - 1
    key_step = style.runtime_key_step if style.runtime_key_step is not None else style.step
    if style.runtime_indent is not None and depth >= 4:
        indent = style.runtime_indent + key_step * (depth - 4)
    else:
        indent = style.step * depth
    snippet = tomlkit.parse(render_table(list(keys), value, indent, key_step, literal=style.literal) + "\n")
    new_table = get(snippet, keys)
    if hasattr(parent, "raw_append"):
        parent.raw_append(keys[-1], new_table)
    else:
        parent[keys[-1]] = new_table


def apply_ops_doc(doc, ops, style):
    """Apply the operations to a tomlkit document in place, keeping everything else as it is."""
    for op in ops:
        keys = op[1]
        if op[0] == "delete":
            parent = get(doc, keys[:-1])
            if isinstance(parent, MutableMapping) and keys[-1] in parent:
                del parent[keys[-1]]
            continue
        value = op[2]
        parent = _ensure(doc, keys[:-1], style.step)
        if op[0] == "append" and keys[-1] in parent:
            parent[keys[-1]].append(value)
        elif op[0] == "append":
            parent[keys[-1]] = [value]
        elif isinstance(value, dict) and keys[-1] not in parent:
            _add_table(parent, keys, value, style)
        else:
            _set(parent, keys[-1], value, " " * (style.step * (len(keys) - 1)))
    return doc


# ---------------------------------------------------------------- writing the CRI table anew

def _drop_definitions(container, keys):
    """Remove every definition of ``keys`` (tables, dotted keys, inline entries) from a tomlkit container.

    Works on the container's body, the list of (key, item) pairs the document renders from, so
    dotted keys and tables out of order are found wherever they are. Returns True when something went.
    """
    body = container.body
    removed = False
    for index, (key, item) in enumerate(body):
        if key is None or getattr(key, "key", key) != keys[0]:
            continue
        if len(keys) == 1:
            body[index] = (None, tomlkit.items.Null())
            removed = True
        elif _is_inline(item):
            if keys[1] in item:
                del item[keys[1]]
                removed = True
        elif isinstance(item, MutableMapping) and hasattr(item, "value"):
            if _drop_definitions(item.value, keys[1:]):
                removed = True
                left = [k for k, _v in item.value.body if k is not None]
                dotted_key = getattr(key, "is_dotted", lambda: False)()
                if not left and (dotted_key or _is_super(item)):
                    body[index] = (None, tomlkit.items.Null())
    return removed


# ---------------------------------------------------------------- whole-file operations

def _tidy_end(text):
    return text.rstrip("\n") + "\n" if text.strip() else ""


def _loads_as(text, want, path, saved):
    """Whether ``text`` loads exactly as ``want`` and still holds every masked template line."""
    try:
        loaded = load(text, path)
    except ConfigFileError:
        return False
    return loaded == want and all(_TEMPLATE_MARK % i in text for i in range(len(saved)))


def _in_plugin(keys, version):
    return tuple(keys[:2]) == ("plugins", CRI_PLUGIN[version])


def _edited_text(doc, masked, ops, want, path, version, style, saved):
    """Apply ``ops`` keeping the file's text; the CRI table is written anew where that fails.

    The result must load exactly as ``want``; otherwise ConfigFileError naming the file and the key.
    """
    try:
        apply_ops_doc(doc, ops, style)
        text = tomlkit.dumps(doc)
        if _loads_as(text, want, path, saved):
            return _tidy_end(text)
    except (TOMLKitError, KeyError, TypeError, ValueError, AttributeError):
        pass  # a spelling tomlkit cannot edit in place: written anew below
    keys = ["plugins", CRI_PLUGIN[version]]
    fresh = parse(masked, path)
    try:
        _drop_definitions(fresh, keys)
        apply_ops_doc(fresh, [op for op in ops if not _in_plugin(op[1], version)], style)
        text = tomlkit.dumps(fresh)
    except (TOMLKitError, KeyError, TypeError, ValueError, AttributeError):
        text = None
    table = get(want, keys)
    if text is not None and table is not None:
        text = _tidy_end(text) + ("\n" if text.strip() else "") + render_table(keys, table, 0, 0)
    if text is not None and _loads_as(text, want, path, saved):
        return _tidy_end(text)
    failed = [op[1] for op in ops if _in_plugin(op[1], version)] or [op[1] for op in ops]
    raise ConfigFileError("%s: cannot write %s: the file spells it in a way the module cannot edit without "
                          "changing what containerd loads (an inline table holding a table?)" % (path, dotted(failed[0])))


def edit_text(text, path, state, runtimes, runtime_path=None, set_as_default=False, cdi=None,
              reference_text=None, reference_path=None, effective=None, info=None):
    """Edit one containerd config text. Returns (new_text, version).

    ``runtimes`` is a list of Runtime, or one runtime's name with ``runtime_path`` and
    ``set_as_default``. ``text`` None means the file does not exist. Go template lines (k3s/RKE2
    templates) are kept as they are. ``effective`` is containerd's own view of the configuration
    (the parsed ``containerd config dump``) to take runtime options from. ``info``, a dict, receives
    ``options_source`` (the runtime new runtimes copy).
    """
    runtimes = as_runtimes(runtimes, runtime_path, set_as_default)
    info = {} if info is None else info
    masked, saved = mask_template(text or "")
    data = load(masked, path)
    reference = None
    if reference_text is not None:
        reference = load(mask_template(reference_text)[0], reference_path or "reference config")
    base_template = any("template" in line and "base" in line for line in saved)
    if base_template and state == "present" and (any(r.default for r in runtimes) or cdi is not None):
        raise ConfigFileError(
            '%s starts with {{ template "base" . }}, which already holds the CRI and containerd tables: '
            "set_as_default and cdi cannot be added there (use the --default-runtime flag of k3s/RKE2, "
            "or a template without the base directive)" % path)
    if saved and "version" not in data:
        version = config_version(reference, reference_path) if reference is not None else DEFAULT_VERSION
    else:
        version = config_version(data, path)
    check_shape(data, path, version)
    if reference is not None:
        check_shape(reference, reference_path or "reference config", version)
    names = [r.name for r in runtimes]
    if state == "present":
        source_name, source = resolve_source(version, data, names, effective, reference)
        info["options_source"] = source_name
        ops = plan_present(data, version, runtimes, cdi, source)
        if not len(data) and not saved and version != 1 and ops:
            ops.insert(0, ("set", ("version",), version))
    else:
        source_name = None
        ops = plan_absent(data, version, names)
    if not ops:
        return text, version
    want = apply_ops_data(data, ops)
    doc = parse(masked, path)
    style = _style_for(doc, masked, version, source_name)
    new_text = _edited_text(doc, masked, ops, want, path, version, style, saved)
    if new_text == masked:
        return text, version
    return unmask_template(new_text, saved), version


# ---------------------------------------------------------------- drop-in mode

def import_pattern(drop_in_path):
    return os.path.join(os.path.dirname(drop_in_path), "*.toml")


def _glob_match(pattern, path, base):
    """Whether containerd's import ``pattern`` (Go filepath.Glob; relative to ``base``) matches ``path``."""
    if not os.path.isabs(pattern):
        pattern = os.path.join(base, pattern)
    pattern_parts = os.path.normpath(pattern).split(os.sep)
    path_parts = os.path.normpath(path).split(os.sep)
    if len(pattern_parts) != len(path_parts):
        return False
    return all(fnmatch.fnmatchcase(part, pat) for part, pat in zip(path_parts, pattern_parts))


def imported_by(imports, drop_in_path, main_path):
    """The first glob of ``imports`` that loads ``drop_in_path``, or None."""
    base = os.path.dirname(os.path.abspath(main_path))
    for pattern in imports:
        if _glob_match(pattern, os.path.abspath(drop_in_path), base):
            return pattern
    return None


def _carried(old_drop, version, main, managed):
    """What an earlier run (or a hand) put into the drop-in that this run must keep.

    The runtimes that are neither in the main file nor managed now, a default naming one of them,
    and ``enable_cdi`` where it differs from the main file. Returns a dict of operations' values.
    """
    cri = ("plugins", CRI_PLUGIN[version])
    carried = {"runtimes": {}, "default": None, "enable_cdi": None}
    if old_drop is None:
        return carried
    main_runtimes = get(main, cri + ("containerd", "runtimes")) or {}
    for name, table in (get(old_drop, cri + ("containerd", "runtimes")) or {}).items():
        if name not in main_runtimes and name not in managed:
            carried["runtimes"][name] = table
    default = get(old_drop, cri + ("containerd", "default_runtime_name"))
    if default in carried["runtimes"]:
        carried["default"] = default
    cdi = get(old_drop, cri + ("enable_cdi",))
    if cdi is not None and cdi != get(main, cri + ("enable_cdi",)):
        carried["enable_cdi"] = cdi
    return carried


def render_drop_in(data):
    """The drop-in's text for its plain data (version and the CRI table), in table form."""
    try:
        return DROP_IN_HEADER + "\n" + _tidy_end(tomlkit.dumps(data))
    except (TOMLKitError, ValueError) as exc:
        raise ConfigFileError("the drop-in cannot be written: %s" % exc)


def edit_drop_in(main_text, main_path, drop_in_text, drop_in_path, state, runtimes, runtime_path=None,
                 set_as_default=False, cdi=None, effective=None, info=None):
    """Drop-in mode. Returns (new_main_text, new_drop_in_text_or_None, version).

    The drop-in holds ``version`` and the main file's complete CRI table plus the managed runtimes
    (containerd < 2.1 replaces a plugin table per import), and keeps what earlier runs put there
    for other runtimes. The main file gets ``imports`` with the drop-in directory unless a glob
    there already loads the drop-in. ``None`` for the drop-in means it must not exist.
    """
    runtimes = as_runtimes(runtimes, runtime_path, set_as_default)
    info = {} if info is None else info
    names = [r.name for r in runtimes]
    main = load(main_text or "", main_path)
    version = config_version(main, main_path)
    if version == 1:
        raise ConfigFileError("%s: config version 1 has no imports; use mode=in_place" % main_path)
    check_shape(main, main_path, version)
    old_drop = None
    if drop_in_text is not None:
        old_drop = load(drop_in_text, drop_in_path)  # refuse to overwrite a drop-in that does not parse
        check_shape(old_drop, drop_in_path, config_version(old_drop, drop_in_path) if old_drop else version)
    cri = ("plugins", CRI_PLUGIN[version])
    pattern = import_pattern(drop_in_path)

    # the managed runtimes never live in the main file in this mode
    main_ops = plan_absent(main, version, names)
    main_after = apply_ops_data(main, main_ops)
    carried = _carried(old_drop, version, main_after, names)
    # the drop-in goes when it would hold none of the runtimes it exists for
    keep_drop = state == "present" or bool(carried["runtimes"])

    imports = list(main_after.get("imports") or [])
    if keep_drop:
        if imported_by(imports, drop_in_path, main_path) is None:
            if imported_by([pattern], drop_in_path, main_path) is None:
                raise ConfigFileError(
                    "drop_in_path %s would not be loaded: containerd imports files by glob and %s does not match it; "
                    "give the drop-in a .toml name in a directory without glob characters" % (drop_in_path, pattern))
            main_ops.append(("append", ("imports",), pattern))
            if not len(main_after):
                main_ops.insert(0, ("set", ("version",), version))
    elif imports == [pattern] and sorted(main_after) == ["imports", "version"]:
        main_ops.extend([("delete", ("imports",)), ("delete", ("version",))])
    new_main = main_text
    if main_ops:
        masked = main_text or ""
        doc = parse(masked, main_path)
        want = apply_ops_data(main, main_ops)
        new_main = _edited_text(doc, masked, main_ops, want, main_path, version, _style_for(doc, masked, version, None),
                                [])
        if not want:
            new_main = ""

    if not keep_drop:
        return new_main, None, version
    drop = {"version": version, "plugins": {CRI_PLUGIN[version]: get(main_after, cri) or {}}}
    if carried["runtimes"]:
        runtimes_keys = cri + ("containerd", "runtimes")
        drop = apply_ops_data(drop, [("set", runtimes_keys + (name,), table)
                                     for name, table in carried["runtimes"].items()])
    if carried["default"] is not None:
        drop = apply_ops_data(drop, [("set", cri + ("containerd", "default_runtime_name"), carried["default"])])
    if carried["enable_cdi"] is not None:
        drop = apply_ops_data(drop, [("set", cri + ("enable_cdi",), carried["enable_cdi"])])
    if state == "present":
        source_name, source = resolve_source(version, main_after, names, effective)
        info["options_source"] = source_name
        drop = apply_ops_data(drop, plan_present(drop, version, runtimes, cdi, source))
    if old_drop is not None and old_drop == drop:
        return new_main, drop_in_text, version
    return new_main, render_drop_in(drop), version


# ---------------------------------------------------------------- flavors

def detect_flavor(path=None, root="/"):
    """k3s or RKE2 when their containerd directory exists (or ``path`` lies in it), else containerd."""
    for flavor in ("k3s", "rke2"):
        directory = FLAVOR_DIRS[flavor]
        if path:
            if os.path.abspath(path).startswith(directory + "/"):
                return flavor
        elif os.path.isdir(os.path.join(root, directory.lstrip("/"))):
            return flavor
    return "containerd"


def template_paths(flavor, path=None):
    """(template path, generated config path) for k3s/RKE2.

    ``path`` may name either the template or the generated ``config.toml``.
    """
    if not path:
        path = os.path.join(FLAVOR_DIRS[flavor], "config.toml.tmpl")
    if path.endswith(".tmpl"):
        return path, path[: -len(".tmpl")]
    return path + ".tmpl", path
