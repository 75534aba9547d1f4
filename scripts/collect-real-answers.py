#!/usr/bin/env python3
"""Collects real answers, token by token, for the first-sentence tests.

Asks a running llama-server (the real model, scripts/install-real-model.sh)
each prompt below, greedy, streamed, and writes one JSON line per answer:

  {"prompt": ..., "system": ..., "tokens": [[ms, "text"], ...], "end_ms": ms}

where `ms` is the arrival of the token's event in milliseconds after the
first one, `text` is the event's `delta.content` exactly as streamed (so
the cuts are llama-server's own token boundaries), and `end_ms` the arrival
of the event with the `finish_reason`. The fixture
crates/llamatap-wire/tests/fixtures/sentence/smollm2_answers.jsonl was made with:

  llama-server -m "$LLAMATAP_REAL_MODEL" --port 8090 -t 1 -np 1 &
  scripts/collect-real-answers.py http://127.0.0.1:8090 64 \
      > crates/llamatap-wire/tests/fixtures/sentence/smollm2_answers.jsonl

(the second argument is max_tokens, 96 by default). Greedy decoding makes
the texts the same on every run with the same build; the times are this
machine's at that moment.

Only the standard library is used.
"""

import json
import sys
import time
import urllib.request

VOICE = "You are a voice assistant. Answer briefly, in plain sentences."

PROMPTS = [
    (None, "What is the capital of France?"),
    (None, "How far is the Moon from the Earth?"),
    (None, "Who wrote Romeo and Juliet?"),
    (None, "What is the value of pi?"),
    (None, "Give me three tips for better sleep."),
    (None, "Explain photosynthesis in simple terms."),
    (None, "What does the abbreviation Dr. stand for?"),
    (None, "How many ounces are in a pound?"),
    (None, "What is the boiling point of water in Fahrenheit?"),
    (None, "Tell me a joke."),
    (None, "What is the population of the U.S.?"),
    (None, "Write a haiku about rain."),
    (None, "What is 15 percent of 80?"),
    (None, "Who was Martin Luther King Jr.?"),
    (None, "Name some tropical fruits."),
    (None, "How do I boil an egg?"),
    (None, "What is the speed of light?"),
    (None, "Why is the sky blue?"),
    (None, "What year did World War II end?"),
    (None, "Can you recommend a good book?"),
    (None, "What is machine learning?"),
    (None, "How do vaccines work?"),
    (None, "What's the weather like on Mars?"),
    (None, "Translate 'good morning' into Spanish."),
    (None, "What is the tallest mountain in the world?"),
    (None, "Summarize the plot of Cinderella."),
    (None, "What is the difference between a virus and a bacterium?"),
    (None, "Hi! How are you today?"),
    (None, "Give me a recipe for pancakes."),
    (None, "What time is it in Tokyo when it is noon in London?"),
    (None, "Who painted the Mona Lisa?"),
    (None, "What is Python used for?"),
    (None, "How many continents are there?"),
    (None, "What is the chemical formula of water?"),
    (None, "Tell me about Albert Einstein."),
    (None, "What is the GDP of Germany, approx.?"),
    (VOICE, "Set a timer for ten minutes."),
    (VOICE, "What should I cook for dinner tonight?"),
    (VOICE, "How long does it take to fly from New York to London?"),
    (VOICE, "Remind me what a prime number is."),
    (VOICE, "Is it going to rain tomorrow?"),
    (VOICE, "What is 3.5 times 2?"),
    (VOICE, "Who is the president of France?"),
    (VOICE, "Spell the word necessary."),
    (VOICE, "What's a good name for a dog?"),
    (VOICE, "How do I reset my Wi-Fi router?"),
    (VOICE, "What is the square root of 144?"),
    (VOICE, "Tell me a fun fact about octopuses."),
]


def ask(base, system, prompt, max_tokens):
    messages = [{"role": "user", "content": prompt}]
    if system:
        messages.insert(0, {"role": "system", "content": system})
    body = json.dumps({
        "messages": messages,
        "stream": True,
        "max_tokens": max_tokens,
        "temperature": 0.0,
        "seed": 42,
    }).encode()
    req = urllib.request.Request(
        base + "/v1/chat/completions", data=body,
        headers={"Content-Type": "application/json"})
    tokens = []
    start = None
    end = None
    with urllib.request.urlopen(req, timeout=120) as resp:
        for raw in resp:
            line = raw.decode("utf-8").rstrip("\n")
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            now = time.monotonic()
            event = json.loads(line[len("data: "):])
            for choice in event.get("choices", []):
                text = (choice.get("delta") or {}).get("content")
                if text:
                    start = now if start is None else start
                    tokens.append([round((now - start) * 1e3, 3), text])
                if choice.get("finish_reason") and start is not None:
                    end = round((now - start) * 1e3, 3)
    return tokens, end


def main():
    base = sys.argv[1].rstrip("/")
    max_tokens = int(sys.argv[2]) if len(sys.argv) > 2 else 96
    for system, prompt in PROMPTS:
        tokens, end = ask(base, system, prompt, max_tokens)
        line = {"prompt": prompt, "system": system, "tokens": tokens, "end_ms": end}
        print(json.dumps(line, ensure_ascii=False), flush=True)


if __name__ == "__main__":
    main()
