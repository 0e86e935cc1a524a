# -*- coding: utf-8 -*-
# Copyright (c) kubegpu.nvidia maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Safe handling of the configuration files the runtime modules edit.

Reading with clear errors, unified before/after diffs, backups, a
``validate`` command run on the candidate file, and atomic replacement that
keeps the owner and mode of the file it replaces.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import errno
import os
import shlex
import tempfile

from ansible.module_utils.common.text.converters import to_bytes, to_native, to_text

from ansible_collections.kubegpu.nvidia.plugins.module_utils.errors import KubegpuError


class ConfigFileError(KubegpuError):
    """A user-facing failure about one configuration file (one line, no traceback).

    Kind ``input`` (a file or option the module cannot use) unless given, e.g. ``runtime`` for a write
    the node refused.
    """

    kind = "input"


def _os_reason(exc):
    if isinstance(exc, OSError) and exc.errno is not None:
        return os.strerror(exc.errno)
    return to_native(exc)


def read_text(path):
    """Return the text of ``path``, or ``None`` when it does not exist.

    Raises ConfigFileError when the path is a directory, unreadable or not UTF-8.
    """
    if os.path.isdir(path):
        raise ConfigFileError("%s is a directory, not a configuration file" % path)
    try:
        with open(to_bytes(path), "rb") as handle:
            data = handle.read()
    except (IOError, OSError) as exc:
        if exc.errno == errno.ENOENT:
            return None
        raise ConfigFileError("cannot read %s: %s" % (path, _os_reason(exc)))
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigFileError("cannot read %s: not UTF-8 text (byte %d)" % (path, exc.start))


def make_diff(path, before, after):
    """Ansible diff dict for one file (``before`` None means the file is new)."""
    return {
        "before": before or "",
        "after": after or "",
        "before_header": path if before is not None else "%s (absent)" % path,
        "after_header": path if after is not None else "%s (absent)" % path,
    }


def _ensure_parent(path, mode=0o755):
    parent = os.path.dirname(path) or "."
    if os.path.isdir(parent):
        return
    try:
        os.makedirs(parent, mode)
    except OSError as exc:
        raise ConfigFileError("cannot create directory %s: %s" % (parent, _os_reason(exc)))


def _run_validate(module, validate, tmp_path, path):
    if "%s" not in validate:
        raise ConfigFileError("validate must contain %%s (the candidate file): %s" % validate)
    argv = [part.replace("%s", tmp_path) for part in shlex.split(validate)]
    try:
        rc, out, err = module.run_command(argv)
    except Exception as exc:  # run_command raises OSError subclasses when the binary is missing
        raise ConfigFileError("validate command for %s could not run: %s" % (path, to_native(exc)))
    if rc != 0:
        output = "\n".join(x for x in (to_text(out).strip(), to_text(err).strip()) if x)
        raise ConfigFileError(
            "validate command failed for %s (rc=%d), file left unchanged: %s" % (path, rc, output or "(no output)"),
            rc=rc, stdout=to_text(out), stderr=to_text(err), cmd=argv,
        )


def write_file(module, path, text, validate=None, backup=False, mode=None):
    """Replace ``path`` with ``text`` atomically.

    The new content goes to a temp file in the same directory, is checked with
    ``validate`` (a command holding ``%s``), then moved over the old file with
    ``module.atomic_move`` (which keeps the old file's owner, mode and SELinux
    context). ``mode`` applies only to a file that did not exist.
    Returns the backup file name or ``None``.
    """
    existed = os.path.exists(path)
    _ensure_parent(path)
    directory = os.path.dirname(path) or "."
    try:
        fd, tmp_path = tempfile.mkstemp(prefix=".%s." % os.path.basename(path), suffix=".tmp", dir=directory)
    except (IOError, OSError) as exc:
        raise ConfigFileError("cannot write %s: %s" % (path, _os_reason(exc)))
    backup_file = None
    try:
        try:
            with os.fdopen(fd, "wb") as handle:
                handle.write(to_bytes(text))
        except (IOError, OSError) as exc:
            raise ConfigFileError("cannot write %s: %s" % (path, _os_reason(exc)))
        if validate:
            _run_validate(module, validate, tmp_path, path)
        if backup and existed:
            backup_file = module.backup_local(path)
        module.atomic_move(tmp_path, path, unsafe_writes=False)
        tmp_path = None
        if not existed and mode is not None:
            os.chmod(path, mode)
    finally:
        if tmp_path and os.path.exists(tmp_path):
            os.unlink(tmp_path)
    return backup_file


def remove_file(module, path, backup=False):
    """Delete ``path`` (used when a file only held what we own). Returns the backup name."""
    backup_file = module.backup_local(path) if backup else None
    try:
        os.unlink(path)
    except OSError as exc:
        if exc.errno != errno.ENOENT:
            raise ConfigFileError("cannot remove %s: %s" % (path, _os_reason(exc)))
    return backup_file


def detect_json_indent(text, default=4):
    """Indentation (spaces, or a tab) of the first indented line of a JSON text."""
    for line in (text or "").splitlines()[1:]:
        stripped = line.lstrip(" \t")
        if not stripped or len(stripped) == len(line):
            continue
        lead = line[: len(line) - len(stripped)]
        if lead.startswith("\t"):
            return "\t"
        return len(lead)
    return default
