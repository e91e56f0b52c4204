"""cuda-aot's REAPI worker: takes actions from a Remote Execution API server through the
Remote Workers API (Bots, google.devtools.remoteworkers.v1test2) and runs them on this
machine. Run by `cargo xtask servers reapi-worker` with the venv of
manifests/reapi-server.txt (grpcio and BuildGrid's generated protos; nothing generated here).

usage: reapi_worker.py --server HOST:PORT --root DIR --name NAME --instance NAME
                       --capacity N --isa ISA

The bot: one session (CreateBotSession, then UpdateBotSession in a loop, each call with a
5 s deadline: BuildGrid long-polls a bot for 80% of min(deadline, keepalive) while it has
room for a lease, and hands out none under 3 s); while every slot is busy it reports every
second so that the server knows it is alive. Leases arrive ACTIVE; each runs in a thread.
A finished one is reported COMPLETED with a packed ActionResult and a google.rpc.Status
(OK when the command ran, whatever its exit code). A lease that leaves the session
(cancelled, or the session lost) has its command killed. SIGTERM or SIGINT: running
commands are killed, their leases given back (status UNAVAILABLE, which BuildGrid queues
again at once), then the bot says BOT_TERMINATING and exits 0.

One lease, in steps (`Runner.run`):
1. The Action (the lease's payload, or a packed Digest of it), its Command and its input
   root's Directory tree come from the server's CAS (BatchReadBlobs; ByteStream Read past
   the batch limit); every blob is checked against its SHA-256 digest.
2. The input root is laid out in a fresh folder ROOT/actions/<id>/root: folders, symbolic
   links (a target that is absolute, climbs out of the input root or has `..` after a
   name is refused) and files hard-linked from the local cache ROOT/cas/ (read-only: 0555
   when executable, else 0444, a separate cache entry for each mode), so that a file every
   action uses (the CUDA toolkit) is downloaded once and never copied, and a command cannot
   change what later actions get. A name that is empty, `.`, `..` or holds `/` is refused.
3. The parent folders of the outputs are made (owned by the --run-as user, if given); the
   command runs in its working directory, as the --run-as user if given (a worker run as
   root should: root could write through the read-only cache links), with exactly the
   Command's environment (with --clock-offset-days, plus datefudge preloaded), stdin
   from /dev/null, stdout and stderr to files, in a session and process group of its own (its first process gets SIGKILL if the
   worker dies); past the Action's timeout the group is killed (DEADLINE_EXCEEDED).
4. The outputs that exist (files, folders as Tree protos, symbolic links) and stdout and
   stderr go to the CAS (FindMissingBlobs first; ByteStream Write past the batch limit);
   a missing output is left for the client to judge.
5. The action's folder is deleted; the cache stays.

A command that cannot start (FAILED_PRECONDITION), a malformed action (INVALID_ARGUMENT)
or a missing input (FAILED_PRECONDITION with a PreconditionFailure) is reported as the
lease's status; a fault of the worker itself is INTERNAL, which BuildGrid retries.

One worker per ROOT (ROOT/worker.lock): at start it deletes what a killed predecessor
left in ROOT/actions/. Events, one JSON object a line, go to stdout (`connected`, `ready`
with the session's name, `lease`, `running` with the command's pid, `done` with the exit
code, status and what was fetched, `stopped`); messages to stderr.
"""

import argparse
import ctypes
import fcntl
import os
import signal
import subprocess
import threading
import time
import uuid

import grpc
from buildgrid._protos.build.bazel.remote.execution.v2 import remote_execution_pb2 as re
from buildgrid._protos.build.bazel.remote.execution.v2 import remote_execution_pb2_grpc as re_grpc
from buildgrid._protos.google.devtools.remoteworkers.v1test2 import bots_pb2
from buildgrid._protos.google.devtools.remoteworkers.v1test2 import bots_pb2_grpc
from buildgrid._protos.google.rpc import code_pb2, status_pb2
from google.protobuf.timestamp_pb2 import Timestamp

# Beside this file (sys.path[0] is the script's folder).
from reapi_worker_cas import (
    CAS_DEADLINE_S,
    ActionError,
    Cache,
    Cas,
    Outputs,
    content,
    digest_of,
    digest_of_file,
    emit,
    invalid,
    key,
    lay_out,
    log,
    remove_tree,
)

# Each Bots call's deadline: BuildGrid waits for work for 80% of it (at most 80% of the
# keepalive) and hands out no lease when that is under its 3 s network timeout.
CALL_DEADLINE_S = 5.0
# How often a bot whose every slot is busy reports that it is alive (the shortest keepalive
# BuildGrid can be given is 4 s).
HEARTBEAT_S = 1.0
# Bots call failures worth trying again on the same session; any other code means the
# server no longer knows the session (expired, closed): a new one is made.
TRANSIENT = {
    grpc.StatusCode.UNAVAILABLE,
    grpc.StatusCode.DEADLINE_EXCEEDED,
    grpc.StatusCode.RESOURCE_EXHAUSTED,
    grpc.StatusCode.CANCELLED,
    grpc.StatusCode.UNKNOWN,
    grpc.StatusCode.INTERNAL,
}
# stdout and stderr up to this size also go inline (stdout_raw, stderr_raw).
INLINE_MAX = 16 * 1024
GRPC_OPTIONS = [
    ("grpc.max_receive_message_length", 64 << 20),
    ("grpc.max_send_message_length", 64 << 20),
]
PR_SET_PDEATHSIG = 1
PRCTL = ctypes.CDLL(None, use_errno=True).prctl


def die_with_worker() -> None:
    """Between fork and exec: the command's first process gets SIGKILL if the worker
    thread that started it ends (a worker killed outright)."""
    PRCTL(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)


def now() -> Timestamp:
    t = Timestamp()
    t.GetCurrentTime()
    return t


class Runner:
    """One lease: fetch, lay out, run, upload, clean (the module's steps 1 to 5)."""

    def __init__(self, lease_id: str, payload, worker):
        self.id = lease_id
        self.payload = payload
        self.worker = worker
        self.folder = os.path.join(worker.root, "actions", uuid.uuid4().hex)
        self.lock = threading.Lock()
        self.process = None
        self.reaping = False  # set, under the lock, just before the command is reaped
        self.cancelled = False
        self.timed_out = False
        self.finished = False
        self.result = None
        self.status = status_pb2.Status(code=code_pb2.OK)
        self.stats = {"fetched_bytes": 0, "fetched_files": 0, "linked_files": 0}
        self.phases = {}
        self.platform = {}
        self.thread = threading.Thread(target=self.main, name=f"lease {lease_id}", daemon=True)

    def main(self) -> None:
        t = time.monotonic()
        try:
            self.result = self.run()
        except ActionError as e:
            self.status = e.status()
        except grpc.RpcError as e:
            self.status = status_pb2.Status(code=code_pb2.INTERNAL, message=f"CAS: {e.code().name}: {e.details()}")
        except Exception as e:  # a fault of this worker: BuildGrid retries INTERNAL
            self.status = status_pb2.Status(code=code_pb2.INTERNAL, message=f"worker {self.worker.name}: {e!r}")
        finally:
            clean = time.monotonic()
            try:
                remove_tree(self.folder)
            except OSError as e:
                log(f"lease {self.id}: cannot delete {self.folder}: {e}")
        if self.cancelled:
            self.status = status_pb2.Status(code=code_pb2.UNAVAILABLE, message=f"worker {self.worker.name} stopped")
            self.result = None
        emit(
            "done",
            id=self.id,
            exit_code=self.result.exit_code if self.result else None,
            status=code_pb2.Code.Name(self.status.code),
            message=self.status.message,
            seconds=round(time.monotonic() - t, 3),
            cancelled=self.cancelled,
            clean_s=round(time.monotonic() - clean, 3),
            platform=self.platform,
            **self.phases,
            **self.stats,
        )
        self.finished = True
        self.worker.attention.set()

    def action(self) -> re.Action:
        """Step 1: the Action from the payload."""
        action = re.Action()
        if self.payload.Is(re.Action.DESCRIPTOR):
            self.payload.Unpack(action)
        elif self.payload.Is(re.Digest.DESCRIPTOR):
            d = re.Digest()
            self.payload.Unpack(d)
            action.ParseFromString(self.worker.cache.blobs([d], self.stats)[key(d)])
        else:
            raise invalid(f"lease payload {self.payload.type_url} is neither an Action nor a Digest")
        return action

    def run(self) -> re.ActionResult:
        meta = re.ExecutedActionMetadata(worker=self.worker.name, worker_start_timestamp=now())
        cache = self.worker.cache
        # 1. The Action, its Command and its input tree.
        meta.input_fetch_start_timestamp.CopyFrom(now())
        t = time.monotonic()
        action = self.action()
        self.platform = {p.name: p.value for p in action.platform.properties}
        command = re.Command()
        command.ParseFromString(cache.blobs([action.command_digest], self.stats)[key(action.command_digest)])
        if not command.arguments:
            raise invalid("the Command has no arguments")
        tree = cache.tree(action.input_root_digest, self.stats)
        files = {}
        for directory in tree.values():
            for f in directory.files:
                files[f"{key(f.digest)}/{f.is_executable}"] = (f.digest, f.is_executable)
        cache.ensure(files, self.stats)
        self.phases["fetch_s"] = round(time.monotonic() - t, 3)
        t = time.monotonic()
        # 2. The input root, hard-linked from the cache.
        root = os.path.join(self.folder, "root")
        os.makedirs(root, 0o755)
        self.stats["linked_files"] = lay_out(tree, action.input_root_digest, root, cache)
        meta.input_fetch_completed_timestamp.CopyFrom(now())
        self.phases["layout_s"] = round(time.monotonic() - t, 3)
        t = time.monotonic()
        # 3. The command.
        outputs = Outputs(command, root)
        outputs.make_parents(self.worker.run_as)
        meta.execution_start_timestamp.CopyFrom(now())
        exit_code = self.execute(command, outputs.cwd, action.timeout.ToTimedelta().total_seconds())
        meta.execution_completed_timestamp.CopyFrom(now())
        self.phases["run_s"] = round(time.monotonic() - t, 3)
        t = time.monotonic()
        if self.worker.damage_outputs:
            damage(outputs)
        # 4. Outputs, stdout and stderr to the CAS.
        meta.output_upload_start_timestamp.CopyFrom(now())
        result = re.ActionResult(exit_code=exit_code)
        blobs = outputs.collect(result)
        for name in ("stdout", "stderr"):
            path = os.path.join(self.folder, name)
            if os.path.getsize(path) > 0:
                d = digest_of_file(path)
                blobs[key(d)] = (d, path)
                getattr(result, f"{name}_digest").CopyFrom(d)
                if d.size_bytes <= INLINE_MAX:
                    setattr(result, f"{name}_raw", content(path))
        self.worker.cas.upload(blobs)
        meta.output_upload_completed_timestamp.CopyFrom(now())
        self.phases["upload_s"] = round(time.monotonic() - t, 3)
        meta.worker_completed_timestamp.CopyFrom(now())
        result.execution_metadata.CopyFrom(meta)
        if self.timed_out:
            self.status = status_pb2.Status(
                code=code_pb2.DEADLINE_EXCEEDED, message=f"the action ran past its timeout ({action.timeout.seconds} s)"
            )
        return result

    def execute(self, command: re.Command, cwd: str, timeout_s: float) -> int:
        """Step 3: runs the command; its exit code (128 + N when killed by signal N)."""
        if not os.path.isdir(cwd):
            raise invalid(f"working directory {command.working_directory!r} is not a folder of the input root")
        env = {v.name: v.value for v in command.environment_variables}
        if self.worker.datefudge:
            # --clock-offset-days: the command and every process it starts see the wall
            # clock shifted (datefudge subtracts DATEFUDGE seconds from the real time).
            env["LD_PRELOAD"] = self.worker.datefudge
            env["DATEFUDGE"] = str(-self.worker.clock_offset_days * 86400)
        argv = list(command.arguments)
        with open(os.path.join(self.folder, "stdout"), "xb") as out, open(os.path.join(self.folder, "stderr"), "xb") as err:
            with self.lock:
                if self.cancelled:
                    raise ActionError(code_pb2.UNAVAILABLE, "cancelled")
                try:
                    self.process = subprocess.Popen(
                        argv,
                        cwd=cwd,
                        env=env,
                        stdin=subprocess.DEVNULL,
                        stdout=out,
                        stderr=err,
                        close_fds=True,
                        start_new_session=True,
                        preexec_fn=die_with_worker,
                        **self.worker.user_args(),
                    )
                except OSError as e:
                    raise ActionError(
                        code_pb2.FAILED_PRECONDITION, f"cannot start {argv[0]!r}: {e.strerror or e}"
                    ) from e
            timer = threading.Timer(timeout_s, self.expire) if timeout_s > 0 else None
            if timer:
                timer.daemon = True
                timer.start()
            pid = self.process.pid
            emit("running", id=self.id, pid=pid)
            # Waited for without reaping: while it is a zombie its group id cannot be
            # reused, so the group (what it left running) is killed safely.
            os.waitid(os.P_PID, pid, os.WEXITED | os.WNOWAIT)
            if timer:
                timer.cancel()
            with self.lock:
                self.kill_group()
                self.reaping = True
            code = self.process.wait()
        return code if code >= 0 else 128 - code

    def kill_group(self) -> None:
        try:
            os.killpg(self.process.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass

    def expire(self) -> None:
        with self.lock:
            if not self.reaping:
                self.timed_out = True
                self.kill_group()

    def cancel(self) -> None:
        """Kills the command (the lease left the session, or the worker stops)."""
        with self.lock:
            self.cancelled = True
            if self.process is not None and not self.reaping:
                self.kill_group()


class Bot:
    """The bot's session: leases in, results out (the module's first part)."""

    def __init__(self, stub: bots_pb2_grpc.BotsStub, worker: "Worker", args):
        self.stub = stub
        self.worker = worker
        self.args = args
        self.runners = {}  # lease id -> Runner, until its result is reported
        # Set by the signal handler, which takes no lock (the main thread it interrupts
        # may hold the lock of `attention`): the loop looks at it every 0.1 s.
        self.stop_requested = False

    def stop(self) -> None:
        """SIGTERM, SIGINT: the loop kills the commands, reports and leaves."""
        self.stop_requested = True

    def fresh_session(self) -> bots_pb2.BotSession:
        s = bots_pb2.BotSession(bot_id=self.args.name, status=bots_pb2.OK)
        device = s.worker.devices.add(handle=self.args.name)
        for k, v in (("OSFamily", "linux"), ("ISA", self.args.isa)):
            device.properties.add(key=k, value=v)
        s.worker.configs.add(key="capacity", value=str(self.args.capacity))
        return s

    def loop(self) -> None:
        """Until stopped: CreateBotSession, then UpdateBotSession again and again."""
        session, failures = None, 0
        while True:
            stopping = self.stop_requested
            if stopping:
                self.cancel_all(join=True)
            if session is None:
                if stopping:
                    return
                sent = []
                method = self.stub.CreateBotSession
                request = bots_pb2.CreateBotSessionRequest(parent=self.args.instance, bot_session=self.fresh_session())
            else:
                sent = self.report(session, stopping)
                method = self.stub.UpdateBotSession
                request = bots_pb2.UpdateBotSessionRequest(name=session.name, bot_session=session)
            t = time.monotonic()
            try:
                reply = self.call(method, request, interruptible=not stopping)
            except grpc.RpcError as e:
                if stopping:
                    log(f"leaving: {e.code().name}: {e.details()}")
                    return
                failures += 1
                if e.code() in TRANSIENT:
                    if failures == 1 or failures % 50 == 0:
                        log(f"{e.code().name}: {e.details()}; trying again")
                    time.sleep(min(0.2 * failures, 2.0))
                    continue
                log(f"session {session.name if session else '(new)'}: {e.code().name}: {e.details()}; a new session")
                self.cancel_all(join=False)
                session = None
                time.sleep(0.5)
                continue
            if reply is None:  # interrupted to report sooner
                continue
            failures = 0
            for lease_id in sent:
                self.runners.pop(lease_id, None)
            if stopping:
                return
            if session is None:
                emit("ready", bot=self.args.name, session=reply.name, capacity=self.args.capacity)
            session = reply
            self.pace(self.take(session), bool(sent), time.monotonic() - t)

    def call(self, method, request, interruptible: bool):
        """The call's reply; None when a finished lease or a stop cut it short (the
        server's long poll would hold the report back for seconds)."""
        future = method.future(request, timeout=CALL_DEADLINE_S)
        while True:
            try:
                return future.result(timeout=0.1)
            except grpc.FutureTimeoutError:
                pass
            wanted = self.worker.attention.is_set() or self.stop_requested
            if interruptible and wanted and future.cancel():
                return None

    def report(self, session: bots_pb2.BotSession, stopping: bool) -> list:
        """Sets each lease's state (COMPLETED with its result, else ACTIVE); returns the
        ids reported COMPLETED."""
        self.worker.attention.clear()
        sent = []
        for lease in session.leases:
            runner = self.runners.get(lease.id)
            if runner is None:
                continue
            if runner.finished or stopping:
                lease.state = bots_pb2.COMPLETED
                if runner.finished:
                    lease.status.CopyFrom(runner.status)
                else:
                    lease.status.CopyFrom(status_pb2.Status(code=code_pb2.UNAVAILABLE, message="worker stopped"))
                lease.ClearField("result")
                if runner.finished and runner.result is not None:
                    lease.result.Pack(runner.result)
                sent.append(lease.id)
            else:
                lease.state = bots_pb2.ACTIVE
        if stopping:
            session.status = bots_pb2.BOT_TERMINATING
        return sent

    def take(self, session: bots_pb2.BotSession) -> int:
        """Starts the session's new leases; kills the commands of leases it no longer
        has. Returns the number started."""
        held, started = set(), 0
        for lease in session.leases:
            held.add(lease.id)
            if lease.id in self.runners or lease.state not in (bots_pb2.PENDING, bots_pb2.ACTIVE):
                continue
            runner = self.worker.runner(lease.id, lease.payload)
            self.runners[lease.id] = runner
            action = digest_of(lease.payload.value) if lease.payload.Is(re.Action.DESCRIPTOR) else None
            emit("lease", id=lease.id, action=key(action) if action else lease.payload.type_url)
            lease.state = bots_pb2.ACTIVE
            runner.thread.start()
            started += 1
        for lease_id in [i for i in self.runners if i not in held]:
            log(f"lease {lease_id} left the session (cancelled, or given to another bot): its command is killed")
            self.runners.pop(lease_id).cancel()
        return started

    def pace(self, started: int, reported: bool, elapsed: float) -> None:
        """Waits before the next call while every slot is busy (a heartbeat), or when the
        server answered an idle poll at once with nothing new (no spinning). A call that
        reported a result is answered at once by the server: the next one, its long poll
        for work, follows straight away (a client waiting on that result sends its next
        action within milliseconds)."""
        busy = sum(1 for r in self.runners.values() if not r.finished)
        if busy >= self.args.capacity:
            self.nap(HEARTBEAT_S)
        elif started == 0 and not reported and elapsed < 0.5:
            self.nap(0.5)

    def nap(self, seconds: float) -> None:
        """Sleeps until a lease finishes, a stop is asked for or `seconds` pass."""
        end = time.monotonic() + seconds
        while not self.stop_requested and time.monotonic() < end:
            if self.worker.attention.wait(min(0.1, max(0.0, end - time.monotonic()))):
                return

    def cancel_all(self, join: bool) -> None:
        """Kills every running command; with `join`, waits (10 s at most) for the threads."""
        for runner in self.runners.values():
            runner.cancel()
        if not join:
            self.runners.clear()
            return
        end = time.monotonic() + 10
        for runner in self.runners.values():
            runner.thread.join(max(0.0, end - time.monotonic()))


class Worker:
    """What every lease shares: the name, the root, the server's CAS and the cache."""

    def __init__(self, args, channel: grpc.Channel):
        self.name = args.name
        self.root = args.root
        self.damage_outputs = args.damage_outputs
        self.run_as = tuple(int(x) for x in args.run_as.split(":")) if args.run_as else None
        self.datefudge = args.datefudge
        self.clock_offset_days = args.clock_offset_days
        caps = re_grpc.CapabilitiesStub(channel).GetCapabilities(
            re.GetCapabilitiesRequest(instance_name=args.instance), timeout=CAS_DEADLINE_S
        )
        if re.DigestFunction.SHA256 not in caps.cache_capabilities.digest_functions:
            raise SystemExit(f"reapi_worker: the server's CAS does not take SHA-256 digests: {caps.cache_capabilities}")
        limit = caps.cache_capabilities.max_batch_total_size_bytes or (4 << 20)
        self.cas = Cas(channel, args.instance, min(limit, 4 << 20))
        self.cache = Cache(args.root, self.cas)
        self.attention = threading.Event()

    def user_args(self) -> dict:
        """Popen's arguments for running a command as --run-as (none without it)."""
        if self.run_as is None:
            return {}
        return {"user": self.run_as[0], "group": self.run_as[1], "extra_groups": []}

    def runner(self, lease_id: str, payload) -> Runner:
        return Runner(lease_id, payload, self)


def lock_root(root: str):
    """ROOT/worker.lock, held while this process runs; then ROOT/actions/ emptied."""
    os.makedirs(root, exist_ok=True)
    f = open(os.path.join(root, "worker.lock"), "a")
    try:
        fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        raise SystemExit(
            f"reapi_worker: another worker uses {root} (its worker.lock is held)\nFix: give each worker its own --root"
        )
    actions = os.path.join(root, "actions")
    remove_tree(actions)
    os.makedirs(actions)
    return f


def damage(outputs) -> None:
    """Fault injection (`--damage-outputs`): every output file that exists cut to half its
    size, as a broken or malicious worker would leave it."""
    for p, _ in outputs.paths:
        full = os.path.join(outputs.cwd, p)
        if os.path.isfile(full) and not os.path.islink(full):
            size = os.path.getsize(full)
            with open(full, "r+b") as f:
                f.truncate(size // 2)
            log(f"--damage-outputs: {p} cut from {size} to {size // 2} bytes")


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--server", required=True, help="HOST:PORT, gRPC without TLS")
    p.add_argument("--root", required=True)
    p.add_argument("--name", required=True)
    p.add_argument("--instance", default="")
    p.add_argument("--capacity", type=int, default=1)
    p.add_argument("--isa", required=True)
    p.add_argument("--damage-outputs", action="store_true", help="fault injection: cut every output file to half")
    p.add_argument("--run-as", help="UID:GID the commands run as (the worker runs as root)")
    p.add_argument("--clock-offset-days", type=int, default=0, help="the commands' wall clock this many days off")
    p.add_argument("--datefudge", help="datefudge.so, preloaded into each command with --clock-offset-days")
    args = p.parse_args()
    args.root = os.path.abspath(args.root)
    lock = lock_root(args.root)

    channel = grpc.insecure_channel(args.server, options=GRPC_OPTIONS)
    try:
        grpc.channel_ready_future(channel).result(timeout=60)
    except grpc.FutureTimeoutError:
        raise SystemExit(
            f"reapi_worker: nothing answers gRPC on {args.server} after 60 s\n"
            "Fix: start the server first (`cargo xtask servers reapi`) and pass its address as --server"
        )
    try:
        worker = Worker(args, channel)
    except grpc.RpcError as e:
        raise SystemExit(f"reapi_worker: GetCapabilities on {args.server}: {e.code().name}: {e.details()}")
    emit("connected", bot=args.name, server=args.server, root=args.root)
    bot = Bot(bots_pb2_grpc.BotsStub(channel), worker, args)
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: bot.stop())
    bot.loop()
    emit("stopped", bot=args.name)
    lock.close()


if __name__ == "__main__":
    main()
