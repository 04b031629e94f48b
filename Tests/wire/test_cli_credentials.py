"""`syncledger credentials create|list|revoke|rotate` beside a running server: temporary
credentials that expire, secrets printed as plain JSON (no `\\/`), list without secrets, revoke
and rotate taking effect at the next request, and the generated admin credential (listed,
flagged, rotatable, revocable, and refused while an operator's own is set)."""

import datetime
import json
import os
import subprocess

import pytest
from botocore.exceptions import ClientError

from conftest import ADMIN_KEY, ADMIN_SECRET, BINARY, Server, new_id


def syncledger(*args, env=None):
    out = subprocess.run([BINARY, *map(str, args)], capture_output=True, timeout=60, env=env)
    return out.returncode, out.stdout.decode(), out.stderr.decode(errors="replace")


def ok(*args, **kw):
    code, out, err = syncledger(*args, **kw)
    assert code == 0, (args, out, err)
    return out


def now():
    return datetime.datetime.now(datetime.timezone.utc)


def parse_time(text):
    return datetime.datetime.strptime(text, "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=datetime.timezone.utc)


def listed(data):
    """`credentials list --json`, by access key id."""
    return {c["AccessKeyId"]: c for c in map(json.loads, ok("credentials", "list", "--json", "--data", data).splitlines())}


def works(server, cred, pool=None, identity=None):
    """Whether a request signed with `cred` is accepted (its own identity's records, or any
    pool's configuration for an admin key)."""
    client = server.client(cred["AccessKeyId"], cred["SecretAccessKey"], cred.get("SessionToken"))
    try:
        if pool and identity:
            client.list_records(IdentityPoolId=pool, IdentityId=identity, DatasetName="d")
        else:
            client.list_datasets(IdentityPoolId=new_id(), IdentityId=new_id())
        return True
    except ClientError as e:
        assert e.response["Error"]["Code"] == "NotAuthorizedException", e.response
        return False


@pytest.fixture(scope="module")
def server(tmp_root):
    s = Server(os.path.join(tmp_root, "cli-credentials"), ["--fast"])
    yield s
    s.stop()


def create(server, pool, identity, *extra):
    args = ["credentials", "create", "--data", server.data_dir, "--identity-pool-id", pool, "--identity-id", identity, *extra]
    code, out, err = syncledger(*args)
    assert code == 0, err
    return json.loads(out), out


def test_a_temporary_credential_expires_after_its_duration(server):
    pool, identity = new_id(), new_id()
    before = now()
    cred, _ = create(server, pool, identity, "--session-token", "--duration", "120")
    after = now()
    assert list(cred) == ["AccessKeyId", "SecretAccessKey", "SessionToken", "Expiration", "Scope", "IdentityPoolId", "IdentityId"]
    assert cred["AccessKeyId"].startswith("ASIA") and cred["Scope"] == "identity"
    expires = parse_time(cred["Expiration"])
    assert before + datetime.timedelta(seconds=119) <= expires <= after + datetime.timedelta(seconds=121)
    assert works(server, cred, pool, identity)
    entry = listed(server.data_dir)[cred["AccessKeyId"]]
    assert entry == {"AccessKeyId": cred["AccessKeyId"], "Scope": "identity", "IdentityPoolId": pool, "IdentityId": identity,
                     "Created": entry["Created"], "Expiration": cred["Expiration"], "Temporary": True, "Expired": False,
                     "GeneratedAdmin": False}
    # By default a temporary credential lives an hour, a plain one until revoked.
    cred, _ = create(server, pool, identity, "--session-token")
    hour = parse_time(cred["Expiration"]) - parse_time(listed(server.data_dir)[cred["AccessKeyId"]]["Created"])
    assert hour == datetime.timedelta(hours=1)
    cred, _ = create(server, pool, identity)
    assert "Expiration" not in cred and "SessionToken" not in cred
    assert listed(server.data_dir)[cred["AccessKeyId"]]["Expiration"] is None


def test_durations_from_one_second_to_36_hours(server):
    pool, identity = new_id(), new_id()
    for seconds in (1, 129600):
        cred, _ = create(server, pool, identity, "--session-token", "--duration", str(seconds))
        created = parse_time(listed(server.data_dir)[cred["AccessKeyId"]]["Created"])
        assert parse_time(cred["Expiration"]) - created == datetime.timedelta(seconds=seconds)
    for args in (["--duration", "60"], ["--session-token", "--duration", "0"], ["--session-token", "--duration", "129601"],
                 ["--session-token", "--duration=-5"]):
        code, out, err = syncledger("credentials", "create", "--data", server.data_dir, "--identity-pool-id", pool,
                                    "--identity-id", identity, *args)
        assert code == 64 and out == "" and "--duration" in err, (args, out, err)


def test_secrets_are_printed_without_escaped_slashes(server):
    pool, identity = new_id(), new_id()
    for _ in range(30):
        cred, raw = create(server, pool, identity, "--session-token")
        if "/" in cred["SecretAccessKey"] + cred["SessionToken"]:
            break
    else:
        pytest.fail("no secret or token with a '/' in 30 credentials")
    assert "\\/" not in raw, raw
    assert f'"SecretAccessKey": "{cred["SecretAccessKey"]}"' in raw and f'"SessionToken": "{cred["SessionToken"]}"' in raw
    assert works(server, cred, pool, identity)


def test_list_never_prints_secrets(server):
    pool, identity = new_id(), new_id()
    cred, _ = create(server, pool, identity, "--session-token")
    for args in ([], ["--json"]):
        out = ok("credentials", "list", "--data", server.data_dir, *args)
        assert cred["AccessKeyId"] in out
        assert cred["SecretAccessKey"] not in out and cred["SessionToken"] not in out
        assert "Secret" not in out and "SessionToken" not in out


def test_revoke_takes_effect_at_the_next_request(server):
    pool, identity = new_id(), new_id()
    cred, _ = create(server, pool, identity)
    assert works(server, cred, pool, identity)
    out = ok("credentials", "revoke", "--data", server.data_dir, cred["AccessKeyId"])
    assert f"revoked {cred['AccessKeyId']}" in out, out
    assert not works(server, cred, pool, identity)
    assert cred["AccessKeyId"] not in listed(server.data_dir)
    code, out, err = syncledger("credentials", "revoke", "--data", server.data_dir, cred["AccessKeyId"])
    assert code == 1 and err.count("\n") == 1 and f"no credential has access key id {cred['AccessKeyId']}" in err, err


def test_rotate_replaces_a_key_at_once_or_after_a_grace(server):
    pool, identity = new_id(), new_id()
    old, _ = create(server, pool, identity, "--session-token", "--duration", "600")
    code, out, err = syncledger("credentials", "rotate", "--data", server.data_dir, old["AccessKeyId"])
    assert code == 0, err
    new = json.loads(out)
    assert "\\/" not in out
    assert (new["Scope"], new["IdentityPoolId"], new["IdentityId"]) == ("identity", pool, identity)
    assert new["AccessKeyId"] != old["AccessKeyId"] and "SessionToken" in new
    # The same lifetime, from now.
    assert datetime.timedelta(seconds=590) < parse_time(new["Expiration"]) - now() <= datetime.timedelta(seconds=600)
    assert "stops working now" in err, err
    assert works(server, new, pool, identity) and not works(server, old, pool, identity)

    code, out, err = syncledger("credentials", "rotate", "--data", server.data_dir, new["AccessKeyId"], "--grace", "60")
    assert code == 0, err
    newer = json.loads(out)
    assert works(server, newer, pool, identity) and works(server, new, pool, identity)
    kept = listed(server.data_dir)[new["AccessKeyId"]]
    assert datetime.timedelta(seconds=50) < parse_time(kept["Expiration"]) - now() <= datetime.timedelta(seconds=60)
    code, out, err = syncledger("credentials", "rotate", "--data", server.data_dir, new["AccessKeyId"], "--grace=-1")
    assert code == 64 and "--grace" in err, err


def test_the_generated_admin_credential_is_listed_rotatable_revocable_and_refused_beside_an_operators(tmp_root):
    data = os.path.join(tmp_root, "cli-generated-admin")
    plain = Server(data, ["--fast"], admin=("", ""))  # no SYNCLEDGER_ACCESS_KEY_ID: the server generates one
    try:
        generated = [c for c in listed(data).values() if c["GeneratedAdmin"]]
        assert len(generated) == 1 and generated[0]["Scope"] == "admin" and generated[0]["Expiration"] is None, generated
        assert "generated admin" in ok("credentials", "list", "--data", data)
        # Rotating it yields a working admin key that is the generated one from now on.
        code, out, err = syncledger("credentials", "rotate", "--data", data, generated[0]["AccessKeyId"])
        assert code == 0, err
        admin = json.loads(out)
        assert admin["Scope"] == "admin" and "IdentityPoolId" not in admin and "\\/" not in out
        assert works(plain, admin)
        assert [c["AccessKeyId"] for c in listed(data).values() if c["GeneratedAdmin"]] == [admin["AccessKeyId"]]
    finally:
        plain.stop()

    # While an operator's own admin credential is set, the generated one is refused (and still listed).
    operated = Server(data, ["--fast"])
    try:
        assert not works(operated, admin)
        assert works(operated, {"AccessKeyId": ADMIN_KEY, "SecretAccessKey": ADMIN_SECRET})
        env = dict(os.environ, SYNCLEDGER_ACCESS_KEY_ID=ADMIN_KEY)
        code, out, err = syncledger("credentials", "list", "--data", data, env=env)
        assert admin["AccessKeyId"] in out and ADMIN_KEY in err and "not stored" in err, (out, err)
    finally:
        operated.stop()

    # Without it, the generated one works again, until revoked.
    plain = Server(data, ["--fast"], admin=("", ""))
    try:
        assert works(plain, admin)
        code, out, err = syncledger("credentials", "revoke", "--data", data, admin["AccessKeyId"])
        assert code == 0 and "generated admin" in out, (out, err)
        assert not works(plain, admin)
        assert not any(c["GeneratedAdmin"] for c in listed(data).values())
    finally:
        plain.stop()
