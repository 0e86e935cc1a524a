"""Serve a directory over HTTP in the background, the way an air-gapped mirror serves packages.

    serve.py start --dir DIR --bind ADDR --state DIR [--port N]   prints the URL; reuses a server already running
    serve.py stop --state DIR                                     stops it (no error when none runs)

The server binds a free port on ADDR (e.g. the Docker bridge gateway, so containers
reach it), or port N when given (a mirror that starts serving other content at the same
URL: start it again with another --dir and the port it had), detaches from the caller,
and records its pid, port and directory in the state directory.
"""

import argparse
import functools
import http.server
import os
import signal
import socketserver
import sys
import time


class Server(socketserver.ThreadingTCPServer):
    # a restart on the same port must not wait for the old connections' TIME_WAIT
    allow_reuse_address = True


class QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format, *args):  # noqa: A002 - signature of the base class
        sys.stderr.write("%s %s\n" % (self.address_string(), format % args))


def alive(pid):
    try:
        os.kill(pid, 0)
    except OSError:
        return False
    return True


def read(path):
    try:
        with open(path, encoding="utf-8") as handle:
            return handle.read().strip()
    except OSError:
        return None


def start(args):
    os.makedirs(args.state, exist_ok=True)
    pid_file, url_file, dir_file = (os.path.join(args.state, n) for n in ("pid", "url", "dir"))
    pid, url, served = read(pid_file), read(url_file), read(dir_file)
    if pid and url and served == os.path.abspath(args.dir) and alive(int(pid)):
        print(url)
        return
    stop(args)
    server = Server((args.bind, args.port), functools.partial(QuietHandler, directory=os.path.abspath(args.dir)))
    url = "http://%s:%d" % (args.bind, server.server_address[1])
    read_end, write_end = os.pipe()
    child = os.fork()
    if child:
        os.close(write_end)
        os.waitpid(child, 0)
        os.read(read_end, 1)  # wait until the server has written its state
        print(url)
        return
    os.close(read_end)
    os.setsid()
    if os.fork():
        os._exit(0)
    log = os.open(os.path.join(args.state, "log"), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.dup2(log, 1)
    os.dup2(log, 2)
    with open(pid_file, "w", encoding="utf-8") as handle:
        handle.write("%d\n" % os.getpid())
    with open(url_file, "w", encoding="utf-8") as handle:
        handle.write(url + "\n")
    with open(dir_file, "w", encoding="utf-8") as handle:
        handle.write(os.path.abspath(args.dir) + "\n")
    os.write(write_end, b"x")
    os.close(write_end)
    signal.signal(signal.SIGTERM, lambda *_: os._exit(0))
    server.serve_forever()


def stop(args):
    pid = read(os.path.join(args.state, "pid"))
    if pid and alive(int(pid)):
        os.kill(int(pid), signal.SIGTERM)
        for _attempt in range(50):
            if not alive(int(pid)):
                break
            time.sleep(0.1)
    for name in ("pid", "url", "dir"):
        try:
            os.unlink(os.path.join(args.state, name))
        except OSError:
            pass


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n", maxsplit=1)[0])
    sub = parser.add_subparsers(dest="action", required=True)
    p_start = sub.add_parser("start")
    p_start.add_argument("--dir", required=True)
    p_start.add_argument("--bind", required=True)
    p_start.add_argument("--state", required=True)
    p_start.add_argument("--port", type=int, default=0, help="port to bind (default: a free one)")
    p_stop = sub.add_parser("stop")
    p_stop.add_argument("--state", required=True)
    args = parser.parse_args()
    if args.action == "start":
        start(args)
    else:
        stop(args)


if __name__ == "__main__":
    main()
