#!/usr/bin/env python3
"""An example Cognito Streams consumer for SyncLedger's HTTP sink, standard library only.

SyncLedger POSTs `{"Records":[…]}` batches (Cognito's stream JSON plus `sequence`), signed
`X-SyncLedger-Signature: sha256=<hex HMAC-SHA256(secret, body)>`. Delivery is at least once and
in order per dataset, so this consumer keeps, per dataset, the highest `sequence` applied and
drops repeats. It keeps each dataset's current records (a materialized copy, as an analytics or
search feed would), fetches payloads sent by reference (`payloadType` `S3Url`: a signed URL of
the server), applies bulk-publish records (`"bulkPublish": true`: a dataset's whole state) and
prints one JSON line per applied record. Only after it applied a batch does it answer 200; any
failure answers 500 and SyncLedger sends the batch again.

    syncledger streams configure --stream-name analytics --http http://127.0.0.1:9000/ --secret-file sink-secret
    python3 examples/stream-consumer.py --port 9000 --secret-file sink-secret [--state state.json]

It prints `listening on PORT` when ready (use --port 0 for any free port). With --state, the
materialized datasets are written to that file (atomically) after every batch.
"""

import argparse
import hashlib
import hmac
import json
import os
import sys
import threading
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class State:
    def __init__(self, path):
        self.lock = threading.Lock()
        self.path = path
        self.datasets = {}   # "pool/identity/dataset" -> {"sequence": n, "syncCount": n, "records": {key: value}}

    def apply(self, r):
        key = f'{r["identityPoolId"]}/{r["identityId"]}/{r["dataSetName"]}'
        current = self.datasets.get(key, {"sequence": 0, "syncCount": 0, "records": {}})
        if r["sequence"] <= current["sequence"] and not (r.get("bulkPublish") and r["sequence"] == current["sequence"]):
            return None          # a repeat, or a bulk state older than what is held
        items = r["kinesisSyncRecords"]
        if r["payloadType"] == "S3Url":
            with urllib.request.urlopen(r["kinesisSyncRecordsURL"], timeout=30) as answer:
                items = json.load(answer)
        records = {} if r.get("bulkPublish") or r["operation"] == "remove" else dict(current["records"])
        for item in items or []:
            if item["op"] == "remove":
                records.pop(item["key"], None)
            else:
                records[item["key"]] = item["value"]
        self.datasets[key] = {"sequence": r["sequence"], "syncCount": r["syncCount"], "records": records}
        return {"dataset": key, "operation": "bulk" if r.get("bulkPublish") else r["operation"],
                "syncCount": r["syncCount"], "keys": sorted(item["key"] for item in items or [])}

    def save(self):
        if not self.path:
            return
        tmp = self.path + ".tmp"
        with open(tmp, "w") as f:
            json.dump(self.datasets, f, sort_keys=True)
        os.replace(tmp, self.path)


def make_handler(secret, state):
    class Sink(BaseHTTPRequestHandler):
        def log_message(self, *args):
            pass

        def answer(self, status):
            self.send_response(status)
            self.send_header("content-length", "0")
            self.end_headers()

        def do_POST(self):
            body = self.rfile.read(int(self.headers.get("content-length", "0")))
            expected = "sha256=" + hmac.new(secret, body, hashlib.sha256).hexdigest()
            if not hmac.compare_digest(expected, self.headers.get("x-syncledger-signature", "")):
                return self.answer(401)
            try:
                with state.lock:
                    for r in json.loads(body)["Records"]:
                        applied = state.apply(r)
                        if applied:
                            print(json.dumps(applied, sort_keys=True), flush=True)
                    state.save()
            except Exception as error:      # answer 500: the batch comes again
                print(json.dumps({"error": str(error)}), file=sys.stderr, flush=True)
                return self.answer(500)
            self.answer(200)

    return Sink


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=9000)
    parser.add_argument("--secret-file", required=True)
    parser.add_argument("--state")
    args = parser.parse_args()
    with open(args.secret_file, "rb") as f:
        secret = f.read().strip()
    server = ThreadingHTTPServer(("127.0.0.1", args.port), make_handler(secret, State(args.state)))
    print(f"listening on {server.server_address[1]}", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        sys.exit(0)


if __name__ == "__main__":
    main()
