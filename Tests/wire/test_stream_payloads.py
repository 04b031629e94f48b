"""Stream records too large to travel inline (over 1 MB of JSON, Cognito's threshold) go by
reference, as Cognito's `payloadType` `S3Url`: the record names a signed, expiring URL of the
real server that answers the records; small ones stay inline. Checked with the directory sink and
plain HTTP GETs; altered and oversized tokens are refused without a credential."""

import json
import os

import requests

from conftest import Server, new_id
from test_bulk_publish import directory_records, wait_done
from test_streams import enable, syncledger, wait_until


def test_large_records_go_by_reference_to_a_signed_url(tmp_root):
    server = Server(os.path.join(tmp_root, "payload-data"), ["--fast"])
    try:
        admin, pool, identity, name = server.client(), new_id(), new_id(), "payloads"
        folder = os.path.join(tmp_root, "payload-folder")
        syncledger(server.data_dir, "streams", "configure", "--stream-name", name, "--directory", folder)
        enable(admin, pool, name)
        ids = dict(IdentityPoolId=pool, IdentityId=identity, DatasetName="big")
        big = 'é"' * 300_000                  # 900 KB stored, about 1.5 MB as JSON: by reference
        token = admin.list_records(**ids)["SyncSessionToken"]
        admin.update_records(**ids, SyncSessionToken=token, RecordPatches=[
            {"Op": "replace", "Key": "big", "Value": big, "SyncCount": 0},
            {"Op": "replace", "Key": "small", "Value": "1", "SyncCount": 0}])
        token = admin.list_records(**ids)["SyncSessionToken"]
        admin.update_records(**ids, SyncSessionToken=token, RecordPatches=[{"Op": "replace", "Key": "small", "Value": "2", "SyncCount": 1}])
        records = wait_until(lambda: (lambda r: r if len(r) >= 2 else None)(directory_records(folder)) if os.path.isdir(folder) else None,
                             what="both records in the folder")
        large, small = records[0], records[1]
        assert small["payloadType"] == "Inline" and small["kinesisSyncRecords"][0]["value"] == "2"
        assert large["payloadType"] == "S3Url" and large["kinesisSyncRecords"] is None
        url = large["kinesisSyncRecordsURL"]
        assert url.startswith(server.url + "/streams/payload/")
        # No credential: the URL is the credential, as an S3 presigned URL.
        got = requests.get(url, timeout=10)
        assert got.status_code == 200 and got.headers["content-type"] == "application/json"
        payload = {x["key"]: x for x in got.json()}
        assert payload["big"]["value"] == big and payload["small"]["value"] == "1"
        assert all(x["op"] == "replace" and x["syncCount"] == 1 == large["syncCount"] for x in payload.values())

        # An altered token, a foreign one and an oversized one: 403, saying why, nothing else.
        prefix, token = url.rsplit("/", 1)
        altered = token[:3] + ("A" if token[3] != "A" else "B") + token[4:]
        for bad in (altered, "x.y", token + "A" * 300):
            r = requests.get(prefix + "/" + bad, timeout=10)
            assert r.status_code == 403 and "not one this server signed" in r.json()["message"]
            assert big[:100] not in r.text

        # A bulk publish sends the dataset's state by reference too: the state as of its entry.
        admin.bulk_publish(IdentityPoolId=pool)
        assert wait_done(admin, pool, timeout=30)["BulkPublishStatus"] == "SUCCEEDED"
        bulk = [r for r in directory_records(folder) if r.get("bulkPublish")]
        assert len(bulk) == 1 and bulk[0]["payloadType"] == "S3Url" and bulk[0]["syncCount"] == 2
        state = {x["key"]: x for x in requests.get(bulk[0]["kinesisSyncRecordsURL"], timeout=10).json()}
        assert state["big"]["value"] == big and state["big"]["syncCount"] == 1
        assert state["small"]["value"] == "2" and state["small"]["syncCount"] == 2
    finally:
        server.stop()
