#!/usr/bin/env python3
"""An example SyncTrigger hook for SyncLedger (the place of Cognito's Lambda), standard library only.

SyncLedger POSTs Cognito's SyncTrigger event to it before every UpdateRecords it applies to
(not for developer credentials), signed `X-SyncLedger-Signature: sha256=<hex HMAC-SHA256(secret,
"<X-SyncLedger-Timestamp>.<body>")>`, and writes what it answers, in the same log entry as the
device's changes. This one:
  - refuses requests whose signature is wrong or whose timestamp is more than 5 minutes off (401);
  - lower-cases the value of every record named `email` being written;
  - removes any record named `password` (nobody should sync one);
  - answers 400 with a message for a value over 10,000 characters, so the write is refused
    (SyncLedger reports InvalidLambdaFunctionOutputException and writes nothing).

    syncledger sync-trigger set --arn arn:aws:lambda:us-east-1:000000000000:function:validate \\
        --url http://127.0.0.1:9100/hook --secret-file hook-secret
    aws cognito-sync set-cognito-events --identity-pool-id $POOL \\
        --events SyncTrigger=arn:aws:lambda:us-east-1:000000000000:function:validate ...
    python3 examples/sync-trigger-hook.py --port 9100 --secret-file hook-secret

It prints `listening on PORT` when ready (use --port 0 for any free port).
"""

import argparse
import hashlib
import hmac
import json
import sys
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


def make_handler(secret):
    class Hook(BaseHTTPRequestHandler):
        def log_message(self, *args):
            pass

        def reply(self, status, obj):
            body = json.dumps(obj).encode()
            self.send_response(status)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_POST(self):
            length = int(self.headers.get("content-length", "0"))
            if length > 4 << 20:
                return self.reply(413, {"errorMessage": "event too large"})
            body = self.rfile.read(length)
            stamp = self.headers.get("x-syncledger-timestamp", "")
            expected = "sha256=" + hmac.new(secret, stamp.encode() + b"." + body, hashlib.sha256).hexdigest()
            if not hmac.compare_digest(expected, self.headers.get("x-syncledger-signature", "")):
                return self.reply(401, {"errorMessage": "bad signature"})
            if not stamp.isdigit() or abs(time.time() - int(stamp)) > 300:   # epoch seconds
                return self.reply(401, {"errorMessage": "stale timestamp"})
            event = json.loads(body)
            records = event["datasetRecords"]
            for key, record in records.items():
                value = record.get("newValue")
                if record.get("op") == "replace" and value is not None and len(value) > 10_000:
                    return self.reply(400, {"errorMessage": f"record {key} is over 10,000 characters"})
                if key == "email" and record.get("op") == "replace" and value is not None:
                    record["newValue"] = value.lower()
                if key == "password":
                    record["newValue"] = None
                    record["op"] = "remove"
            # Everything but datasetRecords is read-only: answer the event as it came.
            self.reply(200, event)

    return Hook


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=9100)
    parser.add_argument("--secret-file", required=True)
    args = parser.parse_args()
    with open(args.secret_file, "rb") as f:
        secret = f.read().strip()
    server = ThreadingHTTPServer(("127.0.0.1", args.port), make_handler(secret))
    print(f"listening on {server.server_address[1]}", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        sys.exit(0)


if __name__ == "__main__":
    main()
