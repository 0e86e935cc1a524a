"""Unit tests for plugins/module_utils/gpu_discovery_common.py: bounded commands and text decoding."""
import os
import time

import pytest

from ansible_collections.kubegpu.nvidia.plugins.module_utils.gpu_discovery_common import (
    CommandTimeout,
    TextDecoder,
    run_bounded,
    text,
)


def script(tmp_path, body):
    path = tmp_path / "cmd"
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(0o755)
    return str(path)


def test_run_bounded_returns_rc_and_bytes(tmp_path):
    rc, out, err = run_bounded([script(tmp_path, 'echo "$LC_ALL $1"; echo oops >&2; exit 3'), "x"], 10,
                               environ_update={"LC_ALL": "C"})
    assert (rc, out, err) == (3, b"C x\n", b"oops\n")


def test_run_bounded_stops_a_command_and_its_children(tmp_path):
    pidfile = tmp_path / "child.pid"
    hang = script(tmp_path, "sleep 300 &\necho $! > %s\nsleep 300\n" % pidfile)
    started = time.monotonic()
    with pytest.raises(CommandTimeout) as caught:
        run_bounded([hang], 0.5)
    assert time.monotonic() - started < 10
    assert str(caught.value) == "cmd did not finish within 0.5 s"
    assert caught.value.timeout == 0.5
    child = int(pidfile.read_text())
    for dummy in range(50):  # the kill is asynchronous: wait until the child is gone (or a zombie of init)
        if not _running(child):
            break
        time.sleep(0.1)
    assert not _running(child)


def _running(pid):
    try:
        with open("/proc/%d/stat" % pid) as handle:
            return handle.read().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False


def test_run_bounded_command_that_cannot_start(tmp_path):
    rc, out, err = run_bounded([str(tmp_path / "absent")], 5)
    assert rc == 127 and out == b""
    assert err.decode().startswith("cannot run %s: " % (tmp_path / "absent"))


def test_decoder_keeps_valid_text_and_reports_invalid_bytes():
    decoder = TextDecoder()
    assert decoder.decode(b"Tesla T4\x00\x00", "the name") == "Tesla T4"
    assert decoder.decode("  NVIDIA H100 ", "the name") == "NVIDIA H100"
    assert decoder.decode(None, "the name") is None
    assert decoder.warnings == []
    assert decoder.decode(b"ok line\nbad \xc3( line\n", "the output of x") == "ok line\nbad \ufffd( line"
    assert decoder.warnings == ["The output of x is not valid UTF-8 (bad \\xc3( line); the facts show each invalid "
                                "byte as U+FFFD"]


def test_decoder_call_takes_the_bytes_of_a_decode_error():
    decoder = TextDecoder()

    def binding():
        return b"A100 \xe9".decode()  # what nvidia-ml-py's convertStrBytes does
    assert decoder.call("NVML's name of GPU 0", binding) == "A100 \ufffd"
    assert decoder.warnings == ["NVML's name of GPU 0 is not valid UTF-8 (A100 \\xe9); the facts show each invalid "
                                "byte as U+FFFD"]


def test_text_decodes_without_warning():
    assert text(b"\xff") == "\ufffd"
    assert text(None) is None


def test_environment_is_passed(tmp_path, monkeypatch):
    monkeypatch.setenv("KUBEGPU_TEST_VALUE", "kept")
    rc, out, dummy = run_bounded([script(tmp_path, 'echo "$KUBEGPU_TEST_VALUE"')], 5)
    assert rc == 0 and out == b"kept\n"
    assert os.environ["KUBEGPU_TEST_VALUE"] == "kept"
