"""The cost of a signed request against the server's own floor, measured with wrk on loopback.

Puts 10 records in one dataset through boto3 (the admin credential), presigns a ListRecords of
them with botocore (SigV4 in the query, valid 15 minutes), then runs wrk against `GET /health`
and against that URL, alternating, `--rounds` times each: the same server, the same run. Prints
the medians and their ratio; `--json-out FILE` writes them.

Used by tools/signed-bench, which builds and starts the release server.
"""

import argparse
import json
import re
import statistics
import subprocess
import sys

import boto3
from botocore.config import Config

REGION = "us-east-1"
POOL = "us-east-1:5196e0b0-0000-4000-8000-00000000be0c"
IDENTITY = "us-east-1:00000000-0000-4000-8000-000000000001"
DATASET = "bench"


def prepare(endpoint, key, secret, records):
    client = boto3.session.Session().client(
        "cognito-sync", endpoint_url=endpoint, region_name=REGION,
        aws_access_key_id=key, aws_secret_access_key=secret, config=Config(retries={"max_attempts": 0}))
    ids = dict(IdentityPoolId=POOL, IdentityId=IDENTITY, DatasetName=DATASET)
    token = client.list_records(**ids)["SyncSessionToken"]
    patches = [dict(Op="replace", Key=f"key-{i:02d}", Value=f"value {i} " + "x" * 100, SyncCount=0) for i in range(records)]
    client.update_records(**ids, SyncSessionToken=token, RecordPatches=patches)
    url = client.generate_presigned_url("list_records", Params=ids, ExpiresIn=900)
    # Check it answers, and with the records, before measuring it.
    import requests
    answer = requests.get(url, timeout=10)
    assert answer.status_code == 200, (answer.status_code, answer.text[:300])
    assert len(answer.json()["Records"]) == records, answer.text[:300]
    return url


def wrk(url, seconds, connections):
    out = subprocess.run(["wrk", "-t1", f"-c{connections}", f"-d{seconds}s", url], capture_output=True, text=True, check=True).stdout
    rate = float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))
    errors = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    if errors:
        sys.exit(f"signed-bench: {errors.group(1)} answers were not 2xx for {url[:80]}…:\n{out}")
    return rate


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--endpoint", required=True)
    p.add_argument("--key", required=True)
    p.add_argument("--secret", required=True)
    p.add_argument("--records", type=int, default=10)
    p.add_argument("--seconds", type=int, default=5)
    p.add_argument("--connections", type=int, default=64)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--json-out")
    a = p.parse_args()
    url = prepare(a.endpoint, a.key, a.secret, a.records)
    health, signed = [], []
    for i in range(a.rounds):
        print(f"signed-bench: round {i + 1} of {a.rounds}", file=sys.stderr, flush=True)
        health.append(wrk(a.endpoint + "/health", a.seconds, a.connections))
        signed.append(wrk(url, a.seconds, a.connections))
    h, s = statistics.median(health), statistics.median(signed)
    result = {
        "health_per_second": round(h), "signed_list_records_per_second": round(s), "ratio": round(s / h, 3),
        "microseconds_over_health": round(1e6 / s - 1e6 / h, 1),
        "rounds": {"health": health, "signed": signed}, "records": a.records,
        "wrk": f"-t1 -c{a.connections} -d{a.seconds}s",
    }
    print(f"{'request':<42} {'per second (median)':>20} {'vs /health':>11}")
    print(f"{'GET /health':<42} {h:>20,.0f} {'1.00x':>11}")
    print(f"{'presigned ListRecords of ' + str(a.records) + ' records':<42} {s:>20,.0f} {s / h:>10.2f}x")
    print(f"a signed request costs {result['microseconds_over_health']} µs more than /health "
          f"(wrk {result['wrk']}, {a.rounds} rounds each, alternating); target >= 0.5x: {'MET' if s / h >= 0.5 else 'MISSED'}")
    if a.json_out:
        with open(a.json_out, "w") as f:
            json.dump(result, f, indent=2)


if __name__ == "__main__":
    main()
