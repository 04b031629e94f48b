"""Cognito Identity on the same port (issue 11, first part): identity pools and unauthenticated
identities through boto3's `cognito-identity` client and the AWS CLI, the enhanced flow (GetId →
GetCredentialsForIdentity → Cognito Sync signed with the temporary credentials), and what an
unauthenticated caller can and cannot do: no signature needed for GetId and
GetCredentialsForIdentity, nothing else; forged, swapped or stale session tokens refused; a pool
bounded in identities; errors in the model's shape."""

import base64
import json
import os
import shutil
import subprocess

import boto3
import pytest
from botocore import UNSIGNED
from botocore.config import Config
from botocore.exceptions import ClientError

from conftest import ADMIN_KEY, ADMIN_SECRET, REGION, new_id, start_server

NO_RETRY = Config(retries={"max_attempts": 1, "mode": "standard"})


def identity_client(server, signed=True):
    if signed:
        return boto3.client("cognito-identity", endpoint_url=server.url, region_name=REGION,
                            aws_access_key_id=ADMIN_KEY, aws_secret_access_key=ADMIN_SECRET, config=NO_RETRY)
    return boto3.client("cognito-identity", endpoint_url=server.url, region_name=REGION,
                        config=Config(signature_version=UNSIGNED, retries={"max_attempts": 1, "mode": "standard"}))


def sync_client(server, credentials):
    return boto3.client("cognito-sync", endpoint_url=server.url, region_name=REGION, config=NO_RETRY,
                        aws_access_key_id=credentials["AccessKeyId"], aws_secret_access_key=credentials["SecretKey"],
                        aws_session_token=credentials["SessionToken"])


def error_of(call, *args, **kwargs):
    with pytest.raises(ClientError) as raised:
        call(*args, **kwargs)
    return raised.value.response["Error"]["Code"], raised.value.response["ResponseMetadata"]["HTTPStatusCode"], \
        raised.value.response["Error"]["Message"]


@pytest.fixture(scope="module")
def admin(server):
    return identity_client(server)


@pytest.fixture(scope="module")
def anonymous(server):
    return identity_client(server, signed=False)


def test_identity_pools_are_created_described_updated_listed_and_deleted(admin):
    pool = admin.create_identity_pool(IdentityPoolName="Notes App", AllowUnauthenticatedIdentities=True,
                                      DeveloperProviderName="login.notes.example",
                                      SupportedLoginProviders={"accounts.google.com": "app-1"})
    pid = pool["IdentityPoolId"]
    assert pid.startswith(REGION + ":")
    assert {k: v for k, v in pool.items() if k != "ResponseMetadata"} == {
        "IdentityPoolId": pid, "IdentityPoolName": "Notes App", "AllowUnauthenticatedIdentities": True,
        "DeveloperProviderName": "login.notes.example", "SupportedLoginProviders": {"accounts.google.com": "app-1"}}
    assert admin.describe_identity_pool(IdentityPoolId=pid)["IdentityPoolName"] == "Notes App"
    updated = admin.update_identity_pool(IdentityPoolId=pid, IdentityPoolName="Notes", AllowUnauthenticatedIdentities=False,
                                         DeveloperProviderName="login.notes.example")
    assert updated["IdentityPoolName"] == "Notes" and updated["AllowUnauthenticatedIdentities"] is False
    assert "SupportedLoginProviders" not in updated
    # The developer provider name is fixed once set.
    code, status, _ = error_of(admin.update_identity_pool, IdentityPoolId=pid, IdentityPoolName="Notes",
                               AllowUnauthenticatedIdentities=False, DeveloperProviderName="other.example")
    assert (code, status) == ("InvalidParameterException", 400)
    listed = []
    token = None
    while True:
        page = admin.list_identity_pools(MaxResults=2, **({"NextToken": token} if token else {}))
        listed += page["IdentityPools"]
        token = page.get("NextToken")
        if not token:
            break
    assert {"IdentityPoolId": pid, "IdentityPoolName": "Notes"} in listed
    admin.delete_identity_pool(IdentityPoolId=pid)
    assert error_of(admin.describe_identity_pool, IdentityPoolId=pid)[:2] == ("ResourceNotFoundException", 400)
    assert error_of(admin.delete_identity_pool, IdentityPoolId=pid)[:2] == ("ResourceNotFoundException", 400)
    # Bad input: the model's error names.
    assert error_of(admin.create_identity_pool, IdentityPoolName="bad/name", AllowUnauthenticatedIdentities=True)[:2] == \
        ("InvalidParameterException", 400)
    assert error_of(admin.describe_identity_pool, IdentityPoolId="no-colon")[:2] == ("InvalidParameterException", 400)


def test_the_enhanced_flow_signs_sync_calls_with_temporary_credentials(server, admin, anonymous):
    pid = admin.create_identity_pool(IdentityPoolName="Flow", AllowUnauthenticatedIdentities=True)["IdentityPoolId"]
    identity = anonymous.get_id(IdentityPoolId=pid)["IdentityId"]
    assert identity.startswith(REGION + ":") and identity != anonymous.get_id(IdentityPoolId=pid)["IdentityId"]
    out = anonymous.get_credentials_for_identity(IdentityId=identity)
    credentials = out["Credentials"]
    assert out["IdentityId"] == identity and credentials["AccessKeyId"].startswith("ASIA")
    lifetime = (credentials["Expiration"] - credentials["Expiration"].now(credentials["Expiration"].tzinfo)).total_seconds()
    assert 3500 < lifetime <= 3600
    sync = sync_client(server, credentials)
    token = sync.list_records(IdentityPoolId=pid, IdentityId=identity, DatasetName="prefs")["SyncSessionToken"]
    written = sync.update_records(IdentityPoolId=pid, IdentityId=identity, DatasetName="prefs", SyncSessionToken=token,
                                  RecordPatches=[{"Op": "replace", "Key": "theme", "Value": "dark", "SyncCount": 0}])
    assert written["Records"][0]["SyncCount"] == 1
    # For that identity alone.
    other = anonymous.get_id(IdentityPoolId=pid)["IdentityId"]
    code, status, message = error_of(sync.list_records, IdentityPoolId=pid, IdentityId=other, DatasetName="prefs")
    assert (code, status) == ("NotAuthorizedException", 403) and identity in message
    # Nothing was stored for them: no credential appears among the server's credentials.
    listed = subprocess.run([os.environ.get("SYNCLEDGER_BIN", "syncledger"), "credentials", "list", "--data", server.data_dir, "--json"],
                            capture_output=True, text=True, timeout=60)
    assert listed.returncode == 0 and credentials["AccessKeyId"] not in listed.stdout
    # The admin sees the identities; a deleted identity's credentials stop at once.
    described = admin.describe_identity(IdentityId=identity)
    assert described["IdentityId"] == identity and described["Logins"] == []
    ids = set()
    token = None
    while True:
        page = admin.list_identities(IdentityPoolId=pid, MaxResults=1, **({"NextToken": token} if token else {}))
        ids |= {i["IdentityId"] for i in page["Identities"]}
        token = page.get("NextToken")
        if not token:
            break
    assert {identity, other} <= ids
    assert admin.delete_identities(IdentityIdsToDelete=[identity])["UnprocessedIdentityIds"] == []
    assert error_of(sync.list_records, IdentityPoolId=pid, IdentityId=identity, DatasetName="prefs")[:2] == ("NotAuthorizedException", 403)
    assert error_of(anonymous.get_credentials_for_identity, IdentityId=identity)[:2] == ("ResourceNotFoundException", 400)
    assert admin.delete_identities(IdentityIdsToDelete=[identity])["UnprocessedIdentityIds"][0]["IdentityId"] == identity
    # Its data stays (the log is append-only); the admin still reads it with Cognito Sync.
    sync_admin = boto3.client("cognito-sync", endpoint_url=server.url, region_name=REGION, config=NO_RETRY,
                              aws_access_key_id=ADMIN_KEY, aws_secret_access_key=ADMIN_SECRET)
    assert sync_admin.list_records(IdentityPoolId=pid, IdentityId=identity, DatasetName="prefs")["Records"][0]["Value"] == "dark"


def test_forged_swapped_and_stale_session_tokens_are_refused(server, admin, anonymous):
    pid = admin.create_identity_pool(IdentityPoolName="Tokens", AllowUnauthenticatedIdentities=True)["IdentityPoolId"]
    a = anonymous.get_id(IdentityPoolId=pid)["IdentityId"]
    b = anonymous.get_id(IdentityPoolId=pid)["IdentityId"]
    ca = anonymous.get_credentials_for_identity(IdentityId=a)["Credentials"]
    cb = anonymous.get_credentials_for_identity(IdentityId=b)["Credentials"]

    def refused(credentials, identity=a):
        code, status, _ = error_of(sync_client(server, credentials).list_records, IdentityPoolId=pid, IdentityId=identity, DatasetName="d")
        assert (code, status) == ("NotAuthorizedException", 403), credentials

    # A's key with B's token (and secret), a flipped byte, a token for another pool's payload.
    refused({**ca, "SessionToken": cb["SessionToken"]})
    refused({**cb, "AccessKeyId": ca["AccessKeyId"]})
    payload, tag = ca["SessionToken"].split(".")
    refused({**ca, "SessionToken": payload[:-2] + ("AA" if payload[-2:] != "AA" else "BB") + "." + tag})
    forged = base64.urlsafe_b64encode(base64.urlsafe_b64decode(payload + "==").replace(a.encode(), b.encode())).rstrip(b"=").decode()
    refused({**ca, "SessionToken": forged + "." + tag}, identity=b)
    refused({**ca, "SessionToken": "x" * 5000})
    refused({**ca, "SecretKey": cb["SecretKey"]})
    # The pool turned off unauthenticated identities: no new ones, no new credentials.
    admin.update_identity_pool(IdentityPoolId=pid, IdentityPoolName="Tokens", AllowUnauthenticatedIdentities=False)
    assert error_of(anonymous.get_id, IdentityPoolId=pid)[:2] == ("NotAuthorizedException", 400)
    assert error_of(anonymous.get_credentials_for_identity, IdentityId=a)[:2] == ("NotAuthorizedException", 400)
    # The pool deleted: the credentials already out stop too.
    admin.delete_identity_pool(IdentityPoolId=pid)
    refused(cb, identity=b)


def test_unsigned_callers_reach_get_id_and_credentials_only(anonymous, admin):
    pid = admin.create_identity_pool(IdentityPoolName="Closed", AllowUnauthenticatedIdentities=True)["IdentityPoolId"]
    for call, kwargs in [(anonymous.describe_identity_pool, {"IdentityPoolId": pid}),
                         (anonymous.create_identity_pool, {"IdentityPoolName": "x", "AllowUnauthenticatedIdentities": True}),
                         (anonymous.list_identities, {"IdentityPoolId": pid, "MaxResults": 5}),
                         (anonymous.delete_identity_pool, {"IdentityPoolId": pid})]:
        assert error_of(call, **kwargs)[:2] == ("NotAuthorizedException", 400)  # Cognito Identity: every client error is 400
    assert admin.describe_identity_pool(IdentityPoolId=pid)["IdentityPoolName"] == "Closed"
    # A provider the pool does not have is refused, never ignored.
    code, _, message = error_of(anonymous.get_id, IdentityPoolId=pid, Logins={"accounts.google.com": "token"})
    assert code == "NotAuthorizedException" and "not a login provider of identity pool" in message
    # Roles are not served, said plainly.
    code, _, message = error_of(admin.get_identity_pool_roles, IdentityPoolId=pid)
    assert code == "InvalidParameterException" and "not served" in message
    assert error_of(anonymous.get_id, IdentityPoolId=new_id())[:2] == ("ResourceNotFoundException", 400)
    assert error_of(anonymous.get_credentials_for_identity, IdentityId=new_id())[:2] == ("ResourceNotFoundException", 400)
    assert error_of(anonymous.get_credentials_for_identity, IdentityId="not an id")[:2] == ("InvalidParameterException", 400)


def test_a_pool_holds_at_most_the_configured_identities(tmp_root):
    server = start_server(tmp_root, "identity-limit", ["--fast", "--max-identities-per-pool", "3"])
    try:
        admin, anonymous = identity_client(server), identity_client(server, signed=False)
        pid = admin.create_identity_pool(IdentityPoolName="Small", AllowUnauthenticatedIdentities=True)["IdentityPoolId"]
        made = {anonymous.get_id(IdentityPoolId=pid)["IdentityId"] for _ in range(3)}
        assert len(made) == 3
        assert error_of(anonymous.get_id, IdentityPoolId=pid)[:2] == ("LimitExceededException", 400)
        assert len(admin.list_identities(IdentityPoolId=pid, MaxResults=60)["Identities"]) == 3
    finally:
        assert server.stop() == 0


def test_the_aws_cli_speaks_it_too(server):
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    env.update(AWS_ACCESS_KEY_ID=ADMIN_KEY, AWS_SECRET_ACCESS_KEY=ADMIN_SECRET, AWS_CONFIG_FILE="/dev/null",
               AWS_SHARED_CREDENTIALS_FILE="/dev/null", AWS_EC2_METADATA_DISABLED="true", AWS_MAX_ATTEMPTS="1", AWS_PAGER="")
    aws = [shutil.which("aws") or "aws", "cognito-identity", "--endpoint-url", server.url, "--region", REGION, "--output", "json"]

    def run(*args, unsigned=False):
        out = subprocess.run(aws + list(args) + (["--no-sign-request"] if unsigned else []), capture_output=True, text=True, env=env, timeout=120)
        return out.returncode, json.loads(out.stdout) if out.stdout.strip() else None, out.stderr

    code, pool, err = run("create-identity-pool", "--identity-pool-name", "Cli", "--allow-unauthenticated-identities")
    assert code == 0, err
    code, got, err = run("get-id", "--identity-pool-id", pool["IdentityPoolId"], unsigned=True)
    assert code == 0 and got["IdentityId"].startswith(REGION + ":"), err
    code, creds, err = run("get-credentials-for-identity", "--identity-id", got["IdentityId"], unsigned=True)
    assert code == 0 and creds["Credentials"]["AccessKeyId"].startswith("ASIA"), err
    code, _, err = run("describe-identity-pool", "--identity-pool-id", pool["IdentityPoolId"], unsigned=True)
    assert code != 0 and "NotAuthorizedException" in err



def b64url(text):
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def verify_with_jwks(server, token):
    """Checks an OpenID token as a third party would: with the JWKS the server publishes."""
    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.hazmat.primitives.asymmetric.utils import encode_dss_signature
    keys = server.get("/.well-known/jwks.json").json()["keys"]
    header, claims, signature = token.split(".")
    head = json.loads(b64url(header))
    key = next(k for k in keys if k["kid"] == head["kid"])
    assert (head["alg"], key["kty"], key["crv"]) == ("ES256", "EC", "P-256")
    public = ec.EllipticCurvePublicNumbers(int.from_bytes(b64url(key["x"]), "big"), int.from_bytes(b64url(key["y"]), "big"),
                                           ec.SECP256R1()).public_key()
    raw = b64url(signature)
    der = encode_dss_signature(int.from_bytes(raw[:32], "big"), int.from_bytes(raw[32:], "big"))
    public.verify(der, f"{header}.{claims}".encode(), ec.ECDSA(hashes.SHA256()))  # raises when it does not verify
    return json.loads(b64url(claims))


def test_developer_authenticated_identities_get_credentials_with_the_servers_token(server, admin, anonymous):
    pid = admin.create_identity_pool(IdentityPoolName="Dev", AllowUnauthenticatedIdentities=False,
                                     DeveloperProviderName="login.notes.example")["IdentityPoolId"]
    # The app's backend vouches for user-17: a new identity, and a token for it.
    out = admin.get_open_id_token_for_developer_identity(IdentityPoolId=pid, Logins={"login.notes.example": "user-17"},
                                                         TokenDuration=600)
    identity, token = out["IdentityId"], out["Token"]
    claims = verify_with_jwks(server, token)
    assert claims["sub"] == identity and claims["aud"] == pid and "authenticated" in claims["amr"]
    assert 590 <= claims["exp"] - claims["iat"] <= 600
    # The same user again: the same identity.
    assert admin.get_open_id_token_for_developer_identity(IdentityPoolId=pid, Logins={"login.notes.example": "user-17"})["IdentityId"] == identity
    # The device trades the token for credentials, and syncs.
    credentials = anonymous.get_credentials_for_identity(IdentityId=identity, Logins={"cognito-identity.amazonaws.com": token})["Credentials"]
    sync = sync_client(server, credentials)
    assert sync.list_records(IdentityPoolId=pid, IdentityId=identity, DatasetName="notes")["Count"] == 0
    # Without the token, or with a token of another identity, or a tampered one: no credentials.
    assert error_of(anonymous.get_credentials_for_identity, IdentityId=identity)[:2] == ("NotAuthorizedException", 400)
    other = admin.get_open_id_token_for_developer_identity(IdentityPoolId=pid, Logins={"login.notes.example": "user-18"})
    assert other["IdentityId"] != identity
    assert error_of(anonymous.get_credentials_for_identity, IdentityId=identity,
                    Logins={"cognito-identity.amazonaws.com": other["Token"]})[:2] == ("NotAuthorizedException", 400)
    header, body, signature = token.split(".")
    forged_claims = base64.urlsafe_b64encode(json.dumps({**claims, "sub": other["IdentityId"]}).encode()).rstrip(b"=").decode()
    assert error_of(anonymous.get_credentials_for_identity, IdentityId=other["IdentityId"],
                    Logins={"cognito-identity.amazonaws.com": f"{header}.{forged_claims}.{signature}"})[:2] == ("NotAuthorizedException", 400)
    assert error_of(anonymous.get_credentials_for_identity, IdentityId=identity,
                    Logins={"accounts.google.com": "whatever"})[:2] == ("NotAuthorizedException", 400)
    # Lookup both ways; a user linked elsewhere cannot be claimed by another identity.
    assert admin.lookup_developer_identity(IdentityPoolId=pid, DeveloperUserIdentifier="user-17", MaxResults=10)["IdentityId"] == identity
    assert admin.lookup_developer_identity(IdentityPoolId=pid, IdentityId=identity, MaxResults=10)["DeveloperUserIdentifierList"] == ["user-17"]
    assert error_of(admin.get_open_id_token_for_developer_identity, IdentityPoolId=pid, IdentityId=other["IdentityId"],
                    Logins={"login.notes.example": "user-17"})[:2] == ("DeveloperUserAlreadyRegisteredException", 400)
    assert error_of(admin.get_open_id_token_for_developer_identity, IdentityPoolId=pid,
                    Logins={"other.example": "user-17"})[:2] == ("InvalidParameterException", 400)
    assert error_of(admin.get_open_id_token_for_developer_identity, IdentityPoolId=pid, TokenDuration=86401,
                    Logins={"login.notes.example": "user-17"})[:2] == ("InvalidParameterException", 400)
    # GetOpenIdToken with the token returns a fresh token for the same identity.
    fresh = anonymous.get_open_id_token(IdentityId=identity, Logins={"cognito-identity.amazonaws.com": token})
    assert fresh["IdentityId"] == identity and verify_with_jwks(server, fresh["Token"])["sub"] == identity
    # Unlinked, the user is no longer found, and the admin sees the identity without the login.
    admin.unlink_developer_identity(IdentityId=identity, IdentityPoolId=pid, DeveloperProviderName="login.notes.example",
                                    DeveloperUserIdentifier="user-17")
    assert error_of(admin.lookup_developer_identity, IdentityPoolId=pid, DeveloperUserIdentifier="user-17", MaxResults=10)[:2] == \
        ("ResourceNotFoundException", 400)
    assert admin.describe_identity(IdentityId=identity)["Logins"] == []
    # Only the admin mints tokens.
    assert error_of(anonymous.get_open_id_token_for_developer_identity, IdentityPoolId=pid,
                    Logins={"login.notes.example": "user-19"})[:2] == ("NotAuthorizedException", 400)


def test_the_command_line_lists_pools_and_identities(server, admin, anonymous):
    binary = os.environ.get("SYNCLEDGER_BIN", "syncledger")

    def cli(*args):
        out = subprocess.run([binary, "identities", *args, "--data", server.data_dir], capture_output=True, text=True, timeout=60)
        return out.returncode, out.stdout, out.stderr

    pid = admin.create_identity_pool(IdentityPoolName="Cli Pool", AllowUnauthenticatedIdentities=True,
                                     DeveloperProviderName="login.cli.example")["IdentityPoolId"]
    guest = anonymous.get_id(IdentityPoolId=pid)["IdentityId"]
    member = admin.get_open_id_token_for_developer_identity(IdentityPoolId=pid, Logins={"login.cli.example": "u-1"})["IdentityId"]
    code, out, err = cli("pools", "--json")
    pools = {p["identityPoolId"]: p for p in map(json.loads, out.splitlines())}
    assert code == 0 and pools[pid]["name"] == "Cli Pool" and pools[pid]["developerProviderName"] == "login.cli.example", err
    code, out, err = cli("list", "--identity-pool-id", pid, "--json")
    listed = {i["identityId"]: i for i in map(json.loads, out.splitlines())}
    assert code == 0 and set(listed) == {guest, member}, err
    assert listed[guest]["logins"] == [] and listed[member]["logins"] == ["login.cli.example"]
    code, out, err = cli("show", member)
    assert code == 0 and f"{member} in identity pool {pid}" in out and "login.cli.example" in out, err
    code, out, err = cli("show", "us-east-1:00000000-0000-0000-0000-000000000000")
    assert code == 1 and err.startswith("syncledger: there is no identity") and len(err.strip().splitlines()) == 1
