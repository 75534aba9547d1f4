"""The quick start's first question: once llamatap is ready, asks it one
question, streamed, prints the answer as it arrives, then llamatap's own
figures for that request (time to first token, to first sentence, the
whole answer), read from its latency page's data (/latency.json).

    python3 scripts/lib/first-question.py PROXY_ADDR ADMIN_ADDR QUESTION [LLAMATAP_PID]

Standard library only. Writes to stderr, as the rest of quickstart.sh
does. Exits 1 when llamatap is not ready within two minutes, or the
question is not answered; the script goes on serving either way.
"""

import json
import os
import sys
import time
import urllib.error
import urllib.request

READY_WITHIN = 120.0
ANSWER_WITHIN = 120.0
RECORD_WITHIN = 10.0


def say(text="", end="\n"):
    sys.stderr.write(text + end)
    sys.stderr.flush()


def alive(pid):
    """The process runs (not gone, not a zombie)."""
    if pid is None:
        return True
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


def get(url, timeout=2.0):
    with urllib.request.urlopen(url, timeout=timeout) as r:
        return r.status, r.read()


def wait_ready(admin, pid):
    deadline = time.monotonic() + READY_WITHIN
    while time.monotonic() < deadline:
        if not alive(pid):
            return False
        try:
            if get(f"http://{admin}/readyz")[0] == 200:
                return True
        except (OSError, urllib.error.URLError):
            pass
        time.sleep(0.1)
    return False


def ask(proxy, question):
    """Streams the answer to stderr as it arrives; returns its text."""
    body = json.dumps(
        {
            "messages": [{"role": "user", "content": question}],
            "stream": True,
            "max_tokens": 64,
            "temperature": 0,
        }
    ).encode()
    req = urllib.request.Request(
        f"http://{proxy}/v1/chat/completions",
        data=body,
        headers={"Content-Type": "application/json"},
    )
    text = []
    with urllib.request.urlopen(req, timeout=ANSWER_WITHIN) as r:
        for raw in r:
            line = raw.decode("utf-8", "replace").strip()
            if not line.startswith("data:"):
                continue
            data = line[5:].strip()
            if data == "[DONE]":
                break
            try:
                event = json.loads(data)
            except ValueError:
                continue
            for choice in event.get("choices") or []:
                piece = (choice.get("delta") or {}).get("content") or ""
                if piece:
                    if not text:
                        piece = piece.lstrip()
                    text.append(piece)
                    say(piece, end="")
    say()
    return "".join(text)


def record(admin):
    """llamatap's record of the request just answered (the newest one),
    once it is written (right after the answer's end)."""
    deadline = time.monotonic() + RECORD_WITHIN
    while time.monotonic() < deadline:
        try:
            _, body = get(f"http://{admin}/latency.json")
            requests = json.loads(body).get("requests") or []
            if requests:
                return requests[-1]
        except (OSError, ValueError, urllib.error.URLError):
            pass
        time.sleep(0.05)
    return None


def ms(value):
    return "–" if value is None else f"{value:.0f} ms"


def main():
    proxy, admin, question = sys.argv[1:4]
    pid = int(sys.argv[4]) if len(sys.argv) > 4 else None
    if not wait_ready(admin, pid):
        say(f"quickstart: llamatap not ready (see http://{admin}/readyz); no first question asked")
        return 1
    say()
    say(f"  > {question}")
    say("  ", end="")
    try:
        answer = ask(proxy, question)
    except (OSError, urllib.error.URLError) as e:
        say(f"quickstart: the first question failed: {e}")
        return 1
    if not answer:
        say("  (an empty answer)")
    r = record(admin)
    if r is None:
        say(f"quickstart: llamatap's record of the request did not appear on http://{admin}/latency.json")
        return 1
    tokens = r.get("output_tokens")
    sentence = r.get("first_sentence_ms")
    say()
    say("  as llamatap measured it, from the request's arrival:")
    say(f"    first token     {ms(r.get('ttft_ms'))}")
    say(
        f"    first sentence  {ms(sentence)}"
        + ("  (no complete sentence in the answer)" if sentence is None else "")
    )
    say(
        f"    whole answer    {ms(r.get('e2e_ms'))}"
        + (f", {tokens} tokens" if tokens is not None else "")
    )
    say(f"  (the request's waterfall: http://{admin}/latency)")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt:
        sys.exit(130)
