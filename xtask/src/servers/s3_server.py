"""The S3-compatible server of cuda-aot's network tests: moto's S3 service on 127.0.0.1,
one request at a time (so a conditional write, If-None-Match: * or If-Match, is checked and
applied with no other request between: atomic under concurrent writers), the buckets given
created first. Run by `cargo xtask servers s3` with the venv of manifests/s3-server.txt.

usage: s3_server.py PORT [BUCKET...]
"""

import logging
import signal
import sys

from moto.moto_server.werkzeug_app import DomainDispatcherApplication, create_backend_app
from werkzeug.serving import make_server
from werkzeug.test import Client


def main() -> None:
    port = int(sys.argv[1])
    app = DomainDispatcherApplication(create_backend_app)
    host = f"127.0.0.1:{port}"
    for bucket in sys.argv[2:]:
        r = Client(app).put(f"/{bucket}", headers={"Host": host})
        if r.status_code != 200:
            sys.exit(f"creating bucket {bucket}: HTTP {r.status_code}: {r.get_data(as_text=True)}")
    # threaded=False: one request at a time (HTTP/1.0, so no connection holds the server).
    # Only errors are logged, not every request.
    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    srv = make_server("127.0.0.1", port, app, threaded=False)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    srv.serve_forever()


if __name__ == "__main__":
    main()
