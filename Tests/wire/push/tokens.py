"""Compact JWS/JWT (RFC 7515/7519) encoding and strict verification for ES256 and RS256.

- ES256 (RFC 7518 §3.4): ECDSA P-256 with SHA-256. The signature is the raw 64-byte `r || s`
  (each big-endian, left-padded to 32 bytes), NOT the DER `SEQUENCE { r, s }` that most crypto
  libraries produce. A DER signature is refused here, as APNs refuses it.
- RS256 (RFC 7518 §3.3): RSASSA-PKCS1-v1_5 with SHA-256.

Segments are base64url without padding (RFC 7515 §2); padding or characters outside the URL-safe
alphabet make the token malformed.

The verifying side is what the stand-ins use; the signing side is for tests that play the sender.
"""

import base64
import binascii
import json
import re
import time

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec, padding, rsa
from cryptography.hazmat.primitives.asymmetric.utils import decode_dss_signature, encode_dss_signature

_B64URL = re.compile(r"^[A-Za-z0-9_-]*$")


class JwtError(Exception):
    """A token that is malformed or whose signature does not verify."""


def b64url_encode(data):
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def b64url_decode(text):
    """Decodes unpadded base64url strictly (no padding, no other characters)."""
    if not _B64URL.match(text) or len(text) % 4 == 1:
        raise JwtError(f"not unpadded base64url: {text[:40]!r}")
    try:
        return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
    except (binascii.Error, ValueError) as error:
        raise JwtError(f"bad base64url: {error}") from None


def _json_segment(text, what):
    try:
        value = json.loads(b64url_decode(text))
    except (ValueError, UnicodeDecodeError) as error:
        raise JwtError(f"the {what} is not JSON: {error}") from None
    if not isinstance(value, dict):
        raise JwtError(f"the {what} is not a JSON object")
    return value


def decode_unverified(token):
    """Splits a compact JWS into (header, claims, signing_input bytes, signature bytes) without
    checking the signature. Raises JwtError when it is not three well-formed segments."""
    if not isinstance(token, str):
        raise JwtError("the token is not a string")
    parts = token.split(".")
    if len(parts) != 3:
        raise JwtError(f"a compact JWS has 3 segments, this has {len(parts)}")
    header = _json_segment(parts[0], "header")
    claims = _json_segment(parts[1], "claims set")
    signature = b64url_decode(parts[2])
    return header, claims, f"{parts[0]}.{parts[1]}".encode("ascii"), signature


def verify(token, public_key, alg):
    """Verifies `token` with `public_key` for algorithm `alg` ("ES256" or "RS256") and returns
    (header, claims). Raises JwtError for a malformed token, a header `alg` other than `alg`, or a
    signature that does not verify."""
    header, claims, signing_input, signature = decode_unverified(token)
    if header.get("alg") != alg:
        raise JwtError(f"header alg is {header.get('alg')!r}, expected {alg!r}")
    if alg == "ES256":
        if not isinstance(public_key, ec.EllipticCurvePublicKey) or public_key.curve.name != "secp256r1":
            raise JwtError("ES256 needs a P-256 public key")
        if len(signature) != 64:
            raise JwtError(f"an ES256 signature is 64 raw bytes (r||s), this is {len(signature)} "
                           "bytes (a DER signature?)")
        r = int.from_bytes(signature[:32], "big")
        s = int.from_bytes(signature[32:], "big")
        try:
            public_key.verify(encode_dss_signature(r, s), signing_input, ec.ECDSA(hashes.SHA256()))
        except InvalidSignature:
            raise JwtError("the ES256 signature does not verify") from None
    elif alg == "RS256":
        if not isinstance(public_key, rsa.RSAPublicKey):
            raise JwtError("RS256 needs an RSA public key")
        try:
            public_key.verify(signature, signing_input, padding.PKCS1v15(), hashes.SHA256())
        except InvalidSignature:
            raise JwtError("the RS256 signature does not verify") from None
    else:
        raise JwtError(f"unsupported alg {alg!r}")
    return header, claims


def sign(header, claims, private_key):
    """Encodes and signs a JWT; `header["alg"]` picks ES256 or RS256. For tests playing the
    sender."""
    segments = b64url_encode(json.dumps(header, separators=(",", ":")).encode()) + "." + \
        b64url_encode(json.dumps(claims, separators=(",", ":")).encode())
    data = segments.encode("ascii")
    if header["alg"] == "ES256":
        der = private_key.sign(data, ec.ECDSA(hashes.SHA256()))
        r, s = decode_dss_signature(der)
        signature = r.to_bytes(32, "big") + s.to_bytes(32, "big")
    elif header["alg"] == "RS256":
        signature = private_key.sign(data, padding.PKCS1v15(), hashes.SHA256())
    else:
        raise ValueError(f"unsupported alg {header['alg']!r}")
    return segments + "." + b64url_encode(signature)


def apns_provider_token(private_key, team_id, key_id, iat=None):
    """An APNs provider token as Apple specifies it: header {"alg":"ES256","kid":key_id}, claims
    {"iss":team_id,"iat":<epoch seconds>}."""
    iat = int(time.time()) if iat is None else int(iat)
    return sign({"alg": "ES256", "kid": key_id}, {"iss": team_id, "iat": iat}, private_key)


def oauth_assertion(private_key, client_email, token_uri, private_key_id=None,
                    scope="https://www.googleapis.com/auth/firebase.messaging", iat=None, lifetime=3600):
    """A Google service-account JWT-bearer assertion (what google-auth builds): header
    {"alg":"RS256","typ":"JWT","kid":private_key_id}, claims iss/scope/aud/iat/exp."""
    iat = int(time.time()) if iat is None else int(iat)
    header = {"alg": "RS256", "typ": "JWT"}
    if private_key_id is not None:
        header["kid"] = private_key_id
    claims = {"iss": client_email, "scope": scope, "aud": token_uri, "iat": iat, "exp": iat + lifetime}
    return sign(header, claims, private_key)
