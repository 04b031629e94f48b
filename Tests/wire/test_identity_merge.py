"""Identity merges through the real server (issue 11, part 2 and 3): MergeDeveloperIdentities with
datasets on both sides — the copies `D.<source>`, their records and history, MergedDatasetNames in
ListRecords, the 409s a client that pushes with SyncCount 0 gets afterwards, the merged identity's
credentials refused — bad input getting the model's errors and writing nothing, kill -9 in the
middle of a merge (all or nothing), and the parts of the real SDKs' synchronize loop that an
identity switch exercises."""

import json
import os
import random
import shutil
import signal
import subprocess
import threading
import time

import pytest
from botocore.exceptions import ClientError

from conftest import ADMIN_KEY, ADMIN_SECRET, BINARY, REGION, Server
from test_identity import admin, anonymous, error_of, identity_client, sync_client  # noqa: F401 (fixtures)

PROVIDER = "login.merge.example"


def developer_credentials(admin, anonymous, pid, user):
    """The developer flow: the app's backend mints a token, the device trades it for credentials."""
    minted = admin.get_open_id_token_for_developer_identity(IdentityPoolId=pid, Logins={PROVIDER: user})
    got = anonymous.get_credentials_for_identity(IdentityId=minted["IdentityId"],
                                                 Logins={"cognito-identity.amazonaws.com": minted["Token"]})
    assert got["IdentityId"] == minted["IdentityId"]
    return minted["IdentityId"], got["Credentials"]


def put(sync, pid, identity, dataset, values, counts=None):
    token = sync.list_records(IdentityPoolId=pid, IdentityId=identity, DatasetName=dataset)["SyncSessionToken"]
    patches = [{"Op": "replace", "Key": k, "Value": v, "SyncCount": (counts or {}).get(k, 0)} for k, v in values.items()]
    return sync.update_records(IdentityPoolId=pid, IdentityId=identity, DatasetName=dataset, SyncSessionToken=token, RecordPatches=patches)


def values(sync, pid, identity, dataset):
    out = sync.list_records(IdentityPoolId=pid, IdentityId=identity, DatasetName=dataset)
    return {r["Key"]: r["Value"] for r in out["Records"] if "Value" in r}


def test_merge_developer_identities_copies_datasets_and_reports_them(server, admin, anonymous):
    pid = admin.create_identity_pool(IdentityPoolName="Merges", AllowUnauthenticatedIdentities=True,
                                     DeveloperProviderName=PROVIDER)["IdentityPoolId"]
    old, old_creds = developer_credentials(admin, anonymous, pid, "old-account")
    new, new_creds = developer_credentials(admin, anonymous, pid, "new-account")
    old_sync, new_sync = sync_client(server, old_creds), sync_client(server, new_creds)
    put(old_sync, pid, old, "settings", {"theme": "light", "lang": "fr"})
    put(old_sync, pid, old, "drafts", {"d1": "hello"})
    put(new_sync, pid, new, "settings", {"theme": "dark"})

    merged = admin.merge_developer_identities(SourceUserIdentifier="old-account", DestinationUserIdentifier="new-account",
                                              DeveloperProviderName=PROVIDER, IdentityPoolId=pid)
    assert merged["IdentityId"] == new
    # The survivor has both users, and each signs in as it.
    found = admin.lookup_developer_identity(IdentityPoolId=pid, IdentityId=new, MaxResults=10)
    assert sorted(found["DeveloperUserIdentifierList"]) == ["new-account", "old-account"]
    assert admin.lookup_developer_identity(IdentityPoolId=pid, DeveloperUserIdentifier="old-account", MaxResults=10)["IdentityId"] == new
    assert developer_credentials(admin, anonymous, pid, "old-account")[0] == new
    # The merged identity is disabled: its credentials stop at once, no new ones.
    code, status, _ = error_of(old_sync.list_datasets, IdentityPoolId=pid, IdentityId=old, MaxResults=10)
    assert status in (400, 403) and code in ("NotAuthorizedException", "AccessDeniedException", "InvalidClientTokenId", "UnrecognizedClientException")
    assert error_of(anonymous.get_credentials_for_identity, IdentityId=old)[:2] == ("NotAuthorizedException", 400)
    listed = admin.list_identities(IdentityPoolId=pid, MaxResults=60)["Identities"]
    assert {i["IdentityId"] for i in listed} == {old, new}
    assert {i["IdentityId"] for i in admin.list_identities(IdentityPoolId=pid, MaxResults=60, HideDisabled=True)["Identities"]} == {new}
    assert admin.describe_identity(IdentityId=old)["Logins"] == []

    # The copies, with their records; the survivor's own dataset untouched.
    names = {d["DatasetName"] for d in new_sync.list_datasets(IdentityPoolId=pid, IdentityId=new, MaxResults=20)["Datasets"]}
    assert names == {"settings", f"settings.{old}", f"drafts.{old}"}
    assert values(new_sync, pid, new, f"settings.{old}") == {"theme": "light", "lang": "fr"}
    assert values(new_sync, pid, new, "settings") == {"theme": "dark"}
    settings = new_sync.list_records(IdentityPoolId=pid, IdentityId=new, DatasetName="settings")
    assert settings["MergedDatasetNames"] == [f"settings.{old}"]
    drafts = new_sync.list_records(IdentityPoolId=pid, IdentityId=new, DatasetName="drafts")
    assert drafts["MergedDatasetNames"] == [f"drafts.{old}"] and drafts["DatasetExists"] is False

    # A client that switched identity and pushes every key with SyncCount 0 gets a 409, never a
    # silent overwrite; the keys the survivor lacks are not written either (all or nothing).
    with pytest.raises(ClientError) as raised:
        put(new_sync, pid, new, "settings", {"theme": "light", "lang": "fr"})
    assert raised.value.response["Error"]["Code"] == "ResourceConflictException"
    assert raised.value.response["ResponseMetadata"]["HTTPStatusCode"] == 409
    assert values(new_sync, pid, new, "settings") == {"theme": "dark"}

    # Deleting the copy ends the report (DeleteDataset's documented behaviour).
    new_sync.delete_dataset(IdentityPoolId=pid, IdentityId=new, DatasetName=f"drafts.{old}")
    assert new_sync.list_records(IdentityPoolId=pid, IdentityId=new, DatasetName="drafts")["MergedDatasetNames"] == []

    # The command line shows the merge and where the copy came from.
    out = subprocess.run([BINARY, "identities", "show", new, "--data", server.data_dir], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and f"settings.{old} copies {old}/settings at sync count 1" in out.stdout, out.stderr


def test_merge_refusals_use_the_model_errors_and_write_nothing(server, admin, anonymous):
    pid = admin.create_identity_pool(IdentityPoolName="Refusals", AllowUnauthenticatedIdentities=True,
                                     DeveloperProviderName=PROVIDER)["IdentityPoolId"]
    a, _ = developer_credentials(admin, anonymous, pid, "a")
    b, _ = developer_credentials(admin, anonymous, pid, "b")
    before = admin.list_identities(IdentityPoolId=pid, MaxResults=60)["Identities"]
    cases = [
        (dict(SourceUserIdentifier="nobody", DestinationUserIdentifier="b", DeveloperProviderName=PROVIDER), "ResourceNotFoundException"),
        (dict(SourceUserIdentifier="a", DestinationUserIdentifier="nobody", DeveloperProviderName=PROVIDER), "ResourceNotFoundException"),
        (dict(SourceUserIdentifier="a", DestinationUserIdentifier="b", DeveloperProviderName="other.example"), "InvalidParameterException"),
        (dict(SourceUserIdentifier="x" * 1025, DestinationUserIdentifier="b", DeveloperProviderName=PROVIDER), "InvalidParameterException"),
    ]
    for kwargs, expected in cases:
        assert error_of(admin.merge_developer_identities, IdentityPoolId=pid, **kwargs)[:2] == (expected, 400), kwargs
    # Only the developer may merge.
    assert error_of(anonymous.merge_developer_identities, IdentityPoolId=pid, SourceUserIdentifier="a",
                    DestinationUserIdentifier="b", DeveloperProviderName=PROVIDER)[:2] == ("NotAuthorizedException", 400)
    assert admin.list_identities(IdentityPoolId=pid, MaxResults=60)["Identities"] == before
    # Merging a user into the identity it already has is a no-op that names it.
    assert admin.merge_developer_identities(IdentityPoolId=pid, SourceUserIdentifier="a", DestinationUserIdentifier="a",
                                            DeveloperProviderName=PROVIDER)["IdentityId"] == a
    # The AWS CLI reaches it too.
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    env.update(AWS_ACCESS_KEY_ID=ADMIN_KEY, AWS_SECRET_ACCESS_KEY=ADMIN_SECRET, AWS_CONFIG_FILE="/dev/null",
               AWS_SHARED_CREDENTIALS_FILE="/dev/null", AWS_EC2_METADATA_DISABLED="true", AWS_MAX_ATTEMPTS="1", AWS_PAGER="")
    out = subprocess.run([shutil.which("aws") or "aws", "cognito-identity", "--endpoint-url", server.url, "--region", REGION, "--output", "json",
                          "merge-developer-identities", "--source-user-identifier", "a", "--destination-user-identifier", "b",
                          "--developer-provider-name", PROVIDER, "--identity-pool-id", pid], capture_output=True, text=True, env=env, timeout=120)
    assert out.returncode == 0 and json.loads(out.stdout)["IdentityId"] == b, out.stderr


def test_the_sync_loop_after_an_identity_switch(server, admin, anonymous):
    """What the SDKs' synchronize does around a switch: a device that never synced a dataset
    (LastSyncCount 0) is not told about an old delete; a removal sent as Op=remove with Value ""
    comes back without a Value; ListRecords without MaxResults returns the whole delta."""
    pid = admin.create_identity_pool(IdentityPoolName="Loop", AllowUnauthenticatedIdentities=True,
                                     DeveloperProviderName=PROVIDER)["IdentityPoolId"]
    ident, creds = developer_credentials(admin, anonymous, pid, "looper")
    sync = sync_client(server, creds)
    put(sync, pid, ident, "notes", {"n1": "a"})
    sync.delete_dataset(IdentityPoolId=pid, IdentityId=ident, DatasetName="notes")
    put(sync, pid, ident, "notes", {"n2": "b"})
    fresh = sync.list_records(IdentityPoolId=pid, IdentityId=ident, DatasetName="notes", LastSyncCount=0)
    assert fresh["DatasetDeletedAfterRequestedSyncCount"] is False and fresh["DatasetExists"] is True
    assert [r["Key"] for r in fresh["Records"]] == ["n2"]
    # A device that synced before the delete is told.
    assert sync.list_records(IdentityPoolId=pid, IdentityId=ident, DatasetName="notes", LastSyncCount=1)["DatasetDeletedAfterRequestedSyncCount"] is True
    count = fresh["DatasetSyncCount"]
    token = fresh["SyncSessionToken"]
    out = sync.update_records(IdentityPoolId=pid, IdentityId=ident, DatasetName="notes", SyncSessionToken=token,
                              RecordPatches=[{"Op": "remove", "Key": "n2", "Value": "", "SyncCount": count}])
    assert out["Records"][0]["Key"] == "n2" and "Value" not in out["Records"][0]
    again = sync.list_records(IdentityPoolId=pid, IdentityId=ident, DatasetName="notes", LastSyncCount=count)
    assert [(r["Key"], "Value" in r) for r in again["Records"]] == [("n2", False)]
    # 1,000 records in one dataset: one ListRecords without MaxResults returns them all.
    for start in range(0, 1000, 250):
        put(sync, pid, ident, "big", {f"k{i:04}": "v" for i in range(start, start + 250)})
    whole = sync.list_records(IdentityPoolId=pid, IdentityId=ident, DatasetName="big")
    assert whole["Count"] == 1000 and "NextToken" not in whole


def test_kill_9_during_a_merge_leaves_all_of_it_or_none(tmp_root):
    """A merge of many datasets is one transaction: killed at a random moment while it runs, the
    restarted server shows either no merge or the whole merge, and the log verifies."""
    rng = random.Random()
    seed = rng.randrange(1 << 30)
    rng.seed(seed)
    data = os.path.join(tmp_root, "merge-kill")
    outcomes = []
    server = Server(data)  # durable
    try:
        admin, anonymous = identity_client(server), identity_client(server, signed=False)
        pid = admin.create_identity_pool(IdentityPoolName="Kill", AllowUnauthenticatedIdentities=True,
                                         DeveloperProviderName=PROVIDER)["IdentityPoolId"]
        window = None
        for round_ in range(5):
            src, src_creds = developer_credentials(admin, anonymous, pid, f"src-{round_}")
            dst, _ = developer_credentials(admin, anonymous, pid, f"dst-{round_}")
            sync = sync_client(server, src_creds)
            datasets = [f"ds{i}" for i in range(15)]
            for name in datasets:
                put(sync, pid, src, name, {f"k{j}": "x" * 900 for j in range(150)})
            done = threading.Event()

            def merge():
                try:
                    admin.merge_developer_identities(SourceUserIdentifier=f"src-{round_}", DestinationUserIdentifier=f"dst-{round_}",
                                                     DeveloperProviderName=PROVIDER, IdentityPoolId=pid)
                except Exception:
                    pass
                done.set()

            if window is None:
                # Round 0 measures how long a merge takes, so later rounds kill inside it.
                started = time.monotonic()
                merge()
                window = time.monotonic() - started
                outcomes.append(f"measured {window * 1000:.0f} ms")
                continue
            thread = threading.Thread(target=merge, daemon=True)
            thread.start()
            done.wait(rng.uniform(0.3 * window, 1.3 * window))
            server.process.send_signal(signal.SIGKILL)
            server.process.wait()
            server.stop()
            thread.join(timeout=30)
            server = Server(data)
            admin, anonymous = identity_client(server), identity_client(server, signed=False)
            owner = admin.lookup_developer_identity(IdentityPoolId=pid, DeveloperUserIdentifier=f"src-{round_}", MaxResults=10)["IdentityId"]
            dst_creds = developer_credentials(admin, anonymous, pid, f"dst-{round_}")[1]
            dst_sync = sync_client(server, dst_creds)
            names = {d["DatasetName"] for d in dst_sync.list_datasets(IdentityPoolId=pid, IdentityId=dst, MaxResults=60)["Datasets"]}
            if owner == dst:
                outcomes.append("merged")
                assert names == {f"{n}.{src}" for n in datasets}, seed
                for n in datasets:
                    got = values(dst_sync, pid, dst, f"{n}.{src}")
                    assert len(got) == 150 and set(got.values()) == {"x" * 900}, (seed, n)
                assert admin.describe_identity(IdentityId=src)["Logins"] == []
            else:
                outcomes.append("not merged")
                assert owner == src and names == set(), seed
                assert admin.describe_identity(IdentityId=src)["Logins"] == [PROVIDER]
        verified = subprocess.run([BINARY, "verify", "--data", data], capture_output=True, text=True, timeout=300)
        assert verified.returncode == 0, verified.stdout + verified.stderr
        print(f"kill -9 during merges: {outcomes} (seed {seed})")
    finally:
        server.stop()


def test_the_command_line_creates_pools_merges_and_disables(server, admin, anonymous):
    def cli(*args):
        out = subprocess.run([BINARY, "identities", *args, "--data", server.data_dir], capture_output=True, text=True, timeout=60)
        return out.returncode, out.stdout, out.stderr

    code, out, err = cli("pools", "create", "--name", "From CLI", "--allow-unauthenticated", "--developer-provider", PROVIDER, "--json")
    assert code == 0, err
    pid = json.loads(out)["identityPoolId"]
    assert admin.describe_identity_pool(IdentityPoolId=pid)["DeveloperProviderName"] == PROVIDER
    code, _, err = cli("pools", "create", "--name", "Bad", "--openid-provider", "nobody.test")
    assert code == 1 and "nobody.test" in err and len(err.strip().splitlines()) == 1
    a, a_creds = developer_credentials(admin, anonymous, pid, "cli-a")
    b, _ = developer_credentials(admin, anonymous, pid, "cli-b")
    put(sync_client(server, a_creds), pid, a, "notes", {"n": "1"})
    code, out, err = cli("merge", "--identity-pool-id", pid, "--source", a, "--destination", b, "--json")
    assert code == 0, err
    summary = json.loads(out)
    assert summary["survivor"] == b and [d["dataset"] for d in summary["datasets"]] == [f"notes.{a}"]
    # Merging again is refused with one line: the source is disabled now.
    code, _, err = cli("merge", "--identity-pool-id", pid, "--source", a, "--destination", b)
    assert code == 1 and "disabled" in err and len(err.strip().splitlines()) == 1
    code, out, err = cli("disable", b, "--reason", "account closed")
    assert code == 0, err
    assert error_of(admin.get_open_id_token_for_developer_identity,
                    IdentityPoolId=pid, Logins={PROVIDER: "cli-b"})[:2] == ("NotAuthorizedException", 400)
    code, out, err = cli("list", "--identity-pool-id", pid)
    assert code == 0 and out.count("DISABLED") == 2 and "account closed" in out, out + err
    code, _, err = cli("pools", "delete", pid)
    assert code == 0, err
    assert error_of(admin.describe_identity_pool, IdentityPoolId=pid)[:2] == ("ResourceNotFoundException", 400)
