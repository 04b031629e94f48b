"""Self-tests of the push stand-ins in `push/` (APNs, FCM + OAuth, webhook receiver).

They need no SyncLedger binary: each test plays the sender itself (curl and the `h2` library for
APNs over HTTP/2, `requests` for FCM and the webhook) and checks that a correct request is
accepted and recorded, that every protocol rule refuses a request that breaks it with the real
service's status and reason, and that scripted failures come back in order.
"""

import hashlib
import hmac
import json
import socket
import ssl
import subprocess
import threading
import time
import uuid
from urllib.parse import urlsplit

import h2.config
import h2.connection
import h2.events
import pytest
import requests
from cryptography import x509
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import ExtensionOID

from push import certs, tokens
from push.apns import ApnsStandIn
from push.fcm import FCM_ERROR_TYPE, FcmStandIn
from push.webhook import WebhookReceiver, compute_signature, sign_headers, timestamp_is_fresh, verify_signature

TEAM = "TEAM123456"
KEY_ID = "KEY1234567"
TOPIC = "com.example.syncledger"
DEVICE = "0123456789abcdef" * 4
SILENT = json.dumps({"aps": {"content-available": 1}, "datasetName": "notes"}).encode()


# -- shared material ------------------------------------------------------------------------

@pytest.fixture(scope="module")
def material(tmp_path_factory):
    directory = tmp_path_factory.mktemp("push-material")
    tls = certs.make_tls_cert(str(directory))
    key_path, public_key = certs.make_apns_key(str(directory), KEY_ID)
    return {"dir": directory, "tls": tls, "apns_key_path": key_path, "apns_public": public_key,
            "apns_private": certs.load_private_key(key_path),
            # RSA generation is slow: one key for the service accounts, one for forgeries.
            "rsa": rsa.generate_private_key(public_exponent=65537, key_size=2048),
            "rsa_forger": rsa.generate_private_key(public_exponent=65537, key_size=2048)}


@pytest.fixture
def apns(material):
    with ApnsStandIn(TEAM, KEY_ID, material["apns_public"], [TOPIC], tls=material["tls"]) as server:
        yield server


@pytest.fixture
def fcm(material, tmp_path):
    with FcmStandIn("syncledger-push-test", tls=material["tls"]) as server:
        account = server.make_service_account(str(tmp_path), private_key=material["rsa"])
        server.material = material
        server.account = account
        server.account_json = certs.read_service_account(account.path)
        server.private_key = certs.load_private_key_pem(server.account_json["private_key"])
        yield server


# -- an HTTP/2 client over TLS (the `h2` library) ------------------------------------------

class H2Client:
    """One HTTP/2 connection (TLS, ALPN h2, certificate verified against `cafile`)."""

    def __init__(self, url, cafile):
        parts = urlsplit(url)
        context = ssl.create_default_context(cafile=cafile)
        context.set_alpn_protocols(["h2"])
        raw = socket.create_connection((parts.hostname, parts.port), timeout=5)
        self.sock = context.wrap_socket(raw, server_hostname=parts.hostname)
        assert self.sock.selected_alpn_protocol() == "h2"
        self.authority = parts.netloc
        self.conn = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True))
        self.conn.initiate_connection()
        self.sock.sendall(self.conn.data_to_send())

    def request(self, path, headers=(), body=b"", method="POST"):
        stream = self.conn.get_next_available_stream_id()
        self.conn.send_headers(stream, [(":method", method), (":scheme", "https"), (":authority", self.authority),
                                        (":path", path), *headers], end_stream=not body)
        if body:
            self.conn.send_data(stream, body, end_stream=True)
        self.sock.sendall(self.conn.data_to_send())
        response_headers, data, done = {}, b"", False
        while not done:
            chunk = self.sock.recv(65536)
            if not chunk:
                raise ConnectionError("the server closed the connection")
            for event in self.conn.receive_data(chunk):
                if getattr(event, "stream_id", None) != stream:
                    continue
                if isinstance(event, h2.events.ResponseReceived):
                    response_headers.update((k.decode(), v.decode()) for k, v in event.headers)
                elif isinstance(event, h2.events.DataReceived):
                    data += event.data
                    self.conn.acknowledge_received_data(event.flow_controlled_length, stream)
                elif isinstance(event, h2.events.StreamEnded):
                    done = True
                elif isinstance(event, h2.events.StreamReset):
                    raise ConnectionError(f"stream reset: {event.error_code}")
            pending = self.conn.data_to_send()
            if pending:
                self.sock.sendall(pending)
        return int(response_headers.pop(":status")), response_headers, data

    def close(self):
        self.conn.close_connection()
        try:
            self.sock.sendall(self.conn.data_to_send())
        finally:
            self.sock.close()


@pytest.fixture
def h2c(apns):
    client = H2Client(apns.url, apns.ca_file)
    yield client
    client.close()


def provider_token(material, iat=None, kid=KEY_ID, team=TEAM, key=None):
    return tokens.apns_provider_token(key or material["apns_private"], team, kid, iat)


def apns_headers(material, jwt=None, **overrides):
    """Valid headers for a silent push; `overrides` replace (None removes) one, `_` for `-`."""
    headers = {"authorization": f"bearer {jwt or provider_token(material)}", "apns-topic": TOPIC,
               "apns-push-type": "background", "apns-priority": "5", "apns-expiration": str(int(time.time()) + 3600),
               "apns-collapse-id": "notes"}
    for name, value in overrides.items():
        name = name.replace("_", "-")
        if value is None:
            headers.pop(name, None)
        else:
            headers[name] = value
    return list(headers.items())


# -- certificates and keys ------------------------------------------------------------------

def test_tls_cert_is_a_self_signed_ca_for_loopback(material):
    with open(material["tls"].cert, "rb") as handle:
        cert = x509.load_pem_x509_certificate(handle.read())
    assert cert.issuer == cert.subject
    assert cert.extensions.get_extension_for_oid(ExtensionOID.BASIC_CONSTRAINTS).value.ca is True
    san = cert.extensions.get_extension_for_oid(ExtensionOID.SUBJECT_ALTERNATIVE_NAME).value
    assert "localhost" in san.get_values_for_type(x509.DNSName)
    assert "127.0.0.1" in [str(ip) for ip in san.get_values_for_type(x509.IPAddress)]
    with open(material["tls"].key) as handle:
        assert handle.read().startswith("-----BEGIN PRIVATE KEY-----")


def test_apns_key_is_pkcs8_p256(material):
    with open(material["apns_key_path"]) as handle:
        assert handle.read().startswith("-----BEGIN PRIVATE KEY-----\n")
    assert material["apns_key_path"].endswith(f"AuthKey_{KEY_ID}.p8")
    assert isinstance(material["apns_private"], ec.EllipticCurvePrivateKey)
    assert material["apns_private"].curve.name == "secp256r1"


def test_service_account_file_has_the_real_fields(tmp_path):
    account = certs.make_fcm_service_account(str(tmp_path), "https://127.0.0.1:1/token", "proj-1")
    document = certs.read_service_account(account.path)
    assert document["type"] == "service_account"
    assert document["project_id"] == account.project_id == "proj-1"
    assert document["client_email"] == account.client_email and account.client_email.endswith(
        "@proj-1.iam.gserviceaccount.com")
    assert document["token_uri"] == "https://127.0.0.1:1/token"
    assert document["private_key"].startswith("-----BEGIN PRIVATE KEY-----\n")
    assert len(document["private_key_id"]) == 40 and document["client_id"].isdigit()
    for name in ("auth_uri", "auth_provider_x509_cert_url", "client_x509_cert_url"):
        assert document[name].startswith("https://")
    assert isinstance(account.public_key, rsa.RSAPublicKey) and account.public_key.key_size == 2048


# -- APNs -----------------------------------------------------------------------------------

def _curl(args):
    result = subprocess.run(["curl", "-sS", "-o", "-", "-D", "/dev/stderr", "-w", "\n%{http_code} %{http_version}",
                             *args], capture_output=True, text=True, timeout=15)
    body, _, status_line = result.stdout.rpartition("\n")
    status, version = status_line.split()
    headers = {}
    for line in result.stderr.splitlines()[1:]:
        name, sep, value = line.partition(":")
        if sep:
            headers[name.strip().lower()] = value.strip()
    return int(status), version, headers, body


def test_apns_accepts_a_silent_push_over_http2_with_curl(apns, material):
    apns_id = str(uuid.uuid4())
    args = ["--http2", "--cacert", apns.ca_file, "-X", "POST", "--data-binary", SILENT.decode(),
            "-H", f"apns-id: {apns_id}"]
    for name, value in apns_headers(material):
        args += ["-H", f"{name}: {value}"]
    status, version, headers, body = _curl(args + [f"{apns.url}/3/device/{DEVICE}"])
    assert (status, version, body) == (200, "2", "")
    assert headers["apns-id"] == apns_id
    [note] = apns.wait_for(lambda r: r.token == DEVICE, timeout=5)
    assert note.http_version == "2" and note.payload == json.loads(SILENT)
    assert note.push_type == "background" and note.priority == "5" and note.topic == TOPIC
    assert note.apns_id == apns_id and abs(note.received_at - time.time()) < 10
    assert apns.rejected == [] and apns.invalid == []


def test_apns_refuses_http1(apns, material):
    args = ["--http1.1", "--cacert", apns.ca_file, "-X", "POST", "--data-binary", SILENT.decode()]
    for name, value in apns_headers(material):
        args += ["-H", f"{name}: {value}"]
    status, version, _, body = _curl(args + [f"{apns.url}/3/device/{DEVICE}"])
    assert (status, version) == (505, "1.1")
    assert json.loads(body) == {"reason": "HTTPVersionNotSupported"}
    assert apns.received == []
    assert [(r.status, r.cause, r.http_version) for r in apns.rejected] == [(505, "http1", "1.1")]


def test_apns_assigns_an_apns_id_and_accepts_a_64_byte_collapse_id(apns, material, h2c):
    status, headers, body = h2c.request(f"/3/device/{DEVICE}", apns_headers(material, apns_collapse_id="c" * 64),
                                        SILENT)
    assert (status, body) == (200, b"")
    uuid.UUID(headers["apns-id"])
    assert headers["apns-id"] == headers["apns-id"].lower()
    assert apns.received[0].collapse_id == "c" * 64


def _forged(material):
    return tokens.apns_provider_token(ec.generate_private_key(ec.SECP256R1()), TEAM, KEY_ID)


def _der_signed(material):
    """A provider token whose signature is DER (what a sender gets wrong most often)."""
    from cryptography.hazmat.primitives import hashes
    good = provider_token(material)
    head, claims, _ = good.split(".")
    der = material["apns_private"].sign(f"{head}.{claims}".encode(), ec.ECDSA(hashes.SHA256()))
    return f"{head}.{claims}.{tokens.b64url_encode(der)}"


APNS_RULES = [
    # (id, function(material) -> (path, headers, body, method), status, reason)
    ("no-authorization", lambda m: (DEVICE, apns_headers(m, authorization=None), SILENT, "POST"), 403,
     "MissingProviderToken"),
    ("not-bearer", lambda m: (DEVICE, apns_headers(m, authorization="basic abc"), SILENT, "POST"), 403,
     "InvalidProviderToken"),
    ("forged-signature", lambda m: (DEVICE, apns_headers(m, jwt=_forged(m)), SILENT, "POST"), 403,
     "InvalidProviderToken"),
    ("der-signature", lambda m: (DEVICE, apns_headers(m, jwt=_der_signed(m)), SILENT, "POST"), 403,
     "InvalidProviderToken"),
    ("wrong-kid", lambda m: (DEVICE, apns_headers(m, jwt=provider_token(m, kid="OTHERKEY00")), SILENT, "POST"), 403,
     "InvalidProviderToken"),
    ("wrong-iss", lambda m: (DEVICE, apns_headers(m, jwt=provider_token(m, team="OTHERTEAM0")), SILENT, "POST"), 403,
     "InvalidProviderToken"),
    ("iat-in-future", lambda m: (DEVICE, apns_headers(m, jwt=provider_token(m, iat=time.time() + 120)), SILENT, "POST"),
     403, "InvalidProviderToken"),
    ("stale-iat", lambda m: (DEVICE, apns_headers(m, jwt=provider_token(m, iat=time.time() - 3601)), SILENT, "POST"),
     403, "ExpiredProviderToken"),
    ("missing-topic", lambda m: (DEVICE, apns_headers(m, apns_topic=None), SILENT, "POST"), 400, "MissingTopic"),
    ("other-topic", lambda m: (DEVICE, apns_headers(m, apns_topic="com.example.other"), SILENT, "POST"), 400,
     "DeviceTokenNotForTopic"),
    ("bad-topic", lambda m: (DEVICE, apns_headers(m, apns_topic="com.example bad"), SILENT, "POST"), 400, "BadTopic"),
    ("unknown-push-type", lambda m: (DEVICE, apns_headers(m, apns_push_type="silent"), SILENT, "POST"), 400,
     "InvalidPushType"),
    ("missing-push-type", lambda m: (DEVICE, apns_headers(m, apns_push_type=None), SILENT, "POST"), 400,
     "InvalidPushType"),
    ("priority-10-background", lambda m: (DEVICE, apns_headers(m, apns_priority="10"), SILENT, "POST"), 400,
     "BadPriority"),
    ("no-priority-background", lambda m: (DEVICE, apns_headers(m, apns_priority=None), SILENT, "POST"), 400,
     "BadPriority"),
    ("priority-7", lambda m: (DEVICE, apns_headers(m, apns_priority="7"), SILENT, "POST"), 400, "BadPriority"),
    ("bad-expiration", lambda m: (DEVICE, apns_headers(m, apns_expiration="soon"), SILENT, "POST"), 400,
     "BadExpirationDate"),
    ("collapse-id-65-bytes", lambda m: (DEVICE, apns_headers(m, apns_collapse_id="c" * 65), SILENT, "POST"), 400,
     "BadCollapseId"),
    ("uppercase-apns-id", lambda m: (DEVICE, apns_headers(m, apns_id=str(uuid.uuid4()).upper()), SILENT, "POST"), 400,
     "BadMessageId"),
    ("duplicate-topic", lambda m: (DEVICE, apns_headers(m) + [("apns-topic", TOPIC)], SILENT, "POST"), 400,
     "DuplicateHeaders"),
    ("non-hex-token", lambda m: ("xyz-not-hex", apns_headers(m), SILENT, "POST"), 400, "BadDeviceToken"),
    ("odd-length-token", lambda m: (DEVICE + "a", apns_headers(m), SILENT, "POST"), 400, "BadDeviceToken"),
    ("no-token", lambda m: ("", apns_headers(m), SILENT, "POST"), 400, "MissingDeviceToken"),
    ("empty-body", lambda m: (DEVICE, apns_headers(m), b"", "POST"), 400, "PayloadEmpty"),
    ("4097-bytes", lambda m: (DEVICE, apns_headers(m), json.dumps(
        {"aps": {"content-available": 1}, "pad": "x" * 4058}).encode(), "POST"), 413, "PayloadTooLarge"),
    ("not-json", lambda m: (DEVICE, apns_headers(m), b"{aps", "POST"), 400, "InvalidPayload"),
    ("no-aps", lambda m: (DEVICE, apns_headers(m), b'{"datasetName":"x"}', "POST"), 400, "InvalidPayload"),
    ("visible-background", lambda m: (DEVICE, apns_headers(m), json.dumps(
        {"aps": {"content-available": 1, "alert": "hi"}}).encode(), "POST"), 400, "InvalidPayload"),
    ("get", lambda m: (DEVICE, apns_headers(m), b"", "GET"), 405, "MethodNotAllowed"),
]


@pytest.mark.parametrize("build,status,reason", [pytest.param(b, s, r, id=i) for i, b, s, r in APNS_RULES])
def test_apns_refuses_what_apple_refuses(apns, material, h2c, build, status, reason):
    token, headers, body, method = build(material)
    got_status, got_headers, got_body = h2c.request(f"/3/device/{token}", headers, body, method)
    assert got_status == status, got_body
    assert json.loads(got_body) == {"reason": reason}
    assert "apns-id" in got_headers
    assert apns.received == []
    [record] = apns.rejected
    assert (record.status, record.reason, record.cause) == (status, reason, "invalid"), record.detail
    # The connection is still usable: a good request goes through afterwards.
    assert h2c.request(f"/3/device/{DEVICE}", apns_headers(material), SILENT)[0] == 200


def test_apns_bad_path(apns, material, h2c):
    status, _, body = h2c.request("/3/devices/abc", apns_headers(material), SILENT)
    assert (status, json.loads(body)) == (404, {"reason": "BadPath"})


def test_apns_counts_provider_tokens_so_reuse_can_be_asserted(apns, material, h2c):
    first = provider_token(material, iat=time.time() - 60)
    for _ in range(3):
        assert h2c.request(f"/3/device/{DEVICE}", apns_headers(material, jwt=first), SILENT)[0] == 200
    second = provider_token(material)
    assert h2c.request(f"/3/device/{DEVICE}", apns_headers(material, jwt=second), SILENT)[0] == 200
    assert apns.provider_tokens == [first, second]
    assert apns.provider_tokens_issued == 2
    assert apns.provider_token_uses == {first: 3, second: 1}
    assert [r.provider_token for r in apns.received] == [first] * 3 + [second]


def test_apns_too_many_provider_token_updates(material):
    with ApnsStandIn(TEAM, KEY_ID, material["apns_public"], TOPIC, tls=material["tls"],
                     min_token_refresh_seconds=1200) as apns:
        client = H2Client(apns.url, apns.ca_file)
        try:
            jwt = provider_token(material, iat=time.time() - 10)
            assert client.request(f"/3/device/{DEVICE}", apns_headers(material, jwt=jwt), SILENT)[0] == 200
            status, _, body = client.request(f"/3/device/{DEVICE}", apns_headers(material), SILENT)
            assert (status, json.loads(body)) == (429, {"reason": "TooManyProviderTokenUpdates"})
        finally:
            client.close()


def test_apns_scripted_answers_come_back_in_order(apns, material, h2c):
    other = "fe" * 32
    apns.script(DEVICE, [(410, "Unregistered", {"timestamp": 1700000000000}), (429, "TooManyRequests"), None,
                         (403, "ExpiredProviderToken")])
    apns.script(None, [(503, "ServiceUnavailable"), (400, "BadDeviceToken")])
    answers = [h2c.request(f"/3/device/{token}", apns_headers(material), SILENT)
               for token in (DEVICE, other, DEVICE, DEVICE, other, DEVICE, other, DEVICE)]
    got = [(status, json.loads(body) if body else None) for status, _, body in answers]
    assert got == [
        (410, {"reason": "Unregistered", "timestamp": 1700000000000}),
        (503, {"reason": "ServiceUnavailable"}),
        (429, {"reason": "TooManyRequests"}),
        (200, None),
        (400, {"reason": "BadDeviceToken"}),
        (403, {"reason": "ExpiredProviderToken"}),
        (200, None),
        (200, None),
    ]
    assert apns.pending_scripts() == 0
    assert [r.cause for r in apns.rejected] == ["scripted"] * 5
    assert apns.invalid == []


def test_apns_script_does_not_hide_a_malformed_request(apns, material, h2c):
    apns.script(None, [(410, "Unregistered")])
    status, _, body = h2c.request(f"/3/device/{DEVICE}", apns_headers(material, apns_priority="10"), SILENT)
    assert (status, json.loads(body)) == (400, {"reason": "BadPriority"})
    assert apns.pending_scripts() == 1


def test_apns_permanent_token_answer_and_down(apns, material, h2c):
    gone = "aa" * 32
    apns.set_token_response(gone, 410, "Unregistered")
    for _ in range(2):
        status, _, body = h2c.request(f"/3/device/{gone}", apns_headers(material), SILENT)
        assert status == 410 and json.loads(body)["reason"] == "Unregistered"
        assert abs(json.loads(body)["timestamp"] / 1000 - time.time()) < 10
    apns.set_down(True)
    for _ in range(3):
        status, _, body = h2c.request(f"/3/device/{DEVICE}", apns_headers(material), SILENT)
        assert (status, json.loads(body)) == (503, {"reason": "ServiceUnavailable"})
    assert apns.down_count == 3
    apns.set_down(False)
    apns.set_token_response(gone)
    assert h2c.request(f"/3/device/{gone}", apns_headers(material), SILENT)[0] == 200
    assert [r.cause for r in apns.requests] == ["permanent"] * 2 + ["down"] * 3 + ["accepted"]


def test_apns_wait_for_blocks_until_another_thread_delivers(apns, material):
    started = threading.Event()

    def send():
        client = H2Client(apns.url, apns.ca_file)
        started.wait(5)
        for n in range(3):
            client.request(f"/3/device/{DEVICE}", apns_headers(material, apns_collapse_id=f"n{n}"), SILENT)
        client.close()

    sender = threading.Thread(target=send, daemon=True)
    sender.start()
    started.set()
    notes = apns.wait_for(lambda r: r.collapse_id.startswith("n"), count=3, timeout=5)
    assert [n.collapse_id for n in notes] == ["n0", "n1", "n2"]
    sender.join(5)
    with pytest.raises(AssertionError, match="waited 0.05 s"):
        apns.wait_for(count=4, timeout=0.05)
    apns.clear()
    assert apns.received == [] and apns.requests == []


def test_apns_drop_connections_and_stop_with_an_idle_connection_open(material):
    apns = ApnsStandIn(TEAM, KEY_ID, material["apns_public"], TOPIC, tls=material["tls"]).start()
    client = H2Client(apns.url, apns.ca_file)
    assert client.request(f"/3/device/{DEVICE}", apns_headers(material), SILENT)[0] == 200
    assert apns.open_connections == 1
    apns.drop_connections()
    with pytest.raises((ConnectionError, ssl.SSLError)):
        client.request(f"/3/device/{DEVICE}", apns_headers(material), SILENT)
    client.sock.close()
    again = H2Client(apns.url, apns.ca_file)  # the listener is still up
    assert again.request(f"/3/device/{DEVICE}", apns_headers(material), SILENT)[0] == 200
    started = time.monotonic()
    apns.stop()  # `again` is left open: stop must not wait for it
    assert time.monotonic() - started < 2
    again.sock.close()
    assert len(apns.received) == 2


# -- FCM ------------------------------------------------------------------------------------

def _grant(fcm, assertion=None, content_type="application/x-www-form-urlencoded", grant_type=None):
    assertion = assertion or tokens.oauth_assertion(fcm.private_key, fcm.account.client_email, fcm.token_url,
                                                    fcm.account_json["private_key_id"])
    form = {"grant_type": grant_type or "urn:ietf:params:oauth:grant-type:jwt-bearer", "assertion": assertion}
    if content_type == "application/json":
        return requests.post(fcm.token_url, json=form, verify=fcm.ca_file, timeout=5)
    return requests.post(fcm.token_url, data=form, verify=fcm.ca_file, timeout=5)


def _access_token(fcm):
    response = _grant(fcm)
    assert response.status_code == 200, response.text
    return response.json()["access_token"]


def _poke(**message_overrides):
    message = {"token": "fcm-registration-token-1",
               "data": {"source": "cognito-sync", "datasetName": "notes", "syncCount": "42"},
               "android": {"priority": "NORMAL", "ttl": "86400s", "collapse_key": "notes"},
               "apns": {"headers": {"apns-push-type": "background", "apns-priority": "5"},
                        "payload": {"aps": {"content-available": 1}}}}
    for name, value in message_overrides.items():
        if value is None:
            message.pop(name, None)
        else:
            message[name] = value
    return {"message": message}


def _send(fcm, body, access_token=None, project=None, raw=None):
    headers = {} if access_token is False else {"Authorization": f"Bearer {access_token or _access_token(fcm)}"}
    if raw is not None:
        return requests.post(fcm.send_url(project), data=raw, headers=headers, verify=fcm.ca_file, timeout=5)
    return requests.post(fcm.send_url(project), json=body, headers=headers, verify=fcm.ca_file, timeout=5)


def test_fcm_grant_then_send(fcm):
    response = _grant(fcm)
    assert response.status_code == 200, response.text
    grant = response.json()
    assert grant["token_type"] == "Bearer" and grant["expires_in"] == 3599
    assert fcm.grants_issued == 1
    response = _send(fcm, _poke(), grant["access_token"])
    assert response.status_code == 200, response.text
    assert response.json()["name"].startswith("projects/syncledger-push-test/messages/")
    [message] = fcm.wait_for(lambda r: r.token == "fcm-registration-token-1", timeout=5)
    assert message.data["syncCount"] == "42" and message.android["priority"] == "NORMAL"
    assert message.access_token == grant["access_token"] and message.name == response.json()["name"]
    assert fcm.url + "/token" == fcm.token_url == fcm.account_json["token_uri"]
    assert fcm.invalid == []


def test_fcm_validate_only_is_not_delivered(fcm):
    body = _poke()
    body["validate_only"] = True
    response = _send(fcm, body)
    assert response.json() == {"name": "projects/syncledger-push-test/messages/fake_message_id"}
    assert fcm.received == [] and fcm.rejected == [] and fcm.requests[0].cause == "validate_only"


def _other_assertion(fcm, **kw):
    args = dict(private_key=fcm.private_key, client_email=fcm.account.client_email, token_uri=fcm.token_url,
                private_key_id=fcm.account_json["private_key_id"])
    args.update(kw)
    return tokens.oauth_assertion(**args)


OAUTH_RULES = [
    ("forged-signature", lambda f: dict(assertion=_other_assertion(f, private_key=f.material["rsa_forger"])),
     "invalid_grant"),
    ("wrong-kid", lambda f: dict(assertion=_other_assertion(f, private_key_id="0" * 40)), "invalid_grant"),
    ("unknown-account", lambda f: dict(assertion=_other_assertion(f, client_email="x@y.iam.gserviceaccount.com")),
     "invalid_grant"),
    ("wrong-audience", lambda f: dict(assertion=_other_assertion(f, token_uri="https://oauth2.googleapis.com/token")),
     "invalid_grant"),
    ("too-long-lived", lambda f: dict(assertion=_other_assertion(f, lifetime=3601)), "invalid_grant"),
    ("expired", lambda f: dict(assertion=_other_assertion(f, iat=time.time() - 4000)), "invalid_grant"),
    ("iat-in-future", lambda f: dict(assertion=_other_assertion(f, iat=time.time() + 300)), "invalid_grant"),
    ("wrong-scope", lambda f: dict(assertion=_other_assertion(
        f, scope="https://www.googleapis.com/auth/userinfo.email")), "invalid_scope"),
    ("wrong-grant-type", lambda f: dict(grant_type="client_credentials"), "unsupported_grant_type"),
    ("json-body", lambda f: dict(content_type="application/json"), "invalid_request"),
    ("not-a-jwt", lambda f: dict(assertion="abc.def"), "invalid_grant"),
]


@pytest.mark.parametrize("build,error", [pytest.param(b, e, id=i) for i, b, e in OAUTH_RULES])
def test_fcm_token_endpoint_refuses_bad_grants(fcm, build, error):
    response = _grant(fcm, **build(fcm))
    assert response.status_code == 400, response.text
    body = response.json()
    assert body["error"] == error and body["error_description"]
    assert fcm.grants_issued == 0 and fcm.oauth_requests[0].error == error


def test_fcm_cloud_platform_scope_is_enough(fcm):
    assertion = _other_assertion(fcm, scope="https://www.googleapis.com/auth/cloud-platform")
    assert _grant(fcm, assertion).status_code == 200


def test_fcm_bearer_must_be_issued_and_unexpired(fcm):
    for token in (False, "ya29.never-issued"):
        response = _send(fcm, _poke(), token)
        assert response.status_code == 401
        error = response.json()["error"]
        assert (error["code"], error["status"]) == (401, "UNAUTHENTICATED")
        assert response.headers["www-authenticate"].startswith("Bearer")
    token = _access_token(fcm)
    assert _send(fcm, _poke(), token).status_code == 200
    fcm.expire_access_tokens()
    assert _send(fcm, _poke(), token).status_code == 401
    assert [r.cause for r in fcm.rejected] == ["unauthenticated"] * 3
    assert len(fcm.received) == 1


def test_fcm_short_lived_access_token_expires(material, tmp_path):
    with FcmStandIn("p1", tls=material["tls"], expires_in=0) as fcm:
        account = fcm.make_service_account(str(tmp_path), private_key=material["rsa"])
        document = certs.read_service_account(account.path)
        key = certs.load_private_key_pem(document["private_key"])
        assertion = tokens.oauth_assertion(key, account.client_email, fcm.token_url, document["private_key_id"])
        token = requests.post(fcm.token_url, data={"grant_type": "urn:ietf:params:oauth:grant-type:jwt-bearer",
                                                   "assertion": assertion}, verify=fcm.ca_file).json()
        assert token["expires_in"] == 0
        response = requests.post(fcm.send_url(), json=_poke(), verify=fcm.ca_file,
                                 headers={"Authorization": "Bearer " + token["access_token"]})
        assert response.status_code == 401


FCM_RULES = [
    ("non-string-data", _poke(data={"syncCount": 42}), 400, "Invalid value at 'message.data[0].value' (TYPE_STRING)"),
    ("second-non-string", _poke(data={"a": "1", "b": True}), 400, "Invalid value at 'message.data[1].value'"),
    ("data-key-from", _poke(data={"from": "x"}), 400, "Invalid data payload key"),
    ("data-key-google", _poke(data={"google.sent_time": "1"}), 400, "Invalid data payload key"),
    ("data-key-gcm", _poke(data={"gcm.n.e": "1"}), 400, "Invalid data payload key"),
    ("data-key-message-type", _poke(data={"message_type": "x"}), 400, "Invalid data payload key"),
    ("token-and-topic", _poke(topic="news"), 400, "oneof field 'target' is already set"),
    ("no-target", _poke(token=None), 400, "Recipient of the message is not set."),
    ("lowercase-priority", _poke(android={"priority": "high"}), 400, "message.android.priority"),
    ("ttl-without-unit", _poke(android={"ttl": "86400"}), 400, "message.android.ttl"),
    ("ttl-number", _poke(android={"ttl": 86400}), 400, "message.android.ttl"),
    ("ttl-over-4-weeks", _poke(android={"ttl": "2419201s"}), 400, "android.ttl is too large"),
    ("unknown-message-field", _poke(priority="high"), 400, 'Unknown name "priority" at \'message\''),
    ("unknown-android-field", _poke(android={"collapseKey": "a", "time_to_live": 3}), 400, 'Unknown name "time_to_live"'),
    ("apns-header-not-string", _poke(apns={"headers": {"apns-priority": 5}}), 400,
     "Invalid value at 'message.apns.headers[0].value' (TYPE_STRING)"),
    ("apns-background-priority-10", _poke(apns={"headers": {"apns-push-type": "background", "apns-priority": "10"}}),
     400, "Invalid APNs priority"),
    ("data-too-big", _poke(data={"k": "v" * 4096}), 400, "Message is too big"),
    ("no-message", {"validate_only": False}, 400, "The message is not set."),
]


@pytest.mark.parametrize("body,status,fragment", [pytest.param(b, s, f, id=i) for i, b, s, f in FCM_RULES])
def test_fcm_send_refuses_bad_messages(fcm, body, status, fragment):
    response = _send(fcm, body)
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert error["code"] == status and error["status"] == "INVALID_ARGUMENT"
    assert fragment in error["message"], error
    assert error["details"][0]["@type"] in (FCM_ERROR_TYPE, "type.googleapis.com/google.rpc.BadRequest")
    assert fcm.received == [] and [r.cause for r in fcm.rejected] == ["invalid"]


def test_fcm_send_needs_json_and_the_right_project(fcm):
    token = _access_token(fcm)
    response = _send(fcm, None, token, raw="message=x")
    assert response.status_code == 400
    response = _send(fcm, _poke(), token, project="someone-else")
    assert response.status_code == 403 and response.json()["error"]["status"] == "PERMISSION_DENIED"


def test_fcm_scripted_answers_come_back_in_order(fcm):
    token = _access_token(fcm)
    fcm.script("fcm-registration-token-1", [(404, "UNREGISTERED"), (403, "SENDER_ID_MISMATCH"), None])
    fcm.script(None, [(503, "UNAVAILABLE", {"retry_after": 7}), (429, "QUOTA_EXCEEDED"), (500, "INTERNAL"),
                      (400, "INVALID_ARGUMENT")])
    targets = ["fcm-registration-token-1", "fcm-registration-token-1", "other", "fcm-registration-token-1",
               "other", "other", "other", "other"]
    got = []
    for target in targets:
        response = _send(fcm, _poke(token=target), token)
        error = response.json().get("error")
        got.append((response.status_code, error and error["status"],
                    error and error["details"][0]["errorCode"], response.headers.get("retry-after")))
    assert got == [
        (404, "NOT_FOUND", "UNREGISTERED", None),
        (403, "PERMISSION_DENIED", "SENDER_ID_MISMATCH", None),
        (503, "UNAVAILABLE", "UNAVAILABLE", "7"),
        (200, None, None, None),
        (429, "RESOURCE_EXHAUSTED", "QUOTA_EXCEEDED", None),
        (500, "INTERNAL", "INTERNAL", None),
        (400, "INVALID_ARGUMENT", "INVALID_ARGUMENT", None),
        (200, None, None, None),
    ]
    assert all(d["@type"] == FCM_ERROR_TYPE for r in fcm.rejected for d in r.response_body["error"]["details"][:1])
    assert [r.reason for r in fcm.rejected] == ["UNREGISTERED", "SENDER_ID_MISMATCH", "UNAVAILABLE",
                                                "QUOTA_EXCEEDED", "INTERNAL", "INVALID_ARGUMENT"]


def test_fcm_down_and_permanent_answers(fcm):
    token = _access_token(fcm)
    fcm.set_token_response("dead-token", 404, "UNREGISTERED")
    assert _send(fcm, _poke(token="dead-token"), token).status_code == 404
    fcm.set_down(True, retry_after=3)
    response = _send(fcm, _poke(), token)
    assert response.status_code == 503 and response.headers["retry-after"] == "3"
    assert response.json()["error"]["details"][0]["errorCode"] == "UNAVAILABLE"
    assert _grant(fcm).status_code == 200  # the token endpoint stays up unless oauth=True
    fcm.set_down(False)
    assert _send(fcm, _poke(), token).status_code == 200
    assert fcm.down_count == 1
    fcm.script_oauth([(503, "temporarily_unavailable", "try later")])
    assert _grant(fcm).status_code == 503
    assert fcm.grants_issued == 2


# -- webhook --------------------------------------------------------------------------------

SECRET = "whsec-test-secret-✓"


@pytest.fixture
def hook():
    with WebhookReceiver(SECRET) as receiver:
        yield receiver


def _post(hook, body, headers, path="/hooks/syncledger"):
    return requests.post(hook.url + path, data=body, headers=headers, timeout=5)


def test_verify_signature_reference_vector():
    body = b'{"event":"sync"}'
    expected = hmac.new(SECRET.encode("utf-8"), b"1700000000." + body, hashlib.sha256).hexdigest()
    assert compute_signature(SECRET, "1700000000", body) == "v1=" + expected
    assert verify_signature(SECRET, "1700000000", body, "v1=" + expected)
    assert not verify_signature(SECRET, "1700000000", body + b" ", "v1=" + expected)
    assert not verify_signature(SECRET, "1700000001", body, "v1=" + expected)
    assert not verify_signature(SECRET, "1700000000", body, "v1=" + expected.upper())
    assert not verify_signature(SECRET, "1700000000", body, expected)
    assert not verify_signature(SECRET, "+1700000000", body, compute_signature(SECRET, "+1700000000", body))
    assert not verify_signature("other", "1700000000", body, "v1=" + expected)
    assert timestamp_is_fresh("1700000000", now=1700000300)
    assert not timestamp_is_fresh("1700000000", now=1700000301)
    assert not timestamp_is_fresh("1700000301", now=1700000000)


def test_webhook_accepts_a_signed_notification(hook):
    body = json.dumps({"event": "datasetUpdated", "datasetName": "notes"}).encode()
    response = _post(hook, body, sign_headers(SECRET, body))
    assert response.status_code == 200, response.text
    [note] = hook.wait_for(timeout=5)
    assert note.payload["datasetName"] == "notes" and note.path == "/hooks/syncledger" and note.body == body


@pytest.mark.parametrize("case", ["bad-signature", "missing-signature", "missing-timestamp", "stale-timestamp",
                                  "future-timestamp", "uppercase-hex", "signed-other-body"])
def test_webhook_refuses_bad_signatures(hook, case):
    body = b'{"event":"x"}'
    now = int(time.time())
    headers = sign_headers(SECRET, body)
    if case == "bad-signature":
        headers["X-SyncLedger-Signature"] = compute_signature("wrong", headers["X-SyncLedger-Timestamp"], body)
    elif case == "missing-signature":
        del headers["X-SyncLedger-Signature"]
    elif case == "missing-timestamp":
        del headers["X-SyncLedger-Timestamp"]
    elif case == "stale-timestamp":
        headers = sign_headers(SECRET, body, now - 310)
    elif case == "future-timestamp":
        headers = sign_headers(SECRET, body, now + 310)
    elif case == "uppercase-hex":
        headers["X-SyncLedger-Signature"] = "v1=" + headers["X-SyncLedger-Signature"][3:].upper()
    elif case == "signed-other-body":
        headers = sign_headers(SECRET, b'{"event":"y"}')
    response = _post(hook, body, headers)
    assert response.status_code == 401
    assert hook.received == [] and [r.cause for r in hook.rejected] == ["invalid"]


def test_webhook_needs_json(hook):
    body = b"not json"
    headers = sign_headers(SECRET, body)
    assert _post(hook, body, headers).status_code == 400
    headers["Content-Type"] = "text/plain"
    assert _post(hook, body, headers).status_code == 415


def test_webhook_scripted_failures_and_down(hook):
    hook.script([500, (429, {"Retry-After": "2"}), None, 503])
    statuses = []
    for n in range(5):
        body = json.dumps({"n": n}).encode()
        response = _post(hook, body, sign_headers(SECRET, body))
        statuses.append((response.status_code, response.headers.get("retry-after")))
    assert statuses == [(500, None), (429, "2"), (200, None), (503, None), (200, None)]
    assert [r.payload["n"] for r in hook.received] == [2, 4]
    hook.set_down(True)
    body = b"{}"
    assert _post(hook, body, sign_headers(SECRET, body)).status_code == 503
    assert hook.down_count == 1
    hook.set_down(False)
    hook.set_path_response("/gone", 410)
    assert _post(hook, body, sign_headers(SECRET, body), "/gone").status_code == 410
    assert _post(hook, body, sign_headers(SECRET, body), "/fine").status_code == 200
    assert hook.invalid == []
