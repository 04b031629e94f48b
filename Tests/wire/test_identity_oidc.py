"""Sign-in with an OpenID Connect provider (issue 11): a provider configured with its issuer and
JWKS file (`syncledger identities providers add`), a pool that names it, and tokens the test
signs (RS256 and ES256) — GetId and GetCredentialsForIdentity with `Logins`, every bad token
refused with nothing written, the implicit merge of a signed-out identity into the one a login
belongs to, a second user of one provider refused, UnlinkIdentity, and what an unsigned caller
can send."""

import base64
import json
import os
import subprocess
import time

import pytest
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec, padding, rsa
from cryptography.hazmat.primitives.asymmetric.utils import decode_dss_signature

from conftest import BINARY
from test_identity import admin, anonymous, error_of, identity_client, sync_client  # noqa: F401 (fixtures)

ISSUER = "https://login.oidc.test/realms/app"
PROVIDER = "login.oidc.test/realms/app"
ARN = f"arn:aws:iam::123456789012:oidc-provider/{PROVIDER}"


def b64(data):
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


class Issuer:
    """An OpenID provider's signing side: an RSA and an EC key, the JWKS it publishes, and ID tokens."""

    def __init__(self):
        self.rsa = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        self.ec = ec.generate_private_key(ec.SECP256R1())
        n, p = self.rsa.public_key().public_numbers(), self.ec.public_key().public_numbers()
        self.jwks = {"keys": [
            {"kty": "RSA", "kid": "rsa-1", "use": "sig", "alg": "RS256", "n": b64(n.n.to_bytes(256, "big")), "e": b64(n.e.to_bytes(3, "big"))},
            {"kty": "EC", "kid": "ec-1", "crv": "P-256", "x": b64(p.x.to_bytes(32, "big")), "y": b64(p.y.to_bytes(32, "big"))},
        ]}

    def token(self, sub, alg="RS256", iss=ISSUER, aud="app-1", exp_in=600, kid=None, key=None, **extra):
        header = {"alg": alg, "typ": "JWT", "kid": kid or ("rsa-1" if alg == "RS256" else "ec-1")}
        now = int(time.time())
        claims = {"iss": iss, "sub": sub, "aud": aud, "iat": now, "exp": now + exp_in, **extra}
        signing_input = f"{b64(json.dumps(header).encode())}.{b64(json.dumps(claims).encode())}".encode()
        if alg == "RS256":
            signature = (key or self.rsa).sign(signing_input, padding.PKCS1v15(), hashes.SHA256())
        elif alg == "ES256":
            r, s = decode_dss_signature((key or self.ec).sign(signing_input, ec.ECDSA(hashes.SHA256())))
            signature = r.to_bytes(32, "big") + s.to_bytes(32, "big")
        else:
            signature = b""
        return f"{signing_input.decode()}.{b64(signature)}"


@pytest.fixture(scope="module")
def issuer(server, tmp_path_factory):
    idp = Issuer()
    path = tmp_path_factory.mktemp("oidc") / "jwks.json"
    path.write_text(json.dumps(idp.jwks))
    out = subprocess.run([BINARY, "identities", "providers", "add", "--data", server.data_dir, "--issuer", ISSUER,
                          "--jwks", str(path), "--client-id", "app-1"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    return idp


@pytest.fixture(scope="module")
def pid(admin, issuer):
    return admin.create_identity_pool(IdentityPoolName="Oidc", AllowUnauthenticatedIdentities=True,
                                      OpenIdConnectProviderARNs=[ARN])["IdentityPoolId"]


def count_identities(admin, pid):
    return len(admin.list_identities(IdentityPoolId=pid, MaxResults=60)["Identities"])


def test_a_pool_names_only_configured_providers(admin, issuer, pid):
    described = admin.describe_identity_pool(IdentityPoolId=pid)
    assert described["OpenIdConnectProviderARNs"] == [ARN]
    code, _, message = error_of(admin.create_identity_pool, IdentityPoolName="Bad", AllowUnauthenticatedIdentities=False,
                                OpenIdConnectProviderARNs=["arn:aws:iam::123456789012:oidc-provider/nobody.test"])
    assert code == "InvalidParameterException" and "nobody.test" in message
    code, _, _ = error_of(admin.create_identity_pool, IdentityPoolName="Bad", AllowUnauthenticatedIdentities=False,
                          OpenIdConnectProviderARNs=["not an arn at all, long enough"])
    assert code == "InvalidParameterException"


def test_get_id_and_credentials_with_an_oidc_login(server, anonymous, admin, issuer, pid):
    token = issuer.token("alice")
    first = anonymous.get_id(IdentityPoolId=pid, Logins={PROVIDER: token})["IdentityId"]
    assert anonymous.get_id(IdentityPoolId=pid, Logins={PROVIDER: issuer.token("alice", alg="ES256")})["IdentityId"] == first
    assert admin.describe_identity(IdentityId=first)["Logins"] == [PROVIDER]
    got = anonymous.get_credentials_for_identity(IdentityId=first, Logins={PROVIDER: token})
    assert got["IdentityId"] == first and got["Credentials"]["AccessKeyId"].startswith("ASIA")
    sync = sync_client(server, got["Credentials"])
    sync.list_records(IdentityPoolId=pid, IdentityId=first, DatasetName="prefs")
    # An authenticated identity gets nothing without its login.
    assert error_of(anonymous.get_credentials_for_identity, IdentityId=first)[:2] == ("NotAuthorizedException", 400)
    # GetOpenIdToken with the login: a token of this server for the identity.
    open_id = anonymous.get_open_id_token(IdentityId=first, Logins={PROVIDER: token})
    claims = json.loads(base64.urlsafe_b64decode(open_id["Token"].split(".")[1] + "=="))
    assert open_id["IdentityId"] == first and claims["sub"] == first and PROVIDER in claims["amr"]


@pytest.mark.parametrize("why, make", [
    ("expired", lambda i: i.token("mallory", exp_in=-5)),
    ("another audience", lambda i: i.token("mallory", aud="someone-else")),
    ("another issuer", lambda i: i.token("mallory", iss="https://evil.test")),
    ("another key", lambda i: i.token("mallory", key=rsa.generate_private_key(public_exponent=65537, key_size=2048))),
    ("alg none", lambda i: i.token("mallory", alg="none")),
    ("not a JWT", lambda i: "garbage"),
])
def test_bad_tokens_are_refused_and_write_nothing(anonymous, admin, issuer, pid, why, make):
    before = count_identities(admin, pid)
    code, status, message = error_of(anonymous.get_id, IdentityPoolId=pid, Logins={PROVIDER: make(issuer)})
    assert (code, status) == ("NotAuthorizedException", 400), why
    assert PROVIDER in message
    assert count_identities(admin, pid) == before


def test_signing_in_on_a_device_that_was_signed_out_merges_its_identity(server, anonymous, admin, issuer, pid):
    # The phone: signed in as bob, with settings.
    bob = anonymous.get_id(IdentityPoolId=pid, Logins={PROVIDER: issuer.token("bob")})["IdentityId"]
    bob_sync = sync_client(server, anonymous.get_credentials_for_identity(IdentityId=bob, Logins={PROVIDER: issuer.token("bob")})["Credentials"])
    token = bob_sync.list_records(IdentityPoolId=pid, IdentityId=bob, DatasetName="settings")["SyncSessionToken"]
    bob_sync.update_records(IdentityPoolId=pid, IdentityId=bob, DatasetName="settings", SyncSessionToken=token,
                            RecordPatches=[{"Op": "replace", "Key": "theme", "Value": "dark", "SyncCount": 0}])
    # The tablet: used signed out first.
    guest = anonymous.get_id(IdentityPoolId=pid)["IdentityId"]
    guest_creds = anonymous.get_credentials_for_identity(IdentityId=guest)["Credentials"]
    guest_sync = sync_client(server, guest_creds)
    token = guest_sync.list_records(IdentityPoolId=pid, IdentityId=guest, DatasetName="settings")["SyncSessionToken"]
    guest_sync.update_records(IdentityPoolId=pid, IdentityId=guest, DatasetName="settings", SyncSessionToken=token,
                              RecordPatches=[{"Op": "replace", "Key": "theme", "Value": "light", "SyncCount": 0}])
    # Signing in on the tablet answers with bob's identity: the guest is merged into it.
    got = anonymous.get_credentials_for_identity(IdentityId=guest, Logins={PROVIDER: issuer.token("bob")})
    assert got["IdentityId"] == bob
    sync = sync_client(server, got["Credentials"])
    settings = sync.list_records(IdentityPoolId=pid, IdentityId=bob, DatasetName="settings")
    assert settings["MergedDatasetNames"] == [f"settings.{guest}"]
    assert [(r["Key"], r["Value"]) for r in settings["Records"]] == [("theme", "dark")]
    copy = sync.list_records(IdentityPoolId=pid, IdentityId=bob, DatasetName=f"settings.{guest}")
    assert [(r["Key"], r["Value"]) for r in copy["Records"]] == [("theme", "light")]
    # The guest's credentials and identity are done.
    code, status, _ = error_of(guest_sync.list_records, IdentityPoolId=pid, IdentityId=guest, DatasetName="settings")
    assert status in (400, 403)
    assert error_of(anonymous.get_credentials_for_identity, IdentityId=guest)[:2] == ("NotAuthorizedException", 400)
    assert guest not in {i["IdentityId"] for i in admin.list_identities(IdentityPoolId=pid, MaxResults=60, HideDisabled=True)["Identities"]}


def test_linking_a_second_user_of_a_provider_is_a_conflict_and_unlink_frees_the_login(anonymous, admin, issuer, pid):
    guest = anonymous.get_id(IdentityPoolId=pid)["IdentityId"]
    # A signed-out identity gets its first login linked.
    assert anonymous.get_credentials_for_identity(IdentityId=guest, Logins={PROVIDER: issuer.token("carol")})["IdentityId"] == guest
    assert admin.describe_identity(IdentityId=guest)["Logins"] == [PROVIDER]
    # Proving the identity with this server's token, a second user of the same provider: conflict.
    own = anonymous.get_open_id_token(IdentityId=guest, Logins={PROVIDER: issuer.token("carol")})["Token"]
    code, status, _ = error_of(anonymous.get_credentials_for_identity, IdentityId=guest,
                               Logins={"cognito-identity.amazonaws.com": own, PROVIDER: issuer.token("dave")})
    assert (code, status) == ("ResourceConflictException", 400)
    # Another user's token does not prove carol's identity.
    assert error_of(anonymous.get_credentials_for_identity, IdentityId=guest,
                    Logins={PROVIDER: issuer.token("dave")})[:2] == ("NotAuthorizedException", 400)
    # UnlinkIdentity needs the identity's own login, and frees it: carol is a new identity next time.
    assert error_of(anonymous.unlink_identity, IdentityId=guest, Logins={PROVIDER: issuer.token("dave")},
                    LoginsToRemove=[PROVIDER])[:2] == ("NotAuthorizedException", 400)
    anonymous.unlink_identity(IdentityId=guest, Logins={PROVIDER: issuer.token("carol")}, LoginsToRemove=[PROVIDER])
    assert admin.describe_identity(IdentityId=guest)["Logins"] == []
    assert anonymous.get_id(IdentityPoolId=pid, Logins={PROVIDER: issuer.token("carol")})["IdentityId"] != guest


def test_a_supported_login_provider_adds_its_app_id_as_an_audience(anonymous, admin, issuer):
    pool = admin.create_identity_pool(IdentityPoolName="Mobile", AllowUnauthenticatedIdentities=False,
                                      SupportedLoginProviders={PROVIDER: "mobile-app"})["IdentityPoolId"]
    assert anonymous.get_id(IdentityPoolId=pool, Logins={PROVIDER: issuer.token("erin", aud="mobile-app")})["IdentityId"]
    assert error_of(anonymous.get_id, IdentityPoolId=pool, Logins={PROVIDER: issuer.token("erin", aud="other")})[:2] == \
        ("NotAuthorizedException", 400)


def test_what_an_unsigned_caller_can_send_is_bounded(anonymous, admin, issuer, pid):
    before = count_identities(admin, pid)
    too_many = {f"p{i}.test": "t" for i in range(11)}
    assert error_of(anonymous.get_id, IdentityPoolId=pid, Logins=too_many)[:2] == ("InvalidParameterException", 400)
    assert error_of(anonymous.get_id, IdentityPoolId=pid, Logins={PROVIDER: "x" * 60_000})[:2] == ("InvalidParameterException", 400)
    assert error_of(anonymous.get_id, IdentityPoolId=pid, Logins={"p" * 200: "t"})[:2] == ("InvalidParameterException", 400)
    # A 20 KiB token of the right provider: refused before any signature work.
    code, _, message = error_of(anonymous.get_id, IdentityPoolId=pid, Logins={PROVIDER: "a" * 20_000})
    assert code == "NotAuthorizedException"
    assert count_identities(admin, pid) == before
