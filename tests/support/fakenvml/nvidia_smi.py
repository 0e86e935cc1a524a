"""A stand-in for ``nvidia-smi -r [-i N]`` over the fake NVML's MIG state (tests/support/fakenvml/fakenvml.c).

A GPU reset applies a pending MIG mode and clears the GPU's GPU and compute instances (they do not survive
a reset). It reads the profile named by $FAKENVML_CONFIG and rewrites the state file $FAKENVML_STATE
(atomically, counting the write as the library does). As nvidia-smi does, it refuses to reset:

* a GPU with processes (the profile's ``processes``): "GPU <bus id> is currently in use by another process."
* a GPU under passthrough (``mig_passthrough = 1``): "Resetting GPU <bus id> is not supported."

and exits non-zero (1 for a GPU in use, 3, nvidia-smi's "operation not available", for passthrough). Any
other use of this stand-in says it is not supported here and exits 2.
"""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from fakenvml.profile import parse_profile  # noqa: E402  (tests/support on sys.path)

EXIT_IN_USE = 1         # nvidia-smi: unknown error class for a busy GPU
EXIT_NOT_SUPPORTED = 3  # nvidia-smi: "the requested operation is not available on target device"
IN_USE_TAIL = ("\n1 device is currently being used by one or more other processes (e.g., Fabric Manager, CUDA "
               "application, graphics application such as an X server, or a monitoring application such as "
               "another instance of nvidia-smi). Please first kill all processes using this device and all compute "
               "applications running in the system.")


def _bus_id(gpu):
    return gpu["pci_bus_id"].upper()


def _read_state(path):
    try:
        with open(path, encoding="utf-8") as handle:
            return handle.read().splitlines()
    except FileNotFoundError:
        return []


def _write_state(path, lines):
    writes = 0
    kept = []
    for line in lines:
        if line.startswith("writes = "):
            writes = int(line.split("=", 1)[1])
        elif line and not line.startswith("#"):
            kept.append(line)
    text = "# fakenvml MIG state (tests/support/fakenvml/fakenvml.c)\nwrites = %d\n" % (writes + 1)
    text += "".join(line + "\n" for line in kept)
    tmp = "%s.tmp.%d" % (path, os.getpid())
    with open(tmp, "w", encoding="utf-8") as handle:
        handle.write(text)
    os.replace(tmp, path)


def _pending(lines, index, gpu):
    for line in lines:
        parts = line.split()
        if parts[:1] == ["mode"] and int(parts[2]) == index:
            return int(parts[5])
    return gpu.get("mig_pending", gpu.get("mig_mode", 0))


def reset(targets):
    config = os.environ.get("FAKENVML_CONFIG") or "/etc/fakenvml/gpus.conf"
    state = os.environ.get("FAKENVML_STATE")
    if not state:
        print("nvidia-smi (fakenvml stand-in): FAKENVML_STATE is not set; a reset has nowhere to go", file=sys.stderr)
        return 2
    with open(config, encoding="utf-8") as handle:
        gpus = parse_profile(handle.read())["gpus"]
    if targets is None:
        targets = list(range(len(gpus)))
    for index in targets:
        if index >= len(gpus):
            print("No devices were found matching the index %d." % index, file=sys.stderr)
            return 6
    lines = _read_state(state)
    rc = 0
    done = []
    for index in targets:
        gpu = gpus[index]
        if gpu.get("mig_passthrough"):
            print("Resetting GPU %s is not supported." % _bus_id(gpu))
            rc = rc or EXIT_NOT_SUPPORTED
            continue
        if gpu.get("processes"):
            print("GPU %s is currently in use by another process.%s" % (_bus_id(gpu), IN_USE_TAIL))
            rc = rc or EXIT_IN_USE
            continue
        pending = _pending(lines, index, gpu)
        ours = ("mode = %d " % index, "gi = %d " % index, "ci = %d " % index)
        lines = [line for line in lines if not line.startswith(ours)]
        if "mig_mode" in gpu:
            lines.append("mode = %d %s %d %d" % (index, gpu["uuid"], pending, pending))
        done.append(gpu)
    if done:
        _write_state(state, lines)
        for gpu in done:
            print("GPU %s was successfully reset." % _bus_id(gpu))
    if rc == 0:
        print("All done.")
    return rc


def main(argv):
    args = list(argv)
    if args and args[0] in ("-r", "--gpu-reset"):
        args.pop(0)
        targets = None
        if args[:1] in (["-i"], ["--id"]) and len(args) == 2:
            try:
                targets = [int(item) for item in args[1].split(",")]
            except ValueError:
                targets = False
            args = []
        if not args and targets is not False:
            return reset(targets)
    print("nvidia-smi (fakenvml stand-in): only 'nvidia-smi -r [-i N[,M...]]' is supported, not %r" % " ".join(argv),
          file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
