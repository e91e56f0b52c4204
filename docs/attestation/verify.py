#!/usr/bin/env python3
"""Checks a cuda-aot build statement with securesystemslib, not with cuda-aot.

The envelope's signatures are checked by securesystemslib's DSSE implementation
(securesystemslib.dsse.Envelope.verify) against public keys exported with
`cargo xtask keygen --export-public KEY --format sslib`; this script only adds what an
in-toto statement leaves to its reader: the statement and predicate types, and that
every subject's bytes have the sha256 the statement names.

Subjects are found either in a build output folder (--subjects: subject names are paths
in it) or in a registry folder (--registry: blobs and manifests by their blake3 digest).
Exit status 0 when everything matches, 1 with each problem named otherwise.
"""

import argparse
import hashlib
import json
import os
import sys

from securesystemslib.dsse import Envelope
from securesystemslib.exceptions import VerificationError
from securesystemslib.signer import SSlibKey

PAYLOAD_TYPE = "application/vnd.in-toto+json"
STATEMENT_TYPE = "https://in-toto.io/Statement/v1"
PREDICATE_TYPE = "https://slsa.dev/provenance/v1"
MANIFEST_MEDIA_TYPE = "application/vnd.cuda-aot.manifest.v1+json"


def fail(message):
    print(f"verify.py: {message}", file=sys.stderr)
    sys.exit(1)


def load_key(path):
    with open(path, encoding="utf-8") as f:
        doc = json.load(f)
    keyid = doc.pop("keyid", None)
    if not isinstance(keyid, str):
        fail(f"{path}: no keyid (export it with --format sslib)")
    return SSlibKey.from_dict(keyid, doc)


def subject_path(args, subject):
    name = subject.get("name", "")
    if args.subjects is not None:
        parts = name.split("/")
        if not name or name.startswith("/") or any(p in ("", ".", "..") for p in parts):
            fail(f"subject name {name!r} is not a plain relative path")
        return os.path.join(args.subjects, *parts)
    b3 = subject.get("digest", {}).get("blake3", "")
    if len(b3) != 64 or any(c not in "0123456789abcdef" for c in b3):
        fail(f"subject {name!r} has no blake3 digest to find it by")
    if subject.get("mediaType") == MANIFEST_MEDIA_TYPE:
        return os.path.join(args.registry, "manifests", "blake3", f"{b3}.json")
    return os.path.join(args.registry, "blobs", "blake3", b3[:2], b3)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--key", action="append", required=True,
                    help="a builder key exported with --format sslib (repeat for several)")
    ap.add_argument("--threshold", type=int, default=1,
                    help="distinct keys that must have signed (the trust root's builder threshold)")
    ap.add_argument("--envelope", required=True, help="the build statement envelope")
    where = ap.add_mutually_exclusive_group(required=True)
    where.add_argument("--subjects", help="the build output folder holding the subjects")
    where.add_argument("--registry", help="the registry folder holding the subjects")
    args = ap.parse_args()

    keys = [load_key(k) for k in args.key]
    with open(args.envelope, encoding="utf-8") as f:
        envelope = Envelope.from_dict(json.load(f))
    if envelope.payload_type != PAYLOAD_TYPE:
        fail(f"payload type {envelope.payload_type!r}, expected {PAYLOAD_TYPE!r}")
    try:
        accepted = envelope.verify(keys, args.threshold)
    except VerificationError as e:
        fail(f"signatures: {e}")

    statement = json.loads(envelope.payload)
    if statement.get("_type") != STATEMENT_TYPE:
        fail(f"_type {statement.get('_type')!r}, expected {STATEMENT_TYPE!r}")
    if statement.get("predicateType") != PREDICATE_TYPE:
        fail(f"predicateType {statement.get('predicateType')!r}, expected {PREDICATE_TYPE!r}")
    subjects = statement.get("subject") or []
    if not subjects:
        fail("the statement names no subjects")

    bad = []
    for subject in subjects:
        path = subject_path(args, subject)
        want = subject.get("digest", {}).get("sha256")
        try:
            with open(path, "rb") as f:
                have = hashlib.sha256(f.read()).hexdigest()
        except OSError as e:
            bad.append(f"{subject.get('name')!r}: {e.strerror}: {path}")
            continue
        if have != want:
            bad.append(f"{subject.get('name')!r}: sha256 {have} at {path}, the statement says {want}")
    if bad:
        fail("subjects that do not match the signed statement:\n  " + "\n  ".join(bad))
    signers = ", ".join(sorted(k[:12] for k in accepted))
    print(f"ok: {len(subjects)} subjects match the statement signed by {signers}")


if __name__ == "__main__":
    main()
