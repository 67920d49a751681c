//! The `peregrine` binary as a user runs it: generate (raw and chat), inspect,
//! dummy weights, and the errors of bad arguments.

mod common;

use common::peregrine;
use peregrine_model::testing::{default_model_path, reference_dir};

#[test]
fn generate_completes_a_prompt_greedily_and_reports_speed() {
    let model = default_model_path();
    let (ok, stdout, stderr) = peregrine(&[
        "generate",
        "-m",
        model.to_str().unwrap(),
        "-p",
        "The capital of France is",
        "--max-tokens",
        "8",
        "--threads",
        "2",
    ]);
    assert!(ok, "{stderr}");
    // transformers' greedy continuation starts " Paris.\n\nThe" (scripts/reference.py, case ascii).
    assert!(stdout.starts_with(" Paris.\n\nThe"), "{stdout:?}");
    assert!(stderr.contains("prompt: 5 tokens") && stderr.contains("generation: 8 tokens"), "{stderr}");
}

#[test]
fn generate_applies_the_chat_template_and_stops_at_eos() {
    let model = default_model_path();
    let (ok, stdout, stderr) = peregrine(&[
        "generate",
        "-m",
        model.to_str().unwrap(),
        "--chat",
        "-p",
        "What is the capital of France?",
        "--max-tokens",
        "64",
    ]);
    assert!(ok, "{stderr}");
    assert!(stdout.contains("Paris"), "{stdout:?}");
    // It stopped at <|im_end|> before the token limit and printed no special tokens.
    assert!(!stderr.contains("generation: 64 tokens"), "{stderr}");
    assert!(!stdout.contains("<|im_end|>"), "{stdout:?}");
}

#[test]
fn seeded_sampling_is_reproducible() {
    let model = default_model_path();
    let run = |seed: &str| {
        let m = model.to_str().unwrap();
        let args = [
            "generate",
            "-m",
            m,
            "-p",
            "Once upon a time",
            "--max-tokens",
            "12",
            "--temperature",
            "0.9",
            "--top-p",
            "0.95",
            "--seed",
            seed,
        ];
        peregrine(&args).1
    };
    assert_eq!(run("11"), run("11"));
    assert_ne!(run("11"), run("12"));
}

#[test]
fn inspect_describes_the_default_model() {
    let (ok, stdout, stderr) = peregrine(&["model", "inspect", "-m", default_model_path().to_str().unwrap()]);
    assert!(ok, "{stderr}");
    for want in [
        "architecture:   llama",
        "layers:         30",
        "Q4_1    210 tensors",
        "Q8_0      1 tensors",
        "<|im_end|> (2)",
        "chat template:",
    ] {
        assert!(stdout.contains(want), "missing {want:?} in\n{stdout}");
    }
}

#[test]
fn dummy_weights_run_from_a_config_alone() {
    let dir = reference_dir("tiny-llama");
    let (ok, stdout, stderr) = peregrine(&[
        "generate",
        "-m",
        dir.to_str().unwrap(),
        "--load-format",
        "dummy",
        "-p",
        "hello",
        "--max-tokens",
        "4",
        "--ignore-eos",
    ]);
    assert!(ok, "{stderr}");
    assert!(stderr.contains("generation: 4 tokens"), "{stderr}{stdout}");
    let (ok, stdout, _) =
        peregrine(&["model", "inspect", "-m", dir.to_str().unwrap(), "--load-format", "dummy"]);
    assert!(ok && stdout.contains("dummy (BF16"), "{stdout}");
}

#[test]
fn bad_arguments_are_clear_errors() {
    let (ok, _, stderr) = peregrine(&["generate", "-m", "/no/such/model.gguf", "-p", "x"]);
    assert!(!ok && stderr.contains("no such file"), "{stderr}");
    let (ok, _, stderr) = peregrine(&["generate", "-m", "someorg/somemodel", "-p", "x"]);
    assert!(!ok && stderr.contains("local path"), "{stderr}");
    let (ok, _, stderr) = peregrine(&["generate", "-p", "x", "--top-p", "0"]);
    assert!(!ok && stderr.contains("top_p"), "{stderr}");
    let m = default_model_path();
    let (ok, _, stderr) = peregrine(&["generate", "-m", m.to_str().unwrap(), "--messages", "{not json"]);
    assert!(!ok && stderr.contains("--messages"), "{stderr}");
}
