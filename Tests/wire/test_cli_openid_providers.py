"""`syncledger identities providers add|list|remove`: OpenID Connect providers configured with
a JWKS file, beside a running server; replace keeps one provider per name; a bad JWKS, an
unreadable file and a plain-http issuer are one-line errors; remove twice is refused.

Needs `OpenIDProviderCommands.self` in the `subcommands:` of `syncledger identities`."""

import base64
import json
import os
import subprocess

import pytest

from conftest import BINARY, start_server


def syncledger(*args):
    out = subprocess.run([BINARY, *map(str, args)], capture_output=True, timeout=60)
    return out.returncode, out.stdout.decode(), out.stderr.decode(errors="replace")


def ok(*args):
    code, out, err = syncledger(*args)
    assert code == 0, (args, code, out, err)
    return out


def refused(*args, says):
    code, out, err = syncledger(*args)
    assert code == 1, (args, code, out, err)
    lines = err.strip("\n").split("\n")
    assert len(lines) == 1 and lines[0].startswith("syncledger: ") and says in lines[0], err
    return lines[0]


def b64(data):
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def jwks_text():
    from cryptography.hazmat.primitives.asymmetric import ec, rsa
    n = rsa.generate_private_key(public_exponent=65537, key_size=2048).public_key().public_numbers()
    p = ec.generate_private_key(ec.SECP256R1()).public_key().public_numbers()
    return json.dumps({"keys": [
        {"kty": "RSA", "kid": "r1", "use": "sig", "n": b64(n.n.to_bytes(256, "big")), "e": b64(n.e.to_bytes(3, "big"))},
        {"kty": "EC", "crv": "P-256", "kid": "e1", "x": b64(p.x.to_bytes(32, "big")), "y": b64(p.y.to_bytes(32, "big"))},
    ]})


@pytest.fixture(scope="module")
def server(tmp_root):
    s = start_server(tmp_root, "cli-openid-providers")
    yield s
    s.stop()


def listed(data):
    return {p["name"]: p for p in map(json.loads, ok("identities", "providers", "list", "--json", "--data", data).splitlines())}


def test_add_replace_list_remove(server, tmp_path):
    data = server.data_dir
    jwks = tmp_path / "jwks.json"
    jwks.write_text(jwks_text())
    assert "no OpenID Connect providers" in ok("identities", "providers", "list", "--data", data)
    out = ok("identities", "providers", "add", "--data", data, "--issuer", "https://login.example.com/realms/x/",
             "--jwks", jwks, "--client-id", "app-1", "--client-id", "app-2")
    assert out.startswith("added OpenID Connect provider login.example.com/realms/x "), out
    first = listed(data)["login.example.com/realms/x"]
    assert first["issuer"] == "https://login.example.com/realms/x/" and first["clientIds"] == ["app-1", "app-2"] and first["keys"] == 2

    # Replacing keeps one provider of that name, with the new client ids and a later time.
    replaced = json.loads(ok("identities", "providers", "add", "--data", data, "--issuer", "https://login.example.com/realms/x/",
                             "--jwks", jwks, "--client-id", "app-3", "--json"))
    assert replaced["clientIds"] == ["app-3"] and replaced["configured"] > first["configured"], (first, replaced)
    ok("identities", "providers", "add", "--data", data, "--issuer", "https://b.example", "--jwks", jwks, "--client-id", "c", "--name", "b")
    providers = listed(data)
    assert sorted(providers) == ["b", "login.example.com/realms/x"] and providers["login.example.com/realms/x"]["clientIds"] == ["app-3"]

    assert ok("identities", "providers", "remove", "--data", data, "b").strip() == "removed OpenID Connect provider b"
    refused("identities", "providers", "remove", "--data", data, "b", says='no OpenID Connect provider named "b" is configured')
    assert sorted(listed(data)) == ["login.example.com/realms/x"]


def test_bad_input_is_refused(server, tmp_path):
    data = server.data_dir
    bad = tmp_path / "bad.json"
    bad.write_text('{"keys": [{"kty": "oct", "k": "AAAA"}]}')
    line = refused("identities", "providers", "add", "--data", data, "--issuer", "https://c.example", "--jwks", bad, "--client-id", "c",
                   says="neither an RSA key nor an EC P-256 key")
    assert str(bad) in line
    notjson = tmp_path / "notjson.json"
    notjson.write_text("<html>")
    refused("identities", "providers", "add", "--data", data, "--issuer", "https://c.example", "--jwks", notjson, "--client-id", "c",
            says="is not a JSON object")
    refused("identities", "providers", "add", "--data", data, "--issuer", "https://c.example", "--jwks", tmp_path / "missing.json",
            "--client-id", "c", says="cannot read the JWKS file")
    good = tmp_path / "good.json"
    good.write_text(jwks_text())
    refused("identities", "providers", "add", "--data", data, "--issuer", "http://c.example", "--jwks", good, "--client-id", "c",
            says="https URL")
    code, _, err = syncledger("identities", "providers", "add", "--data", data, "--issuer", "https://c.example", "--jwks", good)
    assert code == 64 and "--client-id" in err, err
    assert "c.example" not in listed(data)
