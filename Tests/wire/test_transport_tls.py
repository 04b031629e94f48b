"""TLS for `syncledger serve` (--tls-cert/--tls-key) and for a follower of an https leader
(--follow-ca), with a private CA made by `cryptography`, boto3 with verify=, Python's ssl and
the real binary."""

import datetime
import ipaddress
import os
import re
import socket
import ssl
import time

import boto3
import pytest
import requests
from botocore.config import Config
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from conftest import ADMIN_KEY, ADMIN_SECRET, REGION, SERVICE, Dataset, dataset_path, new_id, start_server
from test_transport import connect, head_bytes, metric, read_response, signed_headers


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
    headers = signed_headers(server, "GET", path, b"")
    response = requests.get(server.url + path, headers=headers, verify=verify, timeout=10)
    assert response.status_code == 200, response.text
    return response.json()
