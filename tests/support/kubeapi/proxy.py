"""An HTTP CONNECT proxy for tests: tunnels TLS to 127.0.0.1 and records what it was asked.

    with ConnectProxy(credentials="user:pass") as proxy:
        proxy.url            # http://127.0.0.1:<port>
        proxy.requests       # [{"target": "127.0.0.1:6443", "authorization": "Basic ...", "code": 200}]

With ``credentials``, a CONNECT without the matching ``Proxy-Authorization: Basic`` header is answered
407, as a proxy that requires authentication does. Only targets on 127.0.0.1 are tunnelled.
"""

import base64
import select
import socket
import socketserver
import threading


class _Handler(socketserver.StreamRequestHandler):
    def handle(self):
        proxy = self.server.proxy
        line = self.rfile.readline(65537).decode("latin-1").strip()
        headers = {}
        while True:
            header = self.rfile.readline(65537).decode("latin-1")
            if header in ("\r\n", "\n", ""):
                break
            name, _sep, value = header.partition(":")
            headers[name.strip().lower()] = value.strip()
        method, _sep, rest = line.partition(" ")
        target = rest.split(" ")[0]
        record = {"method": method, "target": target, "authorization": headers.get("proxy-authorization"),
                  "code": None}
        proxy._record(record)
        if method != "CONNECT":
            record["code"] = 405
            self.wfile.write(b"HTTP/1.1 405 Method Not Allowed\r\nContent-Length: 0\r\n\r\n")
            return
        if proxy.credentials is not None and headers.get("proxy-authorization") != proxy.expected_authorization:
            record["code"] = 407
            self.wfile.write(b"HTTP/1.1 407 Proxy Authentication Required\r\n"
                             b"Proxy-Authenticate: Basic realm=\"test\"\r\nContent-Length: 0\r\n\r\n")
            return
        host, _sep, port = target.rpartition(":")
        if host not in ("127.0.0.1", "localhost"):
            record["code"] = 403
            self.wfile.write(b"HTTP/1.1 403 Forbidden\r\nContent-Length: 0\r\n\r\n")
            return
        try:
            upstream = socket.create_connection(("127.0.0.1", int(port)), timeout=10)
        except (OSError, ValueError):
            record["code"] = 502
            self.wfile.write(b"HTTP/1.1 502 Bad Gateway\r\nContent-Length: 0\r\n\r\n")
            return
        record["code"] = 200
        self.wfile.write(b"HTTP/1.1 200 Connection established\r\n\r\n")
        self.wfile.flush()
        self._tunnel(self.connection, upstream)

    def _tunnel(self, client, upstream):
        upstream.settimeout(None)
        sockets = [client, upstream]
        try:
            while not self.server.proxy.stopping:
                readable = select.select(sockets, [], [], 0.2)[0]
                for sock in readable:
                    data = sock.recv(65536)
                    if not data:
                        return
                    (upstream if sock is client else client).sendall(data)
        except OSError:
            return
        finally:
            upstream.close()


class _Server(socketserver.ThreadingTCPServer):
    daemon_threads = True
    allow_reuse_address = True

    def handle_error(self, request, client_address):
        pass


class ConnectProxy:
    """A CONNECT proxy on 127.0.0.1 (port 0: a free one); see the module docstring."""

    def __init__(self, credentials=None):
        self.credentials = credentials
        self.expected_authorization = (
            "Basic " + base64.b64encode(credentials.encode()).decode() if credentials is not None else None)
        self.requests = []
        self.stopping = False
        self._lock = threading.Lock()
        self._server = _Server(("127.0.0.1", 0), _Handler)
        self._server.proxy = self
        self.port = self._server.server_address[1]
        self.url = "http://127.0.0.1:%d" % self.port
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.2},
                                        name="connect-proxy", daemon=True)

    def _record(self, record):
        with self._lock:
            self.requests.append(record)

    def start(self):
        self._thread.start()
        return self

    def stop(self):
        self.stopping = True
        self._server.shutdown()
        self._server.server_close()

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()
