"""The identity throttle in a cluster: a GetId that arrives at a node not owning the registry
shard is charged there, once — its forward to the owner carries a MAC from the cluster secret
(`x-syncledger-forward-mac`) and is not charged again — while a client that adds the cluster's
`x-syncledger-forwarded` header itself (here from behind a `--trusted-proxy`), with no MAC or a
forged one, is charged as any client."""

import json

import boto3
import pytest

from conftest import ADMIN_KEY, ADMIN_SECRET, REGION
from cluster_env import running_bed

# 3 calls at once per source, then one per 20 s: nothing refills while the test asserts.
LIMITS = ["--identity-source-rate", "0.05", "--identity-source-burst", "3", "--identity-pool-rate", "0",
          "--trusted-proxy", "127.0.0.1"]


@pytest.fixture(scope="module")
def bed(tmp_path_factory):
    with running_bed(tmp_path_factory, "cluster-identity-throttle", shards=4, extra_args=LIMITS) as bed:
        yield bed


def get_id(node, pool, source, headers=None):
    """An unsigned GetId from client address `source` (named by X-Forwarded-For, which the nodes
    believe from 127.0.0.1); returns (status, JSON body, the node that answered)."""
    sent = {"X-Amz-Target": "AWSCognitoIdentityService.GetId", "Content-Type": "application/x-amz-json-1.1",
            "X-Forwarded-For": source, **(headers or {})}
    r = node.raw("POST", "/", body=json.dumps({"IdentityPoolId": pool}), headers=sent, sign=False)
    return r.status_code, json.loads(r.content or b"{}"), r.headers.get("x-syncledger-node")


def throttled(answer, source):
    status, body, _ = answer
    return status == 429 and body.get("__type") == "TooManyRequestsException" and source in body.get("message", "")


def test_a_forwarded_get_id_is_charged_once_and_a_forged_forward_is_charged(bed):
    owner = bed.wait_owner(0)
    other = next(n for n in bed.nodes if n is not owner)
    admin = boto3.client("cognito-identity", endpoint_url=owner.url, region_name=REGION,
                         aws_access_key_id=ADMIN_KEY, aws_secret_access_key=ADMIN_SECRET)
    pool = admin.create_identity_pool(IdentityPoolName="Throttled", AllowUnauthenticatedIdentities=True)["IdentityPoolId"]

    # Through the other node: charged there (3 pass, the 4th is refused there, not forwarded).
    forwarded = [get_id(other, pool, "203.0.113.10") for _ in range(3)]
    assert [a[0] for a in forwarded] == [200] * 3, forwarded
    assert all(a[2] is not None for a in forwarded), forwarded  # answered by the owner
    assert throttled(get_id(other, pool, "203.0.113.10"), "203.0.113.10")
    # The owner did not charge the forwards: the same client still has its whole burst there.
    direct = [get_id(owner, pool, "203.0.113.10") for _ in range(3)]
    assert [a[0] for a in direct] == [200] * 3, direct
    assert throttled(get_id(owner, pool, "203.0.113.10"), "203.0.113.10")

    # A client behind the trusted proxy that adds the cluster's marker is charged: with no MAC,
    # with a forged one, with a well-formed one of another secret's shape.
    forged = [{"x-syncledger-forwarded": "node1"},
              {"x-syncledger-forwarded": "node1", "x-syncledger-forward-mac": "node1;0;" + "0" * 64},
              {"x-syncledger-forwarded": "node2", "x-syncledger-forward-mac": "node2;9999999999;" + "a" * 64}]
    for i, headers in enumerate(forged):
        source = f"198.51.100.{i + 1}"
        answers = [get_id(owner, pool, source, headers) for _ in range(4)]
        assert [a[0] for a in answers[:3]] == [200] * 3, answers
        assert throttled(answers[3], source), answers[3]
