//! `peregrine generate --input` (offline batch mode) and the watermark round trip:
//! text generated with `--watermark` is detected by `peregrine watermark detect`,
//! text generated without it is not.

mod common;

use common::peregrine;
use peregrine_model::testing::default_model_path;
use serde_json::Value;

#[test]
fn batch_mode_runs_every_line_and_reports_throughput() {
    let dir = std::env::temp_dir().join(format!("peregrine-batch-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let input = dir.join("prompts.jsonl");
    std::fs::write(
        &input,
        concat!(
            "{\"prompt\": \"The capital of France is\", \"max_tokens\": 8}\n",
            "\n",
            "{\"messages\": [{\"role\": \"user\", \"content\": \"Say hi.\"}], \"max_tokens\": 40}\n",
            "{\"prompt_token_ids\": [504, 3575], \"max_tokens\": 5, \"n\": 2, \"temperature\": 1.0, \"seed\": 3}\n",
            // Greedy repeats " one,"; a line's own repetition penalty must break that.
            "{\"prompt\": \"one, one, one, one, one, one,\", \"max_tokens\": 6}\n",
            "{\"prompt\": \"one, one, one, one, one, one,\", \"max_tokens\": 6, \"repetition_penalty\": 1.5}\n",
        ),
    )
    .unwrap();
    let model = default_model_path();
    let (ok, stdout, stderr) = peregrine(&[
        "generate",
        "-m",
        model.to_str().unwrap(),
        "--input",
        input.to_str().unwrap(),
        "--threads",
        "2",
        "--kv-cache-memory",
        "64MiB",
    ]);
    assert!(ok, "{stderr}");
    let lines: Vec<Value> = stdout.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert_eq!(lines.len(), 5);
    let text = |i: usize, j: usize| lines[i]["outputs"][j]["text"].as_str().unwrap().to_string();
    // Batched with others, the greedy answer is the one it gets alone (tests/cli.rs).
    assert!(text(0, 0).starts_with(" Paris.\n\nThe"), "{:?}", text(0, 0));
    assert_eq!(lines[1]["outputs"][0]["finish_reason"], "stop", "the chat answer ends at eos");
    assert_eq!(lines[2]["outputs"].as_array().unwrap().len(), 2);
    assert_eq!(text(3, 0), " one, one, one,", "greedy repeats");
    assert_ne!(text(4, 0), text(3, 0), "the line's repetition_penalty applies");
    assert!(stderr.contains("aggregate: ") && stderr.contains("generated tok/s"), "{stderr}");

    // A bad line is an error naming the line.
    std::fs::write(&input, "{\"prompt\": \"ok\"}\n{\"max_tokens\": 3}\n").unwrap();
    let (ok, _, stderr) = peregrine(&[
        "generate",
        "-m",
        model.to_str().unwrap(),
        "--input",
        input.to_str().unwrap(),
        "--kv-cache-memory",
        "64MiB",
    ]);
    assert!(!ok);
    assert!(stderr.contains("prompts.jsonl:2"), "{stderr}");
    std::fs::remove_dir_all(&dir).ok();
}

fn generate(watermark: bool, seed: &str) -> String {
    let model = default_model_path();
    let mut args = vec![
        "generate",
        "-m",
        model.to_str().unwrap(),
        "--chat",
        "-p",
        "Write a long story about a lighthouse keeper and a storm.",
        "--max-tokens",
        "200",
        "--temperature",
        "1",
        "--seed",
        seed,
        "--ignore-eos",
        "--threads",
        "2",
        "--kv-cache-memory",
        "64MiB",
    ];
    if watermark {
        args.push("--watermark");
    }
    let (ok, stdout, stderr) = peregrine(&args);
    assert!(ok, "{stderr}");
    stdout
}

fn detect(text: &str) -> Value {
    let model = default_model_path();
    let (ok, stdout, stderr) =
        peregrine(&["watermark", "detect", "-m", model.to_str().unwrap(), "--text", text]);
    assert!(ok, "{stderr}");
    serde_json::from_str(stdout.trim()).unwrap()
}

#[test]
fn watermarked_text_is_detected_and_plain_text_is_not() {
    let marked = detect(&generate(true, "1"));
    assert!(marked["z_score"].as_f64().unwrap() > 4.0, "{marked}");
    assert!(marked["p_value"].as_f64().unwrap() < 1e-4, "{marked}");
    assert_eq!(marked["watermarked"], true);
    let plain = detect(&generate(false, "1"));
    assert!(plain["z_score"].as_f64().unwrap() < 4.0, "{plain}");
    assert_eq!(plain["watermarked"], false);
}
