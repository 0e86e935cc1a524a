# -*- coding: utf-8 -*-
# Copyright (c) kubegpu.nvidia maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Add or remove the NVIDIA runtime in a containerd configuration (versions 1, 2 and 3).

The file is edited with tomlkit so that comments, key order and formatting
of everything we do not touch survive byte for byte. Every function here
works on text and returns text; reading and writing files is the module's job.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os
import re

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
    import tomllib  # Python >= 3.11: a fast parser for the no-change check
except ImportError:  # pragma: no cover - older Pythons always take the tomlkit path
    tomllib = None

from ansible_collections.kubegpu.nvidia.plugins.module_utils.config_file import ConfigFileError

RUNC_V2 = "io.containerd.runc.v2"
RUNC_SHIMS = ("io.containerd.runc.v1", "io.containerd.runc.v2")
CRI_PLUGIN = {1: "cri", 2: "io.containerd.grpc.v1.cri", 3: "io.containerd.cri.v1.runtime"}
DEFAULT_VERSION = 2
DEFAULT_PATH = "/etc/containerd/config.toml"
DEFAULT_DROP_IN = "/etc/containerd/conf.d/99-nvidia.toml"
FLAVOR_DIRS = {
    "k3s": "/var/lib/rancher/k3s/agent/etc/containerd",
    "rke2": "/var/lib/rancher/rke2/agent/etc/containerd",
}
DROP_IN_HEADER = (
    "# Managed by kubegpu.nvidia.container_runtime_nvidia: the NVIDIA runtime for containerd.\n"
    "# containerd before 2.1 replaces a whole plugin table per import, so this file\n"
    "# carries the complete CRI table of the main configuration. Edit that file, not this one.\n"
)
# Whole-line Go template directives in k3s/RKE2 config.toml.tmpl files.
_TEMPLATE_LINE = re.compile(r"^[ \t]*\{\{.*\}\}[ \t]*$")
_TEMPLATE_MARK = "#kubegpu-template-line-%d"
_BARE_KEY = re.compile(r"^[A-Za-z0-9_-]+$")


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


def config_version(doc, path="config"):
    """containerd's rule: empty file -> 2, no ``version`` key -> 1, else the key (1, 2 or 3)."""
    if not len(doc):
        return DEFAULT_VERSION
    version = doc.get("version")
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


def _quote_key(key):
    if _BARE_KEY.match(key):
        return key
    return '"%s"' % key.replace("\\", "\\\\").replace('"', '\\"')


def render_value(value, literal=False):
    if literal and isinstance(value, str) and "'" not in value and "\n" not in value:
        return "'%s'" % value
    if literal and isinstance(value, list):
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
    """TOML text for a table and its sub-tables at an absolute indentation."""
    pad = " " * indent
    lines = ["%s[%s]" % (pad, ".".join(_quote_key(k) for k in keys))]
    subtables = []
    for key, value in data.items():
        if isinstance(value, dict):
            subtables.append((key, value))
        else:
            lines.append("%s%s = %s" % (" " * (indent + step), _quote_key(key), render_value(value, literal)))
    text = "\n".join(lines) + "\n"
    for key, value in subtables:
        text += render_table(keys + [key], value, indent + step, step, literal)
    return text


def _get(table, *keys):
    for key in keys:
        if not isinstance(table, Mapping) or key not in table:
            return None
        table = table[key]
    return table


def _ensure(table, keys, step=0, depth=0):
    """Walk ``keys`` under ``table``, creating missing tables (headers only where needed).

    ``depth`` is the number of keys above ``table``; a created header is indented
    ``step`` spaces per level, as containerd writes its own files.
    """
    for key in keys:
        depth += 1
        if key not in table:
            new = tomlkit.table(is_super_table=True)
            if step:
                new.trivia.indent = "\n" + " " * (step * (depth - 1))
            table[key] = new
        child = table[key]
        if not isinstance(child, MutableMapping):
            raise ConfigFileError("%s is a %s, expected a table" % (key, type(plain(child)).__name__))
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
    if new_key:
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


def _delete(table, key):
    if table is not None and key in table:
        del table[key]
        return True
    return False


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


def source_runtime(containerd, name):
    """The runtime whose table the new one starts from: the default runtime when it is a
    runc shim, else ``runc``, else ``crun``. Returns (name, table) or (None, None)."""
    runtimes = _get(containerd, "runtimes") or {}
    candidates = []
    default = plain(_get(containerd, "default_runtime_name"))
    if isinstance(default, str) and default:
        candidates.append(default)
    candidates.extend(["runc", "crun"])
    for candidate in candidates:
        if candidate == name or candidate not in runtimes:
            continue
        table = runtimes[candidate]
        if not isinstance(table, Mapping):
            continue
        runtime_type = plain(table.get("runtime_type", RUNC_V2))
        if candidate == default and runtime_type not in RUNC_SHIMS and candidate not in ("runc", "crun"):
            continue
        return candidate, table
    return None, None


def _new_runtime_data(source, runtime_path):
    data = plain(source) if source is not None else {"privileged_without_host_devices": False}
    data = dict(data)
    data["runtime_type"] = RUNC_V2
    options = dict(data.get("options") or {})
    options["BinaryName"] = runtime_path
    data.pop("options", None)
    ordered = dict((k, v) for k, v in data.items() if not isinstance(v, dict))
    ordered["options"] = options
    ordered.update((k, v) for k, v in data.items() if isinstance(v, dict) and k != "options")
    return ordered


# ---------------------------------------------------------------- editing

def apply_present(doc, version, runtime_name, runtime_path, set_as_default=False, cdi=None,
                  reference=None, step=0):
    """Add/refresh our runtime in ``doc`` (a tomlkit document) in place.

    ``reference`` is a second document to take the source runtime from when ``doc``
    has none (a k3s/RKE2 template that starts from the generated config).
    """
    cri_name = CRI_PLUGIN[version]
    created = not len(doc)
    if created and version != 1:
        doc["version"] = version
    cri = _ensure(doc, ["plugins", cri_name], step)
    containerd = _ensure(cri, ["containerd"], step, 2)
    runtimes = _ensure(containerd, ["runtimes"], step, 3)

    src_name, src = source_runtime(containerd, runtime_name)
    if src is None and reference is not None:
        ref_containerd = _get(reference, "plugins", cri_name, "containerd")
        if ref_containerd is not None:
            src_name, src = source_runtime(ref_containerd, runtime_name)

    if runtime_name not in runtimes:
        data = _new_runtime_data(src, runtime_path)
        indent, key_step = step * 4, step
        if src_name and src_name in runtimes:
            indent = _header_indent(runtimes[src_name])
            key_step = _key_step(runtimes[src_name], indent, step)
        keys = ["plugins", cri_name, "containerd", "runtimes", runtime_name]
        snippet = tomlkit.parse(render_table(keys, data, indent, key_step, literal=_uses_literal(src)) + "\n")
        new_table = _get(snippet, *keys)
        if hasattr(runtimes, "raw_append"):
            runtimes.raw_append(runtime_name, new_table)
        else:
            runtimes[runtime_name] = new_table
    else:
        ours = runtimes[runtime_name]
        if not isinstance(ours, MutableMapping):
            raise ConfigFileError("runtimes.%s is not a table" % runtime_name)
        _set(ours, "runtime_type", RUNC_V2, " " * (step * 5))
        options = _ensure(ours, ["options"], step, 5)
        _set(options, "BinaryName", runtime_path, " " * (step * 6))
        src_options = _get(src, "options") if src is not None else None
        if src_options is not None and "SystemdCgroup" in src_options and "SystemdCgroup" not in options:
            _set(options, "SystemdCgroup", plain(src_options["SystemdCgroup"]), " " * (step * 6))

    _apply_default(containerd, runtimes, runtime_name, set_as_default, " " * (step * 3))
    if cdi is not None:
        _set(cri, "enable_cdi", bool(cdi), " " * (step * 2))
    return doc


def _apply_default(containerd, runtimes, runtime_name, set_as_default, indent=None):
    current = plain(_get(containerd, "default_runtime_name"))
    if set_as_default:
        _set(containerd, "default_runtime_name", runtime_name, indent)
    elif current == runtime_name:
        _unset_default(containerd, runtimes, runtime_name)


def _unset_default(containerd, runtimes, runtime_name):
    """Hand the default back to runc (containerd's own default) when we hold it."""
    if plain(_get(containerd, "default_runtime_name")) != runtime_name:
        return
    if runtimes is not None and "runc" in runtimes:
        _set(containerd, "default_runtime_name", "runc")
    else:
        _delete(containerd, "default_runtime_name")


def apply_absent(doc, version, runtime_name):
    """Remove our runtime and a default that points to it; leave everything else."""
    if not len(doc):
        return doc
    containerd = _get(doc, "plugins", CRI_PLUGIN[version], "containerd")
    if containerd is None:
        return doc
    runtimes = _get(containerd, "runtimes")
    removed = runtimes is not None and _delete(runtimes, runtime_name)
    _unset_default(containerd, runtimes, runtime_name)
    if removed:
        # drop the tables that only existed to hold our runtime
        path = ["plugins", CRI_PLUGIN[version], "containerd", "runtimes"]
        while path:
            table = _get(doc, *path)
            if not isinstance(table, Mapping) or len(table):
                break
            parent = _get(doc, *path[:-1]) if len(path) > 1 else doc
            del parent[path[-1]]
            path.pop()
    return doc


# ---------------------------------------------------------------- whole-file operations

def edit_text(text, path, state, runtime_name, runtime_path, set_as_default=False, cdi=None,
              reference_text=None, reference_path=None):
    """Edit one containerd config text. Returns (new_text, version).

    ``text`` None means the file does not exist. Go template lines (k3s/RKE2
    templates) are kept as they are.
    """
    masked, saved = mask_template(text or "")
    if text and not saved and reference_text is None:
        fast = is_configured(masked, state, runtime_name, runtime_path, set_as_default, cdi)
        if fast is not None and fast[0]:
            return text, fast[1]
    doc = parse(masked, path)
    reference = None
    if reference_text is not None:
        ref_masked, _unused = mask_template(reference_text)
        reference = parse(ref_masked, reference_path or "reference config")
    base_template = any("template" in line and "base" in line for line in saved)
    if base_template and state == "present" and (set_as_default or cdi is not None):
        raise ConfigFileError(
            '%s starts with {{ template "base" . }}, which already holds the CRI and containerd tables: '
            "set_as_default and cdi cannot be added there (use the --default-runtime flag of k3s/RKE2, "
            "or a template without the base directive)" % path)
    if saved and "version" not in doc and reference is not None:
        version = config_version(reference, reference_path)
    elif saved and "version" not in doc:
        version = DEFAULT_VERSION
    else:
        version = config_version(doc, path)
    if state == "present":
        step = 2 if re.search(r"^[ \t]+\[", masked, re.M) else 0
        apply_present(doc, version, runtime_name, runtime_path, set_as_default, cdi, reference, step)
    else:
        apply_absent(doc, version, runtime_name)
    new_text = tomlkit.dumps(doc)
    if new_text == masked:
        return text, version
    return unmask_template(_tidy_end(new_text), saved), version


def _tidy_end(text):
    return text.rstrip("\n") + "\n" if text.strip() else ""


def is_configured(text, state, runtime_name, runtime_path, set_as_default=False, cdi=None):
    """Cheap check with the standard library's parser: (True, version) when editing would
    change nothing, (False, version) when it would, None when it cannot tell."""
    if tomllib is None:
        return None
    try:
        data = tomllib.loads(text)
    except Exception:  # pylint: disable=broad-except  # the tomlkit path reports the error
        return None
    try:
        return _is_configured(data, state, runtime_name, runtime_path, set_as_default, cdi)
    except (AttributeError, TypeError, KeyError):
        return None  # an odd shape: the tomlkit path explains it


def _is_configured(data, state, runtime_name, runtime_path, set_as_default, cdi):
    if not data:
        return None
    version = data.get("version", 1)
    if version not in CRI_PLUGIN or isinstance(version, bool):
        return None
    containerd = ((data.get("plugins") or {}).get(CRI_PLUGIN[version]) or {}).get("containerd") or {}
    cri = (data.get("plugins") or {}).get(CRI_PLUGIN[version]) or {}
    if not isinstance(containerd, dict) or not isinstance(cri, dict):
        return None
    runtimes = containerd.get("runtimes") or {}
    default = containerd.get("default_runtime_name")
    if state == "absent":
        return runtime_name not in runtimes and default != runtime_name, version
    ours = runtimes.get(runtime_name)
    if not isinstance(ours, dict) or ours.get("runtime_type") != RUNC_V2:
        return False, version
    options = ours.get("options") or {}
    if options.get("BinaryName") != runtime_path:
        return False, version
    src_name, src = source_runtime(containerd, runtime_name)
    if src is not None and "SystemdCgroup" in (src.get("options") or {}) and "SystemdCgroup" not in options:
        return False, version
    if set_as_default and default != runtime_name:
        return False, version
    if not set_as_default and default == runtime_name:
        return False, version
    if cdi is not None and cri.get("enable_cdi") is not bool(cdi):
        return False, version
    return True, version


def import_pattern(drop_in_path):
    return os.path.join(os.path.dirname(drop_in_path), "*.toml")


def edit_drop_in(main_text, main_path, drop_in_text, drop_in_path, state, runtime_name, runtime_path,
                 set_as_default=False, cdi=None):
    """Drop-in mode. Returns (new_main_text, new_drop_in_text_or_None, version).

    The drop-in holds ``version`` and the main file's complete CRI table plus our
    runtime (containerd < 2.1 replaces a plugin table per import). The main file
    gets ``imports`` with the drop-in directory. ``None`` for the drop-in means
    it must not exist (state absent).
    """
    doc = parse(main_text or "", main_path)
    version = config_version(doc, main_path)
    if version == 1:
        raise ConfigFileError("%s: config version 1 has no imports; use mode=in_place" % main_path)
    if drop_in_text is not None:
        parse(drop_in_text, drop_in_path)  # refuse to overwrite a drop-in that does not parse
    cri_name = CRI_PLUGIN[version]
    pattern = import_pattern(drop_in_path)

    # our runtime never lives in the main file in this mode
    apply_absent(doc, version, runtime_name)

    if state == "absent":
        imports = doc.get("imports")
        keys = list(doc.keys())
        if imports is not None and plain(imports) == [pattern] and sorted(keys) == ["imports", "version"]:
            del doc["imports"]
            del doc["version"]
        new_main = tomlkit.dumps(doc)
        return (main_text if new_main == (main_text or "") else _tidy_end(new_main)), None, version

    if not len(doc):
        doc["version"] = version
    imports = doc.get("imports")
    if imports is None:
        doc["imports"] = [pattern]
    elif not isinstance(plain(imports), list):
        raise ConfigFileError("%s: imports is not a list" % main_path)
    elif pattern not in plain(imports):
        imports.append(pattern)
    new_main = tomlkit.dumps(doc)
    if new_main == (main_text or ""):
        new_main = main_text

    drop = tomlkit.document()
    drop["version"] = version
    cri_data = plain(_get(doc, "plugins", cri_name) or {})
    plugins = tomlkit.table(is_super_table=True)
    drop["plugins"] = plugins
    plugins[cri_name] = tomlkit.item(cri_data)
    apply_present(drop, version, runtime_name, runtime_path, set_as_default, cdi)
    new_drop = DROP_IN_HEADER + "\n" + _tidy_end(tomlkit.dumps(drop))
    if drop_in_text is not None and plain(parse(drop_in_text, drop_in_path)) == plain(drop):
        new_drop = drop_in_text
    return new_main, new_drop, version


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
