"""The rules of FCM HTTP v1's send request that the stand-in checks (fcm.py serves them).

Each check mirrors what Google documents for `projects.messages.send`; a request that breaks
one is refused with the status, `google.rpc` status and message FCM gives."""

import json
import re


JWT_BEARER = "urn:ietf:params:oauth:grant-type:jwt-bearer"
FCM_SCOPES = ("https://www.googleapis.com/auth/firebase.messaging",
              "https://www.googleapis.com/auth/cloud-platform")
MAX_ASSERTION_LIFETIME = 3600
MAX_DATA_BYTES = 4096
MAX_TOPIC_DATA_BYTES = 2048
MAX_TTL_SECONDS = 4 * 7 * 24 * 3600

FCM_ERROR_TYPE = "type.googleapis.com/google.firebase.fcm.v1.FcmError"
BAD_REQUEST_TYPE = "type.googleapis.com/google.rpc.BadRequest"

# errorCode → (HTTP status, google.rpc status, default message), per the FCM v1 ErrorCode table.
FCM_ERRORS = {
    "INVALID_ARGUMENT": (400, "INVALID_ARGUMENT", "The registration token is not a valid FCM registration token"),
    "THIRD_PARTY_AUTH_ERROR": (401, "UNAUTHENTICATED", "Auth error from APNS or Web Push Service"),
    "SENDER_ID_MISMATCH": (403, "PERMISSION_DENIED", "SenderId mismatch"),
    "UNREGISTERED": (404, "NOT_FOUND", "Requested entity was not found."),
    "QUOTA_EXCEEDED": (429, "RESOURCE_EXHAUSTED", "Quota exceeded for quota metric 'Send requests'."),
    "INTERNAL": (500, "INTERNAL", "Internal error encountered."),
    "UNAVAILABLE": (503, "UNAVAILABLE", "The service is currently unavailable."),
    "APNS_AUTH_ERROR": (401, "UNAUTHENTICATED", "Auth error from APNS or Web Push Service"),
}

_UNAUTHENTICATED = ("Request had invalid authentication credentials. Expected OAuth 2 access token, login "
                    "cookie or other valid authentication credential. See "
                    "https://developers.google.com/identity/sign-in/web/devconsole-project.")
_MISSING_CREDENTIAL = ("Request is missing required authentication credential. Expected OAuth 2 access token, "
                       "login cookie or other valid authentication credential. See "
                       "https://developers.google.com/identity/sign-in/web/devconsole-project.")
_BAD_TIMEFRAME = ("Invalid JWT: Token must be a short-lived token (60 minutes) and in a reasonable timeframe. "
                  "Check your iat and exp values in the JWT claim.")

_SEND_PATH = re.compile(r"^/v1/projects/([^/]+)/messages:send$")
_DURATION = re.compile(r"^([0-9]+)(\.[0-9]{1,9})?s$")
_TOPIC = re.compile(r"^(/topics/)?[a-zA-Z0-9\-_.~%]+$")

_MESSAGE_FIELDS = {"name", "data", "notification", "android", "webpush", "apns", "fcm_options", "fcmOptions",
                   "token", "topic", "condition"}
_NOTIFICATION_FIELDS = {"title", "body", "image"}
_ANDROID_FIELDS = {"collapse_key", "collapseKey", "priority", "ttl", "restricted_package_name",
                   "restrictedPackageName", "data", "notification", "fcm_options", "fcmOptions",
                   "direct_boot_ok", "directBootOk", "bandwidth_constrained_ok", "bandwidthConstrainedOk",
                   "restricted_satellite_ok", "restrictedSatelliteOk"}
_APNS_FIELDS = {"headers", "payload", "fcm_options", "fcmOptions", "live_activity_token", "liveActivityToken"}


class _Refusal(Exception):
    def __init__(self, status, rpc_status, message, details=(), detail=None, reason=None, headers=(), cause=None):
        super().__init__(message)
        self.cause = cause
        self.status, self.rpc_status, self.message = status, rpc_status, message
        self.details, self.detail, self.headers = list(details), detail or message, list(headers)
        self.reason = reason or rpc_status


def _invalid(message, field_path=None, detail=None):
    """400 INVALID_ARGUMENT: a JSON/type error (BadRequest field violation) when `field_path` is
    given, else an FCM INVALID_ARGUMENT."""
    if field_path is not None:
        details = [{"@type": BAD_REQUEST_TYPE, "fieldViolations": [{"field": field_path, "description": message}]}]
    else:
        details = [{"@type": FCM_ERROR_TYPE, "errorCode": "INVALID_ARGUMENT"}]
    return _Refusal(400, "INVALID_ARGUMENT", message, details, detail=detail,
                    reason="INVALID_ARGUMENT")


def _json_repr(value):
    return json.dumps(value)


def _unknown_fields(obj, allowed, where):
    for name in obj:
        if name not in allowed:
            at = f" at '{where}'" if where else ""
            raise _invalid(f'Invalid JSON payload received. Unknown name "{name}"{at}: Cannot find field.',
                           where or name)


def _string_map(value, where):
    """A proto map<string,string> in JSON: an object whose values are all strings."""
    if not isinstance(value, dict):
        raise _invalid(f"Invalid value at '{where}' (type.googleapis.com/google.protobuf.Map), {_json_repr(value)}",
                       where)
    for index, (key, item) in enumerate(value.items()):
        if not isinstance(item, str):
            raise _invalid(f"Invalid value at '{where}[{index}].value' (TYPE_STRING), {_json_repr(item)}",
                           f"{where}[{index}].value")
    return value


class FcmMessageRules:
    """The checks of a send request's body; FcmStandIn mixes them in."""

    def _validate(self, request, body):
        content_type = (request.header("content-type") or "").split(";")[0].strip().lower()
        if content_type != "application/json":
            raise _invalid("Invalid JSON payload received. Content-Type must be application/json.",
                           detail=f"Content-Type {content_type!r}")
        if body is None:
            raise _invalid("Invalid JSON payload received. Unexpected token.", "",
                           detail="the body is empty or not JSON")
        if not isinstance(body, dict):
            raise _invalid(f"Invalid JSON payload received. Expected an object, got {_json_repr(body)[:40]}", "")
        _unknown_fields(body, {"message", "validate_only", "validateOnly"}, "")
        for name in ("validate_only", "validateOnly"):
            if name in body and not isinstance(body[name], bool):
                raise _invalid(f"Invalid value at '{name}' (TYPE_BOOL), {_json_repr(body[name])}", name)
        message = body.get("message")
        if message is None:
            raise _invalid("The message is not set.", detail="no `message`")
        if not isinstance(message, dict):
            raise _invalid(f"Invalid value at 'message' (type.googleapis.com/google.firebase.fcm.v1.Message), "
                           f"{_json_repr(message)[:40]}", "message")
        _unknown_fields(message, _MESSAGE_FIELDS, "message")

        targets = [name for name in ("token", "topic", "condition") if message.get(name) is not None]
        if not targets:
            raise _invalid("Recipient of the message is not set.", detail="none of token/topic/condition")
        if len(targets) > 1:
            raise _invalid(f"Invalid value at 'message' (oneof), oneof field 'target' is already set. "
                           f"Cannot set '{targets[1]}'", "message", detail=f"targets {targets}")
        target = targets[0]
        value = message[target]
        if not isinstance(value, str) or not value:
            raise _invalid(f"Invalid value at 'message.{target}' (TYPE_STRING), {_json_repr(value)}", f"message.{target}")
        if target == "topic" and not _TOPIC.match(value):
            raise _invalid("Invalid topic name", detail=f"topic {value!r}")

        data = message.get("data")
        if data is not None:
            _string_map(data, "message.data")
            self._check_data_keys(data, "message.data")
            size = sum(len(k.encode()) + len(v.encode()) for k, v in data.items())
            limit = MAX_TOPIC_DATA_BYTES if target == "topic" else MAX_DATA_BYTES
            if size > limit:
                raise _invalid("Message is too big", detail=f"data is {size} bytes, limit {limit}")

        notification = message.get("notification")
        if notification is not None:
            self._check_object(notification, "message.notification", _NOTIFICATION_FIELDS)
            for key, item in notification.items():
                if not isinstance(item, str):
                    raise _invalid(f"Invalid value at 'message.notification.{key}' (TYPE_STRING), {_json_repr(item)}",
                                   f"message.notification.{key}")

        android = message.get("android")
        if android is not None:
            self._check_android(android)

        apns = message.get("apns")
        if apns is not None:
            self._check_apns(apns)

        for name in ("webpush", "fcm_options", "fcmOptions"):
            if message.get(name) is not None and not isinstance(message[name], dict):
                raise _invalid(f"Invalid value at 'message.{name}', {_json_repr(message[name])}", f"message.{name}")

    @staticmethod
    def _check_object(value, where, fields):
        if not isinstance(value, dict):
            raise _invalid(f"Invalid value at '{where}', {_json_repr(value)[:40]}", where)
        _unknown_fields(value, fields, where)

    @staticmethod
    def _check_data_keys(data, where):
        for key in data:
            lowered = key.lower()
            if lowered in ("from", "message_type") or lowered.startswith("google") or lowered.startswith("gcm"):
                raise _invalid(f"Invalid data payload key: {key}", detail=f"{where} key {key!r} is reserved")

    def _check_android(self, android):
        self._check_object(android, "message.android", _ANDROID_FIELDS)
        priority = android.get("priority")
        if priority is not None and priority not in ("NORMAL", "HIGH"):
            raise _invalid("Invalid value at 'message.android.priority' "
                           f"(type.googleapis.com/google.firebase.fcm.v1.AndroidMessagePriority), {_json_repr(priority)}",
                           "message.android.priority")
        ttl = android.get("ttl")
        if ttl is not None:
            match = _DURATION.match(ttl) if isinstance(ttl, str) else None
            if match is None:
                raise _invalid("Invalid value at 'message.android.ttl' (type.googleapis.com/google.protobuf.Duration), "
                               f"{_json_repr(ttl)}", "message.android.ttl")
            if int(match.group(1)) > MAX_TTL_SECONDS:
                raise _invalid("The value provided for android.ttl is too large", detail=f"android.ttl {ttl!r}")
        for name in ("collapse_key", "collapseKey", "restricted_package_name", "restrictedPackageName"):
            if name in android and not isinstance(android[name], str):
                raise _invalid(f"Invalid value at 'message.android.{name}' (TYPE_STRING), {_json_repr(android[name])}",
                               f"message.android.{name}")
        if android.get("data") is not None:
            _string_map(android["data"], "message.android.data")
            self._check_data_keys(android["data"], "message.android.data")

    @staticmethod
    def _check_apns(apns):
        FcmMessageRules._check_object(apns, "message.apns", _APNS_FIELDS)
        headers = apns.get("headers")
        if headers is not None:
            _string_map(headers, "message.apns.headers")
            priority = headers.get("apns-priority")
            if priority is not None and priority not in ("5", "10"):
                raise _invalid("Invalid APNs priority", detail=f"apns-priority {priority!r}")
            if headers.get("apns-push-type") == "background" and priority in (None, "10"):
                raise _invalid("Invalid APNs priority for a background push",
                               detail="apns-priority 10 (or absent) with apns-push-type background")
        payload = apns.get("payload")
        if payload is not None:
            if not isinstance(payload, dict):
                raise _invalid(f"Invalid value at 'message.apns.payload' (type.googleapis.com/google.protobuf.Struct), "
                               f"{_json_repr(payload)[:40]}", "message.apns.payload")
            if "aps" in payload and not isinstance(payload["aps"], dict):
                raise _invalid("Invalid APNs payload: aps must be an object", detail=f"aps {payload['aps']!r}")
