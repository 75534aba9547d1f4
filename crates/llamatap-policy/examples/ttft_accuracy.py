#!/usr/bin/env python3
"""How accurate llamatap's TTFT predictor is on real llama-servers.

Starts two llama-servers (the medium random-weight model by default), runs a
mixed workload against them directly (no proxy), and before sending each
request asks the predictor (`examples/ttft_pipe.rs`, over a pipe) for its
TTFT, from what a proxy would know at that moment:

- the prompt's size in bytes (the messages' text; no tokenizer);
- the cached prefix the member most likely holds: the leading messages of the
  prompt that were sent to that member before (the affinity book works per
  message), in bytes, turned into tokens at the bytes per token the predictor
  learned;
- the member's slots (`-np`), the requests in flight on it (busy =
  min(in flight, slots), queued ahead = the rest), and for each busy one the
  tokens generated so far and its `max_tokens`.

After each answer the predictor learns from llama-server's `timings`, the
slots busy beside the request when its prefill started (first
`prompt_progress` event), the tokens of other prompts prefilled during its
prefill (pro rata of the overlap of their prefill intervals), the tokens the
busy slots had left to prefill when it was sent, its `max_tokens`, and, for
requests that started at once (a free slot, no prompt prefilling beside),
the measured TTFT and the time to the first progress event. At the first
progress event, and at the first one with part of the prompt done, the
corrected prediction is recorded too.

The workload: multi-turn conversations (each its own system prompt, turns
reuse the cache; some turns change the system prompt: a cache break the
affinity book sees), short and long one-shot prompts, a phase with a batch
background of long answers keeping slots busy, and a restart of one member
(its cache is lost; the affinity book forgets that member, as the proxy's
health check would, the predictor's rates are kept).

Run from the repository root:

    scripts/ensure-deps.sh > /tmp/deps.env; set -a; . /tmp/deps.env; set +a
    cargo build -p llamatap-policy --example ttft_pipe
    $LLAMATAP_PYTHON crates/llamatap-policy/examples/ttft_accuracy.py --out /tmp/ttft.jsonl

It prints the summary (median and p90 absolute percentage error, by kind of
request) and writes one JSON line per request to --out, with the predictor's
calls and their times: `--replay FILE --pipe OTHER` feeds them, in order,
to another build of the predictor, to compare it on the same requests;
with `--late MEMBER`, that member's calls come after every other's (it
joins a warm fleet), and its first 8 answers are a group of the summary.
"""

import argparse
import hashlib
import http.client
import json
import os
import random
import socket
import statistics
import subprocess
import sys
import threading
import time

VOCAB = (
    "the of and to in is was for on that with as by at from his her they this "
    "have had not are but were which one all their there been has when who "
    "will more would if out so said what up its about into than them can only "
    "other new some could time these two may then do first any like now my "
    "such our over man me even most made after also did many before must "
    "through back years where much your way well down should because each just "
    "those people how too little state good very make world still own see men "
    "work long get here between both life being under never day same another "
    "know while last might us great old year off come since against go came "
    "right used take three river stone house water light north garden market "
    "winter music paper number table window letter summer station morning"
).split()


def words(rng, n):
    return " ".join(rng.choice(VOCAB) for _ in range(n))


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Pipe:
    """The predictor, one JSON line in, one out."""

    def __init__(self, path):
        self.proc = subprocess.Popen(
            [path], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, bufsize=1
        )
        self.lock = threading.Lock()

    def call(self, **kw):
        with self.lock:
            self.proc.stdin.write(json.dumps(kw) + "\n")
            self.proc.stdin.flush()
            return json.loads(self.proc.stdout.readline())


class Flight:
    def __init__(self, max_tokens, prefill_est):
        self.max_tokens = max_tokens
        self.generated = 0
        self.started = False
        # Prompt tokens still to prefill: the prediction's estimate until
        # progress events say, 0 from the first token on.
        self.prefill_left = prefill_est
        # The prefill's interval (first progress event, first token) and its
        # new tokens (total - cache of the first progress event).
        self.start_t = None
        self.end_t = None
        self.own_new = 0

    def overlap_tokens(self, s, e, now):
        """This prefill's tokens processed during [s, e] (pro rata)."""
        if self.start_t is None:
            return 0
        end = self.end_t if self.end_t is not None else now
        span = max(end - self.start_t, 1e-6)
        inter = max(0.0, min(e, end) - max(s, self.start_t))
        return self.own_new * min(1.0, inter / span)


class Member:
    """One llama-server, what is in flight on it, and its affinity book."""

    def __init__(self, name, binary, model, slots, extra, logdir):
        self.name = name
        self.binary = binary
        self.model = model
        self.slots = slots
        self.extra = extra
        self.port = free_port()
        self.log = os.path.join(logdir, f"{name}.log")
        self.proc = None
        self.lock = threading.Lock()
        self.flights = {}  # id -> Flight, in send order
        self.done = []  # recently finished flights, for overlaps
        self.book = {}  # prefix hash -> None (insertion order: LRU-ish)

    def start(self):
        args = [
            self.binary, "-m", self.model, "--host", "127.0.0.1", "--port", str(self.port),
            "--chat-template", "chatml", "-t", "1", "--metrics", "--slots",
            "-np", str(self.slots), "-c", str(2048 * self.slots),
        ] + self.extra
        self.proc = subprocess.Popen(
            args, stdout=open(self.log, "a"), stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL
        )
        deadline = time.time() + 120
        while time.time() < deadline:
            try:
                c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=2)
                c.request("GET", "/health")
                if c.getresponse().status == 200:
                    return
            except OSError:
                pass
            if self.proc.poll() is not None:
                break
            time.sleep(0.2)
        raise RuntimeError(f"{self.name} did not start; see {self.log}")

    def stop(self):
        if self.proc:
            self.proc.kill()
            self.proc.wait()
            self.proc = None

    def cached_bytes(self, prefixes, sizes):
        """Bytes of the longest run of leading messages sent here before."""
        n = 0
        for i, h in enumerate(prefixes):
            if h in self.book:
                n = sum(sizes[: i + 1])
            else:
                break
        return n

    def remember(self, prefixes):
        for h in prefixes:
            self.book.pop(h, None)
            self.book[h] = None
        while len(self.book) > 10000:
            self.book.pop(next(iter(self.book)))


def runnable():
    """Processes runnable on the machine now (/proc/loadavg's fourth field):
    other work competing with the llama-servers for the 2 cores."""
    try:
        with open("/proc/loadavg") as f:
            return int(f.read().split()[3].split("/")[0])
    except (OSError, ValueError, IndexError):
        return -1


def prefix_hashes(messages):
    out, h = [], hashlib.sha256()
    for m in messages:
        h.update(json.dumps([m["role"], m["content"]]).encode())
        out.append(h.copy().hexdigest())
    return out


class Runner:
    def __init__(self, pipe, members, out):
        self.pipe = pipe
        self.members = members
        self.out = out
        self.lock = threading.Lock()
        self.records = []
        self.next_id = 0
        self.phase = "mixed"
        self.t0 = time.monotonic()

    def least_busy(self):
        return min(self.members, key=lambda m: len(m.flights))

    def request(self, member, messages, max_tokens, kind, background=False):
        sizes = [len(m["content"].encode()) for m in messages]
        prefixes = prefix_hashes(messages)
        with self.lock:
            self.next_id += 1
            rid = self.next_id
        with member.lock:
            cached_b = member.cached_bytes(prefixes, sizes)
            ahead = list(member.flights.values())
            busy = min(len(ahead), member.slots)
            queue_ahead = max(0, len(ahead) - member.slots)
            in_flight = [[f.generated, f.max_tokens, f.prefill_left] for f in ahead[:busy]]
            beside_at_send = sum(f.prefill_left for f in ahead[:busy])
            at_once = len(ahead) < member.slots and beside_at_send == 0
            predict_args = dict(
                op="predict", key=member.name, bytes=sum(sizes), cached_bytes=cached_b,
                slots=member.slots, busy=busy, queue_ahead=queue_ahead, in_flight=in_flight,
            )
            t_predict = time.monotonic()
            pred = self.pipe.call(**predict_args)
            est = self.pipe.call(
                op="predict", key=member.name, bytes=sum(sizes) - cached_b, slots=0,
            ).get("prompt_tokens") or (sum(sizes) - cached_b) // 4
            flight = Flight(max_tokens, est)
            member.flights[rid] = flight
            member.remember(prefixes)
        body = json.dumps({
            "messages": messages, "stream": True, "return_progress": True,
            "max_tokens": max_tokens, "temperature": 0.8, "seed": rid,
        })
        t0 = time.monotonic()
        rec = {
            "id": rid, "member": member.name, "kind": kind, "phase": self.phase,
            "background": background, "prompt_bytes": sum(sizes), "cached_bytes_est": cached_b,
            "busy": busy, "queue_ahead": queue_ahead,
            "predicted": pred, "at_once": at_once, "runnable": runnable(),
            "other_member_busy": sum(
                len(m.flights) for m in self.members if m is not member
            ),
            # The predictor's calls and when they were made, for a replay.
            "calls": [[t_predict - self.t0, predict_args]],
        }
        first_progress = None
        busy_at_start = 0
        prefill_at_start = 0
        corrected = None
        corrected_mid = None
        ttft = None
        timings = None
        text = []
        try:
            conn = http.client.HTTPConnection("127.0.0.1", member.port, timeout=600)
            conn.request("POST", "/v1/chat/completions", body, {"Content-Type": "application/json"})
            resp = conn.getresponse()
            if resp.status != 200:
                raise RuntimeError(f"status {resp.status}: {resp.read()[:200]!r}")
            for raw in resp:
                line = raw.decode("utf-8", "replace").strip()
                if not line.startswith("data: ") or line == "data: [DONE]":
                    continue
                ev = json.loads(line[6:])
                now = time.monotonic()
                prog = ev.get("prompt_progress")
                if prog is not None:
                    with member.lock:
                        flight.prefill_left = max(0, prog["total"] - prog["processed"])
                        others = [f for k, f in member.flights.items() if k != rid and f.started]
                        beside = sum(f.prefill_left for f in others)
                    if first_progress is None:
                        first_progress = (now - t0) * 1000
                        flight.started = True
                        flight.start_t = now
                        flight.own_new = max(0, prog["total"] - prog["cache"])
                        busy_at_start, prefill_at_start = len(others), beside
                        args = dict(
                            op="correct", key=member.name, since_ms=first_progress,
                            busy_others=busy_at_start, prefill_others=beside, **prog,
                        )
                        rec["calls"].append([now - self.t0, args])
                        corrected = self.pipe.call(**args)
                    elif corrected_mid is None and prog["processed"] < prog["total"]:
                        args = dict(
                            op="correct", key=member.name, since_ms=(now - t0) * 1000,
                            busy_others=len(others), prefill_others=beside, **prog,
                        )
                        rec["calls"].append([now - self.t0, args])
                        corrected_mid = self.pipe.call(**args)
                    rec.setdefault("progress", []).append(prog)
                for ch in ev.get("choices", []):
                    c = (ch.get("delta") or {}).get("content")
                    if c:
                        if ttft is None:
                            ttft = (now - t0) * 1000
                            flight.prefill_left = 0
                            flight.end_t = now
                        text.append(c)
                        flight.generated += 1
                if "timings" in ev:
                    timings = ev["timings"]
            conn.close()
        except (OSError, RuntimeError, http.client.HTTPException) as e:
            rec["error"] = str(e)
        finally:
            with member.lock:
                member.flights.pop(rid, None)
                now = time.monotonic()
                overlap = 0
                if flight.start_t is not None and flight.end_t is not None:
                    others = list(member.flights.values()) + member.done
                    overlap = int(sum(
                        f.overlap_tokens(flight.start_t, flight.end_t, now) for f in others
                    ))
                member.done = (member.done + [flight])[-16:]
            rec["overlap_tokens"] = overlap
        rec.update({
            "ttft_ms": ttft, "first_progress_ms": first_progress, "busy_at_start": busy_at_start,
            "prefill_at_start": prefill_at_start,
            "corrected": corrected, "corrected_mid": corrected_mid, "timings": timings,
        })
        if timings and "error" not in rec:
            args = dict(
                op="observe", key=member.name, prompt_n=timings["prompt_n"],
                prompt_ms=timings["prompt_ms"], cache_n=timings["cache_n"],
                predicted_n=timings["predicted_n"], predicted_ms=timings["predicted_ms"],
                busy_others=busy_at_start, prefill_others=rec["overlap_tokens"],
                beside_at_dispatch=beside_at_send, max_tokens=max_tokens,
                prompt_bytes=sum(sizes), cached_bytes=rec["cached_bytes_est"],
                ttft_ms=ttft if at_once else None,
                started_ms=first_progress if at_once else None,
            )
            rec["calls"].append([time.monotonic() - self.t0, args])
            self.pipe.call(**args)
        with self.lock:
            if not background:
                self.records.append(rec)
            self.out.write(json.dumps(rec) + "\n")
            self.out.flush()
        return "".join(text)


def conversation(runner, rng, cid, turns):
    member = runner.members[cid % len(runner.members)]
    system = words(rng, rng.randint(150, 700))
    messages = [{"role": "system", "content": system}]
    for t in range(turns):
        kind = "first_turn" if t == 0 else "next_turn"
        if t > 0 and rng.random() < 0.2:
            # A cache break: the system prompt changes at its start.
            system = words(rng, 3) + " " + system
            messages[0] = {"role": "system", "content": system}
            kind = "cache_break"
        messages.append({"role": "user", "content": words(rng, rng.randint(10, 80))})
        answer = runner.request(member, messages, rng.randint(16, 40), kind)
        messages.append({"role": "assistant", "content": answer})


def one_shot(runner, rng, long):
    n = rng.randint(400, 900) if long else rng.randint(5, 60)
    messages = [{"role": "user", "content": words(rng, n)}]
    runner.request(runner.least_busy(), messages, rng.randint(8, 32), "long" if long else "short")


def run_jobs(runner, jobs, workers):
    lock = threading.Lock()

    def work():
        while True:
            with lock:
                if not jobs:
                    return
                job = jobs.pop(0)
            job()

    threads = [threading.Thread(target=work) for _ in range(workers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()


def make_jobs(runner, rng, convs, turns, shorts, longs, base):
    jobs = [lambda c=base + i, s=rng.randrange(1 << 30): conversation(runner, random.Random(s), c, turns)
            for i in range(convs)]
    jobs += [lambda s=rng.randrange(1 << 30): one_shot(runner, random.Random(s), False)
             for _ in range(shorts)]
    jobs += [lambda s=rng.randrange(1 << 30): one_shot(runner, random.Random(s), True)
             for _ in range(longs)]
    rng.shuffle(jobs)
    return jobs


def background(runner, rng, member, stop):
    while not stop.is_set():
        msgs = [{"role": "user", "content": words(rng, rng.randint(10, 40))}]
        runner.request(member, msgs, 200, "batch", background=True)


def pct(xs, q):
    xs = sorted(xs)
    if not xs:
        return float("nan")
    i = min(len(xs) - 1, max(0, int(round(q * (len(xs) - 1)))))
    return xs[i]


def summary(records):
    rows = []

    def ape(r, field):
        p = (r.get(field) or {}).get("ttft_ms")
        if p is None or r.get("ttft_ms") is None:
            return None
        return abs(p - r["ttft_ms"]) / r["ttft_ms"] * 100

    groups = {"all": records}
    for r in records:
        groups.setdefault("kind=" + r["kind"], []).append(r)
        groups.setdefault("phase=" + r["phase"], []).append(r)
        groups.setdefault("queued" if r["queue_ahead"] > 0 else "slot free", []).append(r)
        groups.setdefault(
            "machine: runnable <= 3" if r.get("runnable", 0) <= 3 else "machine: runnable > 3", []
        ).append(r)
        groups.setdefault(
            "other member idle" if r.get("other_member_busy", 0) == 0 else "other member busy", []
        ).append(r)
        groups.setdefault(
            "this member idle" if r["busy"] == 0 else "this member busy", []
        ).append(r)
        if "late_rank" in r:
            first = r["late_rank"] < 8
            groups.setdefault("late member: first 8" if first else "late member: later", []).append(r)
    for name, rs in groups.items():
        errs = [e for e in (ape(r, "predicted") for r in rs) if e is not None]
        corr = [e for e in (ape(r, "corrected") for r in rs) if e is not None]
        mid = [e for e in (ape(r, "corrected_mid") for r in rs) if e is not None]
        nodata = sum(1 for r in rs if (r.get("predicted") or {}).get("ttft_ms") is None)
        ttfts = [r["ttft_ms"] for r in rs if r.get("ttft_ms")]
        rows.append({
            "group": name, "requests": len(rs), "no_data": nodata, "predicted": len(errs),
            "ttft_p50_ms": statistics.median(ttfts) if ttfts else None,
            "ape_p50": statistics.median(errs) if errs else None, "ape_p90": pct(errs, 0.9),
            "corrected_p50": statistics.median(corr) if corr else None,
            "corrected_p90": pct(corr, 0.9), "mid_n": len(mid),
            "mid_p50": statistics.median(mid) if mid else None, "mid_p90": pct(mid, 0.9),
        })
    return rows


def replay(path, pipe_path, late=None):
    """Feeds a recorded run's calls, in their order, to a fresh predictor
    (another build of it, say) and returns the records with its answers.
    With `late`, that member's calls come after every other member's: it
    joins a fleet whose other members are warm (its first answers then
    start from a peer)."""
    recs = [json.loads(line) for line in open(path)]
    calls = sorted(
        ((t, i, j, args) for i, r in enumerate(recs) for j, (t, args) in enumerate(r["calls"])),
        key=lambda c: (recs[c[1]]["member"] == late, c[0], c[1], c[2]),
    )
    pipe = Pipe(pipe_path)
    for r in recs:
        r["corrected"] = r["corrected_mid"] = None
    for _, i, _, args in calls:
        if args["op"] == "observe" and "cached_bytes" not in args:
            # Recorded before the observation carried it.
            args = dict(args, cached_bytes=recs[i]["cached_bytes_est"])
        out = pipe.call(**args)
        r = recs[i]
        if args["op"] == "predict":
            r["predicted"] = out
        elif args["op"] == "correct":
            r["corrected" if r["corrected"] is None else "corrected_mid"] = out
    mine = sorted((r for r in recs if r["member"] == late), key=lambda r: r["calls"][0][0])
    for rank, r in enumerate(mine):
        r["late_rank"] = rank
    keys = sorted({r["member"] for r in recs})
    learned = {k: pipe.call(op="learned", key=k) for k in keys}
    return [r for r in recs if not r.get("background")], learned


def print_rows(rows):
    hdr = ("group", "requests", "no_data", "ttft_p50_ms", "ape_p50", "ape_p90",
           "corrected_p50", "corrected_p90", "mid_n", "mid_p50", "mid_p90")
    print("| " + " | ".join(hdr) + " |")
    print("|" + " --- |" * len(hdr))
    for r in rows:
        cells = [r[h] if not isinstance(r[h], float) else f"{r[h]:.1f}" for h in hdr]
        print("| " + " | ".join(str(c) for c in cells) + " |")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default=os.environ.get("LLAMATAP_MEDIUM_MODEL"))
    ap.add_argument("--server", default=os.environ.get("LLAMATAP_LLAMA_SERVER"))
    ap.add_argument("--pipe", default="target/debug/examples/ttft_pipe")
    ap.add_argument("--slots", type=int, default=2)
    ap.add_argument("--workers", type=int, default=3)
    ap.add_argument("--convs", type=int, default=6, help="conversations per phase")
    ap.add_argument("--turns", type=int, default=5)
    ap.add_argument("--shorts", type=int, default=8, help="short one-shots per phase")
    ap.add_argument("--longs", type=int, default=4, help="long one-shots per phase")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--out", default="/tmp/ttft-accuracy.jsonl")
    ap.add_argument("--extra", default="--cache-ram 256 -b 512",
                    help="more llama-server flags")
    ap.add_argument("--replay", metavar="FILE",
                    help="replay a recorded run's calls into --pipe instead of running")
    ap.add_argument("--late", metavar="MEMBER",
                    help="with --replay: that member's calls after every other's (it joins late); "
                    "the summary then has its first 8 answers as a group")
    a = ap.parse_args()
    if a.replay:
        records, learned = replay(a.replay, a.pipe, a.late)
        with open(a.out, "w") as f:
            for r in records:
                f.write(json.dumps(r) + "\n")
        print(json.dumps(learned))
        print_rows(summary(records))
        return
    if not (a.model and a.server):
        sys.exit("set LLAMATAP_MEDIUM_MODEL and LLAMATAP_LLAMA_SERVER (scripts/ensure-deps.sh)")
    logdir = f"/tmp/ttft-accuracy-{os.getpid()}"
    os.makedirs(logdir, exist_ok=True)
    rng = random.Random(a.seed)
    members = [Member(n, a.server, a.model, a.slots, a.extra.split(), logdir) for n in ("a", "b")]
    pipe = Pipe(a.pipe)
    out = open(a.out, "w")
    runner = Runner(pipe, members, out)
    t_start = time.time()
    load0 = os.getloadavg()
    try:
        for m in members:
            m.start()
        # 1. The mix, nothing else running.
        run_jobs(runner, make_jobs(runner, rng, a.convs, a.turns, a.shorts, a.longs, 0), a.workers)
        # 2. The same mix beside a batch background on member b.
        runner.phase = "batch_background"
        stop = threading.Event()
        bg = threading.Thread(target=background, args=(runner, random.Random(7), members[1], stop))
        bg.start()
        run_jobs(runner, make_jobs(runner, rng, a.convs, a.turns, a.shorts, a.longs, 100),
                 a.workers)
        stop.set()
        bg.join()
        # 3. Member a restarts: its KV cache and prompt cache are gone.
        members[0].stop()
        members[0].start()
        with members[0].lock:
            members[0].book.clear()
        runner.phase = "after_restart"
        run_jobs(runner, make_jobs(runner, rng, a.convs, a.turns, a.shorts, a.longs, 200),
                 a.workers)
    finally:
        for m in members:
            m.stop()
    rows = summary(runner.records)
    learned = {m.name: pipe.call(op="learned", key=m.name) for m in members}
    meta = {
        "seconds": round(time.time() - t_start), "loadavg_before": load0,
        "loadavg_after": os.getloadavg(), "args": vars(a), "learned": learned,
    }
    print(json.dumps(meta, indent=1))
    print_rows(rows)
    with open(a.out + ".summary.json", "w") as f:
        json.dump({"meta": meta, "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
