"""The S3-compatible server of cuda-aot's network tests: moto's S3 service on 127.0.0.1,
one request at a time (so a conditional write, If-None-Match: * or If-Match, is checked and
applied with no other request between: atomic under concurrent writers), the buckets given
created first. Run by `cargo xtask servers s3` with the venv of manifests/s3-server.txt.

usage: s3_server.py [--ignore-conditions] [--fail-every=N] [--delay-ms=N]
                    [--cut-on=METHOD:SUFFIX] [--die-on=METHOD:SUFFIX]
                    [--stall-on=METHOD:SUFFIX] PORT [BUCKET...]

--ignore-conditions drops If-None-Match and If-Match from every request (a store without
conditional writes); --fail-every=N answers every Nth request for an object with 503 Slow
Down before moto sees it (a 5xx storm; with N above 1, never the same request more than
twice in a row, so a client's retries get through whatever requests interleave with
them; N = 1 fails every one); --delay-ms=N waits N ms before answering each
request (a slow store; one request at a time, so the delays add up).

--cut-on=METHOD:SUFFIX cuts the connection half-way through the first request of METHOD
whose key ends with SUFFIX (PUT: half the body read, the object not written, as a store
does with a body that never arrived whole; GET: half the object sent), then serves on;
--die-on=METHOD:SUFFIX does the same but ends the process there (a store killed
mid-upload or mid-download); --stall-on=METHOD:SUFFIX holds the first such request for an
hour before serving it (a store that hangs: one request at a time, so every later request
waits too).
"""

import logging
import os
import signal
import socket
import sys
import time

from moto.moto_server.werkzeug_app import DomainDispatcherApplication, create_backend_app
from werkzeug.serving import make_server
from werkzeug.test import Client

SLOW_DOWN = (
    b'<?xml version="1.0" encoding="UTF-8"?>\n'
    b"<Error><Code>SlowDown</Code><Message>Please reduce your request rate.</Message></Error>"
)


class Faults:
    """WSGI middleware: the faults the command line asked for, around moto's app."""

    def __init__(
        self, app, ignore_conditions: bool, fail_every: int, delay_ms: int, cut_on, die_on, stall_on
    ) -> None:
        self.app = app
        self.ignore_conditions = ignore_conditions
        self.fail_every = fail_every
        self.delay = delay_ms / 1000.0
        self.seen = 0
        # Consecutive 503s given to each (method, path): at most two in a row.
        self.failed = {}
        # (METHOD, SUFFIX, die) of the one request to break half-way, until it happened.
        self.break_on = [(m, s, False) for m, s in cut_on] + [(m, s, True) for m, s in die_on]
        self.stall_on = list(stall_on)

    def broken(self, environ):
        """Whether this request is the one to break; if so, how (die or cut)."""
        for i, (method, suffix, die) in enumerate(self.break_on):
            if environ.get("REQUEST_METHOD") == method and environ.get("PATH_INFO", "").endswith(
                suffix
            ):
                del self.break_on[i]
                return (die,)
        return None

    @staticmethod
    def end(environ, die: bool) -> None:
        sys.stderr.write(f"s3_server: breaking {environ['REQUEST_METHOD']} {environ['PATH_INFO']}\n")
        sys.stderr.flush()
        if die:
            os._exit(1)
        environ["werkzeug.socket"].shutdown(socket.SHUT_RDWR)

    def __call__(self, environ, start_response):
        for i, (method, suffix) in enumerate(self.stall_on):
            if environ.get("REQUEST_METHOD") == method and environ.get("PATH_INFO", "").endswith(
                suffix
            ):
                del self.stall_on[i]
                sys.stderr.write(f"s3_server: stalling {method} {environ['PATH_INFO']}\n")
                sys.stderr.flush()
                time.sleep(3600)
                break
        how = self.broken(environ)
        if how is not None:
            (die,) = how
            if environ["REQUEST_METHOD"] == "GET":
                return self.half_response(environ, start_response, die)
            environ["wsgi.input"].read(int(environ.get("CONTENT_LENGTH") or 0) // 2)
            self.end(environ, die)
            start_response("500 Cut", [("Content-Length", "0")])
            return [b""]
        return self.faults(environ, start_response)

    def half_response(self, environ, start_response, die: bool):
        """The whole response's status and headers, half its body, then the cut."""
        got = {}

        def keep(status, headers, exc_info=None):
            got["status"], got["headers"] = status, headers

        body = b"".join(self.faults(environ, keep))
        start_response(got["status"], got["headers"])

        def stream():
            yield body[: len(body) // 2]
            self.end(environ, die)

        return stream()

    def faults(self, environ, start_response):
        if self.delay:
            time.sleep(self.delay)
        if self.ignore_conditions:
            environ.pop("HTTP_IF_NONE_MATCH", None)
            environ.pop("HTTP_IF_MATCH", None)
        # Object requests only (a path with a key below the bucket).
        if self.fail_every and environ.get("PATH_INFO", "").strip("/").count("/") >= 1:
            self.seen += 1
            request = (environ.get("REQUEST_METHOD"), environ.get("PATH_INFO"))
            storm = self.seen % self.fail_every == 0 and (
                self.fail_every == 1 or self.failed.get(request, 0) < 2
            )
            self.failed[request] = self.failed.get(request, 0) + 1 if storm else 0
            if storm:
                environ["wsgi.input"].read(int(environ.get("CONTENT_LENGTH") or 0))
                start_response(
                    "503 Slow Down",
                    [("Content-Type", "application/xml"), ("Content-Length", str(len(SLOW_DOWN)))],
                )
                return [SLOW_DOWN]
        return self.app(environ, start_response)


def main() -> None:
    args = sys.argv[1:]
    ignore_conditions = "--ignore-conditions" in args
    fail_every = 0
    delay_ms = 0
    cut_on, die_on, stall_on = [], [], []
    for a in args:
        for flag, into in (("--cut-on=", cut_on), ("--die-on=", die_on), ("--stall-on=", stall_on)):
            if a.startswith(flag):
                method, suffix = a[len(flag) :].split(":", 1)
                into.append((method, suffix))
        if a.startswith("--fail-every="):
            fail_every = int(a.split("=", 1)[1])
        if a.startswith("--delay-ms="):
            delay_ms = int(a.split("=", 1)[1])
    args = [a for a in args if not a.startswith("--")]
    port = int(args[0])
    app = DomainDispatcherApplication(create_backend_app)
    host = f"127.0.0.1:{port}"
    for bucket in args[1:]:
        r = Client(app).put(f"/{bucket}", headers={"Host": host})
        if r.status_code != 200:
            sys.exit(f"creating bucket {bucket}: HTTP {r.status_code}: {r.get_data(as_text=True)}")
    # threaded=False: one request at a time (HTTP/1.0, so no connection holds the server).
    # Only errors are logged, not every request.
    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    srv = make_server(
        "127.0.0.1",
        port,
        Faults(app, ignore_conditions, fail_every, delay_ms, cut_on, die_on, stall_on),
        threaded=False,
    )
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    srv.serve_forever()


if __name__ == "__main__":
    main()
