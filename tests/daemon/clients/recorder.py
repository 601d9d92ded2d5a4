#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""recorder.py - a recording HTTP proxy in front of kvarenad, for the real
clients' lane (tests/daemon/clients/run-clients.sh): every request a client
sends (method, path, headers, JSON body) and every answer's status (and,
for errors, its body) go to a JSON-lines file, so the lane can say what
each client sent and what kvarenad refused. Streams pass through as they
come. Test-only; never in front of a real deployment.

usage: recorder.py LISTEN_PORT UPSTREAM_PORT LOG_FILE
"""
import http.client
import http.server
import json
import socketserver
import sys
import threading

LISTEN, UPSTREAM, LOG = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
lock = threading.Lock()


def record(entry):
    with lock, open(LOG, "a") as f:
        f.write(json.dumps(entry) + "\n")


class Proxy(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *a):
        pass

    def forward(self):
        n = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(n) if n else b""
        hdrs = {k: v for k, v in self.headers.items()
                if k.lower() not in ("host", "connection", "accept-encoding", "content-length")}
        entry = {"method": self.command, "path": self.path,
                 "headers": {k: (v if k.lower() not in ("authorization", "x-api-key") else "<key>")
                             for k, v in hdrs.items()}}
        try:
            entry["body"] = json.loads(body) if body else None
        except ValueError:
            entry["body_text"] = body[:2000].decode(errors="replace")
        up = http.client.HTTPConnection("127.0.0.1", UPSTREAM, timeout=600)
        hdrs["Host"] = f"127.0.0.1:{UPSTREAM}"
        up.request(self.command, self.path, body if body else None, hdrs)
        r = up.getresponse()
        entry["status"] = r.status
        self.send_response(r.status)
        chunked = r.getheader("Transfer-Encoding", "").lower() == "chunked"
        for k, v in r.getheaders():
            if k.lower() not in ("transfer-encoding", "connection", "content-length", "date"):
                self.send_header(k, v)
        if chunked:
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            events = []
            while True:
                piece = r.read1(65536)
                if not piece:
                    break
                for line in piece.decode(errors="replace").splitlines():
                    if line.startswith("event: "):
                        events.append(line[7:])
                self.wfile.write(b"%x\r\n%s\r\n" % (len(piece), piece))
                self.wfile.flush()
            self.wfile.write(b"0\r\n\r\n")
            entry["events"] = events[:400]
        else:
            data = r.read()
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
            if r.status >= 400:
                entry["answer"] = data[:2000].decode(errors="replace")
        up.close()
        record(entry)

    do_GET = do_POST = do_DELETE = do_HEAD = do_OPTIONS = forward


class Server(socketserver.ThreadingMixIn, http.server.HTTPServer):
    daemon_threads = True
    allow_reuse_address = True


if __name__ == "__main__":
    Server(("127.0.0.1", LISTEN), Proxy).serve_forever()
