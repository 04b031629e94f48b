"""SigV4 for the HTTP fuzzer's requests: botocore's SigV4Auth and SigV4QueryAuth, with the
clock set off (expired and future signatures) and signatures garbled on request."""

import datetime
import re

from botocore.auth import SIGV4_TIMESTAMP, SigV4Auth, SigV4QueryAuth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials

from conftest import REGION


def _encode(text):
    return text.encode("utf-8", "surrogateescape")


class _Clocked:
    """botocore's signer with its clock `skew` seconds off (thread-safe, unlike patching
    botocore.auth's clock)."""

    skew = 0

    def add_auth(self, request):
        now = datetime.datetime.now(datetime.timezone.utc).replace(tzinfo=None) + datetime.timedelta(seconds=self.skew)
        request.context["timestamp"] = now.strftime(SIGV4_TIMESTAMP)
        self._modify_request_before_signing(request)
        canonical_request = self.canonical_request(request)
        signature = self.signature(self.string_to_sign(request, canonical_request), request)
        self._inject_signature_to_request(request, signature)


class _ClockedAuth(_Clocked, SigV4Auth):
    pass


class _ClockedQueryAuth(_Clocked, SigV4QueryAuth):
    pass


def _garble(text):
    """`text` with the last character of its signature changed."""
    match = None
    for match in re.finditer(r"(Signature=|X-Amz-Signature=)([0-9a-f]+)", text):
        pass
    if match is None:
        return text
    i = match.end(2) - 1
    return text[:i] + ("0" if text[i] != "0" else "1") + text[i + 1:]


def signed_headers(request, credential, host):
    """(headers, target) to send: the request's own headers, then SigV4's (botocore's
    SigV4Auth; SigV4QueryAuth puts the signature in the target's query instead)."""
    headers = list(request.headers)
    if not request.sign:
        return headers + list(request.unsigned_headers), request.target
    key, secret, token = credential
    url = f"http://{host}{request.target}"
    presign = request.presign and not request.body
    if request.skew:
        auth = (_ClockedQueryAuth(Credentials(key, secret, token), request.service, REGION, expires=request.expires) if presign
                else _ClockedAuth(Credentials(key, secret, token), request.service, REGION))
        auth.skew = request.skew
    else:
        auth = (SigV4QueryAuth(Credentials(key, secret, token), request.service, REGION, expires=request.expires) if presign
                else SigV4Auth(Credentials(key, secret, token), request.service, REGION))
    aws = AWSRequest(method=request.method, url=url, data=request.body, headers=dict(headers))
    try:
        auth.add_auth(aws)
    except (UnicodeError, ValueError):
        # A path botocore cannot quote (raw invalid bytes): sign its Latin-1 reading.
        aws = AWSRequest(method=request.method, url=_encode(url).decode("latin-1"), data=request.body, headers=dict(headers))
        auth.add_auth(aws)
    target = request.target
    if presign:
        target = aws.url.split(host, 1)[1]
    out = [(k, v) for k, v in aws.headers.items()]
    if request.garble:
        if presign:
            target = _garble(target)
        else:
            out = [(k, _garble(v) if k.lower() == "authorization" else v) for k, v in out]
    return out + list(request.unsigned_headers), target
