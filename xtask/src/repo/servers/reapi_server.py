"""The REAPI server of cuda-aot's remote-execution tests: BuildGrid (CAS on disk, an
ActionCache that accepts updates, ByteStream, Execution with BuildGrid's SQL scheduler, and
the Remote Workers API's Bots service) on 127.0.0.1, its scheduler on a private PostgreSQL.
Run by `cargo xtask servers reapi` with the venv of manifests/reapi-server.txt and the
Debian 12 PostgreSQL of manifests/servers.toml.

usage: reapi_server.py --port N --work DIR --postgres BIN --lib DIR --keepalive-secs N
                      [--tls-port N]

The steps, each failing with the reason on stderr and a non-zero exit:
1. PostgreSQL's data folder WORK/pgdata is made by initdb on first use (trust
   authentication, role `bgd`, no locale, no fsync: a test database) and kept, so a server
   restarted on the same WORK keeps its queue like its CAS (WORK/cas).
2. PostgreSQL starts with no TCP listener: one Unix socket in WORK/pg (or a short folder
   under the temporary folder when that path is too long for a socket). It runs with
   PR_SET_PDEATHSIG = SIGQUIT (immediate shutdown), so it ends with the process that
   started it, however that one ends. PostgreSQL refuses to run as root: as root it runs
   in a user namespace of its own, as `nobody` mapped to root (files stay root's).
3. The database `bgd` is created if missing and BuildGrid's schema migrated to the head
   (`bgd migrate apply`).
4. With --tls-port, a certificate authority and a certificate for 127.0.0.1 signed by it
   are made in WORK/tls/ (ca.pem, server.pem, server.key; kept), and BuildGrid also
   listens with TLS on that port (the plain port stays, for workers).
5. WORK/buildgrid.yml is written and this process becomes `bgd server start` (exec): the
   process the caller holds is BuildGrid itself; when it ends, PostgreSQL gets SIGQUIT.
"""

import argparse
import ctypes
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

import psycopg2

PR_SET_PDEATHSIG = 1
CLONE_NEWUSER = 0x10000000
# The user PostgreSQL runs as when this process is root: nobody, present on every Debian
# system (initdb looks its name up).
NOBODY = 65534
# sun_path is 108 bytes with its NUL; PostgreSQL adds "/.s.PGSQL.5432".
SOCKET_PATH_MAX = 107
PORT = 5432
# BuildGrid's command line, `bgd`: run through this Python, since the venv's `bin/bgd`
# names in its #! line the folder the venv was made in, not the one it was moved to.
BGD = [sys.executable, "-c", "import sys; sys.argv[0] = 'bgd'; from buildgrid.server.app import cli; cli()"]

CONFIG = """\
# Written by xtask/src/repo/servers/reapi_server.py (cargo xtask servers reapi).
server:
  - !channel
    address: "127.0.0.1:{port}"
    insecure-mode: true
{tls_channel}
grpc-server-options:
  # Without this, gRPC sets SO_REUSEPORT and a port in use is silently shared.
  grpc.so_reuseport: 0

# Also the most concurrent RPCs: a worker's long poll and a client's Execute stream each
# hold one.
thread-pool-size: {threads}

connections:
  - !sql-connection &sql
    connection-string: {dsn}
    pool-size: 10
    max-overflow: 20

storages:
  - !disk-storage &cas
    path: {cas}

caches:
  - !lru-action-cache &ac
    storage: *cas
    max-cached-refs: 100000
    allow-updates: true
    cache-failed-actions: true

schedulers:
  - !sql-scheduler &scheduler
    sql: *sql
    storage: *cas
    action-cache: *ac
    # A bot not heard from for this long is dead: its session is closed and its lease
    # queued again (checked every session-expiry-timer-interval seconds).
    bot-session-keepalive-timeout: {keepalive}
    session-expiry-timer-interval: 1.0
    poll-interval: 0.5
    bot-poll-interval: 0.5
    # The platform: OSFamily and ISA must match a worker's (BuildGrid always matches
    # them); cuda-aot-toolkit, the digest of the toolkit folder an action carries in its
    # input root, is accepted and not matched (these workers hold no toolkit of their own;
    # a cluster whose workers keep toolkits warm may list it as a match key instead).
    property-set: !dynamic-property-set
      wildcard-property-keys: [cuda-aot-toolkit]
    # Short actions (an nvcc compile is a fraction of a second) are assigned at once: a
    # job no bot was free for is tried again within 0.1 s (BuildGrid's default waits 5 s),
    # without random jitter.
    assigners:
      - !priority-age-assigner
        count: 1
        interval: 0.05
        priority-assignment-percentage: 100
        failure-backoff: 0.1
        jitter-factor: 0

instances:
  - name: ""
    services:
      - !action-cache
        cache: *ac
      - !execution
        scheduler: *scheduler
        operation-stream-keepalive-timeout: 10
        endpoints: [execution, operations, bots]
      - !cas
        storage: *cas
      - !bytestream
        storage: *cas
"""


def fail(msg: str) -> None:
    sys.stderr.write(f"reapi_server: {msg}\n")
    sys.exit(1)


def child_setup(as_nobody: bool):
    """What a PostgreSQL process does between fork and exec: die with its parent and, as
    root, enter a user namespace where it is `nobody`."""
    libc = ctypes.CDLL(None, use_errno=True)

    def setup() -> None:
        if libc.prctl(PR_SET_PDEATHSIG, signal.SIGQUIT, 0, 0, 0) != 0:
            os._exit(120)
        if not as_nobody:
            return
        if libc.unshare(CLONE_NEWUSER) != 0:
            os.write(2, b"reapi_server: unshare(CLONE_NEWUSER) failed: user namespaces are off\n")
            os._exit(121)
        for name, text in (
            ("setgroups", "deny"),
            ("uid_map", f"{NOBODY} 0 1"),
            ("gid_map", f"{NOBODY} 0 1"),
        ):
            with open(f"/proc/self/{name}", "w") as f:
                f.write(text)

    return setup


def socket_dir(work: str) -> str:
    sock = os.path.join(work, "pg")
    if len(os.path.join(sock, f".s.PGSQL.{PORT}")) > SOCKET_PATH_MAX:
        sock = tempfile.mkdtemp(prefix="cuda-aot-pg-")
    os.makedirs(sock, exist_ok=True)
    return sock


def tail(path: str, lines: int = 20) -> str:
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return "".join(f.readlines()[-lines:])
    except OSError:
        return "(no log)"


def start_postgres(args, env, setup, sock: str, log_path: str) -> subprocess.Popen:
    """Steps 1 and 2: the data folder, then PostgreSQL on the socket; waits until it
    accepts connections."""
    bindir = os.path.dirname(args.postgres)
    data = os.path.join(args.work, "pgdata")
    if not os.path.isfile(os.path.join(data, "PG_VERSION")):
        shutil.rmtree(data, ignore_errors=True)
        out = subprocess.run(
            [os.path.join(bindir, "initdb"), "-D", data, "-U", "bgd", "--auth=trust"]
            + ["--no-locale", "-E", "UTF8", "--no-sync", "--no-instructions"],
            env=env,
            preexec_fn=setup,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
        )
        if out.returncode != 0:
            fail(f"initdb failed ({out.returncode}):\n{out.stdout}{out.stderr}")
    settings = {
        "listen_addresses": "",
        "unix_socket_directories": sock,
        "port": str(PORT),
        "jit": "off",
        "fsync": "off",
        "synchronous_commit": "off",
        "full_page_writes": "off",
        "max_connections": "200",
        "shared_buffers": "32MB",
        "dynamic_shared_memory_type": "mmap",
        "timezone": "UTC",
        "log_timezone": "UTC",
    }
    cmd = [args.postgres, "-D", data]
    for k, v in settings.items():
        cmd += ["-c", f"{k}={v}"]
    log = open(log_path, "ab")
    pg = subprocess.Popen(cmd, env=env, preexec_fn=setup, stdin=subprocess.DEVNULL, stdout=log, stderr=log)
    deadline = time.monotonic() + 60
    while True:
        if pg.poll() is not None:
            fail(f"postgres exited with {pg.returncode}; its log ({log_path}):\n{tail(log_path)}")
        try:
            psycopg2.connect(host=sock, port=PORT, user="bgd", dbname="postgres").close()
            return pg
        except psycopg2.OperationalError:
            if time.monotonic() > deadline:
                fail(f"postgres not accepting connections after 60 s; its log ({log_path}):\n{tail(log_path)}")
            time.sleep(0.05)


def create_database(sock: str) -> None:
    conn = psycopg2.connect(host=sock, port=PORT, user="bgd", dbname="postgres")
    conn.autocommit = True
    with conn.cursor() as cur:
        cur.execute("SELECT 1 FROM pg_database WHERE datname = 'bgd'")
        if cur.fetchone() is None:
            cur.execute("CREATE DATABASE bgd")
    conn.close()


TLS_CHANNEL = """\
  - !channel
    address: "127.0.0.1:{port}"
    insecure-mode: false
    credentials:
      tls-server-key: {key}
      tls-server-cert: {cert}
"""


def make_tls(folder: str) -> tuple:
    """A CA and a server certificate for 127.0.0.1 (and localhost) it signs, in `folder`
    (made once, kept): (ca.pem, server.pem, server.key)."""
    import datetime

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    paths = tuple(os.path.join(folder, n) for n in ("ca.pem", "server.pem", "server.key"))
    if all(os.path.isfile(p) for p in paths):
        return paths
    os.makedirs(folder, exist_ok=True)
    now = datetime.datetime.now(datetime.timezone.utc)
    ca_key, key = ec.generate_private_key(ec.SECP256R1()), ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "cuda-aot test CA")])

    def cert(subject, public, issuer_key, ca: bool, sans=None):
        b = (
            x509.CertificateBuilder()
            .subject_name(subject)
            .issuer_name(ca_name)
            .public_key(public)
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(hours=1))
            .not_valid_after(now + datetime.timedelta(days=30))
            .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
        )
        if ca:
            b = b.add_extension(
                x509.KeyUsage(False, False, False, False, False, True, True, False, False), critical=True
            )
        else:
            b = b.add_extension(x509.SubjectAlternativeName(sans), critical=False)
            b = b.add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        return b.sign(issuer_key, hashes.SHA256())

    import ipaddress

    ca = cert(ca_name, ca_key.public_key(), ca_key, True)
    sans = [x509.IPAddress(ipaddress.ip_address("127.0.0.1")), x509.DNSName("localhost")]
    server_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")])
    server = cert(server_name, key.public_key(), ca_key, False, sans)
    pem = serialization.Encoding.PEM
    blobs = (
        ca.public_bytes(pem),
        server.public_bytes(pem),
        key.private_bytes(pem, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()),
    )
    for p, data in zip(paths, blobs):
        with open(p + ".tmp", "wb") as f:
            f.write(data)
        os.chmod(p + ".tmp", 0o600 if p.endswith(".key") else 0o644)
        os.replace(p + ".tmp", p)
    return paths


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--work", required=True)
    p.add_argument("--postgres", required=True, help="the postgres binary (initdb beside it)")
    p.add_argument("--lib", required=True, help="a folder with libpq.so.5")
    p.add_argument("--keepalive-secs", type=int, required=True)
    p.add_argument("--tls-port", type=int, help="also listen with TLS here (a test CA in WORK/tls/)")
    args = p.parse_args()

    work = os.path.abspath(args.work)
    args.work = work
    env = dict(os.environ, LC_ALL="C", TZ="UTC")
    env["LD_LIBRARY_PATH"] = ":".join(x for x in (args.lib, env.get("LD_LIBRARY_PATH")) if x)
    setup = child_setup(os.geteuid() == 0)
    sock = socket_dir(work)
    start_postgres(args, env, setup, sock, os.path.join(work, "postgres.log"))
    create_database(sock)

    dsn = f"postgresql+psycopg2://bgd@/bgd?host={sock}&port={PORT}"
    migrate = subprocess.run(BGD + ["migrate", "apply", dsn], stdin=subprocess.DEVNULL, capture_output=True, text=True)
    if migrate.returncode != 0:
        fail(f"bgd migrate apply failed ({migrate.returncode}):\n{migrate.stdout}{migrate.stderr}")

    tls_channel = ""
    if args.tls_port:
        _, cert, key = make_tls(os.path.join(work, "tls"))
        tls_channel = TLS_CHANNEL.format(port=args.tls_port, key=json.dumps(key), cert=json.dumps(cert))
    config = os.path.join(work, "buildgrid.yml")
    with open(config, "w", encoding="utf-8") as f:
        f.write(
            CONFIG.format(
                port=args.port,
                tls_channel=tls_channel,
                threads=64,
                dsn=json.dumps(dsn),
                cas=json.dumps(os.path.join(work, "cas")),
                keepalive=args.keepalive_secs,
            )
        )
    sys.stdout.flush()
    sys.stderr.flush()
    # PostgreSQL's parent stays this process (same pid) through the exec: it gets SIGQUIT
    # when BuildGrid ends.
    os.execv(sys.executable, BGD + ["server", "start", "--pid-file", os.path.join(work, "bgd.pid"), config])


if __name__ == "__main__":
    main()
