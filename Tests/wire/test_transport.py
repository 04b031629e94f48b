"""The HTTP transport of `syncledger serve`, with raw sockets, boto3 and botocore's signer
against the real binary: the data directory's lock, port checks, bodies refused before they
are read (413) or past the global buffering budget (429), head, body and idle timeouts, the
connection limit, and TLS for the server and for a follower."""

import datetime
import ipaddress
import json
import os
import re
import resource
import socket
import ssl
import subprocess
import time

import boto3
import pytest
from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.config import Config
from botocore.credentials import Credentials
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from conftest import (ADMIN_KEY, ADMIN_SECRET, BINARY, REGION, SERVICE, Dataset, dataset_path, new_id,
                      start_server)


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
    text = server.get("/metrics").text
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
    """A server with 64 KiB bodies, a 96 KiB buffering budget and short timeouts."""
    s = start_server(tmp_root, "transport-small", ["--fast", "--max-body-bytes", "65536",
                                                   "--max-buffered-body-bytes", str(96 * 1024),
                                                   "--header-timeout", "1", "--body-timeout", "1.5",
                                                   "--idle-timeout", "2"])
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
    ds = Dataset(small.client(), new_id(), new_id())
    ds.put("d", {"a": "1"})
    path = dataset_path(ds.pool, ds.identity, "d")
    holder = connect(small)
    try:
        # 60 KiB announced (and taken from the 96 KiB budget), body not sent yet.
        holder.sendall(head_bytes(small, "POST", path, {"Content-Length": str(60 * 1024)}))
        deadline = time.monotonic() + 5
        while metric(small, "syncledger_http_buffered_body_bytes") < 60 * 1024:
            assert time.monotonic() < deadline, "the announced body was never budgeted"
            time.sleep(0.02)
        # 40 KiB more would pass 96 KiB: refused at once.
        with connect(small) as sock:
            sock.sendall(head_bytes(small, "POST", path, {"Content-Length": str(40 * 1024)}))
            answer = read_response(sock)
        assert answer is not None and answer[0] == 429, answer
        assert answer[1]["x-amzn-errortype"] == "TooManyRequestsException"
    finally:
        holder.close()
    # The held bytes return with the connection; then the same request is served.
    deadline = time.monotonic() + 5
    while metric(small, "syncledger_http_buffered_body_bytes") != 0:
        assert time.monotonic() < deadline, "the budget was not given back"
        time.sleep(0.02)
    assert ds.put("d", {"a": "after"})["Records"][0]["Value"] == "after"
    assert metric(small, "syncledger_http_buffered_body_bytes") == 0


# -- time limits -------------------------------------------------------------------------------

def test_a_request_head_sent_a_byte_at_a_time_is_cut_at_the_header_timeout(small):
    """Slowloris: the head never completes. --header-timeout 1 closes it although bytes keep
    coming (each would reset an idle timer)."""
    before = metric(small, "syncledger_http_refusals_total", reason="header_timeout")
    with connect(small) as sock:
        sock.sendall(b"GET /health HTTP/1.1\r\n")
        start = time.monotonic()
        closed = False
        for i in range(40):                       # up to 8 s of trickling
            try:
                sock.sendall(b"X-Slow-%d: y\r\n" % i)
            except ConnectionError:
                closed = True
                break
            sock.settimeout(0.2)
            try:
                if sock.recv(1024) == b"":
                    closed = True
                    break
            except socket.timeout:
                pass
            except ConnectionError:
                closed = True
                break
        elapsed = time.monotonic() - start
    assert closed, "the trickling head was never cut"
    assert 0.7 <= elapsed <= 3.5, elapsed
    assert metric(small, "syncledger_http_refusals_total", reason="header_timeout") == before + 1


def test_a_connection_that_sends_nothing_is_closed_at_the_header_timeout(small):
    with connect(small) as sock:
        assert seconds_until_closed(sock, 6) <= 3


def test_a_complete_head_within_the_header_timeout_is_served(small):
    with connect(small) as sock:
        sock.sendall(b"GET /health HTTP/1.1\r\n")
        time.sleep(0.5)                           # half the header timeout: still in time
        sock.sendall(f"Host: {small.host}\r\n\r\n".encode())
        status, _, body = read_response(sock)
    assert status == 200 and b'"ok"' in body


def test_a_body_that_does_not_arrive_in_time_is_cut(small):
    ds = Dataset(small.client(), new_id(), new_id())
    ds.put("d", {"a": "1"})
    before = ds.snapshot("d")
    path = dataset_path(ds.pool, ds.identity, "d")
    with connect(small) as sock:
        sock.sendall(head_bytes(small, "POST", path, {"Content-Length": "1000"}) + b"{" * 10)
        elapsed = seconds_until_closed(sock, 8)
    assert 1.0 <= elapsed <= 4, elapsed
    assert ds.snapshot("d") == before
    assert metric(small, "syncledger_http_refusals_total", reason="body_timeout") >= 1


def test_an_idle_keep_alive_connection_is_closed_at_the_idle_timeout(small):
    """--idle-timeout 2 (longer than the 1 s header timeout): between requests the idle timeout
    applies, not the header timeout."""
    with connect(small) as sock:
        sock.sendall(f"GET /health HTTP/1.1\r\nHost: {small.host}\r\n\r\n".encode())
        assert read_response(sock)[0] == 200
        elapsed = seconds_until_closed(sock, 8)
    assert 1.5 <= elapsed <= 4.5, elapsed


# -- connections -------------------------------------------------------------------------------

def get_health(sock, server):
    sock.sendall(f"GET /health HTTP/1.1\r\nHost: {server.host}\r\n\r\n".encode())
    answer = read_response(sock)
    assert answer is not None and answer[0] == 200, answer


def test_at_the_connection_limit_the_longest_idle_connection_makes_room(tmp_root):
    s = start_server(tmp_root, "max-conn", ["--fast", "--max-connections", "4", "--header-timeout", "30",
                                            "--idle-timeout", "30"])
    try:
        oldest = connect(s)
        others = [connect(s) for _ in range(3)]
        for sock in others:
            get_health(sock, s)                   # idle since their answer, after `oldest` opened
        # A fifth connection is served, and the longest-idle one was closed for it.
        with connect(s) as sock:
            get_health(sock, s)
        assert seconds_until_closed(oldest, 3) < 3
        for sock in others:
            get_health(sock, s)                   # still open
        assert metric(s, "syncledger_http_refusals_total", reason="connection_evicted") >= 1
        for sock in [oldest, *others]:
            sock.close()
    finally:
        s.stop()


def closed_at_once(sock):
    """Whether the server closed `sock` without an answer (True), or kept it open (False)."""
    sock.settimeout(2)
    try:
        return sock.recv(1) == b""
    except ConnectionError:
        return True
    except socket.timeout:
        return False


def test_past_the_connection_limit_with_every_connection_busy_a_new_one_is_closed_at_once(tmp_root):
    s = start_server(tmp_root, "max-conn-busy", ["--fast", "--max-connections", "3"])
    polls = []
    try:
        query = "after=18446744073709551614&wait=6"
        deadline = time.monotonic() + 20
        while True:
            # Three long-polls of the feed, each a request in progress for 6 s.
            polls = [p for p in polls if p.fileno() != -1]
            while len(polls) < 3:
                sock = connect(s)
                sock.sendall(head_bytes(s, "GET", "/segments/feed?" + query, signed_headers(s, "GET", "/segments/feed?" + query, b"")))
                polls.append(sock)
            probe = connect(s)
            refused = closed_at_once(probe)
            probe.close()
            if refused:
                break
            # The probe came before a poll's head was read and took that poll's place: again.
            for p in polls:
                p.setblocking(False)
                try:
                    if p.recv(1) == b"":
                        p.close()
                except (BlockingIOError, ConnectionError):
                    pass
                p.setblocking(True)
            assert time.monotonic() < deadline, "a connection past the limit was never closed"
        for sock in polls:
            sock.close()
        assert metric_when_free(s, "connection_refused") >= 1
    finally:
        for sock in polls:
            sock.close()
        s.stop()


def metric_when_free(server, reason):
    """Reads a refusal counter once a connection is free for /metrics again."""
    deadline = time.monotonic() + 10
    while True:
        try:
            return metric(server, "syncledger_http_refusals_total", reason=reason)
        except Exception:
            assert time.monotonic() < deadline
            time.sleep(0.1)


def test_health_answers_under_1100_idle_connections(tmp_root):
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard < 1300:
        pytest.skip(f"this test process may open only {hard} files")
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, min(hard, 4096) if hard != resource.RLIM_INFINITY else 4096), hard))
    s = start_server(tmp_root, "many-idle", ["--fast"])        # default limits: 1000 connections
    held = []
    try:
        for _ in range(1100):
            held.append(connect(s))
        start = time.monotonic()
        with connect(s) as sock:
            sock.sendall(f"GET /health HTTP/1.1\r\nHost: {s.host}\r\n\r\n".encode())
            sock.settimeout(5)
            answer = read_response(sock)
        assert answer is not None and answer[0] == 200, answer
        assert time.monotonic() - start < 2
        assert metric(s, "syncledger_http_connections") <= 1000
    finally:
        for sock in held:
            sock.close()
        s.stop()


# -- TLS ---------------------------------------------------------------------------------------

def _name(common):
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common)])


def _pem_key(key):
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption())


def make_tls_files(directory, ca_name="SyncLedger test CA"):
    """Writes ca.pem, server.pem (leaf, then the CA) and server.key into `directory`; returns
    their paths as a dict."""
    os.makedirs(directory, exist_ok=True)
    now = datetime.datetime.now(datetime.timezone.utc)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca = (x509.CertificateBuilder()
          .subject_name(_name(ca_name)).issuer_name(_name(ca_name))
          .public_key(ca_key.public_key()).serial_number(x509.random_serial_number())
          .not_valid_before(now - datetime.timedelta(minutes=5))
          .not_valid_after(now + datetime.timedelta(days=2))
          .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
          .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                       content_commitment=False, key_encipherment=False,
                                       data_encipherment=False, key_agreement=False,
                                       encipher_only=False, decipher_only=False), critical=True)
          .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), critical=False)
          .sign(ca_key, hashes.SHA256()))
    key = ec.generate_private_key(ec.SECP256R1())
    leaf = (x509.CertificateBuilder()
            .subject_name(_name("127.0.0.1")).issuer_name(ca.subject)
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.SubjectAlternativeName([
                x509.IPAddress(ipaddress.ip_address("127.0.0.1")), x509.DNSName("localhost")]), critical=False)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
            .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False)
            .sign(ca_key, hashes.SHA256()))
    paths = {name: os.path.join(directory, name) for name in ("ca.pem", "server.pem", "server.key")}
    with open(paths["ca.pem"], "wb") as f:
        f.write(ca.public_bytes(serialization.Encoding.PEM))
    with open(paths["server.pem"], "wb") as f:
        f.write(leaf.public_bytes(serialization.Encoding.PEM) + ca.public_bytes(serialization.Encoding.PEM))
    with open(paths["server.key"], "wb") as f:
        f.write(_pem_key(key))
    return paths


@pytest.fixture(scope="module")
def tls_files(tmp_root):
    return make_tls_files(os.path.join(tmp_root, "tls"))


@pytest.fixture(scope="module")
def tls_server(tmp_root, tls_files):
    s = start_server(tmp_root, "tls-leader", ["--fast", "--tls-cert", tls_files["server.pem"],
                                              "--tls-key", tls_files["server.key"]])
    yield s
    assert s.stop() == 0


def tls_client(server, verify):
    return boto3.session.Session().client(
        SERVICE, endpoint_url=server.url, region_name=REGION, verify=verify,
        aws_access_key_id=ADMIN_KEY, aws_secret_access_key=ADMIN_SECRET,
        config=Config(retries={"total_max_attempts": 1}, connect_timeout=5, read_timeout=30))


def test_the_server_speaks_https_with_the_given_certificate(tls_server, tls_files):
    assert tls_server.url.startswith("https://127.0.0.1:"), tls_server.url
    client = tls_client(tls_server, tls_files["ca.pem"])
    ds = Dataset(client, new_id(), new_id())
    ds.put("d", {"k": "over tls"})
    assert ds.records("d") == {"k": ("over tls", 1)}
    # The certificate chain is the one given, verified against the private CA.
    context = ssl.create_default_context(cafile=tls_files["ca.pem"])
    with socket.create_connection(("127.0.0.1", tls_server.port), timeout=5) as raw:
        with context.wrap_socket(raw, server_hostname="127.0.0.1") as sock:
            assert sock.version() in ("TLSv1.2", "TLSv1.3")
            sock.sendall(f"GET /health HTTP/1.1\r\nHost: {tls_server.host}\r\n\r\n".encode())
            assert read_response(sock)[0] == 200
    # Without trusting the CA, clients refuse it; plain HTTP gets no HTTP answer.
    with pytest.raises(Exception) as info:
        tls_client(tls_server, True).list_datasets(IdentityPoolId=ds.pool, IdentityId=ds.identity)
    assert "certificate" in str(info.value).lower() or "ssl" in str(info.value).lower(), info.value
    with connect(tls_server) as sock:
        sock.sendall(f"GET /health HTTP/1.1\r\nHost: {tls_server.host}\r\n\r\n".encode())
        sock.settimeout(5)
        try:
            reply = sock.recv(100)
        except ConnectionError:
            reply = b""
        assert not reply.startswith(b"HTTP/1.1 200"), reply


def test_a_body_over_the_limit_is_refused_over_tls_too(tls_server, tls_files):
    context = ssl.create_default_context(cafile=tls_files["ca.pem"])
    with socket.create_connection(("127.0.0.1", tls_server.port), timeout=5) as raw:
        with context.wrap_socket(raw, server_hostname="127.0.0.1") as sock:
            sock.sendall(head_bytes(tls_server, "POST", dataset_path(new_id(), new_id(), "d"),
                                    {"Content-Length": str(100 << 20)}))
            answer = read_response(sock)
    assert answer is not None and answer[0] == 413, answer


def test_a_follower_replicates_an_https_leader_it_trusts_through_follow_ca(tmp_root, tls_server, tls_files):
    leader = tls_server
    client = tls_client(leader, tls_files["ca.pem"])
    pool, identity = new_id(), new_id()
    Dataset(client, pool, identity).put("settings", {"theme": "dark"})
    leader_digest = signed_get_json(leader, "/segments/digest", verify=tls_files["ca.pem"])
    follower = start_server(tmp_root, "tls-follower", ["--fast", "--follow", leader.url, "--follow-ca", tls_files["ca.pem"]])
    untrusting = start_server(tmp_root, "tls-follower-untrusting", ["--fast", "--follow", leader.url])
    try:
        deadline = time.monotonic() + 20
        while follower.raw("GET", "/segments/digest").json()["Digest"] != leader_digest["Digest"]:
            assert time.monotonic() < deadline, follower.raw("GET", "/segments/digest").json()
            time.sleep(0.05)
        assert Dataset(follower.client(), pool, identity).records("settings") == {"theme": ("dark", 1)}
        # Without --follow-ca the leader's certificate is not trusted: nothing is replicated.
        deadline = time.monotonic() + 20
        while metric(untrusting, "syncledger_replication_errors_total", reason="transport") < 1:
            assert time.monotonic() < deadline
            time.sleep(0.05)
        state = untrusting.raw("GET", "/segments/digest").json()
        assert state["Sequence"] == 0 and state["Checkpoint"] == 0, state
        assert re.search("certificate|ssl|tls|handshake", state["LastError"], re.I), state
    finally:
        follower.stop()
        untrusting.stop()


def signed_get_json(server, path, verify):
    import requests
    headers = signed_headers(server, "GET", path, b"")
    response = requests.get(server.url + path, headers=headers, verify=verify, timeout=10)
    assert response.status_code == 200, response.text
    return response.json()
