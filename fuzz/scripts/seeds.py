#!/usr/bin/env python3
"""Writes the seed inputs of every fuzz target into fuzz/corpus/<target>/.

Run from anywhere: python3 fuzz/scripts/seeds.py. Seeds are named seed-*,
so re-running overwrites them and leaves fuzzer-found inputs alone.
"""
import glob
import os

FUZZ = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ROOT = os.path.dirname(FUZZ)


def put(target, name, data):
    d = os.path.join(FUZZ, "corpus", target)
    os.makedirs(d, exist_ok=True)
    if isinstance(data, str):
        data = data.encode()
    with open(os.path.join(d, "seed-" + name), "wb") as f:
        f.write(data)


# --- sse: [m0, m1, n, lens.., stream] ---
BIG = b"\x00\x80"  # bit 15 set: max_event_bytes = 1 MiB
for path in sorted(glob.glob(os.path.join(ROOT, "crates/llamatap-wire/tests/fixtures/sse/*.txt"))):
    name = os.path.basename(path)[:-4]
    body = open(path, "rb").read()
    put("sse", name + "-raw", body)  # the fixture as is (its first bytes are the header)
    put("sse", name + "-bytewise", BIG + b"\x00" + body)
    put("sse", name + "-cuts", BIG + b"\x03\x07\x00\x1d" + body)
    put("sse", name + "-small-max", b"\x40\x00\x02\x05\x0b" + body)
put("sse", "bom-crlf", BIG + b"\x02\x02\x01" + b"\xef\xbb\xbfevent: a\r\ndata: x\r\n\r\ndata:y\rdata\r\r")
put("sse", "cr-split", BIG + b"\x01\x05" + b"data: 1\r\ndata: 2\r\r\n: c\n\n")
put("sse", "skip", b"\x08\x00\x01\x03" + b"data: 0123456789\n\ndata: ok\n\n:long comment here\n\n")
put("sse", "truncated", BIG + b"\x00" + b"data: a\n\ndata: b")

# --- sentence: [n, lens.., text] ---
texts = {
    "hello": "Hi there. How are you?",
    "dr": "Dr. Smith came. Then he left.",
    "initials": "J. R. R. Tolkien wrote it. Yes.",
    "list": "1. Boil water. 2. Add tea.",
    "no": "No. 5 is best. No. I won't.",
    "etc": "Pears, apples, etc. Then more. At 5 p.m. now. U.S. law.",
    "quote": 'He said "Stop." Then **Note.** ok',
    "cjk": "你好。我很好！本当？！「はい。」手法を示す．次に",
    "hindi": "नमस्ते। आप कैसे हैं? كيف حالك؟ أنا بخير",
    "heading": "# Heading\nText follows.\n- item\n",
    "fence": "```py\nx = 1.\n```\nDone. More",
    "rule": "---\n\U0001F44D\nOK. Next",
    "ellipsis": "Well... let me think!!! Really?! Yes…",
    "ws": "  \n Hi",
    "pi": "Pi is 3.14. See example.com. v1.2.3 works.",
    "russian": "Это т.е. пример. И т.д. Конец.",
    "german": "Das ist z.B. gut. Usw. auch.",
    "long": "word " * 450,
}
for name, text in texts.items():
    put("sentence", name + "-chars", b"\x00" + text.encode())
    put("sentence", name + "-whole", b"\x01\xff" + text.encode())
    put("sentence", name + "-cuts", b"\x03\x02\x00\x05" + text.encode())

# --- request: a body (or a path) ---
bodies = {
    "chat": '{"model":"qwen2.5-0.5b","messages":[{"role":"user","content":"hi"}],"stream":true,"max_tokens":64,"temperature":0.7,"top_p":0.9,"seed":42}',
    "native": '{"prompt":"Once","n_predict":-1,"stream":false,"seed":-1}',
    "responses": '\ufeff{"model":"m","input":"x","max_output_tokens":10,"max_completion_tokens":5}',
    "cut": '{"model":"tiny.gguf","stream":true,"messages":[{"role":"user","content":"a very long',
    "escaped": '{"mod\\u0065l":"a\\"b","model":"last","stream":"yes","temperature":1e400}',
    "long-model": '{"model":"' + "m" * 300 + '"}',
    "nested": '{"x":' + "[" * 200 + "]" * 200 + ',"model":"deep"}',
    "path-chat": "/v1/chat/completions?stream=true",
    "path-slots": "/slots/0#frag",
    "path-models": "/v1/models/",
    "path-messages": "/v1/messages/count_tokens",
    "path-encoded-chat": "/v1/chat/%63ompletions",
    "path-encoded-unicode": "/v1/c%u0068at/completions?stream=true",
    "path-encoded-rerank": "/v1/%72erank",
    "path-encoded-slash": "%2Fv1%2Fchat%2Fcompletions",
    "path-encoded-query": "/v1/chat/completions%3Fx=1",
    "path-encoded-twice": "/v1/chat/%2563ompletions",
    "path-encoded-broken": "/v1/chat/completions%u00%g0%",
    "path-transcriptions": "/v1/audio/transcriptions",
}
for name, body in bodies.items():
    put("request", name, body)

# --- llama: [k, name (k % 64 bytes), data] ---
def ev(name, data):
    name = name.encode()
    return bytes([len(name)]) + name + data.encode()

events = {
    "chat-fast": ev("", '{"choices":[{"finish_reason":null,"index":0,"delta":{"content":"Hello"}}],"created":1764493200,"id":"chatcmpl-1","model":"tiny.gguf","system_fingerprint":"b0","object":"chat.completion.chunk"}'),
    "chat-reasoning": ev("", '{"choices":[{"finish_reason":null,"index":0,"delta":{"reasoning_content":"Hm"}}],"created":1,"id":"c","model":"m","system_fingerprint":"b0","object":"chat.completion.chunk"}'),
    "chat-final": ev("", '{"choices":[{"finish_reason":"stop","index":0,"delta":{}}],"created":1,"id":"c","model":"m","object":"chat.completion.chunk","usage":{"completion_tokens":3,"prompt_tokens":5,"total_tokens":8,"prompt_tokens_details":{"cached_tokens":1}},"timings":{"prompt_n":5,"prompt_ms":1.5,"predicted_n":3,"predicted_ms":9.25,"cache_n":1}}'),
    "chat-tools": ev("", '{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"{\\"a\\":"}}]}}],"object":"chat.completion.chunk"}'),
    "done": ev("", "[DONE]"),
    "error": ev("error", '{"error":{"code":500,"message":"boom","type":"server_error"}}'),
    "completion": ev("", '{"choices":[{"text":" world","index":0,"logprobs":null,"finish_reason":null}],"created":1,"model":"m","object":"text_completion","id":"cmpl-1"}'),
    "native": ev("", '{"index":0,"content":"Hi","tokens":[],"stop":false,"id_slot":0,"tokens_predicted":1,"tokens_evaluated":4}'),
    "native-stop": ev("", '{"content":"","stop":true,"stop_type":"eos","model":"m","tokens_predicted":3,"tokens_evaluated":4,"timings":{"prompt_n":4,"prompt_ms":2,"predicted_n":3,"predicted_ms":5}}'),
    "anthropic-start": ev("message_start", '{"type":"message_start","message":{"id":"msg_1","type":"message","role":"assistant","content":[],"model":"m","stop_reason":null,"usage":{"input_tokens":5,"output_tokens":0,"cache_read_input_tokens":2}}}'),
    "anthropic-delta": ev("content_block_delta", '{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Hi"}}'),
    "anthropic-thinking": ev("content_block_delta", '{"type":"content_block_delta","index":0,"delta":{"type":"thinking_delta","thinking":"hm"}}'),
    "anthropic-msgdelta": ev("message_delta", '{"type":"message_delta","delta":{"stop_reason":"end_turn","stop_sequence":null},"usage":{"output_tokens":3}}'),
    "anthropic-stop": ev("message_stop", '{"type":"message_stop"}'),
    "anthropic-error": ev("error", '{"type":"error","error":{"type":"api_error","message":"bad"}}'),
    "responses-delta": ev("response.output_text.delta", '{"type":"response.output_text.delta","item_id":"m1","output_index":0,"content_index":0,"delta":"Hi"}'),
    "responses-created": ev("response.created", '{"type":"response.created","response":{"id":"resp_1","object":"response","model":"m","status":"in_progress"}}'),
    "responses-done": ev("response.completed", '{"type":"response.completed","response":{"id":"resp_1","model":"m","status":"completed","usage":{"input_tokens":5,"output_tokens":3,"total_tokens":8,"input_tokens_details":{"cached_tokens":0},"output_tokens_details":{"reasoning_tokens":1}}}}'),
    "responses-incomplete": ev("response.incomplete", '{"type":"response.incomplete","response":{"id":"r","status":"incomplete","incomplete_details":{"reason":"max_output_tokens"}}}'),
    "whole-chat": ev("", '{"choices":[{"finish_reason":"stop","index":0,"message":{"role":"assistant","content":"Hello there.","reasoning_content":"hm"}}],"created":1,"model":"m","object":"chat.completion","usage":{"completion_tokens":3,"prompt_tokens":5,"total_tokens":8},"id":"chatcmpl-1","timings":{"prompt_n":5,"predicted_n":3}}'),
    "whole-native-array": ev("", '[{"content":"a","stop":true,"stop_type":"limit","tokens_predicted":1,"tokens_evaluated":2},{"content":"bc","stop":true,"stop_type":"eos","tokens_predicted":2,"tokens_evaluated":2}]'),
    "whole-anthropic": ev("", '{"id":"msg_1","type":"message","role":"assistant","model":"m","content":[{"type":"text","text":"Hi"},{"type":"tool_use","id":"t","name":"f","input":{}}],"stop_reason":"tool_use","usage":{"input_tokens":3,"output_tokens":2}}'),
    "whole-responses": ev("", '{"id":"resp_1","object":"response","model":"m","status":"completed","output":[{"type":"message","content":[{"type":"output_text","text":"Hi"}]},{"type":"reasoning","summary":[]}],"usage":{"input_tokens":1,"output_tokens":2}}'),
    "whole-error": ev("", '{"error":{"code":400,"message":"the request exceeds the available context size","type":"exceed_context_size_error","n_prompt_tokens":9000,"n_ctx":4096}}'),
}
for name, data in events.items():
    put("llama", name, data)

# --- tracecontext: a traceparent or tracestate value ---
tc = {
    "tp-00": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
    "tp-ows": " \t00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00\t",
    "tp-future": "01-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-03-extra",
    "tp-upper": "00-0AF7651916CD43DD8448EB211C80319C-B7AD6B7169203331-01",
    "tp-zero": "00-00000000000000000000000000000000-b7ad6b7169203331-01",
    "tp-ff": "ff-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
    "ts-simple": "rojo=00f067aa0ba902b7,congo=t61rcWkgMzE",
    "ts-tenant": "tenant1@vendor=a b,x*y/z-_=1,,  ,c=2",
    "ts-dup": "a=1,a=2",
    "ts-bad": "A=1,b=,=c",
    "ts-many": ",".join(f"k{i}=v{i}" for i in range(33)),
}
for name, v in tc.items():
    put("tracecontext", name, v)

# --- config: TOML ---
put("config", "example", open(os.path.join(ROOT, "conf/llamatap.example.toml"), "rb").read())
cfg = {
    "minimal": 'upstream = "http://llama:8081/base/"\n',
    "ipv6": 'listen = "[::1]:8080"\nupstream = "http://[::1]:8081"\nadmin_listen = "127.0.0.1:0"\n',
    "auth": '[auth]\napi_keys = ["secret-key-1", "  spaced-key-2  ", ""]\nupstream_api_key = "up-key"\n[limits]\nmax_body_bytes = 1024\nmax_header_bytes = 4096\n',
    "telemetry": '[telemetry]\notlp_endpoint = "http://collector:4318"\notlp_protocol = "http/protobuf"\nsample_ratio = 0.25\nservice_name = "svc"\n',
    "bad-protocol": '[telemetry]\notlp_protocol = "udp\\nx"\n',
    "bad-listen": 'listen = "line1\\nline2\\u2028"\n',
    "bad-upstream": 'upstream = "https://x:0/?a"\n',
    "bad-toml": 'threads = \n[telemetry\nx = "\n',
    "unknown-key": '[models]\naliases = ["a"]\nrefresh = 3\n',
    "zero": 'threads = 0\n[upstream_timeouts]\nconnect_ms = 0\n',
    "admin": '[admin]\njaeger_url = "http://jaeger:16686"\nrecent_requests = 10\n[models]\naliases = ["m1", "m2"]\nrefresh_seconds = 5\n',
}
for name, text in cfg.items():
    put("config", name, text)
