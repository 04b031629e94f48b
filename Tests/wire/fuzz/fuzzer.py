"""The HTTP fuzzer: sends requests, records findings (5xx, hangs, crashes, verify failures),
restarts a dead server and sends each suspect again alone."""

import collections
import contextlib
import dataclasses
import json
import os
import random
import re
import shutil
import subprocess
import threading
import time

import conftest

from .mutations import mutate
from .requests import (ALL_OPERATIONS, IDENTITY_LEVEL, REQUEST_TIMEOUT, Hang, NoResponse, Request, from_json, send,
                       serialize, to_json)
from .segments import render_segment, stream_key
from .surfaces import NEW_BASELINE, NEW_OPERATIONS, SURFACE_OF, SURFACES
from .valid_requests import Context, new_entries, valid_request
from dos_attacks import proc_status  # noqa: E402  (one reader of /proc/PID/status)

# --------------------------------------------------------------------------------------------
# The fuzzer

@dataclasses.dataclass
class Finding:
    kind: str          # 5xx | hang | crash | unresponsive
    request: Request
    where: str         # seed and request number
    detail: str
    reproduced: object = None

    def signature(self):
        detail = re.sub(r"\d+", "N", self.detail)[:100]
        return (self.kind, self.request.op, detail)

    def describe(self):
        if self.kind == "verify":
            return f"[verify] {self.where}: {self.detail}"
        text = f"[{self.kind}] {self.where}: {self.detail}\n{self.request.describe()}"
        if self.reproduced is not None:
            text += f"\n  sent again alone: {self.reproduced}"
        return text


class Fuzzer:
    """Fuzzes one server (a conftest.Server). With `keep_going`, a crashed or hung server is
    restarted on the same data directory and the run goes on, for at most `max_restarts` such
    events (each also restarts it once per suspect request that kills it again)."""

    def __init__(self, server, seed, extra_args=("--fast",), keep_going=True, max_restarts=5, timeout=REQUEST_TIMEOUT,
                 log=None, save_dir=None):
        self.server = server
        self.seed = seed
        self.extra_args = tuple(extra_args)
        self.keep_going = keep_going
        self.max_restarts = max_restarts
        self.timeout = timeout
        self.log = log or (lambda text: print(text, flush=True))
        self.save_dir = save_dir
        self.ctx = Context(self, seed)
        self.findings = []
        self.statuses = collections.Counter()
        self.per_op = collections.defaultdict(collections.Counter)
        self.per_surface = collections.Counter()   # fuzzed requests (not helpers) by surface
        self.count = 0
        self.helper_count = 0
        self.no_response = 0
        self.restarts = 0
        self.events = 0    # crashes and hangs of the whole server looked into
        self.lock = threading.Lock()
        self.stopped = False
        self.gate = threading.Condition()
        self.paused = False
        self.in_flight = 0
        self.suspects = []
        self.slow = []   # (seconds, where, request) of requests answered after more than 2 s
        self.writes = []   # successful requests that may have written: (where, summary)
        self.verified_writes = 0   # how many of them the last clean verify covered
        self.verify_failed = False

    # -- one exchange ---------------------------------------------------------------------

    def exchange(self, request, cred, helper=False, where="helper"):
        """Sends one request; records 5xx, hangs and crashes. None when there was no answer."""
        self._enter()
        failure = None
        try:
            server = self.server
            credential = self.ctx.credentials.get(cred, self.ctx.credentials["admin"])
            start = time.monotonic()
            try:
                response = send("127.0.0.1", server.port, request, credential, timeout=self.timeout)
                elapsed = time.monotonic() - start
                if elapsed > 2 and not helper:
                    with self.lock:
                        self.slow.append((elapsed, where, request))
            except Hang as error:
                failure = (f"hang: {error}", True)
            except NoResponse as error:
                if server.process.poll() is not None or self._dead_soon(server):
                    failure = (f"no response ({error})", False)
                else:
                    with self.lock:
                        self.no_response += 1
                    return None
            if failure:
                self._failure(server, request, where, *failure)
                return None
        finally:
            self._leave()
        with self.lock:
            if helper:
                self.helper_count += 1
            self.statuses[response.status // 100 * 100] += 1
            self.per_op[request.op][response.status] += 1
            if not helper and 200 <= response.status < 300 and request.method.upper() not in ("GET", "HEAD"):
                self.writes.append((where, f"{request.op} as {request.cred}: {request.method} {request.target[:100]!r} "
                                           f"[{'; '.join(request.notes)[:240]}] -> {response.status} {response.body[:120]!r}"))
        if response.status >= 500:
            self._record(Finding("5xx", request, where,
                                 f"{response.status} {response.error_type} {response.message()!r}"))
        return response

    # While a crash or hang is looked into, no other request is sent: the requests in flight
    # are the suspects, each is sent again alone to a restarted server, and the one that kills
    # it again is the cause.

    def _enter(self):
        with self.gate:
            while self.paused:
                self.gate.wait()
            self.in_flight += 1

    def _leave(self):
        with self.gate:
            self.in_flight -= 1
            self.gate.notify_all()

    def _dead_soon(self, server):
        try:
            server.process.wait(timeout=0.2)
            return True
        except subprocess.TimeoutExpired:
            return False

    def _record(self, finding):
        with self.lock:
            self.findings.append(finding)
        self.log(f"FINDING {finding.describe()}")
        if self.save_dir:
            os.makedirs(self.save_dir, exist_ok=True)
            name = f"{finding.kind}-{len(self.findings):03d}.json"
            with open(os.path.join(self.save_dir, name), "w") as f:
                json.dump(dict(finding.request.to_json(), where=finding.where, detail=finding.detail), f, indent=1)

    def _failure(self, server, request, where, detail, hang):
        """A request got no answer: the server crashed, hung, or only this request hung."""
        if self.stopped:
            return   # the server is down for good: this run is over
        if hang and server.process.poll() is None and self._healthy(server):
            self._record(Finding("hang", request, where, detail))
            return
        with self.gate:
            if self.paused:   # another request's failure is being looked into: be a suspect
                self.suspects.append((request, where, detail))
                return
            self.paused = True
            self.suspects = [(request, where, detail)]
            deadline = time.monotonic() + self.timeout + 5
            while self.in_flight > 1 and time.monotonic() < deadline:
                self.gate.wait(timeout=0.5)
        try:
            self._investigate(server)
        finally:
            with self.gate:
                self.paused = False
                self.gate.notify_all()

    def _investigate(self, server):
        if server.process.poll() is None:
            kind = "unresponsive"
            ending = "; /health did not answer either: the server was killed"
            server.process.kill()
            server.process.wait()
        else:
            kind = "crash"
            ending = f"; the server exited with {server.process.returncode}"
        log_tail = self._log_tail(server)
        self.events += 1
        if self.keep_going and self.events <= self.max_restarts:
            self._restart(server)
        else:
            self.stopped = True
        suspects = list(self.suspects)
        findings = []
        for request, where, detail in suspects:
            finding = Finding(kind, request, where, detail + ending + (f"\n  server log: {log_tail}" if log_tail else ""))
            if not self.stopped and self.server.process.poll() is None:
                finding.reproduced = self._reproduce(request)
            elif self.stopped:
                finding.reproduced = "not sent again (no more restarts)"
            findings.append(finding)
        confirmed = [f for f in findings if f.reproduced and f.reproduced.startswith(("the server died again", "no answer again"))]
        if confirmed:
            others = [f.where for f in findings if f not in confirmed]
            for f in confirmed:
                if others:
                    f.detail += f"\n  also in flight (answered normally when sent again): {', '.join(others)}"
                self._record(f)
        else:
            first = findings[0]
            if len(findings) > 1:
                first.detail += "\n  in flight too (one of these is the cause): " + "; ".join(
                    f"{f.where}: {f.request.op} {f.request.method} {f.request.target[:160]!r}" for f in findings[1:])
            self._record(first)

    def _log_tail(self, server):
        """What the server's log says about its end: a Swift runtime failure and the frames
        under it, or the last lines."""
        try:
            with open(server.log_path, "rb") as f:
                lines = f.read().decode("utf-8", "replace").splitlines()
        except OSError:
            return ""
        for i, line in enumerate(lines):
            if "crashed:" in line or "Fatal error" in line:
                frames = [l.strip() for l in lines[i:i + 12] if l.strip() and "[system]" not in l
                          and "[thunk]" not in l and "[ra] [thunk]" not in l]
                frames = [re.sub(r"0x[0-9a-f]+ ", "", f) for f in frames if "Swift runtime failure" in f or " at /" in f
                          or "Fatal error" in f][:4]
                failure = [l.strip() for l in lines[i:i + 6] if "runtime failure" in l or "Fatal error" in l]
                return " | ".join(dict.fromkeys(failure + frames))[:1500]
        tail = [l for l in lines if l.strip()][-3:]
        return " | ".join(tail)[:1000]

    def _restart(self, dead):
        """Starts a new server on the dead one's data directory (its log is kept beside)."""
        with self.lock:
            if self.server is not dead:
                return
            with contextlib.suppress(Exception):
                dead._log.close()
            self.restarts += 1
            saved = dead.log_path + f".crash{self.restarts}"
            with contextlib.suppress(OSError):
                shutil.copyfile(dead.log_path, saved)
            try:
                self.server = conftest.Server(dead.data_dir, self.extra_args)
            except AssertionError as error:   # it does not start again: the run is over
                self.stopped = True
                self.log(f"the server did not start again: {error}")
                return
            self.log(f"restarted the server (restart {self.restarts}); log of the dead one: {saved}")

    def _reproduce(self, request):
        """Sends a request that killed the server again, alone, to confirm it."""
        server = self.server
        credential = self.ctx.credentials.get(request.cred, self.ctx.credentials["admin"])
        try:
            r = send("127.0.0.1", server.port, request, credential, timeout=self.timeout)
            return f"answered {r.status} {r.error_type} {r.message(120)!r} (not reproduced)"
        except (Hang, NoResponse) as error:
            if server.process.poll() is not None or self._dead_soon(server):
                code = server.process.returncode
                self._restart(server)
                return f"the server died again (exit {code}): reproduced"
            if not self._healthy(server):
                server.process.kill()
                server.process.wait()
                self._restart(server)
                return f"no answer again ({error}) and /health hung: reproduced"
            return f"no answer again ({error}): reproduced as a hang"

    def _healthy(self, server, timeout=5):
        try:
            r = send("127.0.0.1", server.port, Request("Health", "GET", ["health"], [], [], sign=False), None, timeout=timeout)
            return r.status == 200
        except (Hang, NoResponse):
            return False

    # -- the run ------------------------------------------------------------------------------

    def baseline(self):
        """Every operation and endpoint once, valid and unmutated: all must succeed, or the
        fuzzer would only ever fuzz refusals. Returns the failures."""
        failures = []
        rng = random.Random(f"{self.seed}:baseline")
        # Configuration first (a bulk publish needs CognitoStreams), deletion last.
        order = ["SetIdentityPoolConfiguration"] + [op for op in ALL_OPERATIONS
                                                   if op not in ("SetIdentityPoolConfiguration", "DeleteDataset")] + ["DeleteDataset"]
        order += NEW_BASELINE
        saved_tokens, self.ctx.next_tokens = self.ctx.next_tokens, {}
        self.ctx.variety = False   # no numbers at the edge: every request here must succeed
        try:
            for op in order:
                self.ctx.tokens.clear()   # fresh session tokens and sync counts
                failure = self._baseline_one(op, rng)
                if failure:
                    failures.append(failure)
        finally:
            self.ctx.next_tokens = saved_tokens
            self.ctx.variety = True
        return failures

    def _baseline_one(self, op, rng):
        """One valid request of `op`; a failure text, or None when it succeeded."""
        request = valid_request(self.ctx, rng, op)
        if op in NEW_OPERATIONS:
            pass   # signed as its builder says
        elif op in IDENTITY_LEVEL or op in ("GetStreamSegment", "PostOfflineSegment"):
            request.cred = "identity"
        else:
            request.cred = "admin"
        if op == "SetIdentityPoolConfiguration":   # streams enabled: a bulk publish needs them
            body = from_json(request.body)
            body.get("CognitoStreams")[:] = [(k, "ENABLED" if k == "StreamingStatus" else v)
                                             for k, v in body.get("CognitoStreams")]
            request.body = to_json(body)
        if op in ("DescribeDataset", "DeleteDataset"):   # a dataset that exists
            request = serialize(op, dict(IdentityPoolId=self.ctx.pool, IdentityId=self.ctx.identity,
                                         DatasetName="notes" if op == "DescribeDataset" else "games"))
            request.cred = "identity"
        if op in ("PostSegment", "PostOfflineSegment"):
            # a new entry on the current head of `prefs`
            self.ctx.forget_head("prefs")
            offset, head = self.ctx.head("prefs", random.Random(0))
            request.segment = ("stream", dict(key=stream_key(self.ctx.pool, self.ctx.identity, "prefs"), previous=head,
                                              entries=new_entries(rng, offset + 1, 1), dataset="prefs"))
            request.body = render_segment(request.segment)
            request.query = [("mode", "offline"), ("syncSessionToken", self.ctx.refresh_token("prefs")[0])] \
                if op == "PostOfflineSegment" else []
        response = self.exchange(request, request.cred, where=f"seed {self.seed} baseline")
        with self.lock:
            self.count += 1
            self.per_surface[SURFACE_OF[op]] += 1
        expected = 101 if op == "EventsWebSocket" else None
        if response is not None and response.status == expected:
            return None
        if response is None or not 200 <= response.status < 300:
            return (f"{op}: " + (f"{response.status} {response.message()!r}" if response else "no answer")
                    + "\n" + request.describe())
        return None

    def run(self, requests=None, seconds=None, workers=1, progress=None, verify_every=None):
        """Fuzzes until `requests` requests were sent or `seconds` passed (or the server could
        not be kept up). `progress(count, fivexx)` is called at most once a second; with
        `verify_every`, `syncledger verify` runs that often (seconds) while fuzzing."""
        deadline = time.monotonic() + seconds if seconds else None
        counter = iter(range(10**12))
        counter_lock = threading.Lock()

        def work():
            while not self.stopped:
                with counter_lock:
                    index = next(counter)
                if requests is not None and index >= requests:
                    return
                if deadline is not None and time.monotonic() >= deadline:
                    return
                self.one(index)

        errors = []

        def guarded():
            try:
                work()
            except BaseException as error:  # a bug of the fuzzer: stop and say so
                errors.append(error)
                self.stopped = True

        threads = [threading.Thread(target=guarded, daemon=True) for _ in range(workers)]
        for t in threads:
            t.start()
        last = 0.0
        last_verify = time.monotonic()
        while any(t.is_alive() for t in threads):
            for t in threads:
                t.join(timeout=0.25)
            if progress and time.monotonic() - last >= 1.0:
                last = time.monotonic()
                progress(self.count, self.fivexx)
            if verify_every and not self.verify_failed and time.monotonic() - last_verify >= verify_every:
                self.check_verify()
                last_verify = time.monotonic()
        if errors:
            raise errors[0]

    def one(self, index):
        rng = random.Random(f"{self.seed}:{index}")
        try:
            request = mutate(valid_request(self.ctx, rng), rng, self.ctx)
        except Exception as error:  # a bug of the fuzzer itself: say so, do not hide it
            raise RuntimeError(f"building request {index} of seed {self.seed} failed: {error!r}") from error
        self.exchange(request, request.cred, where=f"seed {self.seed} request #{index}")
        with self.lock:
            self.count += 1
            self.per_surface[SURFACE_OF[request.op]] += 1

    @property
    def fivexx(self):
        return sum(1 for f in self.findings if f.kind == "5xx")

    def verify(self):
        """`syncledger verify` on the data directory while the server runs."""
        out = subprocess.run([conftest.BINARY, "verify", "--data", self.server.data_dir], capture_output=True, timeout=300)
        return out.returncode, out.stdout.decode(errors="replace") + out.stderr.decode(errors="replace")

    def check_verify(self):
        """Runs verify; when it fails (the first time), records a finding that lists the
        successful writes since the last clean verify, entry-level segment mutations first."""
        with self.lock:
            covered = len(self.writes)
        code, text = self.verify()
        ok = code == 0 and "ok:" in text
        if ok:
            self.verified_writes = covered
        elif not self.verify_failed:
            self.verify_failed = True
            window = self.writes[self.verified_writes:covered]
            likely = [w for w in window if "entry[" in w[1]] + [w for w in window if "entry[" not in w[1]]
            listing = "\n".join(f"    {where}: {summary}" for where, summary in likely[:40])
            more = f"\n    ... and {len(window) - 40} more" if len(window) > 40 else ""
            self._record(Finding("verify", Request("Verify", "-", [], [], []), f"seed {self.seed} after {self.count} requests",
                                 f"syncledger verify exit {code}: {text.strip()[:600]}\n  the {len(window)} successful "
                                 f"writes since the last clean verify (segment entry mutations first):\n{listing}{more}"))
        return code, text

    @property
    def crashes(self):
        return sum(1 for f in self.findings if f.kind == "crash")

    def summary(self):
        surfaces = ", ".join(f"{name} {self.per_surface[name]}" for name in SURFACES)
        return (f"fuzzed {self.count} requests ({surfaces}), 5xx seen: {self.fivexx}, crashes: {self.crashes}, "
                f"hangs: {sum(f.kind in ('hang', 'unresponsive') for f in self.findings)}")

    def report(self):
        """Findings grouped by kind, operation and message, one example each."""
        groups = collections.OrderedDict()
        for f in self.findings:
            groups.setdefault(f.signature(), []).append(f)
        lines = [f"seed {self.seed}: {self.summary()}; server crashes {sum(f.kind == 'crash' for f in self.findings)}, "
                 f"hangs {sum(f.kind in ('hang', 'unresponsive') for f in self.findings)}, restarts {self.restarts}, "
                 f"verify failures {sum(f.kind == 'verify' for f in self.findings)}; "
                 f"statuses {dict(sorted(self.statuses.items()))}; closed without an answer {self.no_response}"]
        try:
            status = proc_status(self.server.process.pid)
            lines.append(f"server memory now: VmHWM {status.get('VmHWM', 0) >> 20} MiB, VmRSS {status.get('VmRSS', 0) >> 20} MiB "
                         "(VmHWM: since its last start)")
        except OSError:
            pass
        for surface, ops in SURFACES.items():
            answers = collections.Counter()
            for op in ops:
                for status, n in self.per_op[op].items():
                    answers[status // 100 * 100] += n
            lines.append(f"  {surface}: {self.per_surface[surface]} fuzzed; answers (helpers included) "
                         f"{dict(sorted(answers.items()))}")
        if self.slow:
            lines.append(f"{len(self.slow)} requests took over 2 s; the slowest:")
            for elapsed, where, request in sorted(self.slow, key=lambda x: -x[0])[:5]:
                lines.append(f"  {elapsed:.1f} s {where}: {request.op} {request.method} {request.target[:100]!r} "
                             f"{'; '.join(request.notes)[:200]}")
        for (kind, op, _), found in groups.items():
            lines.append(f"\n== {len(found)} x {kind} in {op}; first:\n" + found[0].describe())
        return "\n".join(lines)
