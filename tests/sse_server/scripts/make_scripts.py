#!/usr/bin/env python3
"""Writes the scripted-server scripts used by tests/unit/test_bench_cli.c and the README demo.
Run from this directory; the JSON files are committed, so tests never need Python."""
import json


def chunk(delta, finish=None, usage=None, model="demo"):
    c = {"id": "chatcmpl-demo", "object": "chat.completion.chunk", "created": 1, "model": model,
         "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}
    if usage is not None:
        c["usage"] = usage
    return c


def usage(p, c, cached, r):
    u = {"prompt_tokens": p, "completion_tokens": c, "total_tokens": p + c}
    if cached is not None:
        u["prompt_tokens_details"] = {"cached_tokens": cached}
    if r is not None:
        u["completion_tokens_details"] = {"reasoning_tokens": r}
    return u


def demo_stream(ttft, prompt, cached):
    """12 tokens: 4 reasoning (1 per chunk), 4 content, 2 chunks of 2 content tokens; 12 ms per
    token throughout; continuous usage on every chunk."""
    ev = [{"delay_ms": 2, "data": chunk({"role": "assistant", "content": ""}, usage=usage(prompt, 0, cached, 0))}]
    n = r = 0
    for i in range(4):
        n += 1
        r += 1
        ev.append({"delay_ms": ttft - 2 if i == 0 else 12,
                   "data": chunk({"reasoning_content": " think"}, usage=usage(prompt, n, cached, r))})
    for i in range(4):
        n += 1
        ev.append({"delay_ms": 12, "data": chunk({"content": " word"}, usage=usage(prompt, n, cached, r))})
    for i in range(2):
        n += 2
        ev.append({"delay_ms": 24, "data": chunk({"content": " two words"}, usage=usage(prompt, n, cached, r))})
    ev.append({"delay_ms": 1, "data": chunk({}, finish="length", usage=usage(prompt, n, cached, r))})
    ev.append({"delay_ms": 1, "data": "[DONE]"})
    return {"status": 200, "events": ev}


def bench_demo():
    cold = "\"content\":\"["  # cold prompts start with a unique "[nonce-i]" line
    # TTFT grows with the prompt (body size stands in for it); warm requests hit the cache
    cases = [
        {"contains": cold, "min_len": 40000, "response": demo_stream(240, 8192, 0)},
        {"contains": cold, "min_len": 10000, "response": demo_stream(90, 2048, 0)},
        {"contains": cold, "response": demo_stream(60, 512, 0)},
        {"min_len": 40000, "response": demo_stream(30, 8192, 8176)},
        {"min_len": 10000, "response": demo_stream(20, 2048, 2032)},
        {"response": demo_stream(15, 512, 496)},
    ]
    return {"routes": {
        "GET /v1/models": {"json": {"object": "list", "data": [
            {"id": "demo", "object": "model", "owned_by": "gantry", "max_model_len": 4096}]}},
        "POST /tokenize": {"tokenize": "words"},
        "GET /health": {"json": {"status": "ok"}},
        "GET /ready": {"json": {"status": "ready"}},
        "POST /v1/chat/completions": {"switch": cases}}}


def text_stream(words, p, cached):
    ev = [{"delay_ms": 2, "data": chunk({"role": "assistant", "content": ""}, model="tiny")}]
    for i, w in enumerate(words):
        ev.append({"delay_ms": 10 if i else 20,
                   "data": chunk({"content": w}, finish="stop" if i == len(words) - 1 else None, model="tiny")})
    ev.append({"delay_ms": 1, "data": {"id": "chatcmpl-chk", "object": "chat.completion.chunk", "choices": [],
                                       "usage": usage(p, len(words), cached, None)}})
    ev.append({"delay_ms": 1, "data": "[DONE]"})
    return {"status": 200, "events": ev}


def check(good):
    tool = {"status": 200, "events": [
        {"delay_ms": 2, "data": chunk({"role": "assistant", "content": None}, model="tiny")},
        {"delay_ms": 20, "data": chunk({"tool_calls": [{"index": 0, "id": "call_7", "type": "function",
                                                        "function": {"name": "get_weather", "arguments": ""}}]},
                                       model="tiny")},
        {"delay_ms": 10, "data": chunk({"tool_calls": [{"index": 0, "function": {"arguments": "{\"city\": "}}]},
                                       model="tiny")},
        {"delay_ms": 10, "data": chunk({"tool_calls": [{"index": 0, "function": {"arguments": "\"Paris\"}"}}]},
                                       finish="tool_calls", model="tiny")},
        {"delay_ms": 1, "data": {"id": "chatcmpl-chk", "object": "chat.completion.chunk", "choices": [],
                                 "usage": usage(40, 9, 0, None)}},
        {"delay_ms": 1, "data": "[DONE]"}]}
    too_long = {"status": 400, "json": {"error": {
        "message": "prompt is 2823 tokens, the model's context is 1024", "type": "invalid_request_error",
        "param": "messages", "code": "context_length_exceeded"}}}
    cases = [{"contains": "tool_call_id", "response": text_stream([" It", " is", " 21C"], 60, 0)},
             {"contains": "get_weather", "response": tool}]
    if good:  # the over-long prompt (2 x max_model_len words) is rejected cleanly
        cases.append({"min_len": 10000, "response": too_long})
    cases.append({"response": text_stream(["Rivers", " run", " to", " the", " sea", "."], 30,
                                           384 if good else None)})
    ready = {"json": {"status": "ready"}} if good else \
        {"status": 503, "json": {"error": {"message": "no engine ready", "type": "unavailable"}}}
    return {"routes": {
        "GET /health": {"json": {"status": "ok"}},
        "GET /ready": ready,
        "GET /v1/models": {"json": {"object": "list", "data": [
            {"id": "tiny", "object": "model", "max_model_len": 1024}]}},
        "POST /v1/chat/completions": {"switch": cases}}}


if __name__ == "__main__":
    for name, s in (("bench_demo.json", bench_demo()), ("check_pass.json", check(True)),
                    ("check_fail.json", check(False))):
        with open(name, "w") as f:
            json.dump(s, f, indent=1)
            f.write("\n")
