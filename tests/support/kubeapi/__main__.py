"""Run the Kubernetes API test server in the foreground until SIGTERM or SIGINT.

python tests/support/kubeapi/__main__.py --port 0 --tls --kubeconfig-out PATH [--port-file F]
"""

import argparse
import os
import signal
import sys
import threading

if __package__ in (None, ""):
    # run as a script: import the package, not its modules as top-level ones
    sys.path[0] = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    from kubeapi import KubeAPIServer  # noqa: E402
else:
    from . import KubeAPIServer  # noqa: E402


def _write(path, text):
    tmp = path + ".tmp"
    with open(tmp, "w") as handle:
        handle.write(text)
    os.replace(tmp, path)


def main(argv=None):
    parser = argparse.ArgumentParser(prog="kubeapi", description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="127.0.0.1", choices=("127.0.0.1", "localhost"))
    parser.add_argument("--port", type=int, default=0, help="0 picks a free port")
    parser.add_argument("--tls", action="store_true", help="serve HTTPS with a generated CA")
    parser.add_argument("--kubeconfig-out", required=True, help="where to write the kubeconfig")
    parser.add_argument("--token", help="bearer token with full rights (default: random)")
    parser.add_argument("--readonly-token", help="bearer token that may only read (default: random)")
    parser.add_argument("--enable-admission-plugins", default="",
                        help="comma-separated: PodTolerationRestriction, ExtendedResourceToleration (default: none)")
    parser.add_argument("--pid-file")
    parser.add_argument("--port-file", help="written once the server answers")
    args = parser.parse_args(argv)

    srv = KubeAPIServer(host=args.host, port=args.port, tls=args.tls, token=args.token,
                        readonly_token=args.readonly_token, kubeconfig_path=args.kubeconfig_out,
                        admission_plugins=[p for p in args.enable_admission_plugins.split(",") if p])
    done = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: done.set())
    signal.signal(signal.SIGINT, lambda *_: done.set())
    srv.start()
    if args.pid_file:
        _write(args.pid_file, "%d\n" % os.getpid())
    if args.port_file:
        _write(args.port_file, "%d\n" % srv.port)
    print("kubeapi: serving %s, kubeconfig %s" % (srv.url, srv.kubeconfig_path), flush=True)
    try:
        while not done.wait(1.0):
            pass
    finally:
        srv.stop()
        for path in (args.pid_file, args.port_file):
            if path and os.path.exists(path):
                os.unlink(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
