"""The HTTP fuzzer (fuzz_http.py) against a server of its own: valid signed requests of every
surface (the 17 Cognito Sync operations, every /segments endpoint, Cognito Identity signed and
unsigned, /devices, /messages and its consumers, /events as SSE and WebSocket, /admin/redactions,
the history browser and the streams payload endpoint), mutated and signed again with the admin
and an identity credential. No answer may be a 5xx, no request may hang, the server must be
alive at the end, every surface must have been fuzzed, and `syncledger verify` must pass on its
data.

SYNCLEDGER_FUZZ_REQUESTS sets the number of requests (default 4000, about 45 s on a loaded 2-core VM);
SYNCLEDGER_FUZZ_SEED replays a run (the seed is printed). `bash tools/fuzz-http SECONDS` runs
the same fuzzer longer."""

import os
import random
import time

import conftest
import fuzz_http

DEFAULT_REQUESTS = 4000


def test_fuzz_every_surface(tmp_root, capsys):
    requests = int(os.environ.get("SYNCLEDGER_FUZZ_REQUESTS", DEFAULT_REQUESTS))
    seed = int(os.environ.get("SYNCLEDGER_FUZZ_SEED") or random.SystemRandom().randrange(10**9))
    print(f"fuzz seed {seed} (SYNCLEDGER_FUZZ_SEED={seed} replays it), {requests} requests")
    # Its own server: a crash must not take the shared one (and every other test) down.
    server = conftest.Server(os.path.join(tmp_root, "fuzz"), ["--fast"])
    fuzzer = fuzz_http.Fuzzer(server, seed, max_restarts=4)
    try:
        start = time.monotonic()
        fuzzer.ctx.setup()
        baseline = fuzzer.baseline()
        assert not baseline, (f"seed {seed}: valid, unmutated requests failed, so the fuzzer would fuzz refusals only:\n"
                              + "\n".join(baseline))
        fuzzer.run(requests=requests, workers=2)
        seconds = time.monotonic() - start
        print(fuzzer.report())
        print(f"{fuzzer.summary()} in {seconds:.1f} s")
        assert fuzzer.count >= requests or fuzzer.stopped, fuzzer.summary()
        missed = [name for name in fuzz_http.SURFACES if fuzzer.per_surface[name] == 0]
        assert not missed, f"seed {seed}: no request reached {missed}: {fuzzer.summary()}"
        # Most requests must get past SigV4 and the checks of the path to a handler, or the
        # fuzzer tests nothing but refusals.
        answered = sum(fuzzer.statuses.values())
        assert fuzzer.statuses[200] >= answered * 0.2, (f"seed {seed}: too few requests succeeded "
                                                        f"({dict(fuzzer.statuses)}): the mutations no longer reach the handlers")
        live = fuzzer.server
        alive = live.process.poll() is None and fuzzer._healthy(live)
        # `syncledger verify` on its data while it runs (a failure lists the writes to suspect).
        code, text = fuzzer.check_verify()
        assert not fuzzer.findings, fuzzer.report()
        assert live.process.poll() is None, f"seed {seed}: the server died (exit {live.process.returncode})"
        assert alive, f"seed {seed}: GET /health did not answer 200 within 5 s after fuzzing"
        assert code == 0 and "ok:" in text, f"seed {seed}: verify after fuzzing failed:\n{text[-3000:]}"
    finally:
        with capsys.disabled():   # the summary line shows even when the output is captured
            print(f"\n{fuzzer.summary()} (seed {seed})")
        code = fuzzer.server.stop(timeout=20)
    assert code == 0, f"the fuzzed server did not exit 0 on SIGTERM (exit {code})"
