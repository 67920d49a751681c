"""Client conformance: real client libraries against a running `peregrine serve`.

CI starts the server, then runs
    PEREGRINE_URL=http://127.0.0.1:$PORT PEREGRINE_API_KEY=test-key python -m pytest -q scripts/test_clients.py
Needs: pip install openai huggingface_hub prometheus_client requests pytest.
PEREGRINE_MODEL overrides the served model name (default: the --model path CI passes).
Expectations about greedy output (a stop word, an early end-of-sequence) were checked against
SmolLM2-135M-Instruct with `peregrine generate`. Every request is small (<= 16 tokens).
"""
import os
import re
import time

import pytest

URL = os.environ.get("PEREGRINE_URL", "").rstrip("/")
KEY = os.environ.get("PEREGRINE_API_KEY", "")
if not URL:
    pytest.skip("PEREGRINE_URL is unset: start `peregrine serve ... --api-key KEY` and set "
                "PEREGRINE_URL (and PEREGRINE_API_KEY) to run the client conformance tests",
                allow_module_level=True)

import openai  # noqa: E402
import requests  # noqa: E402
from huggingface_hub import InferenceClient  # noqa: E402
from huggingface_hub.errors import HfHubHTTPError, ValidationError  # noqa: E402
from prometheus_client.parser import text_string_to_metric_families  # noqa: E402

MODEL = os.environ.get("PEREGRINE_MODEL", "models/SmolLM2-135M-Instruct.Q4_1.gguf")
AUTH = {"Authorization": f"Bearer {KEY}"}
TIMEOUT = 120
PROMPT = "Once upon a time, there was a"  # greedy: " small town nestled in the heart of a"
REPEAT = "one, one, one, one, one, one,"  # greedy repeats " one,"; a repetition penalty breaks that
CHAT = [{"role": "user", "content": "Say hi."}]  # greedy runs past 8 tokens
CHAT_EOS = [{"role": "user", "content": "What is the capital of France?"}]  # greedy ends with EOS


def post(path, body, headers=AUTH, **kw):
    return requests.post(URL + path, json=body, headers=headers, timeout=TIMEOUT, **kw)


def counts(usage):  # not *_tokens_details: a prefix-cache hit may differ between two requests
    return usage.prompt_tokens, usage.completion_tokens, usage.total_tokens


def text_of(chunks):
    return "".join(c.choices[0].text for c in chunks if c.choices)


@pytest.fixture(scope="module")
def client():
    """Validates non-streamed bodies against the SDK's pydantic types (required fields, enums)."""
    return openai.OpenAI(base_url=URL + "/v1", api_key=KEY, max_retries=0, timeout=TIMEOUT,
                         _strict_response_validation=True)


@pytest.fixture(scope="module")
def loose():
    """For streamed /v1/completions: `Completion.choices[].finish_reason` is a required enum in the
    SDK's type, but it is null in every chunk but the last, as in OpenAI's and vLLM's streams."""
    return openai.OpenAI(base_url=URL + "/v1", api_key=KEY, max_retries=0, timeout=TIMEOUT)


@pytest.fixture(scope="module")
def greedy(client):
    return client.completions.create(model=MODEL, prompt=PROMPT, max_tokens=8, temperature=0)


@pytest.fixture(scope="module")
def hf():
    return InferenceClient(model=URL, token=KEY, timeout=TIMEOUT)


@pytest.fixture(scope="module")
def tgi_greedy(hf):
    return hf.text_generation(PROMPT, max_new_tokens=8, do_sample=False, details=True,
                              decoder_input_details=True)


# ---------------------------------------------------------------- OpenAI SDK

def test_models_list(client):
    models = client.models.list().data
    assert MODEL in [m.id for m in models]
    assert all(m.object == "model" and isinstance(m.owned_by, str) for m in models)


def test_completion(greedy):
    assert len(greedy.choices) == 1
    choice = greedy.choices[0]
    assert choice.index == 0 and isinstance(choice.text, str) and choice.text
    assert choice.finish_reason in ("length", "stop")
    u = greedy.usage
    assert u.prompt_tokens > 0 and 0 < u.completion_tokens <= 8
    assert u.total_tokens == u.prompt_tokens + u.completion_tokens
    assert greedy.object == "text_completion" and greedy.model == MODEL


def test_completion_stream(loose, greedy):
    chunks = list(loose.completions.create(model=MODEL, prompt=PROMPT, max_tokens=8,
                                           temperature=0, stream=True))
    assert text_of(chunks) == greedy.choices[0].text
    assert chunks[-1].choices[0].finish_reason == greedy.choices[0].finish_reason
    assert all(c.choices[0].finish_reason is None for c in chunks[:-1])
    assert all(c.usage is None for c in chunks)

    chunks = list(loose.completions.create(model=MODEL, prompt=PROMPT, max_tokens=8, temperature=0,
                                           stream=True, stream_options={"include_usage": True}))
    assert text_of(chunks) == greedy.choices[0].text
    assert chunks[-1].choices == [] and chunks[-1].usage is not None
    assert counts(chunks[-1].usage) == counts(greedy.usage)
    assert all(c.usage is None for c in chunks[:-1])
    assert chunks[-2].choices[0].finish_reason == greedy.choices[0].finish_reason


def test_chat(client):
    full = client.chat.completions.create(model=MODEL, messages=CHAT, max_tokens=8, temperature=0)
    msg = full.choices[0].message
    assert msg.role == "assistant" and isinstance(msg.content, str) and msg.content
    assert full.choices[0].finish_reason in ("length", "stop")
    assert 0 < full.usage.completion_tokens <= 8

    chunks = list(client.chat.completions.create(
        model=MODEL, messages=CHAT, max_tokens=8, temperature=0, stream=True,
        stream_options={"include_usage": True}))
    assert chunks[0].choices[0].delta.role == "assistant"
    assert all(c.object == "chat.completion.chunk" and c.id == chunks[0].id for c in chunks)
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == msg.content
    assert chunks[-2].choices[0].finish_reason == full.choices[0].finish_reason
    assert chunks[-1].choices == [] and counts(chunks[-1].usage) == counts(full.usage)


def test_n_choices(client):
    out = client.completions.create(model=MODEL, prompt=PROMPT, max_tokens=4, temperature=1.0,
                                    n=3, seed=7)
    assert sorted(c.index for c in out.choices) == [0, 1, 2]
    assert all(isinstance(c.text, str) for c in out.choices)
    assert out.usage.completion_tokens <= 12


def test_completion_logprobs(client, greedy):
    out = client.completions.create(model=MODEL, prompt=PROMPT, max_tokens=8, temperature=0,
                                    logprobs=2)
    lp, n = out.choices[0].logprobs, out.usage.completion_tokens
    assert out.choices[0].text == greedy.choices[0].text
    assert len(lp.tokens) == len(lp.token_logprobs) == len(lp.top_logprobs) == n
    assert "".join(lp.tokens) == out.choices[0].text
    assert all(x <= 0 for x in lp.token_logprobs)
    for tok, x, top in zip(lp.tokens, lp.token_logprobs, lp.top_logprobs):
        assert 1 <= len(top) <= 3 and all(v <= 0 for v in top.values())
        assert tok in top and x == pytest.approx(max(top.values()), abs=1e-4)  # greedy: top-1


def test_chat_logprobs(client):
    out = client.chat.completions.create(model=MODEL, messages=CHAT, max_tokens=8, temperature=0,
                                         logprobs=True, top_logprobs=2)
    content = out.choices[0].logprobs.content
    assert len(content) == out.usage.completion_tokens
    assert "".join(e.token for e in content) == out.choices[0].message.content
    for e in content:
        assert isinstance(e.token, str) and e.logprob <= 0
        assert len(e.top_logprobs) == 2
        assert e.top_logprobs[0].logprob >= e.top_logprobs[1].logprob
        assert e.logprob == pytest.approx(e.top_logprobs[0].logprob, abs=1e-4)


def test_stop_string(client, greedy):
    text = greedy.choices[0].text
    words = re.findall(r"[A-Za-z]{4,}", text)
    assert len(words) >= 2, f"greedy text has too few words to pick a stop from: {text!r}"
    word = words[1]
    out = client.completions.create(model=MODEL, prompt=PROMPT, max_tokens=8, temperature=0,
                                    stop=[word])
    assert word not in out.choices[0].text
    assert out.choices[0].text == text[:text.index(word)]
    assert out.choices[0].finish_reason == "stop"


def test_seed_reproducible(client):
    a, b = (client.completions.create(model=MODEL, prompt=PROMPT, max_tokens=8, temperature=1.0,
                                      seed=42).choices[0].text for _ in range(2))
    assert a == b


def test_wrong_api_key():
    bad = openai.OpenAI(base_url=URL + "/v1", api_key="wrong-key", max_retries=0, timeout=TIMEOUT)
    with pytest.raises(openai.AuthenticationError) as e:
        bad.models.list()
    assert e.value.status_code == 401


def test_unknown_model(client):
    with pytest.raises(openai.NotFoundError) as e:
        client.completions.create(model="no-such-model", prompt=PROMPT, max_tokens=1)
    assert e.value.status_code == 404


def test_bad_temperature(client):
    with pytest.raises(openai.BadRequestError) as e:
        client.completions.create(model=MODEL, prompt=PROMPT, max_tokens=1, temperature=-1)
    assert e.value.param == "temperature"
    assert isinstance(e.value.body, dict) and isinstance(e.value.type, str) and e.value.message


def test_max_tokens_over_context(client):
    with pytest.raises(openai.BadRequestError):
        client.completions.create(model=MODEL, prompt=PROMPT, max_tokens=10_000_000)


@pytest.mark.parametrize("extra", [
    {"response_format": {"type": "json_schema", "json_schema": {
        "name": "answer", "schema": {"type": "object", "properties": {"a": {"type": "string"}}}}}},
    {"tools": [{"type": "function", "function": {
        "name": "get_weather", "parameters": {"type": "object", "properties": {}}}}]},
], ids=["json_schema", "tools"])
def test_unsupported_chat_features(client, extra):
    with pytest.raises(openai.BadRequestError) as e:
        client.chat.completions.create(model=MODEL, messages=CHAT, max_tokens=4, **extra)
    assert "not supported" in e.value.message


# ---------------------------------------------------------------- vLLM extras (extra_body)

def complete(client, prompt=PROMPT, max_tokens=8, **extra_body):
    temperature = extra_body.pop("temperature", 0)
    return client.completions.create(model=MODEL, prompt=prompt, max_tokens=max_tokens,
                                     temperature=temperature, seed=3, extra_body=extra_body)


def chat(client, max_tokens, **extra_body):
    return client.chat.completions.create(model=MODEL, messages=CHAT_EOS, max_tokens=max_tokens,
                                          temperature=0, extra_body=extra_body)


def test_top_k_and_min_p_one_are_greedy(client, greedy):
    assert complete(client, temperature=1.0, top_k=1).choices[0].text == greedy.choices[0].text
    assert complete(client, temperature=1.0, min_p=1.0).choices[0].text == greedy.choices[0].text


def test_repetition_penalty(client):
    plain = complete(client, prompt=REPEAT).choices[0].text
    assert plain.count(" one,") >= 3, plain
    assert complete(client, prompt=REPEAT, repetition_penalty=1.5).choices[0].text != plain


def test_ignore_eos_and_min_tokens(client):
    base = chat(client, 16)  # " The capital of France is Paris." + EOS: 8 tokens, EOS counted
    assert base.choices[0].finish_reason == "stop" and base.usage.completion_tokens <= 8
    out = chat(client, 12, ignore_eos=True)
    assert out.usage.completion_tokens == 12 and out.choices[0].finish_reason == "length"
    assert chat(client, 12, min_tokens=10).usage.completion_tokens >= 10


def test_stop_token_ids(client, greedy):
    text = greedy.choices[0].text
    ids = post("/tokenize", {"model": MODEL, "prompt": text, "add_special_tokens": False}).json()["tokens"]
    pos = ids.index(ids[3])
    out = complete(client, stop_token_ids=[ids[3]])
    assert out.choices[0].finish_reason == "stop"
    assert out.usage.completion_tokens <= pos + 1
    assert text.startswith(out.choices[0].text) and len(out.choices[0].text) < len(text)


# ---------------------------------------------------------------- huggingface_hub (TGI routes)

def test_tgi_generate(hf, tgi_greedy, greedy):
    text = hf.text_generation(PROMPT, max_new_tokens=8, do_sample=False)
    assert isinstance(text, str) and text and text == tgi_greedy.generated_text
    assert text == greedy.choices[0].text  # the same engine behind both APIs
    d = tgi_greedy.details
    assert d.finish_reason in ("length", "eos_token", "stop_sequence")
    assert 0 < d.generated_tokens <= 8 and len(d.tokens) == d.generated_tokens
    for t in d.tokens:
        assert isinstance(t.id, int) and isinstance(t.text, str) and isinstance(t.special, bool)
        assert isinstance(t.logprob, float) and t.logprob <= 0
    assert d.prefill and all(isinstance(p.id, int) and isinstance(p.text, str) for p in d.prefill)
    assert all(p.logprob <= 0 for p in d.prefill[1:])


def test_tgi_stream(hf, tgi_greedy):
    items = list(hf.text_generation(PROMPT, max_new_tokens=8, do_sample=False, stream=True,
                                    details=True))
    assert "".join(i.token.text for i in items if not i.token.special) == tgi_greedy.generated_text
    assert all(i.details is None and i.generated_text is None for i in items[:-1])
    last = items[-1]
    assert last.generated_text == tgi_greedy.generated_text
    assert last.details.finish_reason == tgi_greedy.details.finish_reason
    assert last.details.generated_tokens == len(items) and last.details.input_length > 0
    assert all(isinstance(i.token.logprob, float) and i.token.logprob <= 0 for i in items)
    tokens = hf.text_generation(PROMPT, max_new_tokens=8, do_sample=False, stream=True)
    assert "".join(tokens) == tgi_greedy.generated_text


def test_tgi_explicit_routes(hf, tgi_greedy):
    text = hf.text_generation(PROMPT, model=URL + "/generate", max_new_tokens=8, do_sample=False)
    assert text == tgi_greedy.generated_text
    tokens = hf.text_generation(PROMPT, model=URL + "/generate_stream", max_new_tokens=8,
                                do_sample=False, stream=True)
    assert "".join(tokens) == tgi_greedy.generated_text


def test_tgi_stop_sequences(hf, tgi_greedy):
    text = tgi_greedy.generated_text
    word = re.findall(r"[A-Za-z]{4,}", text)[1]
    out = hf.text_generation(PROMPT, max_new_tokens=8, do_sample=False, stop=[word], details=True)
    assert out.details.finish_reason == "stop_sequence"
    assert text.startswith(out.generated_text) and len(out.generated_text) < len(text)


@pytest.mark.parametrize("bad", [{"temperature": -1.0}, {"top_p": 2.0}], ids=["temperature", "top_p"])
def test_tgi_invalid_parameter(hf, bad):
    # huggingface_hub turns a 422 whose body is {"error": ..., "error_type": "validation"} into
    # ValidationError, raised from the HfHubHTTPError.
    with pytest.raises(ValidationError) as e:
        hf.text_generation(PROMPT, max_new_tokens=2, **bad)
    assert isinstance(e.value.__cause__, HfHubHTTPError)
    assert e.value.__cause__.response.status_code == 422


def test_info_and_health():
    assert requests.get(URL + "/health", timeout=TIMEOUT).status_code == 200  # no auth needed
    info = requests.get(URL + "/info", headers=AUTH, timeout=TIMEOUT).json()
    assert info["model_id"] == MODEL
    for k in ("max_input_tokens", "max_total_tokens", "max_concurrent_requests"):
        assert isinstance(info[k], int) and info[k] > 0, k
    assert info["max_input_tokens"] < info["max_total_tokens"]


def test_tokenize_and_detokenize():
    text = "Hello world"
    tgi = post("/tokenize", {"inputs": text})
    assert tgi.status_code == 200
    tgi = tgi.json()
    assert isinstance(tgi, list) and tgi
    for t in tgi:
        assert isinstance(t["id"], int) and text[t["start"]:t["stop"]] == t["text"]
    vllm = post("/tokenize", {"model": MODEL, "prompt": text}).json()  # vLLM's shape
    assert vllm["tokens"] == [t["id"] for t in tgi]
    assert vllm["count"] == len(vllm["tokens"]) and isinstance(vllm["max_model_len"], int)

    plain = "The quick brown fox, naïve café — 42!"
    ids = post("/tokenize", {"model": MODEL, "prompt": plain, "add_special_tokens": False}).json()["tokens"]
    back = post("/detokenize", {"model": MODEL, "tokens": ids})
    assert back.status_code == 200 and back.json()["prompt"] == plain

    chat_count = post("/tokenize", {"model": MODEL, "messages": CHAT}).json()["count"]
    assert chat_count > post("/tokenize", {"model": MODEL, "prompt": CHAT[0]["content"]}).json()["count"]


# ---------------------------------------------------------------- raw HTTP: errors, metrics

@pytest.mark.parametrize("path", ["/v1/completions", "/v1/chat/completions"])
def test_malformed_json(path):
    r = requests.post(URL + path, data=b'{"model": "x", "prompt": ', timeout=TIMEOUT,
                      headers={**AUTH, "Content-Type": "application/json"})
    assert r.status_code == 400
    err = r.json()["error"]
    assert isinstance(err["message"], str) and err["message"] and isinstance(err["type"], str)


@pytest.mark.parametrize("method,path", [("GET", "/v1/models"), ("POST", "/v1/completions"),
                                         ("POST", "/generate")])
def test_missing_auth(method, path):
    r = requests.request(method, URL + path, json={"model": MODEL, "prompt": "hi", "inputs": "hi"},
                         timeout=TIMEOUT)
    assert r.status_code == 401
    if path.startswith("/v1/"):
        assert isinstance(r.json()["error"]["message"], str)


COUNTERS = ["vllm:prompt_tokens", "vllm:generation_tokens", "vllm:request_success",
            "vllm:prefix_cache_queries", "vllm:prefix_cache_hits"]
GAUGES = ["vllm:num_requests_running", "vllm:num_requests_waiting", "vllm:kv_cache_usage_perc"]
HISTOGRAMS = ["vllm:time_to_first_token_seconds", "vllm:inter_token_latency_seconds",
              "vllm:e2e_request_latency_seconds", "vllm:request_queue_time_seconds"]


def scrape():
    r = requests.get(URL + "/metrics", timeout=TIMEOUT)  # no auth needed
    assert r.status_code == 200
    return {f.name: f for f in text_string_to_metric_families(r.text)}


def total(fams, name, suffix):
    return sum(s.value for s in fams[name].samples if s.name == name + suffix)


def test_metrics(client):
    client.completions.create(model=MODEL, prompt=PROMPT, max_tokens=4, temperature=0)
    deadline = time.monotonic() + 5  # a server may record a request just after answering it
    fams = scrape()
    while time.monotonic() < deadline and not (
            "vllm:generation_tokens" in fams and total(fams, "vllm:generation_tokens", "_total") > 0):
        time.sleep(0.2)
        fams = scrape()
    for kind, names in (("counter", COUNTERS), ("gauge", GAUGES), ("histogram", HISTOGRAMS)):
        for n in names:
            assert n in fams and fams[n].type == kind, f"{n}: want a {kind}, have {sorted(fams)}"
    assert total(fams, "vllm:generation_tokens", "_total") > 0, \
        "no vllm:generation_tokens_total samples (a counter's HELP/TYPE lines name it with _total)"
    assert total(fams, "vllm:prompt_tokens", "_total") > 0
    assert total(fams, "vllm:time_to_first_token_seconds", "_count") > 0
    success = [s for s in fams["vllm:request_success"].samples if s.name.endswith("_total")]
    assert success and all("finished_reason" in s.labels for s in success)
    assert sum(s.value for s in success) > 0
    for n in GAUGES:
        assert all(s.value >= 0 for s in fams[n].samples)
