"""Local stand-ins for the push services SyncLedger delivers to, for the wire tests.

- `apns.ApnsStandIn`: Apple's APNs provider API (HTTP/2 over TLS, ES256 provider tokens).
- `fcm.FcmStandIn`: Google's OAuth 2 token endpoint (RS256 JWT-bearer grant) and the FCM HTTP v1
  send API.
- `webhook.WebhookReceiver`: a customer webhook that checks SyncLedger's `v1=` HMAC signature.
- `certs`: the TLS certificate, the APNs `.p8` key and the FCM service-account file they use.
- `tokens`: JWT encoding/verification (ES256 with raw r||s signatures, RS256).

Each stand-in runs hypercorn in-process on a daemon thread on 127.0.0.1 with a free port, checks
every request as strictly as the real service does (stricter where noted in the docstrings),
records what it accepted and what it refused, and can be scripted to fail.

Nothing here needs the SyncLedger binary.
"""
