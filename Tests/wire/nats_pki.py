"""Test-time secrets for the NATS cluster: a certificate authority with server and client
certificates (Python's `cryptography`), nkey user key pairs, random passwords.

Everything is made fresh in a directory per cluster, every secret file 0600; nothing is checked
in. The server certificate names 127.0.0.1 and localhost and serves for both server and client
authentication, since the nats-servers' routes verify each other with it.
"""

import base64
import datetime
import ipaddress
import os
import secrets

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID


def write_secret(path, data):
    """Writes `data` (str or bytes) to a new file readable by its owner only."""
    if isinstance(data, str):
        data = data.encode()
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(data)
    return path


def _name(common_name):
    return x509.Name([x509.NameAttribute(NameOID.ORGANIZATION_NAME, "SyncLedger tests"),
                      x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


class CertificateAuthority:
    """A self-signed CA (P-256) that issues leaf certificates into `directory`."""

    def __init__(self, directory, name):
        self.directory = directory
        self.name = name
        os.makedirs(directory, exist_ok=True)
        self.key = ec.generate_private_key(ec.SECP256R1())
        now = datetime.datetime.now(datetime.timezone.utc)
        self.cert = (x509.CertificateBuilder()
                     .subject_name(_name(name)).issuer_name(_name(name))
                     .public_key(self.key.public_key())
                     .serial_number(x509.random_serial_number())
                     .not_valid_before(now - datetime.timedelta(days=1))
                     .not_valid_after(now + datetime.timedelta(days=30))
                     .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
                     .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                                  content_commitment=False, key_encipherment=False,
                                                  data_encipherment=False, key_agreement=False,
                                                  encipher_only=False, decipher_only=False), critical=True)
                     .add_extension(x509.SubjectKeyIdentifier.from_public_key(self.key.public_key()), critical=False)
                     .sign(self.key, hashes.SHA256()))
        self.cert_path = os.path.join(directory, f"{name}.pem")
        with open(self.cert_path, "wb") as f:
            f.write(self.cert.public_bytes(serialization.Encoding.PEM))

    def issue(self, name, server=False, client=False):
        """A leaf certificate and key for `name`: (cert path, key path). A server certificate
        names 127.0.0.1 and localhost."""
        key = ec.generate_private_key(ec.SECP256R1())
        now = datetime.datetime.now(datetime.timezone.utc)
        usages = ([ExtendedKeyUsageOID.SERVER_AUTH] if server else []) + ([ExtendedKeyUsageOID.CLIENT_AUTH] if client else [])
        builder = (x509.CertificateBuilder()
                   .subject_name(_name(name)).issuer_name(self.cert.subject)
                   .public_key(key.public_key())
                   .serial_number(x509.random_serial_number())
                   .not_valid_before(now - datetime.timedelta(days=1))
                   .not_valid_after(now + datetime.timedelta(days=30))
                   .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
                   .add_extension(x509.KeyUsage(digital_signature=True, key_encipherment=False, key_cert_sign=False,
                                                crl_sign=False, content_commitment=False, data_encipherment=False,
                                                key_agreement=False, encipher_only=False, decipher_only=False),
                                  critical=True)
                   .add_extension(x509.ExtendedKeyUsage(usages), critical=False)
                   .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(self.key.public_key()), critical=False))
        if server:
            builder = builder.add_extension(x509.SubjectAlternativeName(
                [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), critical=False)
        cert = builder.sign(self.key, hashes.SHA256())
        cert_path = os.path.join(self.directory, f"{name}.pem")
        key_path = os.path.join(self.directory, f"{name}-key.pem")
        with open(cert_path, "wb") as f:
            f.write(cert.public_bytes(serialization.Encoding.PEM))
        write_secret(key_path, key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                                 serialization.NoEncryption()))
        return cert_path, key_path


def _crc16(data):
    crc = 0
    for b in data:
        crc ^= b << 8
        for _ in range(8):
            crc = ((crc << 1) ^ 0x1021) & 0xFFFF if crc & 0x8000 else (crc << 1) & 0xFFFF
    return crc


def _nkey_encode(prefix, payload):
    body = bytes(prefix) + payload
    return base64.b32encode(body + _crc16(body).to_bytes(2, "little")).decode().rstrip("=")


def nkey_user():
    """A new nkey user: (public key `U…`, seed `SU…`)."""
    key = Ed25519PrivateKey.generate()
    seed = key.private_bytes(serialization.Encoding.Raw, serialization.PrivateFormat.Raw, serialization.NoEncryption())
    public = key.public_key().public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    user, seed_prefix = 20 << 3, 18 << 3
    return (_nkey_encode([user], public),
            _nkey_encode([seed_prefix | user >> 5, (user & 31) << 3], seed))


def password():
    """A random password (URL-safe characters, so it needs no quoting in a config file)."""
    return secrets.token_urlsafe(24)
