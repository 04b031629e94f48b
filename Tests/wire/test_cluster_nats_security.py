"""Cluster mode over a secured NATS (nats_env.NatsSecurity: TLS with client certificates,
accounts, per-user permissions): nodes join with their user, `cluster status` signs in with the
admin nkey, and a node with a wrong password or an untrusted CA is refused, saying why.
"""

import json
import os
import stat
import subprocess
import time

import pytest

from conftest import ADMIN_KEY, ADMIN_SECRET, BINARY
from cluster_env import running_bed
import nats_pki


@pytest.fixture(scope="module")
def bed(tmp_path_factory):
    with running_bed(tmp_path_factory, "cluster-security", shards=4) as bed:
        yield bed


def run(*args, env=None, timeout=60):
    """`syncledger *args` with the admin credential and `env` over the inherited environment."""
    full = dict(os.environ)
    full.update(SYNCLEDGER_ACCESS_KEY_ID=ADMIN_KEY, SYNCLEDGER_SECRET_ACCESS_KEY=ADMIN_SECRET)
    full.update(env or {})
    out = subprocess.run([BINARY, *args], capture_output=True, timeout=timeout, env=full, stdin=subprocess.DEVNULL)
    return out.returncode, out.stdout.decode(errors="replace"), out.stderr.decode(errors="replace")


def node_flags(security, password_file=None, ca=None, cert=True):
    flags = ["--nats-user", security.node_user, "--nats-password-file", password_file or security.node_password_file,
             "--nats-ca", ca or security.ca_file]
    if cert:
        flags += ["--nats-cert", security.client_cert, "--nats-key", security.client_key]
    return flags


def serve(bed, tmp_path, name, flags, env=None):
    return run("serve", "--data", str(tmp_path / name), "--port", "0", "--cluster", bed.nats.urls, "--shards", "4",
               "--node-id", name, *flags, env=env)


def test_nodes_and_admin_commands_sign_in_and_no_secret_is_shown(bed):
    security = bed.nats.security
    # The nodes joined (the fixture waited for every shard to be owned) with the flags, and the
    # admin command signs in as the nkey user from the environment.
    deadline = time.monotonic() + 30
    while True:  # every node announces itself at its first lease round
        code, out, err = run("cluster", "status", "--cluster", bed.nats.urls, "--json")
        assert code == 0, err
        nodes = json.loads(out)["nodes"]
        if len(nodes) == 3 or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert sorted(nodes) == ["node0", "node1", "node2"]
    for i, node in enumerate(bed.nodes):
        cmdline = open(f"/proc/{node.process.pid}/cmdline", "rb").read().decode(errors="replace")
        assert security.node_password not in cmdline and "--nats-password-file" in cmdline
        log = open(node.log_path, errors="replace").read()
        assert security.node_password not in log
    # Every connection to the nats-servers is TLS with a verified client certificate.
    clients = [c for n in bed.nats.nodes for c in n.monitor("/connz?auth=true")["connections"]
               if c.get("name", "").startswith("syncledger-node")]
    assert len(clients) == 3 and all(c.get("tls_version") for c in clients), clients
    assert {c.get("authorized_user") for c in clients} <= {security.node_user, security.admin_nkey}


def test_a_node_with_a_wrong_password_is_refused_with_the_reason(bed, tmp_path):
    wrong = nats_pki.write_secret(str(tmp_path / "wrong.password"), "not-the-password")
    code, out, err = serve(bed, tmp_path, "intruder", node_flags(bed.nats.security, password_file=wrong))
    assert code != 0, (out, err)
    assert "authorization violation" in err and "--nats-password-file" in err, err
    assert "not-the-password" not in err + out


def test_a_node_trusting_another_ca_refuses_the_servers(bed, tmp_path):
    code, out, err = serve(bed, tmp_path, "misled", node_flags(bed.nats.security, ca=bed.nats.security.rogue_ca.cert_path))
    assert code != 0, (out, err)
    assert "certificate verification failed" in err and "--nats-ca" in err, err


def test_a_node_without_a_client_certificate_is_refused(bed, tmp_path):
    # (The harness's environment names the client certificate: emptied here.)
    code, out, err = serve(bed, tmp_path, "nocert", node_flags(bed.nats.security, cert=False),
                           env={"SYNCLEDGER_NATS_CERT": "", "SYNCLEDGER_NATS_KEY": ""})
    assert code != 0, (out, err)
    assert "cannot join the cluster" in err and "TLS" in err, err


def test_secret_files_and_flags_are_checked_before_connecting(bed, tmp_path):
    security = bed.nats.security
    loose = tmp_path / "loose.password"
    loose.write_text(security.node_password)
    os.chmod(loose, stat.S_IRUSR | stat.S_IWUSR | stat.S_IRGRP | stat.S_IROTH)
    code, out, err = serve(bed, tmp_path, "loose", node_flags(security, password_file=str(loose)))
    assert code != 0 and "readable by every user" in err, err
    assert security.node_password not in err + out
    code, out, err = serve(bed, tmp_path, "missing", node_flags(security, password_file=str(tmp_path / "nope")))
    assert code != 0 and "no such file" in err, err
    code, out, err = serve(bed, tmp_path, "two", [*node_flags(security), "--nats-nkey-file", security.admin_seed_file])
    assert code != 0 and "one way to authenticate" in err, err
    code, out, err = run("serve", "--data", str(tmp_path / "plain"), "--port", "0", "--nats-ca", security.ca_file)
    assert code != 0 and "--cluster" in err, err
    bad_seed = nats_pki.write_secret(str(tmp_path / "bad.nk"), "SUNOTASEED")
    code, out, err = run("cluster", "status", "--cluster", bed.nats.urls, "--nats-nkey-file", bad_seed)
    assert code != 0 and "nkey seed" in err and "SUNOTASEED" not in err, err
    not_pem = tmp_path / "ca.txt"
    not_pem.write_text("not a certificate")
    code, out, err = serve(bed, tmp_path, "notpem", node_flags(security, ca=str(not_pem)))
    assert code != 0 and "CA file" in err and str(not_pem) in err, err


def test_the_servers_refuse_bad_passwords_and_what_the_nodes_user_may_not_do(bed):
    from nats_env import read_line
    sock, answer = bed.nats.raw_client(password="wrong")
    assert answer == "-ERR 'Authorization Violation'", answer
    sock.close()
    sock, answer = bed.nats.raw_client()
    assert answer == "PONG", answer
    # The nodes' user may not listen on the shard subjects nor publish outside SyncLedger's.
    sock.sendall(b"SUB syncledger.shard.> 1\r\nPUB elsewhere.x 2\r\nhi\r\nPING\r\n")
    lines = [read_line(sock) for _ in range(3)]
    assert lines == ["-ERR 'Permissions Violation for Subscription to \"syncledger.shard.>\"'",
                     "-ERR 'Permissions Violation for Publish to \"elsewhere.x\"'", "PONG"], lines
    sock.close()


def test_another_accounts_user_sees_nothing_of_the_cluster(bed):
    security = bed.nats.security
    pw = nats_pki.write_secret(os.path.join(os.path.dirname(security.node_password_file), "app.password"), security.app_password)
    # The flags replace the environment's admin nkey.
    code, out, err = run("cluster", "status", "--cluster", bed.nats.urls, "--nats-user", security.app_user,
                         "--nats-password-file", pw, timeout=90)
    assert code != 0, out
    assert '"nodes"' not in out
