"""Redaction on a cluster (docs/redaction.md): redacting an identity merged into another, whose
shard another node owns, redacts the merged identity's own data and answers the copy the merge
made in the survivor as Remaining — never a half-done redaction answered 503 — and the copy is
redacted by the same request naming the survivor and the copy, sent to any node."""

import json
import time
import urllib.parse
import uuid

import pytest

from cluster_env import running_bed
from cluster_load import shard_of

SHARDS = 4


@pytest.fixture(scope="module")
def bed(tmp_path_factory):
    with running_bed(tmp_path_factory, "cluster-redaction", shards=SHARDS, lease_seconds=2) as bed:
        yield bed


def eventually(what, condition, timeout=60):
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        try:
            last = condition()
            if last:
                return last
        except Exception as e:  # noqa: BLE001 (a shard between owners: try again)
            last = e
        time.sleep(0.2)
    raise AssertionError(f"{what}: not within {timeout}s (last: {last!r})")


def redact(node, body):
    return node.raw("POST", "/admin/redactions", body=json.dumps(body), headers={"Content-Type": "application/json"})


def test_redacting_a_merged_identity_redacts_its_copy_on_the_survivors_node(bed):
    from test_identity import identity_client, sync_client
    from test_identity_merge import PROVIDER, developer_credentials, put, values

    entry = bed.nodes[0]
    admin, anonymous = identity_client(entry), identity_client(entry, signed=False)
    pid = admin.create_identity_pool(IdentityPoolName="Cluster redactions", AllowUnauthenticatedIdentities=True,
                                     DeveloperProviderName=PROVIDER)["IdentityPoolId"]
    # Two identities whose shards different nodes own.
    users = {}
    for n in range(40):
        user = f"user-{n}"
        identity, creds = developer_credentials(admin, anonymous, pid, user)
        users[user] = (identity, creds, bed.wait_owner(shard_of(pid, identity, SHARDS)).url)
        owners = {owner for _, _, owner in users.values()}
        if len(owners) >= 2:
            break
    old_user = next(iter(users))
    old, old_creds, old_owner = users[old_user]
    new_user = next(u for u, v in users.items() if v[2] != old_owner)
    new, new_creds, _ = users[new_user]
    assert shard_of(pid, old, SHARDS) != shard_of(pid, new, SHARDS)

    email, kept = f"EMAIL-{uuid.uuid4().hex}", f"KEPT-{uuid.uuid4().hex}"
    put(sync_client(entry, old_creds), pid, old, "profile", {"email": email, "theme": "dark"})
    put(sync_client(entry, new_creds), pid, new, "profile", {"email": kept})
    admin.merge_developer_identities(SourceUserIdentifier=old_user, DestinationUserIdentifier=new_user,
                                     DeveloperProviderName=PROVIDER, IdentityPoolId=pid)
    new_sync = sync_client(entry, developer_credentials(admin, anonymous, pid, new_user)[1])
    copy = f"profile.{old}"
    eventually("the merge's copy is made", lambda: values(new_sync, pid, new, copy) == {"email": email, "theme": "dark"})

    # Sent to a node: it runs on the merged identity's shard owner, which does not write the
    # survivor's streams: the copy is listed as Remaining, nothing of it attempted.
    body = {"IdentityPoolId": pid, "IdentityId": old, "DatasetName": "profile", "Key": "email", "Reason": "erase my email"}
    answer = redact(entry, body)
    assert answer.status_code == 200, answer.content
    report = answer.json()
    assert report["Copies"] == [] and report["Remaining"] == [{"IdentityId": new, "DatasetName": copy}], report
    assert values(new_sync, pid, new, copy) == {"email": email, "theme": "dark"}
    # The same request again, through every node: done again (idempotent), not refused.
    for node in bed.nodes:
        again = redact(node, body)
        assert again.status_code == 200, again.content
        assert again.json()["Remaining"] == report["Remaining"], again.content
    # The copy, redacted as the answer says: through any node, to the survivor's owner.
    copy_body = {"IdentityPoolId": pid, "IdentityId": new, "DatasetName": copy, "Key": "email", "Reason": "erase my email (merged copy)"}
    done = redact(bed.nodes[2], copy_body)
    assert done.status_code == 200, done.content
    assert len(done.json()["Removals"]) == 1 and done.json()["Remaining"] == [], done.content
    eventually("the copy lost the key", lambda: values(new_sync, pid, new, copy) == {"theme": "dark"})
    assert values(new_sync, pid, new, "profile") == {"email": kept}
