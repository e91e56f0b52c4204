"""Racing writers against an S3 endpoint, with boto3 (a real S3 client): N threads create
the same key with If-None-Match: * (create-if-absent), then N threads replace it with
If-Match on the ETag they all read (compare-and-swap). Prints one JSON line: how many of
each race won and were refused with 412, and whether the stored bytes are a winner's.
Run by xtask/tests/s3_server.rs with the venv of `cargo xtask servers s3`.

usage: s3_race.py ENDPOINT BUCKET N
"""

import json
import sys
import threading

import boto3
import botocore
from botocore.config import Config

endpoint, bucket, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
s3 = boto3.client(
    "s3",
    endpoint_url=endpoint,
    aws_access_key_id="test",
    aws_secret_access_key="test",
    region_name="us-east-1",
    config=Config(max_pool_connections=n, retries={"max_attempts": 1}),
)
start = threading.Barrier(n)


def race(kind, condition):
    results = [None] * n

    def one(i):
        body = f"{kind} {i}".encode()
        start.wait()
        try:
            s3.put_object(Bucket=bucket, Key=kind, Body=body, **condition)
            results[i] = ("won", body)
        except botocore.exceptions.ClientError as e:
            results[i] = (str(e.response["ResponseMetadata"]["HTTPStatusCode"]), body)

    threads = [threading.Thread(target=one, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    won = [b for r, b in results if r == "won"]
    stored = s3.get_object(Bucket=bucket, Key=kind)["Body"].read()
    return {
        "won": len(won),
        "refused_412": sum(1 for r, _ in results if r == "412"),
        "stored_is_a_winner": stored in won,
    }


out = {"create": race("create", {"IfNoneMatch": "*"})}
etag = s3.put_object(Bucket=bucket, Key="swap", Body=b"first")["ETag"]
out["swap"] = race("swap", {"IfMatch": etag})
print(json.dumps(out))
