//! extract-bench: what a trivial script extraction costs, per language — the
//! pre-dispatch `prepare` (one compile-only child) and the post-command `run`
//! (one child that runs `main`) — next to the bare start of the same runtime,
//! which no child-per-call design can beat.
//!
//! Usage: `extract-bench [--runs N] [--language javascript|python]`
//! (N ≥ 50, default 100). Prints median / p95 / min / max in milliseconds.

use std::process::{Command, ExitCode, Stdio};
use std::time::{Duration, Instant};

use aab_extract::{Language, PreparedScript, ScriptSpec};
use serde_json::json;

const WARMUP: usize = 3;

fn main() -> ExitCode {
    let mut runs = 100;
    let mut languages = vec![Language::JavaScript, Language::Python];
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        match (arg.as_str(), args.next()) {
            ("--runs", Some(n)) if n.parse::<usize>().is_ok_and(|n| n >= 50) => runs = n.parse().unwrap_or(runs),
            ("--language", Some(name)) if Language::from_name(&name).is_some() => languages = Language::from_name(&name).into_iter().collect(),
            _ => {
                eprintln!("usage: extract-bench [--runs N (>= 50)] [--language javascript|python]");
                return ExitCode::from(2);
            }
        }
    }
    println!(
        "{:<11} {:<13} {:>5} {:>9} {:>9} {:>9} {:>9}",
        "language", "step", "runs", "median", "p95", "min", "max"
    );
    for language in languages {
        if let Err(message) = bench(language, runs) {
            eprintln!("{}: {message}", language.name());
            return ExitCode::FAILURE;
        }
    }
    ExitCode::SUCCESS
}

fn bench(language: Language, runs: usize) -> Result<(), String> {
    let source = match language {
        Language::JavaScript => "function main(ctx) { return ctx.inputs.kind; }",
        Language::Python => "def main(ctx):\n    return ctx.inputs['kind']\n",
    };
    let spec = ScriptSpec {
        language,
        source: Some(source.into()),
        source_path: None,
        timeout_ms: 10_000,
    };
    let cwd = std::env::current_dir().map_err(|e| e.to_string())?;
    let prepare = || aab_extract::prepare(spec.clone(), &cwd).map_err(|e| e.to_string());
    let script: PreparedScript = prepare()?;
    let inputs = aab_extract::build_inputs("json", json!({"items": [1, 2, 3]}), json!({"ok": true}), json!({}));

    // Interleaved rounds, so load from other processes on the machine hits all
    // three steps alike.
    let (mut bare, mut prepared, mut ran, mut parts) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for round in 0..WARMUP + runs {
        let keep = round >= WARMUP;
        let started = Instant::now();
        bare_start(&script, language)?;
        let bare_took = started.elapsed();
        let started = Instant::now();
        prepare()?;
        let prepare_took = started.elapsed();
        let started = Instant::now();
        let extraction = aab_extract::run_timed(&script, &inputs);
        let run_took = started.elapsed();
        match extraction.result {
            Ok(v) if v == json!("json") => {}
            Ok(v) => return Err(format!("unexpected result {v}")),
            Err(e) => return Err(e.to_string()),
        }
        if keep {
            bare.push(bare_took);
            prepared.push(prepare_took);
            ran.push(run_took);
            parts.push(extraction.timings);
        }
    }
    report(language, "bare start", &bare);
    report(language, "prepare", &prepared);
    report(language, "run", &ran);
    report(language, "  run setup", &parts.iter().map(|t| t.setup).collect::<Vec<_>>());
    report(language, "  run worker", &parts.iter().map(|t| t.worker).collect::<Vec<_>>());
    report(language, "  run cleanup", &parts.iter().map(|t| t.cleanup).collect::<Vec<_>>());
    Ok(())
}

/// The runtime doing nothing: spawn, start, exit, reap.
fn bare_start(script: &PreparedScript, language: Language) -> Result<(), String> {
    let mut command = Command::new(script.runtime());
    match language {
        Language::JavaScript => command.args(["-e", "0"]),
        Language::Python => command.args(["-I", "-B", "-u", "-c", "pass"]),
    };
    let status = command
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .map_err(|e| e.to_string())?;
    if status.success() {
        Ok(())
    } else {
        Err(format!("bare start failed: {status}"))
    }
}

fn report(language: Language, step: &str, times: &[Duration]) {
    let mut sorted = times.to_vec();
    sorted.sort();
    let ms = |d: Duration| format!("{:.1}ms", d.as_secs_f64() * 1000.0);
    let at = |q: f64| sorted[((sorted.len() as f64 * q).ceil() as usize).clamp(1, sorted.len()) - 1];
    println!(
        "{:<11} {:<13} {:>5} {:>9} {:>9} {:>9} {:>9}",
        language.name(),
        step,
        sorted.len(),
        ms(at(0.5)),
        ms(at(0.95)),
        ms(sorted[0]),
        ms(sorted[sorted.len() - 1])
    );
}
