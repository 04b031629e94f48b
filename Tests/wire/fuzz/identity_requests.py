"""Cognito Identity requests for the HTTP fuzzer: the awsJson1_1 API at `POST /` with
`X-Amz-Target: AWSCognitoIdentityService.<Operation>`, as botocore's `cognito-identity` model
serializes it. GetId, GetCredentialsForIdentity, GetOpenIdToken and UnlinkIdentity are sent
unsigned (as AWS's clients do), the others signed with the admin credential for the service
`cognito-identity`. The state they are built on (an identity pool, unauthenticated and
developer identities and an OpenID token) is made by `IdentityState.setup`."""

import base64
import json

import botocore.serialize
import botocore.session

from .requests import Request

_MODEL = botocore.session.get_session().get_service_model("cognito-identity")
_SERIALIZER = botocore.serialize.create_serializer("json", include_validation=False)
IDENTITY_SERVICE = "cognito-identity"
TARGET_PREFIX = "AWSCognitoIdentityService."
DEVELOPER_PROVIDER = "login.fuzz.example"
COGNITO_PROVIDER = "cognito-identity.amazonaws.com"

UNSIGNED = ["GetId", "GetCredentialsForIdentity", "GetOpenIdToken", "UnlinkIdentity"]
SIGNED = ["CreateIdentityPool", "DescribeIdentityPool", "UpdateIdentityPool", "ListIdentityPools", "DeleteIdentityPool",
          "DescribeIdentity", "ListIdentities", "DeleteIdentities", "GetOpenIdTokenForDeveloperIdentity",
          "LookupDeveloperIdentity", "MergeDeveloperIdentities", "UnlinkDeveloperIdentity", "GetIdentityPoolRoles"]
# The fuzzer's names of these operations (apart from Cognito Sync's).
IDENTITY_OPERATIONS = ["Identity." + name for name in UNSIGNED + SIGNED]
# Valid and unmutated, each must succeed (GetIdentityPoolRoles is refused by design: no roles).
IDENTITY_BASELINE = [op for op in IDENTITY_OPERATIONS if op != "Identity.GetIdentityPoolRoles"]


def identity_request(name, params):
    """A valid request of Cognito Identity's `name` as botocore serializes it, signed for
    `cognito-identity` with the admin credential unless the operation needs no signature."""
    r = _SERIALIZER.serialize_to_request(params, _MODEL.operation_model(name))
    body = r["body"] if isinstance(r["body"], bytes) else (r["body"] or "").encode()
    request = Request("Identity." + name, "POST", [], [], list(r["headers"].items()), body,
                      cred="admin", service=IDENTITY_SERVICE)
    request.sign = name not in UNSIGNED
    return request


class IdentityState:
    """An identity pool that allows unauthenticated identities and has a developer provider
    (never updated, so that GetId keeps working), a second one that UpdateIdentityPool
    changes, unauthenticated identities, developer users and an OpenID token of one."""

    def __init__(self, ctx, rng):
        self.ctx = ctx
        self.pool = None
        self.updated_pool = None
        self.identities = []          # unauthenticated identities of `pool`
        self.users = {}               # developer user -> identity
        self.token = None             # an OpenID token of users["user-0"], valid a day
        self.pool_ids = []            # NextTokens of ListIdentityPools (pool ids)
        self.dead = []                # (user, identity, token) of developer identities deleted since
        self.tag = f"{rng.getrandbits(32):08x}"

    def call(self, name, params):
        r = self.ctx.call(identity_request(name, params))
        if r is None or r.status != 200:
            return None
        return json.loads(r.body)

    def setup(self):
        for attr in ("pool", "updated_pool"):
            made = self.call("CreateIdentityPool", dict(IdentityPoolName=f"fuzz {attr} {self.tag}", AllowUnauthenticatedIdentities=True,
                                                          DeveloperProviderName=DEVELOPER_PROVIDER))
            assert made, f"setup CreateIdentityPool ({attr}) failed"
            setattr(self, attr, made["IdentityPoolId"])
        for _ in range(3):
            got = self.call("GetId", dict(IdentityPoolId=self.pool))
            assert got, "setup GetId failed"
            self.identities.append(got["IdentityId"])
        for i in range(3):
            got = self.developer_token(f"user-{i}", duration=86400)
            assert got, "setup GetOpenIdTokenForDeveloperIdentity failed"
            if i == 0:
                self.token = got[1]
        listed = self.call("ListIdentityPools", dict(MaxResults=1))
        if listed and listed.get("NextToken"):
            self.pool_ids.append(listed["NextToken"])

    def developer_token(self, user, duration=600):
        """(identity, OpenID token) of developer user `user` of `pool` (made when new)."""
        got = self.call("GetOpenIdTokenForDeveloperIdentity", dict(IdentityPoolId=self.pool, Logins={DEVELOPER_PROVIDER: user},
                                                                   TokenDuration=duration))
        if not got:
            return None
        self.users[user] = got["IdentityId"]
        return got["IdentityId"], got["Token"]


def valid_identity_request(ctx, rng, op):
    """A valid request of Cognito Identity operation `op` ("Identity.<Name>")."""
    from .valid_requests import edge_or   # (valid_requests imports this module)
    s = ctx.identity_state
    name = op.split(".", 1)[1]
    variety = ctx.variety
    fresh = f"{rng.getrandbits(48):012x}"
    p = {}
    if name == "CreateIdentityPool":
        p = dict(IdentityPoolName=f"fuzz {fresh}", AllowUnauthenticatedIdentities=rng.random() < 0.7)
        if rng.random() < 0.5:
            p["DeveloperProviderName"] = f"login.{fresh}.example"
        if rng.random() < 0.3:
            p["SupportedLoginProviders"] = {"accounts.google.com": f"app-{fresh}"}
        if rng.random() < 0.2:
            p["OpenIdConnectProviderARNs"] = []
    elif name == "DescribeIdentityPool":
        p = dict(IdentityPoolId=rng.choice([s.pool, s.updated_pool]))
    elif name == "UpdateIdentityPool":
        p = dict(IdentityPoolId=s.updated_pool, IdentityPoolName=f"updated {fresh}", AllowUnauthenticatedIdentities=rng.random() < 0.5,
                 DeveloperProviderName=DEVELOPER_PROVIDER)
        if rng.random() < 0.4:
            p["SupportedLoginProviders"] = {"accounts.google.com": "app-1", "graph.facebook.com": "123"}
    elif name == "ListIdentityPools":
        p = dict(MaxResults=edge_or(rng, rng.randint(1, 60), [1, 60], ctx))
        if s.pool_ids and rng.random() < 0.4:
            p["NextToken"] = rng.choice(s.pool_ids)
    elif name == "DeleteIdentityPool":
        made = s.call("CreateIdentityPool", dict(IdentityPoolName=f"doomed {fresh}", AllowUnauthenticatedIdentities=False))
        p = dict(IdentityPoolId=made["IdentityPoolId"] if made else s.updated_pool)
    elif name == "GetId":
        p = dict(IdentityPoolId=s.pool)
        if rng.random() < 0.3 and variety:   # this server's token: of a live identity, or of one deleted since
            p["Logins"] = {COGNITO_PROVIDER: rng.choice(s.dead)[2] if s.dead and rng.random() < 0.3 else s.token}
        if rng.random() < 0.2:
            p["AccountId"] = "123456789012"
    elif name in ("GetCredentialsForIdentity", "GetOpenIdToken") and variety and s.dead and rng.random() < 0.15:
        user, identity, token = rng.choice(s.dead)   # an identity deleted since its token was made
        p = dict(IdentityId=identity, Logins={COGNITO_PROVIDER: token})
    elif name in ("GetCredentialsForIdentity", "GetOpenIdToken"):
        if rng.random() < 0.3 and variety:
            p = dict(IdentityId=s.users["user-0"], Logins={COGNITO_PROVIDER: s.token})
        else:
            p = dict(IdentityId=rng.choice(s.identities))
    elif name == "UnlinkIdentity":
        made = s.developer_token(f"unlink-{fresh}")
        identity, token = made if made else (s.users["user-0"], s.token)
        p = dict(IdentityId=identity, Logins={COGNITO_PROVIDER: token}, LoginsToRemove=[DEVELOPER_PROVIDER])
    elif name == "DescribeIdentity":
        p = dict(IdentityId=rng.choice(s.identities + list(s.users.values())[:3]))
    elif name == "ListIdentities":
        p = dict(IdentityPoolId=s.pool, MaxResults=edge_or(rng, rng.randint(1, 60), [1, 60], ctx))
        if rng.random() < 0.3:
            p["HideDisabled"] = rng.random() < 0.5
    elif name == "DeleteIdentities":
        if variety and rng.random() < 0.4:   # a developer identity: its user and token live on in later requests
            user = f"deleted-{fresh}"
            made = s.developer_token(user)
            ids = [made[0]] if made else []
            if made:
                s.dead.append((user, made[0], made[1]))
        else:
            got = s.call("GetId", dict(IdentityPoolId=s.pool))
            ids = [got["IdentityId"]] if got else []
        if not ids or (variety and rng.random() < 0.2):
            ids.append(f"us-east-1:{fresh[:8]}-0000-4000-8000-{fresh}")   # unknown: listed as unprocessed
        p = dict(IdentityIdsToDelete=ids)
    elif name == "GetOpenIdTokenForDeveloperIdentity":
        user = f"user-{rng.randint(0, 5)}" if rng.random() < 0.8 else f"new-{fresh}"
        if variety and s.dead and rng.random() < 0.15:
            user = rng.choice(s.dead)[0]   # the user of a deleted identity
        p = dict(IdentityPoolId=s.pool, Logins={DEVELOPER_PROVIDER: user},
                 TokenDuration=edge_or(rng, rng.randint(1, 86400), [1, 86400], ctx))
        if user in s.users and rng.random() < 0.3:
            p["IdentityId"] = s.users[user]
    elif name == "LookupDeveloperIdentity":
        p = dict(IdentityPoolId=s.pool)
        if rng.random() < 0.6:
            p["DeveloperUserIdentifier"] = rng.choice(["user-0", "user-1", "user-2"])
        else:
            p["IdentityId"] = s.users[rng.choice(["user-0", "user-1", "user-2"])]
        if variety and s.dead and rng.random() < 0.15:
            dead = rng.choice(s.dead)
            p.pop("IdentityId", None)
            p["DeveloperUserIdentifier" if rng.random() < 0.5 else "IdentityId"] = dead[0] if rng.random() < 0.5 else dead[1]
        if rng.random() < 0.3:
            p["MaxResults"] = rng.randint(1, 60)
    elif name == "MergeDeveloperIdentities":
        source, destination = f"merge-{fresh}-a", f"merge-{fresh}-b"
        s.developer_token(source)
        s.developer_token(destination)
        if variety and rng.random() < 0.3:   # merged already, into itself, or a deleted identity's user
            source, destination = rng.choice([(destination, destination), ("user-1", "user-2"), ("user-2", "user-1")]
                                             + ([(rng.choice(s.dead)[0], destination), (source, rng.choice(s.dead)[0])] if s.dead else []))
        p = dict(IdentityPoolId=s.pool, DeveloperProviderName=DEVELOPER_PROVIDER, SourceUserIdentifier=source,
                 DestinationUserIdentifier=destination)
    elif name == "UnlinkDeveloperIdentity":
        user = f"unlinked-{fresh}"
        made = s.developer_token(user)
        p = dict(IdentityId=made[0] if made else s.users["user-1"], IdentityPoolId=s.pool, DeveloperProviderName=DEVELOPER_PROVIDER,
                 DeveloperUserIdentifier=user)
    elif name == "GetIdentityPoolRoles":
        p = dict(IdentityPoolId=s.pool)
    return identity_request(name, p)


def _b64url(data):
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _unb64url(text):
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


JWT_VALUES = [2**63, 2**63 - 1, -(2**63), 2**64, 10**30, -1, 0, 1e308, "1e400", "NaN", None, True, [], {}, "", "x" * 5000,
              "\u202e", 1.5, 9007199254740993]


def mutant_jwt(rng, token):
    """A JWT with its header or claims changed (alg none, exp, iat, nbf, aud, sub at limits and
    of other types) and its signature kept, dropped or swapped; the parts base64url again."""
    parts = token.split(".")
    try:
        header, claims = json.loads(_unb64url(parts[0])), json.loads(_unb64url(parts[1]))
    except (ValueError, IndexError):
        return token + ".x"
    choice = rng.randrange(5)
    if choice == 0:
        header["alg"] = rng.choice(["none", "HS256", "RS256", "ES512", "", None, 7])
    elif choice == 1 and isinstance(claims, dict):
        claims[rng.choice(["exp", "iat", "nbf", "aud", "sub", "iss", "amr", "https://cognito-identity.amazonaws.com/aud"])] = \
            rng.choice(JWT_VALUES)
    elif choice == 2 and isinstance(claims, dict) and claims:
        del claims[rng.choice(sorted(claims))]
    elif choice == 3:
        header["kid"] = rng.choice(["", "../../etc/passwd", "x" * 4096, 1, None])
    else:
        claims = rng.choice([[], "x", None, 1, {"exp": 2**63}])
    signature = rng.choice([parts[2] if len(parts) > 2 else "", "", "AAAA", parts[2][::-1] if len(parts) > 2 else "x"])
    return ".".join([_b64url(json.dumps(header).encode()), _b64url(json.dumps(claims).encode()), signature])


def mutate_target(request, rng):
    """Another X-Amz-Target: an unknown, misspelt, overlong or other service's operation, one
    whose body is another operation's, or none."""
    # Not the operations that delete or change what the valid requests are built on (a GetId body
    # sent as DeleteIdentityPool would delete the fuzzed pool, and every later request fails early).
    ops = [op for op in UNSIGNED + SIGNED if op not in ("DeleteIdentityPool", "DeleteIdentities", "UpdateIdentityPool",
                                                          "UnlinkIdentity", "UnlinkDeveloperIdentity", "MergeDeveloperIdentities")]
    choice = rng.randrange(7)
    if choice == 0:
        value = TARGET_PREFIX + rng.choice(ops)   # the body is another operation's
    elif choice == 1:
        value = TARGET_PREFIX + rng.choice(["", "getid", "GETID", "Get Id", "GetId ", "x" * 300, "GetId\u00e9", "../GetId",
                                            "DeleteIdentityPool\u0000", "TagResource", "ListTagsForResource"])
    elif choice == 2:
        value = rng.choice(["AWSCognitoSyncService.ListRecords", "AWSCognitoIdentityService", "awscognitoidentityservice.GetId",
                            "AWSCognitoIdentityProviderService.InitiateAuth", "", "."])
    elif choice == 3:
        value = TARGET_PREFIX + rng.choice(ops) + "." + rng.choice(ops)
    elif choice == 4:
        request.headers = [(k, v) for k, v in request.headers if k.lower() != "x-amz-target"]
        request.notes.append("without X-Amz-Target")
        return
    elif choice == 5:   # twice: the same or another operation
        request.headers.append(("X-Amz-Target", TARGET_PREFIX + rng.choice(ops)))
        request.notes.append("X-Amz-Target twice")
        return
    else:   # invalid UTF-8 (raw bytes: unsigned, as botocore cannot sign them)
        request.headers = [(k, v) for k, v in request.headers if k.lower() != "x-amz-target"]
        request.unsigned_headers.append(("X-Amz-Target", TARGET_PREFIX + rng.choice(["GetId", ""]) + "\udcff\udcc0"))
        request.notes.append("X-Amz-Target with invalid UTF-8")
        return
    request.headers = [(k, v) for k, v in request.headers if k.lower() != "x-amz-target"] + [("X-Amz-Target", value)]
    request.notes.append(f"X-Amz-Target {value[:60]!r}")
