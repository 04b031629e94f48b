"""`syncledger devices` and `syncledger messages` on the data directory of a running server:
what the API wrote, read back with and without --json; unlink as a logout recorded in the log;
tail after a consumer's cursor; purge's bound; one-line errors."""

import json

from conftest import new_id
from test_cli_commands import json_lines, ok, one_line_error, syncledger


def call(server, method, path, body=b"", cred=None, query=""):
    kw = dict(key=cred["AccessKeyId"], secret=cred["SecretAccessKey"]) if cred else {}
    return server.raw(method, path, body, query=query, **kw)


def test_devices_and_messages_from_the_command_line(server):
    pool, alice = new_id(), new_id()
    cred = server.mint(pool, alice)
    reply = call(server, "POST", "/devices/sync", {"Platform": "GCM", "Model": "Pixel 8", "OsVersion": "15",
                                                   "Settings": {"theme": "dark"}}, cred)
    assert reply.status_code == 200, reply.text
    code = reply.json()["DeviceCode"]
    assert call(server, "POST", "/devices/sync-token", {"DeviceCode": code, "Token": "fcm-token-1"}, cred).status_code == 200
    assert call(server, "POST", "/devices/login", {"DeviceCode": code}, cred).status_code == 200
    data = ["--data", server.data_dir]

    listed = json_lines(ok("devices", "list", *data, "--identity-pool-id", pool, "--json"))
    assert [d["deviceCode"] for d in listed] == [code]
    device = listed[0]
    assert device["identityId"] == alice and device["loggedIn"] is True and device["hasToken"] is True
    assert device["settings"] == {"theme": "dark"} and device["model"] == "Pixel 8"
    assert "fcm-token-1" not in json.dumps(listed), "the token is never shown"
    assert json_lines(ok("devices", "list", *data, "--identity-pool-id", pool, "--identity-id", alice, "--json")) == listed
    text = ok("devices", "show", *data, "--identity-pool-id", pool, code)
    assert code in text and "logged in as " + alice in text and "setting theme = dark" in text

    for i in range(3):
        reply = call(server, "POST", "/messages", {"DeviceCode": code, "MessageId": f"m{i}", "TimeToLive": 3600,
                                                    "Data": {"n": str(i)}}, cred)
        assert reply.status_code == 200, reply.text
    tail = [m for m in json_lines(ok("messages", "tail", *data, "--json", "--limit", "100000"))
            if m["identityPoolId"] == pool]
    assert [m["messageId"] for m in tail] == ["m0", "m1", "m2"]
    assert all(m["deviceCode"] == code and m["identityId"] == alice for m in tail)
    # A consumer that acknowledged the first: tail after its cursor shows the other two.
    consumer = "cli-" + new_id().split(":")[1][:8]
    assert call(server, "POST", "/messages/ack", {"Consumer": consumer, "Sequence": tail[0]["sequence"]}).status_code == 200
    after = [m["messageId"] for m in json_lines(ok("messages", "tail", *data, "--consumer", consumer, "--json", "--limit", "100000"))
             if m["identityPoolId"] == pool]
    assert after == ["m1", "m2"]
    consumers = {c["name"]: c for c in json_lines(ok("messages", "consumers", *data, "--json"))}
    assert consumers[consumer]["cursor"] == tail[0]["sequence"] and consumers[consumer]["acknowledged"] >= 1

    # Unlink: a logout recorded in the log, by the command line.
    assert "logged out of " + alice in ok("devices", "unlink", *data, "--identity-pool-id", pool, code)
    assert "was not logged in" in ok("devices", "unlink", *data, "--identity-pool-id", pool, code)
    listed = json_lines(ok("devices", "list", *data, "--identity-pool-id", pool, "--json"))
    assert listed[0]["loggedIn"] is False and listed[0]["hasToken"] is True
    assert json_lines(ok("devices", "list", *data, "--identity-pool-id", pool, "--identity-id", alice, "--json")) == []
    system = json_lines(ok("log", *data, "--system", "--json", "--limit", "1000000"))
    last = [e for e in system if e["stream"]["pool"] == pool and e["stream"]["dataset"] == "devices"][-1]
    assert last["author"] == "admin:cli"

    purged = json.loads(ok("messages", "purge", *data, "--json"))
    assert purged["messageKeys"] == 0 and purged["remaining"]["message-ids"]["entries"] >= 3
    status, _, err = syncledger("messages", "purge", *data, "--retention-days", "7")
    assert status == 64 and err.startswith("syncledger: --retention-days must be at least 28, not 7"), err
    one_line_error(syncledger("devices", "show", *data, "--identity-pool-id", pool, "no-such-device"))
    one_line_error(syncledger("devices", "list", *data, "--identity-pool-id", "not a pool"))
