#!/usr/bin/env python3
"""Routing with and without the TTFT prediction, on real llama-servers.

Runs one mixed chat workload through llamatap in front of two llama-servers,
once per variant, restarting the llama-servers (and llamatap) between
variants so each starts cold:

- `off`: today's routing (`routing.policy`, default `prefix_affinity`);
- `steer`: the same policy with `routing.ttft_steer_percent` set: members
  predicted much slower than the fastest are left out of the choice.

Two fleets:

- `same`: both members serve `medium.gguf` (equal members on one machine);
- `mixed`: member `b` serves `slow.gguf` under the same model name (a member
  on slower hardware; `--alias` gives both the one name).

The workload (seeded): three client threads (`--clients`); conversations of five turns,
each with its own system prompt of 150 to 700 words and a user message of 10
to 40 words a turn (a turn repeats the conversation so far); short (5 to 60
words) and long (400 to 900 words) one-shot prompts between them; with
`--rag N`, N retrieval questions (one of three documents of 300 to 700 words,
then a question of 10 to 20 words, in one user message, after a short system
prompt); with `--shared-system N`, every conversation has the same system
prompt of N words (one application's), so that llama-server's slots replace
one conversation with another down to it; with `--interleave`, each client
advances its conversations one turn at a time, in rotation, rather than one
after another; answers of 8 to 40 tokens. TTFT, the upstream and the prediction come from llamatap's
access log (TTFT from arrival to the first token).

Run from the repository root, after `cargo build --release`:

    scripts/ensure-deps.sh > /tmp/deps.env; set -a; . /tmp/deps.env; set +a
    $LLAMATAP_PYTHON bench/ttft-steer.py --fleet mixed --out /tmp/steer.json

It prints one table row per variant, with the prediction's absolute
percentage error through the proxy (before dispatch, and as corrected by the
last progress event), and writes every access line to --out.
"""

import argparse
import http.client
import json
import os
import random
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time

VOCAB = (
    "the of and to in is was for on that with as by at from his her they this "
    "have had not are but were which one all their there been has when who "
    "will more would if out so said what up its about into than them can only "
    "other new some could time these two may then do first any like now my "
    "river stone house water light north garden market winter music paper "
    "number table window letter summer station morning"
).split()
MODEL = "llm"


def words(rng, n):
    return " ".join(rng.choice(VOCAB) for _ in range(n))


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_http(port, path, proc, what, timeout=180):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{what} exited with {proc.returncode}")
        try:
            c = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
            c.request("GET", path)
            if c.getresponse().status == 200:
                return
        except OSError:
            pass
        time.sleep(0.2)
    raise RuntimeError(f"{what} did not answer {path} within {timeout} s")


def start_member(binary, model, logdir, name):
    port = free_port()
    args = [
        binary, "-m", model, "--alias", MODEL, "--host", "127.0.0.1",
        "--port", str(port), "--chat-template", "chatml", "-t", "1",
        "-np", "2", "-c", "4096", "--cache-ram", "256", "--metrics", "--slots",
    ]
    log = open(os.path.join(logdir, f"{name}.log"), "w")
    proc = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    wait_http(port, "/health", proc, f"llama-server {name}")
    return proc, port


def start_llamatap(binary, ports, steer, policy, logdir, variant):
    port, admin = free_port(), free_port()
    access = os.path.join(logdir, f"access-{variant}.jsonl")
    ups = "".join(
        f'[[upstreams]]\nurl = "http://127.0.0.1:{p}"\nname = "{n}"\n\n'
        for n, p in zip("ab", ports)
    )
    conf = os.path.join(logdir, f"llamatap-{variant}.toml")
    with open(conf, "w") as f:
        f.write(
            f'listen = "127.0.0.1:{port}"\nadmin_listen = "127.0.0.1:{admin}"\n\n'
            f'[routing]\npolicy = "{policy}"\nttft_steer_percent = {steer}\n\n{ups}'
        )
    log = open(os.path.join(logdir, f"llamatap-{variant}.log"), "w")
    proc = subprocess.Popen(
        [binary, "--config", conf, "--access-log", access],
        stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
    )
    wait_http(admin, "/readyz", proc, "llamatap")
    return proc, port, access


def jobs(seed, convs, shorts, longs, clients=3, rag=0, shared_system=0):
    """One list of jobs per client; a conversation stays on one."""
    rng = random.Random(seed)
    items = []
    # One application's system prompt, the same in every conversation.
    shared = words(rng, shared_system) if shared_system else None
    # Retrieval: one of three documents, then a question, in one user
    # message; llama-server reuses the document's tokens where it has them.
    documents = [words(rng, rng.randint(300, 700)) for _ in range(3)] if rag else []
    for _ in range(rag):
        question = words(rng, rng.randint(10, 20))
        context = f"Context:\n{rng.choice(documents)}\n\nQuestion: {question}"
        items.append(("rag", context, rng.randint(8, 40)))
    for _ in range(convs):
        system = words(rng, rng.randint(150, 700))
        if shared:
            system = shared
        turns = [(words(rng, rng.randint(10, 40)), rng.randint(8, 40)) for _ in range(5)]
        items.append(("conv", system, turns))
    for _ in range(shorts):
        items.append(("one", words(rng, rng.randint(5, 60)), rng.randint(8, 40)))
    for _ in range(longs):
        items.append(("one", words(rng, rng.randint(400, 900)), rng.randint(8, 40)))
    rng.shuffle(items)
    return [items[i::clients] for i in range(clients)]


def chat(port, messages, max_tokens):
    body = json.dumps({
        "model": MODEL, "messages": messages, "max_tokens": max_tokens,
        "stream": True, "temperature": 0, "seed": 1,
    })
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
    c.request("POST", "/v1/chat/completions", body, {"content-type": "application/json"})
    r = c.getresponse()
    text = []
    for raw in r:
        line = raw.decode("utf-8", "replace").strip()
        if not line.startswith("data: ") or line == "data: [DONE]":
            continue
        try:
            ev = json.loads(line[6:])
        except ValueError:
            continue
        for ch in ev.get("choices") or []:
            text.append((ch.get("delta") or {}).get("content") or "")
    c.close()
    if r.status != 200:
        raise RuntimeError(f"status {r.status}")
    return "".join(text)


def client(port, mine, errors, interleave=False):
    if interleave:
        mine = interleaved(mine)
    for job in mine:
        try:
            if job[0] == "user":
                _, messages, user = job
                messages.append({"role": "user", "content": user})
            elif job[0] == "turn":
                _, messages, n = job
                messages.append({"role": "assistant", "content": chat(port, messages, n)})
            elif job[0] == "conv":
                _, system, turns = job
                messages = [{"role": "system", "content": system}]
                for user, n in turns:
                    messages.append({"role": "user", "content": user})
                    answer = chat(port, messages, n)
                    messages.append({"role": "assistant", "content": answer})
            elif job[0] == "rag":
                _, context, n = job
                system = {"role": "system", "content": "Answer from the context."}
                chat(port, [system, {"role": "user", "content": context}], n)
            else:
                _, prompt, n = job
                chat(port, [{"role": "user", "content": prompt}], n)
        except Exception as e:  # noqa: BLE001: reported and counted
            errors.append(repr(e))


def interleaved(mine):
    """A client's jobs with its conversations advanced one turn at a time,
    in rotation, and its one-shots between them: more conversations at once
    than a member has slots. A turn's job extends its conversation's
    messages, which the turns before it have filled."""
    convs = [j for j in mine if j[0] == "conv"]
    rest = [j for j in mine if j[0] != "conv"]
    out = []
    states = [[{"role": "system", "content": system}] for _, system, _ in convs]
    for t in range(max((len(c[2]) for c in convs), default=0)):
        for state, (_, _, turns) in zip(states, convs):
            if t < len(turns):
                user, n = turns[t]
                out.append(("user", state, user))
                out.append(("turn", state, n))
            if rest:
                out.append(rest.pop(0))
    return out + rest


def pct(values, q):
    v = sorted(values)
    if not v:
        return float("nan")
    return v[min(len(v) - 1, int(round(q * (len(v) - 1))))]


def run_variant(args, variant, steer, logdir):
    models = [args.medium, args.medium if args.fleet == "same" else args.slow]
    members = [start_member(args.llama_server, m, logdir, f"{variant}-{n}") for m, n in zip(models, "ab")]
    proxy = None
    try:
        proxy, port, access = start_llamatap(
            args.llamatap, [p for _, p in members], steer, args.policy, logdir, variant
        )
        errors = []
        start = time.time()
        threads = [
            threading.Thread(target=client, args=(port, mine, errors, args.interleave))
            for mine in jobs(
                args.seed, args.convs, args.shorts, args.longs, args.clients, args.rag,
                args.shared_system,
            )
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        wall = time.time() - start
    finally:
        if proxy:
            proxy.terminate()
            proxy.wait()
        for p, _ in members:
            p.kill()
            p.wait()
    lines = [json.loads(x) for x in open(access) if x.strip()]
    ok = [x for x in lines if x["route"] == "chat_completions" and x["status"] == 200]
    ttft = [x["ttft_ms"] for x in ok if x["ttft_ms"] is not None]
    prompt = sum(x["prompt_tokens"] or 0 for x in ok)
    cached = sum(x["cached_tokens"] or 0 for x in ok)
    on_b = sum(1 for x in ok if x["upstream"] == "b")
    # The prediction's error through the proxy: predicted (from dispatch)
    # against the TTFT llamatap measured (from arrival; no queue here, so
    # arrival and dispatch are within a millisecond); requests with no
    # prediction (a member's first) are left out.
    def ape(field):
        return [
            abs(x[field] - x["ttft_ms"]) / x["ttft_ms"]
            for x in ok
            if x.get(field) is not None and x["ttft_ms"]
        ]
    before, corrected = ape("predicted_ttft_ms"), ape("corrected_ttft_ms")
    return {
        "variant": variant, "steer_percent": steer, "requests": len(ok),
        "errors": errors, "wall_s": wall,
        "ttft_p50": pct(ttft, 0.5), "ttft_p90": pct(ttft, 0.9),
        "ttft_mean": statistics.fmean(ttft) if ttft else float("nan"),
        "share_on_b": on_b / len(ok) if ok else float("nan"),
        "cached_share": cached / prompt if prompt else float("nan"),
        "ape_n": len(before), "ape_p50": pct(before, 0.5), "ape_p90": pct(before, 0.9),
        "corrected_n": len(corrected), "corrected_p50": pct(corrected, 0.5),
        "corrected_p90": pct(corrected, 0.9),
        "lines": lines,
    }


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--fleet", choices=["same", "mixed"], default="mixed")
    ap.add_argument("--policy", default="prefix_affinity")
    ap.add_argument("--steer", type=int, default=150, help="ttft_steer_percent of the steer variant")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--convs", type=int, default=6)
    ap.add_argument("--clients", type=int, default=3,
                    help="client threads (more than the fleet's 4 slots queue)")
    ap.add_argument("--shorts", type=int, default=10)
    ap.add_argument("--longs", type=int, default=4)
    ap.add_argument("--rag", type=int, default=0,
                    help="questions after one of three shared documents, in one user message")
    ap.add_argument("--shared-system", type=int, default=0,
                    help="words of one system prompt every conversation shares (0: each its own)")
    ap.add_argument("--interleave", action="store_true",
                    help="each client advances its conversations a turn at a time, in rotation")
    ap.add_argument("--order", default="off,steer", help="variants in run order")
    ap.add_argument("--llamatap", default="target/release/llamatap")
    ap.add_argument("--llama-server", default=os.environ.get("LLAMATAP_LLAMA_SERVER"))
    ap.add_argument("--medium", default=os.environ.get("LLAMATAP_MEDIUM_MODEL"),
                    help="member a's model, and b's in the same fleet (a real model's GGUF works too)")
    ap.add_argument("--slow", default=os.environ.get("LLAMATAP_SLOW_MODEL"))
    ap.add_argument("--out")
    args = ap.parse_args()
    for need in ("llama_server", "medium", "slow"):
        if not getattr(args, need):
            sys.exit(f"ttft-steer: --{need.replace('_', '-')} not given (run scripts/ensure-deps.sh)")
    logdir = tempfile.mkdtemp(prefix="ttft-steer-")
    results = []
    for variant in args.order.split(","):
        steer = {"off": 0, "steer": args.steer}[variant]
        load = os.getloadavg()[0]
        r = run_variant(args, variant, steer, logdir)
        r["load_before"], r["load_after"] = load, os.getloadavg()[0]
        results.append(r)
    print(f"fleet {args.fleet}, policy {args.policy}, seed {args.seed}, logs in {logdir}")
    print("| variant | requests | errors | TTFT p50 ms | TTFT p90 ms | TTFT mean ms | on b | cached share | prediction APE p50 / p90 (n) | corrected APE p50 / p90 (n) | wall s | load 1 min |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for r in results:
        print(
            f"| {r['variant']} ({r['steer_percent']}) | {r['requests']} | {len(r['errors'])} "
            f"| {r['ttft_p50']:.0f} | {r['ttft_p90']:.0f} | {r['ttft_mean']:.0f} "
            f"| {r['share_on_b']:.0%} | {r['cached_share']:.2f} "
            f"| {r['ape_p50']:.1%} / {r['ape_p90']:.1%} ({r['ape_n']}) "
            f"| {r['corrected_p50']:.1%} / {r['corrected_p90']:.1%} ({r['corrected_n']}) "
            f"| {r['wall_s']:.1f} "
            f"| {r['load_before']:.1f} → {r['load_after']:.1f} |"
        )
    if args.out:
        with open(args.out, "w") as f:
            json.dump({"fleet": args.fleet, "policy": args.policy, "seed": args.seed, "results": results}, f)
    if any(r["errors"] for r in results):
        sys.exit("ttft-steer: some requests failed: " + "; ".join(e for r in results for e in r["errors"][:3]))


if __name__ == "__main__":
    main()
