"""The HTTP transport of `syncledger serve`, with raw sockets, boto3 and botocore's signer
against the real binary: the data directory's lock, port checks, bodies refused before they
are read (413) or past the global buffering budget (429), head, body and idle timeouts, and the
connection limit. TLS: test_transport_tls.py."""

import json
import os
import socket
import subprocess
import time

import pytest
from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials

from conftest import (ADMIN_KEY, ADMIN_SECRET, BINARY, REGION, SERVICE, Dataset, dataset_path, new_id,
                      start_server)
from dos_attacks import wait_read_by_server


# -- helpers ---------------------------------------------------------------------------------

def serve_fails(args, env_extra=None, timeout=30):
    """Runs `syncledger serve ARGS`, which must exit non-zero without listening; returns its
    stderr."""
    env = dict(os.environ, SYNCLEDGER_ACCESS_KEY_ID=ADMIN_KEY, SYNCLEDGER_SECRET_ACCESS_KEY=ADMIN_SECRET)
    for name, value in (env_extra or {}).items():
        if value is None:
            env.pop(name, None)
        else:
            env[name] = value
    out = subprocess.run([BINARY, "serve", *args], capture_output=True, timeout=timeout, env=env)
    assert out.returncode != 0, (out.stdout, out.stderr)
    assert b"listening on" not in out.stdout, out.stdout
    return out.stderr.decode(errors="replace")


def connect(server, timeout=10):
    return socket.create_connection(("127.0.0.1", server.port), timeout=timeout)


def read_response(sock):
    """Reads one HTTP/1.1 response with a Content-Length; returns (status, headers, body), or
    None when the server closed the connection first."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        if not chunk:
            return None
        data += chunk
    head, body = data.split(b"\r\n\r\n", 1)
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split()[1])
    headers = {k.strip().lower(): v.strip() for k, v in (line.split(":", 1) for line in lines[1:])}
    length = int(headers.get("content-length", "0"))
    while len(body) < length:
        chunk = sock.recv(65536)
        if not chunk:
            break
        body += chunk
    return status, headers, body


def seconds_until_closed(sock, limit):
    """Blocks until the server closes `sock` (EOF or reset); returns the seconds it took.
    Fails if it is still open after `limit` seconds."""
    start = time.monotonic()
    sock.settimeout(limit)
    try:
        while sock.recv(65536):
            pass
    except socket.timeout:
        raise AssertionError(f"the connection was still open after {limit} s")
    except ConnectionError:
        pass
    return time.monotonic() - start


def metric(server, name, **labels):
    """The value of one Prometheus sample of `server`'s /metrics."""
    text = server.metrics()
    wanted = name + ("{" + ",".join(f'{k}="{v}"' for k, v in labels.items()) + "}" if labels else "")
    for line in text.splitlines():
        if line.startswith(wanted + " "):
            return float(line.split()[-1])
    raise AssertionError(f"{wanted} is not in /metrics:\n{text}")


def signed_headers(server, method, path, body, extra=None):
    request = AWSRequest(method=method, url=server.url + path, data=body, headers=dict(extra or {}))
    SigV4Auth(Credentials(ADMIN_KEY, ADMIN_SECRET), SERVICE, REGION).add_auth(request)
    return dict(request.headers.items())


def update_body(ds, name, key, value):
    listing = ds.list(name)
    counts = {r["Key"]: r["SyncCount"] for r in listing["Records"]}
    return json.dumps({"SyncSessionToken": listing["SyncSessionToken"],
                       "RecordPatches": [{"Op": "replace", "Key": key, "Value": value,
                                          "SyncCount": counts.get(key, 0)}]}).encode()


def head_bytes(server, method, path, headers):
    headers = dict(headers)
    headers.setdefault("Host", server.host)
    return (f"{method} {path} HTTP/1.1\r\n" + "".join(f"{k}: {v}\r\n" for k, v in headers.items()) + "\r\n").encode()


# -- the data directory's lock, ports ---------------------------------------------------------

def test_a_second_server_on_the_same_data_directory_refuses_to_start(tmp_root):
    first = start_server(tmp_root, "lock-dir", ["--fast"])
    try:
        err = serve_fails(["--data", first.data_dir, "--port", "0"])
        assert first.data_dir in err, err
        assert f"process {first.process.pid}" in err, err
        assert "server.lock" in err, err
        # The first one is unharmed, and CLI commands still work beside it.
        assert first.get("/health").status_code == 200
        pool, identity = new_id(), new_id()
        Dataset(first.client(), pool, identity).put("d", {"k": "v"})
        cred = first.mint(pool, identity)
        assert Dataset(first.client_for(cred), pool, identity).records("d") == {"k": ("v", 1)}
        out = subprocess.run([BINARY, "export", "--data", first.data_dir, "--out", os.path.join(tmp_root, "lock-export")],
                             capture_output=True, timeout=60)
        assert out.returncode == 0, out.stderr
    finally:
        assert first.stop() == 0
    # Once it stopped, the directory can be served again.
    again = start_server(tmp_root, "lock-dir", ["--fast"])
    again.stop()


@pytest.mark.parametrize("port", ["99999", "65536", "-1"])
def test_a_port_outside_0_to_65535_is_refused(tmp_root, port):
    err = serve_fails(["--data", os.path.join(tmp_root, "bad-port"), f"--port={port}"])
    assert f"--port {port}" in err and "65535" in err, err
    assert not os.path.exists(os.path.join(tmp_root, "bad-port", "data.mdb"))


def test_address_in_use_names_the_port_before_touching_the_ledger(tmp_root, server):
    data = os.path.join(tmp_root, "port-taken")
    err = serve_fails(["--data", data, "--port", str(server.port)], env_extra={"SYNCLEDGER_ACCESS_KEY_ID": None,
                                                                             "SYNCLEDGER_SECRET_ACCESS_KEY": None})
    assert f"port {server.port} is already in use" in err, err
    assert "Generated" not in err
    # Nothing was generated or written first: no ledger, no admin credential printed.
    assert not os.path.exists(os.path.join(data, "data.mdb"))


def test_tls_files_must_come_in_pairs_and_be_readable(tmp_root):
    data = os.path.join(tmp_root, "tls-bad")
    err = serve_fails(["--data", data, "--port", "0", "--tls-cert", "/nonexistent/cert.pem"])
    assert "--tls-cert" in err and "--tls-key" in err, err
    err = serve_fails(["--data", data, "--port", "0", "--tls-cert", "/nonexistent/cert.pem", "--tls-key", "/nonexistent/key.pem"])
    assert "/nonexistent/cert.pem" in err and "no such file" in err, err


# -- bodies ------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def small(tmp_root):
    """A server with 64 KiB bodies and a 96 KiB buffering budget."""
    s = start_server(tmp_root, "transport-small", ["--fast", "--max-body-bytes", "65536",
                                                   "--max-buffered-body-bytes", str(96 * 1024)])
    yield s
    assert s.stop() == 0


def test_content_length_over_the_limit_is_refused_413_before_the_body_is_sent(small):
    ds = Dataset(small.client(), new_id(), new_id())
    path = dataset_path(ds.pool, ds.identity, "big")
    with connect(small) as sock:
        # Only the head: an answer can come only if the server decides without the body.
        sock.sendall(head_bytes(small, "POST", path, {"Content-Length": str(64 * 1024 * 1024),
                                                      "Content-Type": "application/x-amz-json-1.1"}))
        sock.settimeout(5)
        answer = read_response(sock)
    assert answer is not None, "the server closed the connection without an answer"
    status, headers, body = answer
    assert status == 413, (status, body)
    assert headers["x-amzn-errortype"] == "InvalidParameterException", headers
    assert headers.get("connection") == "close", headers
    message = json.loads(body)["message"]
    assert "67108864" in message and "65536" in message, message
    assert metric(small, "syncledger_http_refusals_total", reason="body_too_large") >= 1


def test_a_413_reaches_a_client_that_sends_its_whole_body(small):
    """boto3 sends the whole oversized body before it reads: it must still get the 413 (the
    server reads and discards for a moment before it closes), and nothing is written."""
    ds = Dataset(small.client(), new_id(), new_id())
    ds.put("d", {"a": "1"})
    before = ds.snapshot("d")
    body = json.loads(update_body(ds, "d", "a", "x"))
    body["RecordPatches"][0]["Value"] = "v" * 70_000
    response = small.raw("POST", dataset_path(ds.pool, ds.identity, "d"), json.dumps(body))
    assert response.status_code == 413, response.text[:300]
    assert response.headers["x-amzn-ErrorType"] == "InvalidParameterException"
    assert ds.snapshot("d") == before


def send_chunked(sock, path, headers, chunks, server):
    sock.sendall(head_bytes(server, "POST", path, dict(headers, **{"Transfer-Encoding": "chunked"})))
    for chunk in chunks:
        sock.sendall(b"%x\r\n%s\r\n" % (len(chunk), chunk))


def test_a_chunked_body_is_counted_as_it_arrives_and_refused_past_the_limit(small):
    ds = Dataset(small.client(), new_id(), new_id())
    ds.put("d", {"a": "1"})
    before = ds.snapshot("d")
    path = dataset_path(ds.pool, ds.identity, "d")
    with connect(small) as sock:
        # 80 KiB in 8 KiB chunks, never terminated: the server must answer once it passed 64 KiB.
        send_chunked(sock, path, {"Content-Type": "application/x-amz-json-1.1"}, [b"x" * 8192] * 10, small)
        sock.settimeout(5)
        answer = read_response(sock)
    assert answer is not None and answer[0] == 413, answer
    assert "65536" in json.loads(answer[2])["message"]
    assert ds.snapshot("d") == before


def test_a_chunked_body_under_the_limit_is_served(small):
    ds = Dataset(small.client(), new_id(), new_id())
    ds.put("d", {"a": "1"})
    path = dataset_path(ds.pool, ds.identity, "d")
    body = update_body(ds, "d", "a", "chunked")
    headers = signed_headers(small, "POST", path, body)
    with connect(small) as sock:
        send_chunked(sock, path, headers, [body[:10], body[10:]], small)
        sock.sendall(b"0\r\n\r\n")
        status, _, reply = read_response(sock)
    assert status == 200, reply
    assert ds.records("d")["a"] == ("chunked", 2)


def test_the_buffering_budget_refuses_with_429_and_recovers(small):
    """The budget is taken as body bytes arrive: a declared length takes nothing, the bytes
    sent do, and a request whose arriving bytes would pass the budget gets 429."""
    ds = Dataset(small.client(), new_id(), new_id())
    ds.put("d", {"a": "1"})
    path = dataset_path(ds.pool, ds.identity, "d")
    holder = connect(small)
    try:
        # 64 KiB announced: nothing taken from the 96 KiB budget until bytes come.
        holder.sendall(head_bytes(small, "POST", path, {"Content-Length": str(64 * 1024)}))
        wait_read_by_server(small.port, [holder])
        assert metric(small, "syncledger_http_buffered_body_bytes") == 0
        # 60 KiB of it sent: taken.
        holder.sendall(b"{" * (60 * 1024))
        wait_read_by_server(small.port, [holder])
        assert metric(small, "syncledger_http_buffered_body_bytes") == 60 * 1024
        # 40 KiB more would pass 96 KiB: refused as they arrive.
        with connect(small) as sock:
            sock.sendall(head_bytes(small, "POST", path, {"Content-Length": str(40 * 1024)}) + b"{" * (40 * 1024))
            answer = read_response(sock)
        assert answer is not None and answer[0] == 429, answer
        assert answer[1]["x-amzn-errortype"] == "TooManyRequestsException"
        assert metric(small, "syncledger_http_buffered_body_bytes") == 60 * 1024
    finally:
        holder.close()
    # The held bytes return with the connection; then the same request is served.
    deadline = time.monotonic() + 5
    while metric(small, "syncledger_http_buffered_body_bytes") != 0:
        assert time.monotonic() < deadline, "the budget was not given back"
        time.sleep(0.02)
    assert ds.put("d", {"a": "after"})["Records"][0]["Value"] == "after"
    assert metric(small, "syncledger_http_buffered_body_bytes") == 0


def test_a_body_still_arriving_after_its_request_was_answered_is_discarded(small):
    """GET /health is answered without reading a body; the rest of a chunked body that comes
    after the answer is discarded, and the connection serves its next request. (Before, that
    chunk crashed the server: the guard charged it to a request already answered.)"""
    with connect(small) as sock:
        sock.sendall(head_bytes(small, "GET", "/health", {"Transfer-Encoding": "chunked"}))
        assert read_response(sock)[0] == 200
        sock.sendall(b"5\r\nhello\r\n0\r\n\r\n" + head_bytes(small, "GET", "/health", {}))
        answer = read_response(sock)
    assert answer is not None and answer[0] == 200, answer
    assert small.process.poll() is None
    assert metric(small, "syncledger_http_buffered_body_bytes") == 0


# -- --follow ----------------------------------------------------------------------------------

@pytest.mark.parametrize("url", ["http://admin:hunter2-secret@127.0.0.1:9", "https://hunter2-secret@leader.example:443",
                                 "http://a:hunter2-secret@[::1]:9/", "admin:hunter2-secret@127.0.0.1:9"])
def test_follow_refuses_a_url_with_a_user_or_password(tmp_root, url):
    """The follower signs with the admin credential; a password in --follow would only be
    logged (and shown in the digest) wherever the URL is. It is refused, and not echoed."""
    data = os.path.join(tmp_root, "follow-userinfo")
    err = serve_fails(["--data", data, "--port", "0", "--follow", url])
    assert "--follow" in err and "user name or password" in err, err
    assert "hunter2" not in err, err
    assert not os.path.exists(os.path.join(data, "data.mdb"))
