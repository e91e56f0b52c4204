"""The storage side of cuda-aot's REAPI worker (`reapi_worker.py`, which imports this file
from beside it): the server's CAS (batch calls under its size limit, ByteStream past it,
every blob checked against its SHA-256 digest), the local cache of blobs in ROOT/cas/ that
input roots are hard-linked from, the input root's layout and the outputs' collection.
"""

import errno
import hashlib
import io
import json
import os
import re as regex
import shutil
import stat
import sys
import threading
import uuid

import grpc
from buildgrid._protos.build.bazel.remote.execution.v2 import remote_execution_pb2 as re
from buildgrid._protos.build.bazel.remote.execution.v2 import remote_execution_pb2_grpc as re_grpc
from buildgrid._protos.google.bytestream import bytestream_pb2 as bs
from buildgrid._protos.google.bytestream import bytestream_pb2_grpc as bs_grpc
from buildgrid._protos.google.rpc import code_pb2, error_details_pb2, status_pb2

# Deadline of a CAS call; ByteStream calls get this per started 16 MiB.
CAS_DEADLINE_S = 60.0
CHUNK = 1 << 20
# What a batch request may carry besides the blobs (digests, names, framing).
BATCH_OVERHEAD = 64 * 1024
HEX64 = regex.compile("[0-9a-f]{64}")

OUT_LOCK = threading.Lock()


def emit(event: str, **fields) -> None:
    """One event as a JSON line on stdout."""
    with OUT_LOCK:
        sys.stdout.write(json.dumps({"event": event, **fields}) + "\n")
        sys.stdout.flush()


def log(msg: str) -> None:
    with OUT_LOCK:
        sys.stderr.write(f"reapi_worker: {msg}\n")
        sys.stderr.flush()


class ActionError(Exception):
    """An action that cannot be run as given: reported as the lease's status."""

    def __init__(self, code: int, message: str, missing: "re.Digest | None" = None):
        super().__init__(message)
        self.code = code
        self.missing = missing

    def status(self) -> status_pb2.Status:
        s = status_pb2.Status(code=self.code, message=str(self))
        if self.missing is not None:
            v = error_details_pb2.PreconditionFailure.Violation(
                type="MISSING", subject=f"blobs/{self.missing.hash}/{self.missing.size_bytes}"
            )
            s.details.add().Pack(error_details_pb2.PreconditionFailure(violations=[v]))
        return s


def invalid(message: str) -> ActionError:
    return ActionError(code_pb2.INVALID_ARGUMENT, message)


def key(d: re.Digest) -> str:
    return f"{d.hash}/{d.size_bytes}"


def digest_of(data: bytes) -> re.Digest:
    return re.Digest(hash=hashlib.sha256(data).hexdigest(), size_bytes=len(data))


def digest_of_file(path: str) -> re.Digest:
    h = hashlib.sha256()
    size = 0
    with open(path, "rb", opener=lambda p, f: os.open(p, f | os.O_NOFOLLOW)) as f:
        while block := f.read(CHUNK):
            h.update(block)
            size += len(block)
    return re.Digest(hash=h.hexdigest(), size_bytes=size)


def plain_name(name: str, what: str) -> str:
    """A single path component: not empty, `.` or `..`, no `/` or NUL."""
    if name in ("", ".", "..") or "/" in name or "\0" in name:
        raise invalid(f"{what}: {name!r} is not a plain name")
    return name


def relative_path(path: str, what: str) -> list[str]:
    """A relative path of plain names (`""`: the folder itself)."""
    if path == "":
        return []
    return [plain_name(p, f"{what} {path!r}") for p in path.split("/")]


class Cas:
    """The server's CAS: batch calls under its size limit, ByteStream past it."""

    def __init__(self, channel: grpc.Channel, instance: str, batch_limit: int):
        self.cas = re_grpc.ContentAddressableStorageStub(channel)
        self.bytestream = bs_grpc.ByteStreamStub(channel)
        self.instance = instance
        self.budget = batch_limit - BATCH_OVERHEAD
        self.prefix = f"{instance}/" if instance else ""

    def batches(self, digests):
        """Digests grouped so that each group's blobs fit one batch call."""
        group, size = [], 0
        for d in digests:
            if group and size + d.size_bytes > self.budget:
                yield group
                group, size = [], 0
            group.append(d)
            size += d.size_bytes
        if group:
            yield group

    def read_batch(self, digests) -> dict:
        """The blobs of `digests` (each within the batch budget), checked: key -> bytes."""
        got = {}
        for group in self.batches(digests):
            req = re.BatchReadBlobsRequest(instance_name=self.instance, digests=group)
            for r in self.cas.BatchReadBlobs(req, timeout=CAS_DEADLINE_S).responses:
                if r.status.code == code_pb2.NOT_FOUND:
                    raise ActionError(code_pb2.FAILED_PRECONDITION, f"blob {key(r.digest)} is not in the CAS", r.digest)
                if r.status.code != code_pb2.OK:
                    raise RuntimeError(f"BatchReadBlobs {key(r.digest)}: {r.status.message} (code {r.status.code})")
                if digest_of(r.data) != r.digest:
                    raise RuntimeError(f"the CAS returned other bytes for {key(r.digest)}")
                got[key(r.digest)] = r.data
            lost = [key(d) for d in group if key(d) not in got]
            if lost:
                raise RuntimeError(f"BatchReadBlobs answered nothing for {', '.join(lost)}")
        return got

    def read_to_file(self, d: re.Digest, path: str) -> None:
        """ByteStream Read of `d` into a new file `path`, checked."""
        name = f"{self.prefix}blobs/{d.hash}/{d.size_bytes}"
        h = hashlib.sha256()
        size = 0
        timeout = CAS_DEADLINE_S * (1 + d.size_bytes // (16 << 20))
        try:
            with open(path, "xb") as f:
                for r in self.bytestream.Read(bs.ReadRequest(resource_name=name), timeout=timeout):
                    f.write(r.data)
                    h.update(r.data)
                    size += len(r.data)
        except grpc.RpcError as e:
            if e.code() == grpc.StatusCode.NOT_FOUND:
                raise ActionError(code_pb2.FAILED_PRECONDITION, f"blob {key(d)} is not in the CAS", d) from e
            raise
        if h.hexdigest() != d.hash or size != d.size_bytes:
            raise RuntimeError(f"ByteStream Read of {key(d)} gave {size} bytes of another digest")

    def upload(self, blobs: dict) -> None:
        """Stores `blobs` (key -> (Digest, bytes or a file path)) the server lacks."""
        digests = [d for d, _ in blobs.values()]
        missing = []
        for i in range(0, len(digests), 4000):
            req = re.FindMissingBlobsRequest(instance_name=self.instance, blob_digests=digests[i : i + 4000])
            missing += self.cas.FindMissingBlobs(req, timeout=CAS_DEADLINE_S).missing_blob_digests
        small = [d for d in missing if d.size_bytes <= self.budget]
        for group in self.batches(small):
            req = re.BatchUpdateBlobsRequest(instance_name=self.instance)
            for d in group:
                req.requests.add(digest=d, data=content(blobs[key(d)][1]))
            for r in self.cas.BatchUpdateBlobs(req, timeout=CAS_DEADLINE_S).responses:
                if r.status.code != code_pb2.OK:
                    raise RuntimeError(f"BatchUpdateBlobs {key(r.digest)}: {r.status.message}")
        for d in missing:
            if d.size_bytes > self.budget:
                self.write(d, blobs[key(d)][1])

    def write(self, d: re.Digest, source) -> None:
        name = f"{self.prefix}uploads/{uuid.uuid4()}/blobs/{d.hash}/{d.size_bytes}"

        def chunks():
            with open(source, "rb") if isinstance(source, str) else io.BytesIO(source) as f:
                offset = 0
                while True:
                    block = f.read(CHUNK)
                    last = offset + len(block) >= d.size_bytes
                    yield bs.WriteRequest(
                        resource_name=name if offset == 0 else "", write_offset=offset, data=block, finish_write=last
                    )
                    offset += len(block)
                    if last or not block:
                        return

        timeout = CAS_DEADLINE_S * (1 + d.size_bytes // (16 << 20))
        committed = self.bytestream.Write(chunks(), timeout=timeout).committed_size
        if committed != d.size_bytes:
            raise RuntimeError(f"ByteStream Write of {key(d)} committed {committed} bytes")


def content(source) -> bytes:
    if isinstance(source, str):
        with open(source, "rb") as f:
            return f.read()
    return source


class Cache:
    """ROOT/cas/: blobs by digest, each a read-only file (a second entry, `.x`, when
    wanted executable), written once (a temporary file renamed into place) and
    hard-linked into input roots."""

    def __init__(self, root: str, cas: Cas):
        self.dir = os.path.join(root, "cas")
        self.tmp = os.path.join(self.dir, "tmp")
        os.makedirs(self.tmp, exist_ok=True)
        for name in os.listdir(self.tmp):
            os.unlink(os.path.join(self.tmp, name))
        self.cas = cas
        self.directories = {}  # key -> Directory, parsed once per process
        self.lock = threading.Lock()

    def path(self, d: re.Digest, executable: bool = False) -> str:
        """The cache file of `d`: its hash, once checked, names it."""
        if not (HEX64.fullmatch(d.hash) and d.size_bytes >= 0):
            raise invalid(f"digest {d.hash[:80]!r}/{d.size_bytes} is not a SHA-256 digest")
        suffix = ".x" if executable else ""
        return os.path.join(self.dir, d.hash[:2], f"{d.hash}_{d.size_bytes}{suffix}")

    def _put(self, d: re.Digest, executable: bool, write) -> None:
        tmp = os.path.join(self.tmp, uuid.uuid4().hex)
        try:
            write(tmp)
            os.chmod(tmp, 0o555 if executable else 0o444)
            final = self.path(d, executable)
            os.makedirs(os.path.dirname(final), exist_ok=True)
            os.replace(tmp, final)
        finally:
            if os.path.lexists(tmp):
                os.unlink(tmp)

    def _put_bytes(self, d: re.Digest, executable: bool, data: bytes) -> None:
        def write(tmp):
            with open(tmp, "xb") as f:
                f.write(data)

        self._put(d, executable, write)

    def ensure(self, wanted: dict, stats: dict) -> None:
        """Makes sure every (Digest, executable) of `wanted` (key -> pair) is cached;
        fetches each missing blob once."""
        need = [(d, x) for d, x in wanted.values() if not os.path.exists(self.path(d, x))]
        fetch = {}
        for d, x in need:
            if not (os.path.exists(self.path(d, not x)) or d.size_bytes == 0):
                fetch[key(d)] = d
        small = [d for d in fetch.values() if d.size_bytes <= self.cas.budget]
        for k, data in self.cas.read_batch(small).items():
            self._put_bytes(fetch[k], False, data)
            stats["fetched_bytes"] += len(data)
        for d in fetch.values():
            if d.size_bytes > self.cas.budget:
                self._put(d, False, lambda tmp, d=d: self.cas.read_to_file(d, tmp))
                stats["fetched_bytes"] += d.size_bytes
        stats["fetched_files"] += len(fetch)
        for d, x in need:
            if os.path.exists(self.path(d, x)):
                continue
            if d.size_bytes == 0:
                self._put_bytes(d, x, b"")
            else:
                self._put(d, x, lambda tmp, d=d, x=x: shutil.copyfile(self.path(d, not x), tmp))

    def blobs(self, digests, stats: dict) -> dict:
        """The bytes of small blobs (protos), from the cache or fetched into it."""
        self.ensure({key(d): (d, False) for d in digests}, stats)
        out = {}
        for d in digests:
            with open(self.path(d), "rb") as f:
                out[key(d)] = f.read()
        return out

    def tree(self, root: re.Digest, stats: dict) -> dict:
        """Every Directory under `root`, by key."""
        found, level = {}, [root]
        while level:
            with self.lock:
                known = {key(d): self.directories[key(d)] for d in level if key(d) in self.directories}
            fresh = [d for d in {key(d): d for d in level}.values() if key(d) not in known]
            for k, data in self.blobs(fresh, stats).items():
                directory = re.Directory()
                directory.ParseFromString(data)
                known[k] = directory
            with self.lock:
                if len(self.directories) > 100000:
                    self.directories.clear()
                self.directories.update(known)
            found.update(known)
            level = [c.digest for dr in known.values() for c in dr.directories if key(c.digest) not in found]
        return found

    def link(self, d: re.Digest, executable: bool, dest: str) -> None:
        try:
            os.link(self.path(d, executable), dest)
        except OSError as e:
            # Another file system, the link count at its limit, or links not allowed
            # there: a copy.
            if e.errno not in (errno.EXDEV, errno.EMLINK, errno.EPERM):
                raise
            shutil.copy2(self.path(d, executable), dest)


def lay_out(tree: dict, root: re.Digest, dest: str, cache: Cache) -> int:
    """Makes the input root `root` in the empty folder `dest`; returns the files linked."""
    files = 0
    stack = [(root, dest, [])]
    while stack:
        d, here, at = stack.pop()
        directory = tree[key(d)]
        seen = set()

        def name_of(node, what):
            name = plain_name(node.name, what)
            if name in seen:
                raise invalid(f"input folder {'/'.join(at)!r} names {name!r} twice")
            seen.add(name)
            return name

        for f in directory.files:
            cache.link(f.digest, f.is_executable, os.path.join(here, name_of(f, "input file")))
            files += 1
        for link in directory.symlinks:
            name = name_of(link, "input symbolic link")
            check_link_target(at, link.target, name)
            os.symlink(link.target, os.path.join(here, name))
        for sub in directory.directories:
            name = name_of(sub, "input folder")
            os.mkdir(os.path.join(here, name), 0o755)
            stack.append((sub.digest, os.path.join(here, name), at + [name]))
    return files


def check_link_target(at: list, target: str, name: str) -> None:
    """A symbolic link in folder `at` (names from the input root) must stay inside it:
    a relative target whose `..` come first and climb no higher than the input root. A
    `..` after a name is refused, since the name may be another link (`d -> .`, then
    `x -> d/d/../..` climbs two folders, not none); with that rule every link resolves
    inside the input root, whichever links it passes through."""
    where = "/".join(at + [name])
    if target == "" or target.startswith("/") or "\0" in target:
        raise invalid(f"symbolic link {where!r}: target {target!r} is not a relative path")
    parts = [p for p in target.split("/") if p not in ("", ".")]
    ups = 0
    while ups < len(parts) and parts[ups] == "..":
        ups += 1
    if ups > len(at):
        raise invalid(f"symbolic link {where!r}: target {target!r} leaves the input root")
    if ".." in parts[ups:]:
        raise invalid(f"symbolic link {where!r}: target {target!r} has `..` after a name")


def remove_tree(path: str) -> None:
    """Deletes `path`, whatever modes the command left on its folders."""

    def fix(_func, p, _exc):
        parent = os.path.dirname(p)
        os.chmod(parent, 0o755)
        if os.path.isdir(p) and not os.path.islink(p):
            os.chmod(p, 0o755)
            shutil.rmtree(p, onerror=fix)
        else:
            os.unlink(p)

    if os.path.lexists(path):
        shutil.rmtree(path, onerror=fix)


class Outputs:
    """The outputs a Command declares (`output_paths`, else the legacy `output_files` and
    `output_directories`), relative to its working directory in the input root `root`."""

    def __init__(self, command: re.Command, root: str):
        self.root = root
        self.cwd = os.path.join(root, *relative_path(command.working_directory, "working directory"))
        self.directories_too = command.output_directory_format != re.Command.TREE_ONLY
        if command.output_paths:
            self.paths = [(p, None) for p in command.output_paths]
        else:
            self.paths = [(p, "file") for p in command.output_files]
            self.paths += [(p, "folder") for p in command.output_directories]
        for p, _ in self.paths:
            relative_path(p, "output path")

    def make_parents(self, owner: "tuple[int, int] | None" = None) -> None:
        """Step 3: the folders the outputs go in (not the outputs themselves), given to
        `owner` (uid, gid: the user the command runs as) when there is one."""
        for p, _ in self.paths:
            parts = relative_path(p, "output path")[:-1]
            parent = os.path.join(self.cwd, *parts)
            try:
                os.makedirs(parent, 0o755, exist_ok=True)
                for i in range(len(parts)):
                    if owner is not None:
                        os.chown(os.path.join(self.cwd, *parts[: i + 1]), *owner)
            except OSError as e:
                raise invalid(f"output path {p!r}: cannot make its folder: {e.strerror}") from e

    def collect(self, result: re.ActionResult) -> dict:
        """Step 4: the outputs that exist into `result`; returns the blobs to upload
        (key -> (Digest, bytes or a file path))."""
        blobs = {}
        real_root = os.path.realpath(self.root)
        for p, kind in self.paths:
            full = os.path.join(self.cwd, *relative_path(p, "output path"))
            where = os.path.realpath(os.path.dirname(full) if p else full)
            if where != real_root and not where.startswith(real_root + "/"):
                log(f"output {p!r} is outside the input root (through a symbolic link): left out")
                continue
            try:
                st = os.lstat(full)
            except FileNotFoundError:
                continue
            if stat.S_ISLNK(st.st_mode):
                link = re.OutputSymlink(path=p, target=os.readlink(full))
                result.output_symlinks.append(link)
                if kind == "file":
                    result.output_file_symlinks.append(link)
                elif kind == "folder":
                    result.output_directory_symlinks.append(link)
            elif stat.S_ISREG(st.st_mode) and kind != "folder":
                d = digest_of_file(full)
                blobs[key(d)] = (d, full)
                result.output_files.add(path=p, digest=d, is_executable=bool(st.st_mode & 0o100))
            elif stat.S_ISDIR(st.st_mode) and kind != "file":
                children = {}
                tree = re.Tree(root=self.directory(full, blobs, children))
                tree.children.extend(children.values())
                data = tree.SerializeToString()
                out = result.output_directories.add(path=p, tree_digest=digest_of(data))
                blobs[key(out.tree_digest)] = (out.tree_digest, data)
                if self.directories_too:
                    data = tree.root.SerializeToString()
                    out.root_directory_digest.CopyFrom(digest_of(data))
                    blobs[key(out.root_directory_digest)] = (out.root_directory_digest, data)
        return blobs

    def directory(self, path: str, blobs: dict, children: dict) -> re.Directory:
        """The Directory of folder `path`; its files' blobs into `blobs`, its descendants
        into `children` (by key)."""
        out = re.Directory()
        for entry in sorted(os.scandir(path), key=lambda e: e.name.encode("utf-8", "surrogateescape")):
            st = entry.stat(follow_symlinks=False)
            if stat.S_ISLNK(st.st_mode):
                out.symlinks.add(name=entry.name, target=os.readlink(entry.path))
            elif stat.S_ISREG(st.st_mode):
                d = digest_of_file(entry.path)
                blobs[key(d)] = (d, entry.path)
                out.files.add(name=entry.name, digest=d, is_executable=bool(st.st_mode & 0o100))
            elif stat.S_ISDIR(st.st_mode):
                sub = self.directory(entry.path, blobs, children)
                data = sub.SerializeToString()
                d = digest_of(data)
                children[key(d)] = sub
                if self.directories_too:
                    blobs[key(d)] = (d, data)
                out.directories.add(name=entry.name, digest=d)
        return out
