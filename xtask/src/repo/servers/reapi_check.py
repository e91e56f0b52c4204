"""Checks that `cargo xtask servers reapi` serves the Remote Execution API and the Remote
Workers API, with nothing but gRPC and BuildGrid's bundled generated protos: run with the
server's own venv (`.cuda-aot/servers/buildgrid-<pins>/venv/bin/python`).

usage: reapi_check.py ADDR [KEEPALIVE_SECS]

Prints one JSON object (the facts each step saw) and exits 0, or names the failed step on
stderr and exits 1. The steps, on instance "" (the only one the server has):
 1. Capabilities: execution enabled, SHA-256, ActionCache updates allowed.
 2. CAS: a blob through BatchUpdateBlobs is present to FindMissingBlobs (an unknown one is
    missing) and reads back through BatchReadBlobs; another goes up and back through
    ByteStream Write and Read.
 3. ActionCache: UpdateActionResult, then GetActionResult returns it.
 4. Execution: a stored Action is queued by Execute (the first Operation, not done).
 5. Bots: bot A's CreateBotSession receives that action as a lease (its payload a packed
    Action), reports it ACTIVE then COMPLETED with an ActionResult; WaitExecution then
    gives the client that result, and the ActionCache has it; A leaves (BOT_TERMINATING).
 6. A dead worker: bot A takes a second action's lease and goes silent; bot B, asking
    meanwhile, gets the same lease once A's session has expired (KEEPALIVE_SECS, default 5):
    the seconds it took are printed. B completes it and leaves.
"""

import hashlib
import json
import sys
import time
import uuid

import grpc
from buildgrid._protos.build.bazel.remote.execution.v2 import remote_execution_pb2 as re
from buildgrid._protos.build.bazel.remote.execution.v2 import remote_execution_pb2_grpc as re_grpc
from buildgrid._protos.google.bytestream import bytestream_pb2 as bs
from buildgrid._protos.google.bytestream import bytestream_pb2_grpc as bs_grpc
from buildgrid._protos.google.devtools.remoteworkers.v1test2 import bots_pb2
from buildgrid._protos.google.devtools.remoteworkers.v1test2 import bots_pb2_grpc
from buildgrid._protos.google.longrunning import operations_pb2 as _ops  # noqa: F401 (registers Operation)

INSTANCE = ""
PLATFORM = [("OSFamily", "linux")]


class Failed(Exception):
    pass


def expect(ok: bool, what: str) -> None:
    if not ok:
        raise Failed(what)


def digest(data: bytes) -> re.Digest:
    return re.Digest(hash=hashlib.sha256(data).hexdigest(), size_bytes=len(data))


def upload(cas, blobs) -> None:
    req = re.BatchUpdateBlobsRequest(instance_name=INSTANCE)
    for b in blobs:
        req.requests.add(digest=digest(b), data=b)
    for r in cas.BatchUpdateBlobs(req, timeout=30).responses:
        expect(r.status.code == 0, f"BatchUpdateBlobs of {r.digest.hash}: {r.status}")


def action_of(cas, argv, salt: bytes):
    """Stores a Command and an Action (with the test platform) and returns the Action and
    its digest."""
    plat = re.Platform(properties=[re.Platform.Property(name=k, value=v) for k, v in PLATFORM])
    command = re.Command(arguments=argv, platform=plat).SerializeToString()
    root = re.Directory().SerializeToString()
    action = re.Action(
        command_digest=digest(command), input_root_digest=digest(root), platform=plat, salt=salt
    )
    blob = action.SerializeToString()
    upload(cas, [command, root, blob])
    return action, digest(blob)


def capabilities(channel, out) -> None:
    caps = re_grpc.CapabilitiesStub(channel).GetCapabilities(
        re.GetCapabilitiesRequest(instance_name=INSTANCE), timeout=30
    )
    expect(caps.execution_capabilities.exec_enabled, f"execution not enabled: {caps}")
    expect(re.DigestFunction.SHA256 in caps.cache_capabilities.digest_functions, f"no SHA256: {caps}")
    expect(caps.cache_capabilities.action_cache_update_capabilities.update_enabled, "AC updates off")
    out["capabilities"] = {
        "exec_enabled": True,
        "action_cache_update_enabled": True,
        "max_batch_total_size_bytes": caps.cache_capabilities.max_batch_total_size_bytes,
        "api": f"{caps.low_api_version.major}.{caps.low_api_version.minor}"
        f"-{caps.high_api_version.major}.{caps.high_api_version.minor}",
    }


def cas_round_trip(channel, cas, out) -> None:
    blob = b"cuda-aot reapi check " + uuid.uuid4().bytes
    unknown = digest(b"never uploaded " + uuid.uuid4().bytes)
    upload(cas, [blob])
    missing = cas.FindMissingBlobs(
        re.FindMissingBlobsRequest(instance_name=INSTANCE, blob_digests=[digest(blob), unknown]), timeout=30
    ).missing_blob_digests
    expect([m.hash for m in missing] == [unknown.hash], f"FindMissingBlobs said {missing}")
    got = cas.BatchReadBlobs(re.BatchReadBlobsRequest(instance_name=INSTANCE, digests=[digest(blob)]), timeout=30)
    expect(got.responses[0].data == blob, "BatchReadBlobs returned other bytes")

    big = uuid.uuid4().bytes * 40000  # 640 KB, in 64 KiB chunks
    d = digest(big)
    name = f"uploads/{uuid.uuid4()}/blobs/{d.hash}/{d.size_bytes}"
    chunk = 64 * 1024
    reqs = (
        bs.WriteRequest(
            resource_name=name if off == 0 else "",
            write_offset=off,
            data=big[off : off + chunk],
            finish_write=off + chunk >= len(big),
        )
        for off in range(0, len(big), chunk)
    )
    stub = bs_grpc.ByteStreamStub(channel)
    written = stub.Write(reqs, timeout=30).committed_size
    expect(written == len(big), f"ByteStream Write committed {written}")
    read = b"".join(r.data for r in stub.Read(bs.ReadRequest(resource_name=f"blobs/{d.hash}/{d.size_bytes}"), timeout=30))
    expect(read == big, "ByteStream Read returned other bytes")
    out["cas"] = {"batch_blob_present": True, "unknown_blob_missing": True, "bytestream_bytes": len(big)}


def action_cache(channel, cas, out) -> None:
    _, adigest = action_of(cas, ["true"], uuid.uuid4().bytes)
    ac = re_grpc.ActionCacheStub(channel)
    result = re.ActionResult(exit_code=0, stdout_raw=b"cached")
    ac.UpdateActionResult(
        re.UpdateActionResultRequest(instance_name=INSTANCE, action_digest=adigest, action_result=result), timeout=30
    )
    got = ac.GetActionResult(re.GetActionResultRequest(instance_name=INSTANCE, action_digest=adigest), timeout=30)
    expect(got.stdout_raw == b"cached", f"GetActionResult: {got}")
    out["action_cache"] = {"update_then_get": True}


def execute(channel, adigest):
    """Execute's first Operation (the call's stream is cancelled after it)."""
    stream = re_grpc.ExecutionStub(channel).Execute(
        re.ExecuteRequest(instance_name=INSTANCE, action_digest=adigest, skip_cache_lookup=True), timeout=30
    )
    op = next(stream)
    stream.cancel()
    meta = re.ExecuteOperationMetadata()
    op.metadata.Unpack(meta)
    return op, meta


def bot_session(bot_id: str) -> bots_pb2.BotSession:
    s = bots_pb2.BotSession(bot_id=bot_id, status=bots_pb2.OK)
    dev = s.worker.devices.add(handle=bot_id)
    for k, v in PLATFORM:
        dev.properties.add(key=k, value=v)
    return s


def wait_lease(bots, session, deadline_s: float, first: bool):
    """Long-polls (Create, then Update) until the session holds a lease or the time is up;
    returns (session, lease or None)."""
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        if first:
            session = bots.CreateBotSession(
                bots_pb2.CreateBotSessionRequest(parent=INSTANCE, bot_session=session), timeout=10
            )
            first = False
        else:
            session = bots.UpdateBotSession(
                bots_pb2.UpdateBotSessionRequest(name=session.name, bot_session=session), timeout=10
            )
        if session.leases:
            return session, session.leases[0]
    return session, None


def update(bots, session):
    return bots.UpdateBotSession(bots_pb2.UpdateBotSessionRequest(name=session.name, bot_session=session), timeout=10)


def bots_round_trip(channel, cas, out) -> None:
    action, adigest = action_of(cas, ["echo", "hello"], uuid.uuid4().bytes)
    op, meta = execute(channel, adigest)
    expect(not op.done, f"a fresh action finished at once: {op}")
    out["execute"] = {"first_stage": re.ExecutionStage.Value.Name(meta.stage), "operation": op.name}

    bots = bots_pb2_grpc.BotsStub(channel)
    t = time.monotonic()
    session, lease = wait_lease(bots, bot_session("bot-a"), 30, first=True)
    expect(lease is not None, "no lease reached bot A in 30 s")
    payload = re.Action()
    expect(lease.payload.Unpack(payload), f"lease payload is {lease.payload.type_url}, not an Action")
    expect(payload == action, "the leased Action is not the one executed")
    out["bots"] = {
        "lease_after_s": round(time.monotonic() - t, 2),
        "lease_state": bots_pb2.LeaseState.Name(lease.state),
        "payload_type_url": lease.payload.type_url,
        "bot_session_name": session.name,
    }

    lease.state = bots_pb2.ACTIVE
    session = update(bots, session)
    lease = session.leases[0]
    lease.state = bots_pb2.COMPLETED
    lease.status.code = 0
    lease.result.Pack(re.ActionResult(exit_code=0, stdout_raw=b"hello\n"))
    session = update(bots, session)

    done = None
    for o in re_grpc.ExecutionStub(channel).WaitExecution(re.WaitExecutionRequest(name=op.name), timeout=30):
        if o.done:
            done = o
            break
    expect(done is not None, "WaitExecution never reported done")
    resp = re.ExecuteResponse()
    done.response.Unpack(resp)
    expect(resp.result.stdout_raw == b"hello\n" and resp.status.code == 0, f"ExecuteResponse: {resp}")
    cached = re_grpc.ActionCacheStub(channel).GetActionResult(
        re.GetActionResultRequest(instance_name=INSTANCE, action_digest=adigest), timeout=30
    )
    expect(cached.stdout_raw == b"hello\n", f"the result is not in the ActionCache: {cached}")
    out["bots"]["completed_result_reached_client"] = True
    out["bots"]["result_in_action_cache"] = True
    # A worker that leaves says so: BuildGrid assigns jobs to every bot whose status is OK
    # until its session expires, polling or not.
    session.status = bots_pb2.BOT_TERMINATING
    update(bots, session)


def dead_worker(channel, cas, keepalive: float, out) -> None:
    action, adigest = action_of(cas, ["sleep", "1000"], uuid.uuid4().bytes)
    execute(channel, adigest)
    bots = bots_pb2_grpc.BotsStub(channel)
    _, lease_a = wait_lease(bots, bot_session("bot-dead"), 30, first=True)
    expect(lease_a is not None, "no lease reached the bot that will die")
    # Bot A goes silent now (no UpdateBotSession): a worker killed mid-action.
    silent = time.monotonic()
    session_b, lease_b = wait_lease(bots, bot_session("bot-b"), keepalive + 30, first=True)
    expect(lease_b is not None, f"the dead bot's lease never reached bot B ({keepalive + 30} s)")
    expect(lease_b.id == lease_a.id, f"bot B got lease {lease_b.id}, not the dead bot's {lease_a.id}")
    payload = re.Action()
    lease_b.payload.Unpack(payload)
    expect(payload == action, "bot B's lease carries another Action")
    out["dead_worker"] = {
        "keepalive_secs": keepalive,
        "handed_on_after_s": round(time.monotonic() - silent, 2),
        "same_lease": True,
    }
    # B finishes the action and leaves, so a later run starts from an empty queue.
    lease_b.state = bots_pb2.COMPLETED
    lease_b.result.Pack(re.ActionResult(exit_code=0))
    session_b.status = bots_pb2.BOT_TERMINATING
    update(bots, session_b)


def main() -> None:
    addr = sys.argv[1]
    keepalive = float(sys.argv[2]) if len(sys.argv) > 2 else 5.0
    channel = grpc.insecure_channel(addr)
    grpc.channel_ready_future(channel).result(timeout=60)
    cas = re_grpc.ContentAddressableStorageStub(channel)
    out = {}
    steps = [
        ("capabilities", lambda: capabilities(channel, out)),
        ("cas", lambda: cas_round_trip(channel, cas, out)),
        ("action cache", lambda: action_cache(channel, cas, out)),
        ("execute and bots", lambda: bots_round_trip(channel, cas, out)),
        ("dead worker", lambda: dead_worker(channel, cas, keepalive, out)),
    ]
    for name, step in steps:
        t = time.monotonic()
        try:
            step()
        except (Failed, grpc.RpcError) as e:
            sys.stderr.write(f"reapi_check: step {name!r} failed: {e}\n")
            print(json.dumps(out, indent=1))
            sys.exit(1)
        out.setdefault("seconds", {})[name] = round(time.monotonic() - t, 2)
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
