# -*- coding: utf-8 -*-
# Copyright (c) kubegpu.nvidia maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Safe handling of the configuration files the runtime modules edit.

Reading with clear errors, unified before/after diffs, backups, a
``validate`` command run on the candidate file, and atomic replacement that
keeps the owner and mode of the file it replaces. A path that is a symbolic
link is edited through the link: the file it points to is replaced and the
link stays.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import errno
import os
import re
import shlex
import shutil
import tempfile
import time

from ansible.module_utils.common.text.converters import to_bytes, to_native, to_text

from ansible_collections.kubegpu.nvidia.plugins.module_utils.errors import KubegpuError

# How many links ``resolve`` follows before it calls the chain a loop (Linux's own limit is 40).
MAX_LINKS = 40

# Settings whose values are credentials (containerd registry auth, tokens), in TOML or JSON, and
# passwords in URLs: the diff shows them masked.
SECRET_KEYS = ("password", "auth", "identitytoken", "token", "secret")
_SECRET_VALUE = re.compile(
    r"""(?P<key>(?:"|')?\b(?:%s)\b(?:"|')?\s*[=:]\s*)(?P<value>"(?:[^"\\\n]|\\.)*"|'[^'\n]*')""" % "|".join(SECRET_KEYS),
    re.IGNORECASE)
_URL_PASSWORD = re.compile(r"(?P<user>[A-Za-z][A-Za-z0-9+.-]*://[^/\s:@\"']+:)[^/\s@\"']+@")
MASK = "********"

# Why a rename onto a file fails, in the words a user can act on.
_REPLACE_REASONS = {
    errno.EBUSY: "it is a mount point (a file bind-mounted into place, for example read-only), "
                 "which a rename cannot replace; change it where it is mounted from",
    errno.EROFS: "its file system is mounted read-only",
    errno.EPERM: "the operation is not permitted (an immutable file or directory? see lsattr)",
    errno.EACCES: "permission denied on its directory",
}
# Failures module.atomic_move works around (copy, then rename); anything else is reported.
_ATOMIC_MOVE_WORKAROUNDS = (errno.EXDEV, errno.ETXTBSY)


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


def resolve(path):
    """The file that ``path`` names once symbolic links are followed (``path`` itself when it is none).

    A path that does not exist yet resolves through its existing parent directories. Raises
    ConfigFileError for a link that points nowhere and for a chain of links that never ends.
    """
    current = os.path.abspath(path)
    for _unused in range(MAX_LINKS):
        parent = os.path.dirname(current)
        name = os.path.basename(current)
        real_parent = os.path.realpath(parent)
        candidate = os.path.join(real_parent, name)
        if not os.path.islink(candidate):
            if not os.path.lexists(candidate) or os.path.exists(candidate):
                return candidate
            break  # pragma: no cover - lexists without islink and without exists does not happen
        target = os.readlink(candidate)
        current = os.path.normpath(os.path.join(real_parent, target))
        if not os.path.lexists(current):
            raise ConfigFileError(
                "%s is a symbolic link to %s, which does not exist: create %s or remove the link"
                % (path, current, current), kind="not_found")
    raise ConfigFileError("%s is a symbolic link loop (more than %d links): fix or remove the link" % (path, MAX_LINKS))


def same_file(first, second):
    """True when two paths name the same file once links are followed (existing or not)."""
    try:
        return resolve(first) == resolve(second)
    except ConfigFileError:
        return os.path.abspath(first) == os.path.abspath(second)


def read_text(path):
    """Return the text of ``path``, or ``None`` when it does not exist.

    Raises ConfigFileError when the path is a directory, unreadable, a dangling or looping
    symbolic link, or not UTF-8.
    """
    real = resolve(path)
    if os.path.isdir(real):
        raise ConfigFileError("%s is a directory, not a configuration file" % path)
    try:
        with open(to_bytes(real), "rb") as handle:
            data = handle.read()
    except (IOError, OSError) as exc:
        if exc.errno == errno.ENOENT:
            return None
        raise ConfigFileError("cannot read %s: %s" % (path, _os_reason(exc)))
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigFileError("cannot read %s: not UTF-8 text (byte %d)" % (path, exc.start))


def mask_secrets(text):
    """``text`` with the values of credential settings (SECRET_KEYS) and passwords in URLs masked."""
    if not text:
        return text
    text = _SECRET_VALUE.sub(lambda m: m.group("key") + m.group("value")[0] + MASK + m.group("value")[0], text)
    return _URL_PASSWORD.sub(lambda m: m.group("user") + MASK + "@", text)


def make_diff(path, before, after):
    """Ansible diff dict for one file (``before`` None means the file is new); credentials are masked."""
    return {
        "before": mask_secrets(before or ""),
        "after": mask_secrets(after or ""),
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
        raise ConfigFileError("cannot create directory %s: %s" % (parent, _os_reason(exc)), kind="runtime")


def find_command(name):
    """The executable ``name`` (a path, or looked up on PATH and the sbin directories); None when missing."""
    if os.sep in name:
        executable = os.path.isfile(name) and os.stat(name).st_mode & 0o111 and os.access(name, os.X_OK)
        return name if executable else None
    search = os.environ.get("PATH", os.defpath).split(os.pathsep) + ["/usr/local/sbin", "/usr/sbin", "/sbin"]
    return shutil.which(name, path=os.pathsep.join(search))


def _run_validate(module, validate, tmp_path, path):
    if "%s" not in validate:
        raise ConfigFileError("validate must contain %%s (the candidate file): %s" % validate)
    try:
        argv = [part.replace("%s", tmp_path) for part in shlex.split(validate)]
    except ValueError as exc:  # shlex: an unterminated quote
        raise ConfigFileError("validate is not a valid command line (%s): %s" % (exc, validate))
    binary = find_command(argv[0])
    if binary is None:
        raise ConfigFileError("validate command for %s not found: %s is not installed or not on PATH"
                              % (path, argv[0]), kind="not_found", cmd=argv)
    argv[0] = binary
    try:
        rc, out, err = module.run_command(argv)
    except OSError as exc:  # ansible-core fails the module itself unless run_command is told otherwise
        raise ConfigFileError("validate command for %s could not run: %s" % (path, _os_reason(exc)), kind="runtime")
    if rc != 0:
        output = mask_secrets("\n".join(x for x in (to_text(out).strip(), to_text(err).strip()) if x))
        raise ConfigFileError(
            "validate command failed for %s (rc=%d), file left unchanged: %s" % (path, rc, output or "(no output)"),
            rc=rc, stdout=mask_secrets(to_text(out)), stderr=mask_secrets(to_text(err)), cmd=argv,
        )


def _replace(module, tmp_path, target, path):
    """Rename ``tmp_path`` over ``target`` keeping the old file's owner, mode and SELinux context.

    A rename the node refuses (a bind-mounted file, a read-only file system, an immutable file)
    is a ConfigFileError naming ``path`` and the reason; the two failures ``module.atomic_move``
    can work around (another file system, a busy text file) are handed to it.
    """
    context = None
    if os.path.exists(target):
        try:
            stat = os.stat(target)
            os.chown(tmp_path, stat.st_uid, stat.st_gid)
            shutil.copystat(target, tmp_path)
        except OSError as exc:
            if exc.errno != errno.EPERM:
                raise ConfigFileError("cannot replace %s: %s" % (path, _os_reason(exc)), kind="runtime")
        if module.selinux_enabled():
            context = module.selinux_context(target)
    try:
        os.rename(tmp_path, target)
    except OSError as exc:
        if exc.errno in _ATOMIC_MOVE_WORKAROUNDS:
            module.atomic_move(tmp_path, target, unsafe_writes=False)
            return
        reason = _REPLACE_REASONS.get(exc.errno, _os_reason(exc))
        raise ConfigFileError("cannot replace %s: %s; file left unchanged" % (path, reason), kind="runtime")
    if context is not None:
        module.set_context_if_different(target, context, False)


def write_file(module, path, text, validate=None, backup=False, mode=None, backup_dir=None):
    """Replace ``path`` with ``text`` atomically.

    A symbolic link is followed: its target is replaced and the link stays. The new content
    goes to a temp file in the target's directory, is checked with ``validate`` (a command
    holding ``%s``), then renamed over the old file, keeping its owner, mode and SELinux context.
    ``mode`` applies only to a file that did not exist. ``backup_dir`` moves the backup out of
    the file's own directory (for directories a runtime reads whole).
    Returns the backup file name or ``None``. No temp file is left behind on any failure.
    """
    target = resolve(path)
    existed = os.path.exists(target)
    _ensure_parent(target)
    directory = os.path.dirname(target) or "."
    try:
        fd, tmp_path = tempfile.mkstemp(prefix=".%s." % os.path.basename(target), suffix=".tmp", dir=directory)
    except (IOError, OSError) as exc:
        raise ConfigFileError("cannot write %s: %s" % (path, _os_reason(exc)), kind="runtime")
    backup_file = None
    try:
        try:
            with os.fdopen(fd, "wb") as handle:
                handle.write(to_bytes(text))
        except (IOError, OSError) as exc:
            raise ConfigFileError("cannot write %s: %s" % (path, _os_reason(exc)), kind="runtime")
        if validate:
            _run_validate(module, validate, tmp_path, path)
        if backup and existed:
            backup_file = make_backup(module, target, backup_dir)
        try:
            _replace(module, tmp_path, target, path)
        except ConfigFileError:
            if backup_file and os.path.exists(backup_file):
                os.unlink(backup_file)  # the file stays as it was: no backup of it either
            raise
        tmp_path = None
        if not existed and mode is not None:
            os.chmod(target, mode)
    finally:
        if tmp_path and os.path.exists(tmp_path):
            os.unlink(tmp_path)
    return backup_file


def make_backup(module, path, backup_dir=None):
    """``module.backup_local``; with ``backup_dir``, the same timestamped copy is made there instead."""
    if not backup_dir:
        return module.backup_local(path)
    backup_file = os.path.join(backup_dir, "%s.%s.%s~" % (
        os.path.basename(path), os.getpid(), time.strftime("%Y-%m-%d@%H:%M:%S", time.localtime())))
    try:
        module.preserved_copy(path, backup_file)
    except (IOError, OSError) as exc:
        raise ConfigFileError("cannot keep the backup of %s in %s: %s" % (path, backup_dir, _os_reason(exc)),
                              kind="runtime")
    return backup_file


def remove_file(module, path, backup=False, backup_dir=None):
    """Delete ``path`` (used when a file only held what we own). Returns the backup name.

    A symbolic link is removed itself; the file it points to stays.
    """
    backup_file = None
    if backup and os.path.exists(path):
        backup_file = make_backup(module, resolve(path), backup_dir)
    try:
        os.unlink(path)
    except OSError as exc:
        if exc.errno != errno.ENOENT:
            raise ConfigFileError("cannot remove %s: %s" % (path, _os_reason(exc)), kind="runtime")
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
