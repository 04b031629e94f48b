"""The AWS CLI (`aws cognito-sync ...`) against the server: a device's sync cycle, datasets,
devices and pool configuration, and how errors reach the command line."""

import json

from conftest import Dataset, new_id


def ok(result):
    code, out, err = result
    assert code == 0, err
    return out


def failed(result, error_type):
    code, out, err = result
    assert code != 0, out
    assert error_type in err, err
    return err


def test_cli_sync_cycle(server, admin, pool, identity):
    ids = ["--identity-pool-id", pool, "--identity-id", identity]
    page = ok(server.cli("list-records", *ids, "--dataset-name", "prefs"))
    assert page["Records"] == [] and page["DatasetSyncCount"] == 0 and page["DatasetExists"] is False
    token = page["SyncSessionToken"]

    patches = [{"Op": "replace", "Key": "theme", "Value": "dark", "SyncCount": 0},
               {"Op": "replace", "Key": "font", "Value": "mono", "SyncCount": 0}]
    out = ok(server.cli("update-records", *ids, "--dataset-name", "prefs", "--sync-session-token", token,
                        "--record-patches", json.dumps(patches)))
    assert sorted((r["Key"], r["Value"], r["SyncCount"]) for r in out["Records"]) == [("font", "mono", 1), ("theme", "dark", 1)]

    # The CLI's shorthand syntax too.
    out = ok(server.cli("update-records", *ids, "--dataset-name", "prefs", "--sync-session-token", token,
                        "--record-patches", "Op=replace,Key=theme,Value=light,SyncCount=1"))
    assert [(r["Key"], r["Value"], r["SyncCount"]) for r in out["Records"]] == [("theme", "light", 2)]

    page = ok(server.cli("list-records", *ids, "--dataset-name", "prefs", "--last-sync-count", "1"))
    assert [(r["Key"], r["Value"], r["SyncCount"]) for r in page["Records"]] == [("theme", "light", 2)]
    assert page["DatasetSyncCount"] == 2

    # What the CLI wrote, boto3 reads.
    assert Dataset(admin, pool, identity).records("prefs") == {"theme": ("light", 2), "font": ("mono", 1)}

    # A stale sync count: 409 ResourceConflictException, non-zero exit, nothing written.
    failed(server.cli("update-records", *ids, "--dataset-name", "prefs", "--sync-session-token", token,
                      "--record-patches", "Op=replace,Key=theme,Value=stale,SyncCount=1"), "ResourceConflictException")
    assert Dataset(admin, pool, identity).records("prefs")["theme"] == ("light", 2)

    described = ok(server.cli("describe-dataset", *ids, "--dataset-name", "prefs"))["Dataset"]
    assert described["DatasetName"] == "prefs" and described["NumRecords"] == 2
    assert described["DataStorage"] == len("themelight") + len("fontmono")

    ok(server.cli("update-records", *ids, "--dataset-name", "second", "--sync-session-token",
                  ok(server.cli("list-records", *ids, "--dataset-name", "second"))["SyncSessionToken"],
                  "--record-patches", "Op=replace,Key=k,Value=v,SyncCount=0"))
    listed = ok(server.cli("list-datasets", *ids))
    assert [d["DatasetName"] for d in listed["Datasets"]] == ["prefs", "second"] and listed["Count"] == 2

    deleted = ok(server.cli("delete-dataset", *ids, "--dataset-name", "prefs"))["Dataset"]
    assert deleted["DatasetName"] == "prefs" and deleted["NumRecords"] == 2
    failed(server.cli("describe-dataset", *ids, "--dataset-name", "prefs"), "ResourceNotFoundException")
    listed = ok(server.cli("list-datasets", *ids))
    assert [d["DatasetName"] for d in listed["Datasets"]] == ["second"]


def test_cli_devices_and_configuration(server, admin, pool, identity):
    ids = ["--identity-pool-id", pool, "--identity-id", identity]
    first = ok(server.cli("register-device", *ids, "--platform", "APNS", "--token", "apns-token"))["DeviceId"]
    again = ok(server.cli("register-device", *ids, "--platform", "APNS", "--token", "apns-token"))["DeviceId"]
    assert first == again
    assert admin.register_device(IdentityPoolId=pool, IdentityId=identity, Platform="APNS", Token="apns-token")["DeviceId"] == first

    config = ok(server.cli("get-identity-pool-configuration", "--identity-pool-id", pool))
    assert config == {"IdentityPoolId": pool}
    admin.set_identity_pool_configuration(IdentityPoolId=pool, CognitoStreams={"StreamName": "cli-stream", "StreamingStatus": "ENABLED"})
    config = ok(server.cli("get-identity-pool-configuration", "--identity-pool-id", pool))
    assert config == {"IdentityPoolId": pool, "CognitoStreams": {"StreamName": "cli-stream", "StreamingStatus": "ENABLED"}}


def test_cli_with_identity_credentials(server, admin, pool, identity):
    cred = server.mint(pool, identity, session_token=True)
    key = dict(key=cred["AccessKeyId"], secret=cred["SecretAccessKey"], token=cred["SessionToken"])
    own = ["--identity-pool-id", pool, "--identity-id", identity, "--dataset-name", "mine"]
    token = ok(server.cli("list-records", *own, **key))["SyncSessionToken"]
    out = ok(server.cli("update-records", *own, "--sync-session-token", token,
                        "--record-patches", "Op=replace,Key=k,Value=v,SyncCount=0", **key))
    assert out["Records"][0]["SyncCount"] == 1 and out["Records"][0]["LastModifiedBy"] == identity

    other = new_id()
    failed(server.cli("list-records", "--identity-pool-id", pool, "--identity-id", other, "--dataset-name", "mine", **key),
           "NotAuthorizedException")
    failed(server.cli("get-identity-pool-configuration", "--identity-pool-id", pool, **key), "NotAuthorizedException")
    # Without its session token the credential is refused.
    failed(server.cli("list-records", *own, key=cred["AccessKeyId"], secret=cred["SecretAccessKey"]), "NotAuthorizedException")
    # Wrong secret.
    failed(server.cli("list-datasets", "--identity-pool-id", pool, "--identity-id", identity,
                      key=cred["AccessKeyId"], secret="wrong", token=cred["SessionToken"]), "NotAuthorizedException")
