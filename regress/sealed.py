#!/usr/bin/python3
"""The events a notification carries, as docs/protocol.md lays them out,
written from that page alone (not from the C code): regress/t/026 opens
the server's notifications with it, and seals a forged one.

    sealed.py open KEY_HEX TOKEN VERSION_ID BASE64
        prints the plaintext as JSON: {"format", "sent_at_us", "previous",
        "events": [{revision, transaction_first_revision, transaction_end,
        version_id, processed_us, originated_us, event_type, action,
        entity_id, correlation_id, event_data}]}; exits 1 if it does not open
    sealed.py seal KEY_HEX TOKEN VERSION_ID
        reads that JSON on stdin and prints the "events" value
"""
import base64
import json
import os
import struct
import sys
import uuid

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

TEXT_FIELDS = ("event_type", "action", "entity_id", "correlation_id", "event_data")


def aad(token, version_id):
    return bytes.fromhex(token) + uuid.UUID(version_id).bytes


def decode(plain):
    fmt, sent_at, has_previous = struct.unpack_from(">BqB", plain, 0)
    at = 10
    previous = None
    if has_previous:
        previous = str(uuid.UUID(bytes=plain[at:at + 16]))
        at += 16
    (count,) = struct.unpack_from(">H", plain, at)
    at += 2
    events = []
    for _ in range(count):
        revision, first, end = struct.unpack_from(">qqB", plain, at)
        at += 17
        version = str(uuid.UUID(bytes=plain[at:at + 16]))
        at += 16
        processed, originated = struct.unpack_from(">qq", plain, at)
        at += 16
        event = {"revision": revision, "transaction_first_revision": first,
                 "transaction_end": bool(end), "version_id": version,
                 "processed_us": processed, "originated_us": originated}
        for field in TEXT_FIELDS:
            (n,) = struct.unpack_from(">I", plain, at)
            at += 4
            event[field] = plain[at:at + n].decode("utf-8")
            at += n
        events.append(event)
    if at != len(plain):
        raise ValueError("trailing bytes")
    return {"format": fmt, "sent_at_us": sent_at, "previous": previous, "events": events}


def encode(doc):
    out = struct.pack(">Bq", doc["format"], doc["sent_at_us"])
    if doc["previous"]:
        out += b"\x01" + uuid.UUID(doc["previous"]).bytes
    else:
        out += b"\x00"
    out += struct.pack(">H", len(doc["events"]))
    for e in doc["events"]:
        out += struct.pack(">qqB", e["revision"], e["transaction_first_revision"], int(e["transaction_end"]))
        out += uuid.UUID(e["version_id"]).bytes
        out += struct.pack(">qq", e["processed_us"], e["originated_us"])
        for field in TEXT_FIELDS:
            raw = e[field].encode("utf-8")
            out += struct.pack(">I", len(raw)) + raw
    return out


def main():
    command, key, token, version_id = sys.argv[1:5]
    box = AESGCM(bytes.fromhex(key))
    if command == "open":
        raw = base64.b64decode(sys.argv[5], validate=True)
        try:
            plain = box.decrypt(raw[:12], raw[12:], aad(token, version_id))
        except InvalidTag:
            print("does not open", file=sys.stderr)
            return 1
        print(json.dumps(decode(plain)))
        return 0
    if command == "seal":
        nonce = os.urandom(12)
        sealed = box.encrypt(nonce, encode(json.load(sys.stdin)), aad(token, version_id))
        print(base64.b64encode(nonce + sealed).decode("ascii"))
        return 0
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
