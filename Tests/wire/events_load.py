"""Many event streams at once: memory per connection and delivery.

    python3 Tests/wire/events_load.py BINARY [COUNT] [--transport sse|websocket|idle]

Starts `BINARY serve` (fast mode, room for COUNT streams), opens COUNT connections — each an
event stream filtered to its own identity (admin credential), or with `idle` one keep-alive
HTTP request for comparison — then reports the server's memory per connection (VmRSS and
RssAnon from /proc, before and after), writes one UpdateRecords per identity and checks that
every stream got exactly its one event, and that the streams gauge is back to 0 once the clients
close. One thread and a selector hold every socket. Needs COUNT + 100 open files (ulimit -n).
"""

import argparse
import atexit
import os
import selectors
import shutil
import socket
import subprocess
import tempfile
import threading
import time
import urllib.request
import uuid

import boto3
from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.config import Config
from botocore.credentials import Credentials

KEY, SECRET = "AKIDEVENTSLOAD", "events-load-secret"


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("binary")
    parser.add_argument("count", type=int, nargs="?", default=1000)
    parser.add_argument("--transport", choices=["sse", "websocket", "idle"], default="sse")
    args = parser.parse_args()
    count = args.count
    root = tempfile.mkdtemp(prefix="syncledger-events-load-")
    atexit.register(shutil.rmtree, root, True)
    env = dict(os.environ, SYNCLEDGER_ACCESS_KEY_ID=KEY, SYNCLEDGER_SECRET_ACCESS_KEY=SECRET)
    server = subprocess.Popen([args.binary, "serve", "--data", os.path.join(root, "data"), "--port", "0", "--fast",
                               "--max-connections", str(2 * count + 200), "--max-event-streams", str(count + 50),
                               "--events-per-source", "0"],  # every stream comes from this one address
                              env=env, stdout=subprocess.PIPE, stderr=open(os.path.join(root, "server.log"), "wb"))
    atexit.register(server.kill)
    while "listening on" not in (line := server.stdout.readline().decode()):
        assert line, "the server did not start"
    port = int(line.split()[3].rsplit(":", 1)[1])

    def memory():
        status = dict(line.split(":", 1) for line in open(f"/proc/{server.pid}/status"))
        return int(status["VmRSS"].split()[0]), int(status["RssAnon"].split()[0])

    def metric(name):
        # /metrics is answered to the admin signature only (on the API's listener).
        request = AWSRequest(method="GET", url=f"http://127.0.0.1:{port}/metrics")
        SigV4Auth(Credentials(KEY, SECRET), "cognito-sync", "us-east-1").add_auth(request)
        signed = urllib.request.Request(f"http://127.0.0.1:{port}/metrics", headers=dict(request.headers.items()))
        for line in urllib.request.urlopen(signed).read().decode().splitlines():
            if line.startswith(name + " "):
                return float(line.split()[1])
        raise AssertionError(name)

    pool = f"us-east-1:{uuid.uuid4()}"
    identities = [f"us-east-1:{uuid.uuid4()}" for _ in range(count)]
    time.sleep(0.5)
    base = memory()
    print(f"server at rest: VmRSS {base[0]} KiB, RssAnon {base[1]} KiB")
    selector = selectors.DefaultSelector()
    sockets, buffers = [], [b""] * count
    began = time.monotonic()
    for i, identity in enumerate(identities):
        query = f"identityPoolId={pool.replace(':', '%3A')}&identityId={identity.replace(':', '%3A')}"
        request = AWSRequest(method="GET", url=f"http://127.0.0.1:{port}/events?{query}")
        SigV4Auth(Credentials(KEY, SECRET), "cognito-sync", "us-east-1").add_auth(request)
        signed = "".join(f"{k}: {v}\r\n" for k, v in request.headers.items())
        if args.transport == "idle":
            head = f"GET /health HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n\r\n"
        elif args.transport == "websocket":
            head = (f"GET /events?{query} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                    f"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n{signed}\r\n")
        else:
            head = f"GET /events?{query} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n{signed}\r\n"
        sock = socket.create_connection(("127.0.0.1", port))
        sock.sendall(head.encode())
        sock.setblocking(False)
        selector.register(sock, selectors.EVENT_READ, i)
        sockets.append(sock)

    def pump(done, timeout=120):
        deadline = time.monotonic() + timeout
        while not all(done(b) for b in buffers):
            assert time.monotonic() < deadline, f"{sum(not done(b) for b in buffers)} connections not there yet"
            for key, _ in selector.select(1):
                try:
                    buffers[key.data] += key.fileobj.recv(65536)
                except BlockingIOError:
                    pass

    started = {"sse": b"retry: 3000", "websocket": b'"type":"position"', "idle": b'"ok"'}[args.transport]
    pump(lambda b: started in b)
    print(f"{count} {args.transport} connections open in {time.monotonic() - began:.1f} s; "
          f"syncledger_event_streams {metric('syncledger_event_streams'):.0f}")
    time.sleep(1)
    opened = memory()
    print(f"with them: VmRSS {opened[0]} KiB, RssAnon {opened[1]} KiB; per connection "
          f"{(opened[0] - base[0]) / count:.1f} KiB RSS, {(opened[1] - base[1]) / count:.1f} KiB anonymous")
    if args.transport != "idle":
        client = boto3.client("cognito-sync", endpoint_url=f"http://127.0.0.1:{port}", region_name="us-east-1",
                              aws_access_key_id=KEY, aws_secret_access_key=SECRET, config=Config(max_pool_connections=16))

        def write(chunk):
            for identity in chunk:
                ids = dict(IdentityPoolId=pool, IdentityId=identity, DatasetName="d")
                token = client.list_records(**ids)["SyncSessionToken"]
                client.update_records(**ids, SyncSessionToken=token,
                                      RecordPatches=[{"Op": "replace", "Key": "k", "Value": "v", "SyncCount": 0}])

        began = time.monotonic()
        writers = [threading.Thread(target=write, args=(identities[i::8],)) for i in range(8)]
        for writer in writers:
            writer.start()
        for writer in writers:
            writer.join()
        pump(lambda b: b'"datasetName"' in b)
        exact = all(buffers[i].count(b'"datasetName"') == 1 and f'"identityId":"{identity}"'.encode() in buffers[i]
                    for i, identity in enumerate(identities))
        after = memory()
        print(f"{count} UpdateRecords (8 threads): every stream had exactly its one event {time.monotonic() - began:.1f} s "
              f"after the first write: {exact}; RssAnon {after[1]} KiB; events sent {metric('syncledger_events_sent_total'):.0f}")
    for sock in sockets:
        sock.close()
    deadline = time.monotonic() + 30
    while metric("syncledger_event_streams") != 0 and time.monotonic() < deadline:
        time.sleep(0.1)
    print(f"clients closed: syncledger_event_streams {metric('syncledger_event_streams'):.0f}, "
          f"subscribers {metric('syncledger_event_stream_subscribers'):.0f}")


if __name__ == "__main__":
    main()
