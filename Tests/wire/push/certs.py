"""Key material for the push stand-ins, made with `cryptography`:

- `make_tls_cert`: a self-signed, CA-capable TLS certificate for 127.0.0.1 and localhost. The
  stand-ins serve it, and the sender under test is given the same PEM as the CA to trust.
- `make_apns_key`: an APNs token-signing key like the `AuthKey_<KEYID>.p8` Apple hands out
  (EC P-256, PKCS#8 PEM, `-----BEGIN PRIVATE KEY-----`).
- `make_fcm_service_account`: a Google service-account key file (the JSON the Firebase console
  downloads) with an RSA 2048 key and a `token_uri` pointing at the stand-in.
"""

import datetime
import ipaddress
import json
import os
import secrets
from typing import NamedTuple
from urllib.parse import quote

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID


class TlsFiles(NamedTuple):
    cert: str   # PEM certificate; also the CA file the client must trust
    key: str    # PEM private key (PKCS#8, unencrypted)


class ApnsKey(NamedTuple):
    path: str           # the .p8 file
    public_key: object  # cryptography EllipticCurvePublicKey


class ServiceAccount(NamedTuple):
    path: str           # the JSON key file
    public_key: object  # cryptography RSAPublicKey
    client_email: str
    project_id: str


def _write(path, data, mode=0o600):
    with open(path, "wb") as handle:
        handle.write(data)
    os.chmod(path, mode)
    return path


def _pkcs8(private_key):
    return private_key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                     serialization.NoEncryption())


def make_tls_cert(directory, name="push-standin", days=30):
    """Writes `<name>.cert.pem` and `<name>.key.pem` into `directory` and returns
    TlsFiles(cert, key).

    The certificate is self-signed (EC P-256, ECDSA-SHA256) and doubles as its own CA, so a client
    that trusts the PEM verifies the server: basicConstraints CA:TRUE (critical), keyUsage
    digitalSignature + keyCertSign + cRLSign, extendedKeyUsage serverAuth, subjectAltName
    IP:127.0.0.1, IP:::1 and DNS:localhost, subject/authority key identifiers, valid from one hour
    ago for `days` days."""
    os.makedirs(directory, exist_ok=True)
    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.ORGANIZATION_NAME, "SyncLedger tests"),
                         x509.NameAttribute(NameOID.COMMON_NAME, f"{name} (127.0.0.1)")])
    now = datetime.datetime.now(datetime.timezone.utc)
    ski = x509.SubjectKeyIdentifier.from_public_key(key.public_key())
    cert = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(hours=1))
        .not_valid_after(now + datetime.timedelta(days=days))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(x509.KeyUsage(digital_signature=True, content_commitment=False,
                                     key_encipherment=False, data_encipherment=False,
                                     key_agreement=False, key_cert_sign=True, crl_sign=True,
                                     encipher_only=False, decipher_only=False), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(x509.SubjectAlternativeName([
            x509.IPAddress(ipaddress.ip_address("127.0.0.1")),
            x509.IPAddress(ipaddress.ip_address("::1")),
            x509.DNSName("localhost")]), critical=False)
        .add_extension(ski, critical=False)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_subject_key_identifier(ski), critical=False)
        .sign(key, hashes.SHA256())
    )
    cert_path = _write(os.path.join(directory, f"{name}.cert.pem"),
                       cert.public_bytes(serialization.Encoding.PEM), 0o644)
    key_path = _write(os.path.join(directory, f"{name}.key.pem"), _pkcs8(key))
    return TlsFiles(cert_path, key_path)


def make_apns_key(directory, key_id="ABC123DEFG"):
    """Writes `AuthKey_<key_id>.p8` (an EC P-256 private key as unencrypted PKCS#8 PEM, the format
    of Apple's downloadable token-signing key) into `directory`; returns ApnsKey(path, public_key)."""
    os.makedirs(directory, exist_ok=True)
    key = ec.generate_private_key(ec.SECP256R1())
    path = _write(os.path.join(directory, f"AuthKey_{key_id}.p8"), _pkcs8(key))
    return ApnsKey(path, key.public_key())


def load_private_key(path):
    """Loads an unencrypted PEM private key file (e.g. the .p8)."""
    with open(path, "rb") as handle:
        return serialization.load_pem_private_key(handle.read(), password=None)


def load_private_key_pem(text):
    """Loads an unencrypted PEM private key from its text (e.g. a key file's `private_key`)."""
    return serialization.load_pem_private_key(text.encode() if isinstance(text, str) else text, password=None)


def make_fcm_service_account(directory, token_uri, project_id="syncledger-push-test",
                             client_email=None, file_name="service-account.json", private_key=None):
    """Writes a Google service-account key file into `directory` and returns
    ServiceAccount(path, public_key, client_email, project_id).

    The fields are those of a real key file: `type` "service_account", `project_id`,
    `private_key_id` (40 hex), `private_key` (RSA 2048, PKCS#8 PEM, `\\n` line ends), `client_email`
    (`<name>@<project>.iam.gserviceaccount.com`), `client_id` (21 digits), `auth_uri`, `token_uri`
    (the given URL, normally the stand-in's `token_url`), `auth_provider_x509_cert_url`,
    `client_x509_cert_url` and `universe_domain`.

    `private_key` reuses an RSA private key instead of generating one (generation takes ~0.1 s;
    tests making many files can share one)."""
    os.makedirs(directory, exist_ok=True)
    key = private_key or rsa.generate_private_key(public_exponent=65537, key_size=2048)
    client_email = client_email or f"firebase-adminsdk-test@{project_id}.iam.gserviceaccount.com"
    document = {
        "type": "service_account",
        "project_id": project_id,
        "private_key_id": secrets.token_hex(20),
        "private_key": _pkcs8(key).decode("ascii"),
        "client_email": client_email,
        "client_id": str(10 ** 20 + secrets.randbelow(9 * 10 ** 20)),
        "auth_uri": "https://accounts.google.com/o/oauth2/auth",
        "token_uri": token_uri,
        "auth_provider_x509_cert_url": "https://www.googleapis.com/oauth2/v1/certs",
        "client_x509_cert_url": "https://www.googleapis.com/robot/v1/metadata/x509/" + quote(client_email, safe=""),
        "universe_domain": "googleapis.com",
    }
    path = _write(os.path.join(directory, file_name), (json.dumps(document, indent=2) + "\n").encode())
    return ServiceAccount(path, key.public_key(), client_email, project_id)


def read_service_account(path):
    """The parsed JSON of a service-account key file."""
    with open(path, encoding="utf-8") as handle:
        return json.load(handle)
