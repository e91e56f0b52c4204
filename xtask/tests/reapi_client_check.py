"""A REAPI client for `xtask/tests/reapi_worker.rs`: executes actions on a `servers reapi`
server that `servers reapi-worker` processes take work from, with nothing but gRPC and
BuildGrid's bundled generated protos (run with the server's venv Python).

usage: reapi_client_check.py ADDR main
       reapi_client_check.py ADDR sleep SECONDS COUNT
       reapi_client_check.py ADDR run ARG...

Prints one JSON object (what each case saw) and exits 0, or names the failed check on
stderr and exits 1. Every Execute skips the ActionCache.

`main`, on one input root (an executable script.sh, data/input.txt with a symbolic link
to it, and big.txt of 6 MiB, which goes up through ByteStream):
 1. `/bin/sh script.sh` (environment FOO and PATH only) writes out/result.txt and
    out/big.txt (6 MiB, which the worker sends back through ByteStream), a folder logs/,
    a symbolic link out/link, and prints what it saw: exit code 0; each output's digest is
    that of the expected bytes (the big one read back in full); missing.txt, declared but
    not made, is absent; stdout and stderr are what it printed.
 2. `exit 3` on the same input root: exit code 3, status OK.
 3. A program that does not exist: a non-OK status naming it.
 4. `sleep 30` with a 1 s timeout: DEADLINE_EXCEEDED.
 5. Input roots the worker must refuse (INVALID_ARGUMENT): a symbolic link climbing out
    of the input root, a file named `..`, a file whose digest is a path.

`run ARG...`: one action running ARG... on an empty input root; prints its exit code,
stdout and the worker that ran it.

`sleep SECONDS COUNT`: COUNT actions that sleep (fresh ones each call), executed at once;
prints each one's exit code, the worker that completed it and the seconds it took.
"""

import hashlib
import json
import random
import sys
import threading
import time
import uuid

import grpc
from buildgrid._protos.build.bazel.remote.execution.v2 import remote_execution_pb2 as re
from buildgrid._protos.build.bazel.remote.execution.v2 import remote_execution_pb2_grpc as re_grpc
from buildgrid._protos.google.bytestream import bytestream_pb2 as bs
from buildgrid._protos.google.bytestream import bytestream_pb2_grpc as bs_grpc
from buildgrid._protos.google.longrunning import operations_pb2 as _ops  # noqa: F401 (registers Operation)
from buildgrid._protos.google.rpc import code_pb2

INSTANCE = ""
BIG = 6 * 1024 * 1024
CHUNK = 1 << 20
ENV = [("FOO", "bar"), ("PATH", "/usr/bin:/bin")]

SCRIPT = b"""set -eu
test -x script.sh && echo "script.sh is executable"
echo "HOME=${HOME-unset} FOO=$FOO"
echo "links=$(stat -c %h big.txt)"
tr a-z A-Z < data/input.txt > out/result.txt
tr a-z A-Z < big.txt > out/big.txt
mkdir logs
echo "log line" > logs/run.log
ln -s result.txt out/link
cat data/link.txt >&2
echo done
"""


class Failed(Exception):
    pass


def expect(ok: bool, what: str) -> None:
    if not ok:
        raise Failed(what)


def digest(data: bytes) -> re.Digest:
    return re.Digest(hash=hashlib.sha256(data).hexdigest(), size_bytes=len(data))


class Client:
    def __init__(self, addr: str):
        options = [("grpc.max_receive_message_length", 64 << 20), ("grpc.max_send_message_length", 64 << 20)]
        self.channel = grpc.insecure_channel(addr, options=options)
        grpc.channel_ready_future(self.channel).result(timeout=60)
        self.cas = re_grpc.ContentAddressableStorageStub(self.channel)
        self.bytestream = bs_grpc.ByteStreamStub(self.channel)
        self.execution = re_grpc.ExecutionStub(self.channel)

    def upload(self, blobs) -> None:
        """Small blobs in one batch, big ones through ByteStream Write."""
        req = re.BatchUpdateBlobsRequest(instance_name=INSTANCE)
        for b in blobs:
            if len(b) > CHUNK:
                d = digest(b)
                name = f"uploads/{uuid.uuid4()}/blobs/{d.hash}/{d.size_bytes}"
                chunks = (
                    bs.WriteRequest(
                        resource_name=name if off == 0 else "",
                        write_offset=off,
                        data=b[off : off + CHUNK],
                        finish_write=off + CHUNK >= len(b),
                    )
                    for off in range(0, len(b), CHUNK)
                )
                committed = self.bytestream.Write(chunks, timeout=60).committed_size
                expect(committed == len(b), f"ByteStream Write committed {committed}")
            else:
                req.requests.add(digest=digest(b), data=b)
        for r in self.cas.BatchUpdateBlobs(req, timeout=30).responses:
            expect(r.status.code == 0, f"BatchUpdateBlobs of {r.digest.hash}: {r.status}")

    def read(self, d: re.Digest) -> bytes:
        name = f"blobs/{d.hash}/{d.size_bytes}"
        return b"".join(r.data for r in self.bytestream.Read(bs.ReadRequest(resource_name=name), timeout=60))

    def action(self, argv, root: re.Digest, outputs=(), timeout_s: int = 0) -> re.Digest:
        command = re.Command(
            arguments=argv,
            environment_variables=[re.Command.EnvironmentVariable(name=k, value=v) for k, v in ENV],
            output_paths=list(outputs),
        ).SerializeToString()
        action = re.Action(command_digest=digest(command), input_root_digest=root, salt=uuid.uuid4().bytes)
        if timeout_s:
            action.timeout.seconds = timeout_s
        blob = action.SerializeToString()
        self.upload([command, blob])
        return digest(blob)

    def execute(self, adigest: re.Digest):
        """The ExecuteResponse once the operation is done, and the seconds it took."""
        t = time.monotonic()
        req = re.ExecuteRequest(instance_name=INSTANCE, action_digest=adigest, skip_cache_lookup=True)
        for op in self.execution.Execute(req, timeout=120):
            if op.done:
                expect(op.HasField("response"), f"operation ended without a response: {op}")
                resp = re.ExecuteResponse()
                op.response.Unpack(resp)
                return resp, round(time.monotonic() - t, 3)
        raise Failed("Execute's stream ended before the operation was done")

    def stdout(self, result: re.ActionResult) -> bytes:
        if result.stdout_raw or not result.HasField("stdout_digest"):
            return result.stdout_raw
        return self.read(result.stdout_digest)


def input_root(client: Client):
    """The input root of `main`, uploaded; its digest and the big file's bytes."""
    rng = random.Random(45)
    big = bytes(rng.choice(b"abcdefghijklmnopqrstuvwxyz\n") for _ in range(BIG))
    text = b"hello reapi worker\n"
    data = re.Directory(
        files=[re.FileNode(name="input.txt", digest=digest(text))],
        symlinks=[re.SymlinkNode(name="link.txt", target="input.txt")],
    ).SerializeToString()
    root = re.Directory(
        files=[
            re.FileNode(name="big.txt", digest=digest(big)),
            re.FileNode(name="script.sh", digest=digest(SCRIPT), is_executable=True),
        ],
        directories=[re.DirectoryNode(name="data", digest=digest(data))],
    ).SerializeToString()
    client.upload([big, text, SCRIPT, data, root])
    return digest(root), big


def outputs_case(client: Client, root: re.Digest, big: bytes, out: dict) -> None:
    outputs = ["out/result.txt", "out/big.txt", "logs", "out/link", "missing.txt"]
    resp, seconds = client.execute(client.action(["/bin/sh", "script.sh"], root, outputs))
    r = resp.result
    expect(resp.status.code == 0, f"status {resp.status}")
    expect(r.exit_code == 0, f"exit code {r.exit_code}, stderr {r.stderr_raw!r}")
    files = {f.path: f for f in r.output_files}
    expect(sorted(files) == ["out/big.txt", "out/result.txt"], f"output files {sorted(files)}")
    expect(files["out/result.txt"].digest == digest(b"HELLO REAPI WORKER\n"), "out/result.txt's digest")
    expect(files["out/big.txt"].digest == digest(big.upper()), "out/big.txt's digest")
    expect(client.read(files["out/big.txt"].digest) == big.upper(), "out/big.txt read back")
    dirs = {d.path: d for d in r.output_directories}
    expect(list(dirs) == ["logs"], f"output folders {list(dirs)}")
    tree = re.Tree()
    tree.ParseFromString(client.read(dirs["logs"].tree_digest))
    expect(
        [(f.name, f.digest) for f in tree.root.files] == [("run.log", digest(b"log line\n"))], f"logs/: {tree}"
    )
    links = [(s.path, s.target) for s in r.output_symlinks]
    expect(links == [("out/link", "result.txt")], f"output symbolic links {links}")
    stdout = client.stdout(r).decode()
    for line in ["script.sh is executable", "HOME=unset FOO=bar", "done"]:
        expect(line in stdout.splitlines(), f"stdout lacks {line!r}: {stdout!r}")
    links = int(stdout.split("links=")[1].split()[0])
    expect(r.stderr_raw == b"hello reapi worker\n", f"stderr {r.stderr_raw!r}")
    out["outputs"] = {
        "exit_code": r.exit_code,
        "seconds": seconds,
        "worker": r.execution_metadata.worker,
        "big_output_bytes": files["out/big.txt"].digest.size_bytes,
        "big_input_link_count": links,
        "stdout_digest": r.stdout_digest.hash,
    }


def failure_cases(client: Client, root: re.Digest, out: dict) -> None:
    resp, seconds = client.execute(client.action(["/bin/sh", "-c", "echo failing >&2; exit 3"], root))
    expect(resp.status.code == 0 and resp.result.exit_code == 3, f"exit 3 gave {resp}")
    out["exit_3"] = {"exit_code": resp.result.exit_code, "seconds": seconds, "worker": resp.result.execution_metadata.worker}

    resp, _ = client.execute(client.action(["./no-such-program"], root))
    expect(resp.status.code != 0 and "no-such-program" in resp.status.message, f"cannot start gave {resp}")
    out["cannot_start"] = {"status": code_pb2.Code.Name(resp.status.code), "message": resp.status.message}

    resp, seconds = client.execute(client.action(["/bin/sh", "-c", "exec sleep 30"], root, timeout_s=1))
    expect(resp.status.code == code_pb2.DEADLINE_EXCEEDED, f"a 1 s timeout gave {resp}")
    out["timeout"] = {"status": code_pb2.Code.Name(resp.status.code), "seconds": seconds}

    out["refused"] = {}
    text = b"x"
    for case, bad in [
        ("escaping_link", re.Directory(symlinks=[re.SymlinkNode(name="etc", target="../../../etc")])),
        ("dot_dot_file", re.Directory(files=[re.FileNode(name="..", digest=digest(text))])),
        ("path_as_digest", re.Directory(files=[re.FileNode(name="f", digest=re.Digest(hash="../../x", size_bytes=1))])),
    ]:
        blob = bad.SerializeToString()
        client.upload([blob, text])
        resp, _ = client.execute(client.action(["/bin/true"], digest(blob)))
        expect(resp.status.code == code_pb2.INVALID_ARGUMENT, f"{case} gave {resp}")
        out["refused"][case] = resp.status.message


def sleep_case(client: Client, seconds: str, count: int, out: dict) -> None:
    root = re.Directory().SerializeToString()
    client.upload([root])
    argv = ["/bin/sh", "-c", f"echo sleeping; exec sleep {seconds}"]
    actions = [client.action(argv, digest(root)) for _ in range(count)]
    results = [None] * count

    def one(i: int) -> None:
        try:
            results[i] = client.execute(actions[i])
        except (Failed, grpc.RpcError) as e:
            results[i] = e

    threads = [threading.Thread(target=one, args=(i,)) for i in range(count)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    out["sleep"] = []
    for r in results:
        expect(not isinstance(r, Exception), f"a sleeping action: {r}")
        resp, took = r
        expect(resp.status.code == 0 and resp.result.exit_code == 0, f"a sleeping action gave {resp}")
        expect(client.stdout(resp.result) == b"sleeping\n", f"stdout {resp.result}")
        meta = resp.result.execution_metadata
        out["sleep"].append({"exit_code": resp.result.exit_code, "worker": meta.worker, "seconds": took})


def run_case(client: Client, argv: list, out: dict) -> None:
    root = re.Directory().SerializeToString()
    client.upload([root])
    resp, _ = client.execute(client.action(argv, digest(root)))
    expect(resp.status.code == 0, f"the action gave {resp.status}")
    out["run"] = {
        "exit_code": resp.result.exit_code,
        "stdout": client.stdout(resp.result).decode(),
        "worker": resp.result.execution_metadata.worker,
    }


def main() -> None:
    addr, mode = sys.argv[1], sys.argv[2]
    client = Client(addr)
    out = {}
    try:
        if mode == "main":
            root, big = input_root(client)
            outputs_case(client, root, big, out)
            failure_cases(client, root, out)
        elif mode == "run":
            run_case(client, sys.argv[3:], out)
        else:
            sleep_case(client, sys.argv[3], int(sys.argv[4]), out)
    except (Failed, grpc.RpcError) as e:
        sys.stderr.write(f"reapi_client_check: {e}\n")
        print(json.dumps(out, indent=1))
        sys.exit(1)
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
