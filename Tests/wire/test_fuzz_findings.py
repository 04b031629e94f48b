"""Regression tests for what `tools/fuzz-http` found, each reduced to its cause (the fuzzer
itself is fuzz_http.py; its short run is test_fuzz.py).

- seed 301 (`tools/fuzz-http 300 --seed 301`, after 10,621 requests): `syncledger verify` run
  beside the live server reported "the usage view of pool P differs from its datasets", and
  passed again once the writes stopped. Verify gathered each pool's latest entry time stream by
  stream, in earlier read transactions than the one that compares the pool aggregates, so a
  write to the pool in between looked like a broken view."""

import os
import subprocess
import threading
import uuid

from conftest import BINARY, Server


def test_verify_beside_a_server_that_writes_reports_no_broken_usage_view(tmp_root):
    server = Server(os.path.join(tmp_root, "verify-live"), ["--fast"])
    try:
        admin = server.client()
        # Pool "0…" is scanned first, pool "f…" after it: its many streams keep verify busy
        # between the scan of the written pool and the comparison of the pool aggregates.
        busy, written = "us-east-1:ffffffff-0000-4000-8000-000000000000", "us-east-1:00000000-0000-4000-8000-000000000000"
        identities = [f"us-east-1:{uuid.uuid4()}" for _ in range(8)]   # at most 20 datasets each
        for i in range(160):
            ids = dict(IdentityPoolId=busy, IdentityId=identities[i % 8], DatasetName=f"d{i}")
            token = admin.list_records(**ids)["SyncSessionToken"]
            admin.update_records(**ids, SyncSessionToken=token, RecordPatches=[
                {"Op": "replace", "Key": f"k{j}", "Value": "v" * 50, "SyncCount": 0} for j in range(20)])
        stop = threading.Event()
        wrote = []

        def writer():
            ids = dict(IdentityPoolId=written, IdentityId=identities[0], DatasetName="live")
            while not stop.is_set():
                page = admin.list_records(**ids)
                count = {r["Key"]: r["SyncCount"] for r in page["Records"]}.get("k", 0)
                admin.update_records(**ids, SyncSessionToken=page["SyncSessionToken"], RecordPatches=[
                    {"Op": "replace", "Key": "k", "Value": str(count), "SyncCount": count}])
                wrote.append(count)

        thread = threading.Thread(target=writer, daemon=True)
        thread.start()
        try:
            results = []
            for _ in range(6):
                out = subprocess.run([BINARY, "verify", "--data", server.data_dir], capture_output=True, timeout=120)
                results.append((out.returncode, (out.stdout + out.stderr).decode(errors="replace").strip()))
        finally:
            stop.set()
            thread.join(timeout=30)
        assert len(wrote) > 6, f"the writer wrote {len(wrote)} times: the verifies did not run beside writes"
        failed = [text for code, text in results if code != 0 or "ok:" not in text]
        assert not failed, f"{len(failed)} of {len(results)} verifies beside a writing server failed:\n" + "\n".join(failed)
    finally:
        server.stop()
