//! Chat templates against transformers' `apply_chat_template` (fixtures of
//! `scripts/reference.py`), and the Jinja2/Python behaviours templates rely on.

use peregrine_model::testing::{load_reference, tokenizers_for};
use peregrine_model::tokenizer::{ChatTemplate, ChatTemplateError, Tokenizer};
use serde_json::{json, Map, Value};

fn check_chat(name: &str) {
    let (dir, reference) = load_reference(name);
    let chats = reference["chat"].as_array().expect("chat entries");
    assert!(!chats.is_empty(), "{name}: no chat entries");
    for (label, tok) in tokenizers_for(&dir, &reference) {
        let template = tok
            .chat_template()
            .unwrap_or_else(|| panic!("{label}: no chat template ({:?})", tok.chat_template_error()));
        for c in chats {
            let messages = &c["messages"];
            let gen = c["add_generation_prompt"].as_bool().unwrap();
            let rendered = template.render(messages, gen, None);
            if let Some(error) = c.get("error") {
                match rendered {
                    Err(ChatTemplateError::Raised { message }) => {
                        assert_eq!(message, error.as_str().unwrap(), "{label}: raise_exception message")
                    }
                    other => {
                        panic!("{label}: expected raise_exception({error}) for {messages}, got {other:?}")
                    }
                }
                continue;
            }
            let text = rendered.unwrap_or_else(|e| panic!("{label}: rendering {messages}: {e}"));
            let want = c["text"].as_str().unwrap();
            assert_eq!(text, want, "{label}: rendered chat differs from transformers for {messages}");
            let add = c["add_special_tokens"].as_bool().unwrap_or(false);
            let ids: Vec<u32> =
                c["ids"].as_array().unwrap().iter().map(|x| x.as_u64().unwrap() as u32).collect();
            assert_eq!(tok.encode(&text, add).unwrap(), ids, "{label}: ids of the rendered chat {text:?}");
            if !tok.decode_strips_leading_space() {
                assert_eq!(tok.decode(&ids, false).unwrap(), text, "{label}: decode of the chat ids");
            }
        }
    }
}

#[test]
fn chat_smollm2_q4_1() {
    check_chat("smollm2-q4_1");
}

#[test]
fn chat_tiny_llama() {
    check_chat("tiny-llama");
}

#[test]
fn chat_tiny_qwen2() {
    check_chat("tiny-qwen2");
}

#[test]
fn chat_tiny_mistral() {
    check_chat("tiny-mistral");
}

#[test]
fn chat_tiny_spm_gguf() {
    check_chat("tiny-spm-gguf");
}

// ---------------------------------------------------------------------------------------------
// No fixtures needed. Expected strings are what transformers' apply_chat_template renders
// (Jinja2 with trim_blocks and lstrip_blocks) for the same template and inputs.
// ---------------------------------------------------------------------------------------------

fn render(src: &str, messages: Value, gen: bool) -> Result<String, ChatTemplateError> {
    ChatTemplate::new(src, Some("<s>"), Some("</s>")).expect("compiles").render(&messages, gen, None)
}

#[test]
fn python_string_methods_and_raise_exception() {
    let src = "{% for m in messages %}\
        {% if m['role'] not in ['user', 'assistant'] %}{{ raise_exception('Unknown role: ' + m['role']) }}{% endif %}\
        {{ m['role'].upper() }}: {{ m['content'].strip() }}{% if m['content'].startswith(' ') %} (padded){% endif %}\n\
        {% endfor %}";
    let out = render(
        src,
        json!([{"role": "user", "content": "  hi there "}, {"role": "assistant", "content": "yo"}]),
        false,
    );
    // trim_blocks also eats the "\n" right after `{% endif %}`.
    assert_eq!(out.unwrap(), "USER: hi there (padded)ASSISTANT: yo");
    match render(src, json!([{"role": "tool", "content": "x"}]), false) {
        Err(ChatTemplateError::Raised { message }) => assert_eq!(message, "Unknown role: tool"),
        other => panic!("{other:?}"),
    }
    // Raised from inside a macro too.
    let macro_src =
        "{% macro check(m) %}{% if not m.content %}{{ raise_exception('empty') }}{% endif %}{% endmacro %}\
        {% for m in messages %}{{ check(m) }}{% endfor %}";
    match render(macro_src, json!([{"role": "user", "content": ""}]), false) {
        Err(e @ ChatTemplateError::Raised { .. }) => assert_eq!(e.to_string(), "empty"),
        other => panic!("{other:?}"),
    }
    let split =
        "{{ messages[0].content.split(',') | join('|') }} {{ messages[0].content.replace('a', 'b') }} \
        {{ messages[0].content.split() | length }} {{ ' x '.lstrip() }}.";
    assert_eq!(
        render(split, json!([{"role": "user", "content": "a,b a"}]), false).unwrap(),
        "a|b a b,b b 2 x ."
    );
}

#[test]
fn trim_and_lstrip_blocks_like_transformers() {
    // Jinja2 trim_blocks removes the newline after a block tag; lstrip_blocks the indentation before it.
    let src = "{% for m in messages %}\n    {% if m.role == 'user' %}\n[U] {{ m.content }}\n    {% endif %}\n{% endfor %}\n";
    assert_eq!(
        render(src, json!([{"role": "user", "content": "a"}, {"role": "user", "content": "b"}]), false)
            .unwrap(),
        "[U] a\n[U] b\n"
    );
    // The template's own final newline is dropped (keep_trailing_newline=False).
    assert_eq!(render("x\n", json!([]), false).unwrap(), "x");
    assert_eq!(
        render("{{ bos_token }}{% if add_generation_prompt %}GEN{% endif %}{{ eos_token }}", json!([]), true)
            .unwrap(),
        "<s>GEN</s>"
    );
}

#[test]
fn dict_methods_loop_controls_and_namespace() {
    let src = "{% set ns = namespace(n=0) %}{% for m in messages %}{% if loop.index0 == 2 %}{% break %}{% endif %}\
        {% for k, v in m.items() %}{% if k == 'role' %}{% continue %}{% endif %}{{ k }}={{ v }};{% endfor %}\
        {% set ns.n = ns.n + 1 %}{% endfor %}n={{ ns.n }} {{ messages[0].get('missing', 'dflt') }} {{ messages[0].keys() | list | length }}";
    let msgs = json!([{"role": "user", "content": "a", "name": "x"}, {"role": "assistant", "content": "b"}, {"role": "user", "content": "c"}]);
    assert_eq!(render(src, msgs, false).unwrap(), "content=a;name=x;content=b;n=2 dflt 3");
}

#[test]
fn values_print_as_python_and_tojson_as_transformers() {
    let msgs = json!([{"role": "assistant", "content": null, "tool_calls": [{"name": "f", "arguments": {"city": "Paris", "days": 3, "hot": true, "t": 1.5}}]}]);
    let src = "{{ messages[0].content }}|{{ messages[0].tool_calls[0].arguments }}|{{ messages[0].tool_calls[0].arguments | tojson }}|\
        {{ messages[0].tool_calls[0].arguments | tojson(indent=2) }}|{{ true }}|{{ none }}|{{ [1, 'a'] }}|{{ 'é<>&' | tojson }}|{{ 2.0 }}";
    let out = render(src, msgs, false).unwrap();
    let want = "None|{'city': 'Paris', 'days': 3, 'hot': True, 't': 1.5}|{\"city\": \"Paris\", \"days\": 3, \"hot\": true, \"t\": 1.5}|\
        {\n  \"city\": \"Paris\",\n  \"days\": 3,\n  \"hot\": true,\n  \"t\": 1.5\n}|True|None|[1, 'a']|\"é<>&\"|2.0";
    assert_eq!(out, want);
    assert_eq!(
        render("{{ {'b': 1, 'a': 2} | tojson(sort_keys=true) }}", json!([]), false).unwrap(),
        "{\"a\": 2, \"b\": 1}"
    );
    assert_eq!(render("{{ 'é' | tojson(ensure_ascii=true) }}", json!([]), false).unwrap(), "\"\\u00e9\"");
}

#[test]
fn extra_variables_tools_and_reasoning() {
    let src =
        "{% if tools is not none %}T{{ tools | length }}{% endif %}|{{ enable_thinking }}|{{ bos_token }}|\
        {% for m in messages %}{{ m.reasoning_content }}/{{ m.thinking }}{% endfor %}";
    let mut extra = Map::new();
    extra.insert("enable_thinking".into(), json!(false));
    extra.insert("bos_token".into(), json!("<BOS>"));
    let t = ChatTemplate::new(src, Some("<s>"), None).unwrap();
    let msgs = json!([{"role": "assistant", "content": "x", "reasoning": "because"}]);
    assert_eq!(t.render(&msgs, false, Some(&extra)).unwrap(), "|False|<BOS>|because/because");
    extra.insert("tools".into(), json!([{"type": "function"}]));
    assert_eq!(t.render(&json!([]), false, Some(&extra)).unwrap(), "T1|False|<BOS>|");
}

#[test]
fn strftime_now_and_generation_blocks() {
    let year = render("{{ strftime_now('%Y') }}", json!([]), false).unwrap();
    assert!(year.len() == 4 && year.starts_with("20"), "{year}");
    let src = "{% for m in messages %}{% if m.role == 'assistant' %}{% generation %}{{ m.content }}{% endgeneration %}{% else %}[{{ m.content }}]{% endif %}{% endfor %}";
    assert_eq!(
        render(src, json!([{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}]), false)
            .unwrap(),
        "[q]a"
    );
}

#[test]
fn errors_are_typed() {
    assert!(matches!(ChatTemplate::new("{% for %}", None, None), Err(ChatTemplateError::Syntax(_))));
    let t = ChatTemplate::new("{{ messages[0].content }}", None, None).unwrap();
    assert!(matches!(
        t.render(&json!({"role": "user"}), false, None),
        Err(ChatTemplateError::InvalidInput(_))
    ));
    assert!(matches!(t.render(&json!(["hi"]), false, None), Err(ChatTemplateError::InvalidInput(_))));
    assert!(matches!(
        ChatTemplate::new("{{ foo.bar.baz }}", None, None).unwrap().render(&json!([]), false, None),
        Err(ChatTemplateError::Render(_))
    ));
    // A runaway template is stopped, not run forever.
    let heavy = "{% for a in range(100000) %}{% for b in range(100000) %}{% endfor %}{% endfor %}";
    assert!(matches!(
        ChatTemplate::new(heavy, None, None).unwrap().render(&json!([]), false, None),
        Err(ChatTemplateError::Render(_))
    ));
}

/// `tokenizer_config.json` with a list of named templates and AddedToken-style special tokens.
#[test]
fn hf_config_variants() {
    let dir = std::env::temp_dir().join(format!("peregrine-chat-template-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let tokenizer = json!({
        "version": "1.0", "truncation": null, "padding": null,
        "added_tokens": [{"id": 0, "content": "<s>", "single_word": false, "lstrip": false, "rstrip": false, "normalized": false, "special": true}],
        "normalizer": null, "pre_tokenizer": {"type": "Whitespace"}, "post_processor": null, "decoder": null,
        "model": {"type": "WordLevel", "vocab": {"<s>": 0, "hello": 1, "world": 2, "</s>": 3, "[UNK]": 4}, "unk_token": "[UNK]"}
    });
    std::fs::write(dir.join("tokenizer.json"), tokenizer.to_string()).unwrap();
    let config = json!({
        "bos_token": {"__type": "AddedToken", "content": "<s>", "special": true},
        "eos_token": "</s>",
        "add_bos_token": true,
        "chat_template": [
            {"name": "default", "template": "{{ bos_token }}{{ messages[0].content }}"},
            {"name": "tool_use", "template": "TOOLS {{ eos_token }}"}
        ]
    });
    std::fs::write(dir.join("tokenizer_config.json"), config.to_string()).unwrap();
    let tok =
        Tokenizer::from_file(&dir.join("tokenizer.json"), Some(&dir.join("tokenizer_config.json"))).unwrap();
    assert_eq!(tok.encode("hello world", true).unwrap(), vec![0, 1, 2]);
    assert_eq!(tok.encode("hello world", false).unwrap(), vec![1, 2]);
    assert!(tok.add_bos_token() && !tok.add_eos_token());
    assert!(tok.is_special(3), "eos_token named in the config becomes special");
    assert_eq!(tok.eos_token_ids(), vec![3]);
    let msgs = json!([{"role": "user", "content": "hi"}]);
    assert_eq!(tok.chat_template().unwrap().render(&msgs, false, None).unwrap(), "<s>hi");
    assert_eq!(
        tok.named_chat_template("tool_use").unwrap().render(&msgs, false, None).unwrap(),
        "TOOLS </s>"
    );

    std::fs::write(dir.join("tokenizer_config.json"), "{\"chat_template\": 3}").unwrap();
    let err = Tokenizer::from_file(&dir.join("tokenizer.json"), Some(&dir.join("tokenizer_config.json")));
    assert!(err.is_err_and(|e| e.to_string().contains("chat_template")));
    std::fs::remove_dir_all(&dir).ok();
}

/// Malformed templates (e.g. from a damaged GGUF) are errors, never panics.
/// "{%}" is the input the fuzzer found: its "%}" overlaps the opening "{%".
#[test]
fn malformed_templates_are_errors() {
    for src in ["{%}{ m['content'] }}{% endfor %}", "{%", "{% if %}", "{{", "{% generation", "{%-}"] {
        if let Ok(t) = ChatTemplate::new(src, None, None) {
            assert!(t.render(&json!([]), false, None).is_err() || src.is_empty(), "{src:?} rendered");
        }
    }
}
