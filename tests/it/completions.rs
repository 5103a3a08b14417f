//! `aab completions`: the generated scripts complete what the registry holds. Each
//! script is generated through the real binary and then run by the real shell (bash
//! here: its completion function is called as bash calls it), so the check is what
//! a person pressing Tab would get, including plugin commands and enum values.

use std::process::Command;

use aab_e2e::{TestEnv, error_code};

/// What bash's completion function offers for `words` (the last one being typed).
fn complete(env: &TestEnv, words: &[&str]) -> Vec<String> {
    let script = env.root.join("aab.bash");
    let run = env.aab(&["completions", "bash"]);
    assert_eq!(run.exit(), 0, "{}", env.report(Some(&run)));
    std::fs::write(&script, run.stdout.as_bytes()).unwrap();
    let quoted: Vec<String> = words.iter().map(|w| format!("'{w}'")).collect();
    let cword = words.len() - 1;
    let prev = if cword > 0 { words[cword - 1] } else { "aab" };
    let program = format!(
        "source '{}'; COMP_WORDS=({}); COMP_CWORD={cword}; _aab aab '{}' '{prev}'; printf '%s\\n' \"${{COMPREPLY[@]}}\"",
        script.display(),
        quoted.join(" "),
        words[cword]
    );
    let out = Command::new("bash").args(["--norc", "--noprofile", "-c", &program]).output().expect("bash");
    assert!(out.status.success(), "bash: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).lines().filter(|l| !l.is_empty()).map(str::to_string).collect()
}

#[test]
fn bash_completes_registry_commands_their_flags_and_enum_values() {
    let env = TestEnv::new();
    env.install_plugin("aab_plugin_web", "web");
    assert_eq!(complete(&env, &["aab", "web-execu"]), ["web-execution", "web-executor"], "a plugin command");
    assert_eq!(complete(&env, &["aab", "executor-pre"]), ["executor-prepare"], "a host command");
    assert!(complete(&env, &["aab", "web-executor", "--sess"]).contains(&"--session-id".to_string()), "a flag from an operation variant, kebab-case");
    let ops = complete(&env, &["aab", "web-executor", "--operation", ""]);
    for op in ["open", "observe", "act", "close"] {
        assert!(ops.contains(&op.to_string()), "operation {op} in {ops:?}");
    }
    assert_eq!(complete(&env, &["aab", "completions", "fi"]), ["fish"]);
    for shell in ["zsh", "fish", "powershell"] {
        let run = env.aab(&["completions", shell]);
        env.check(run.exit() == 0 && run.stdout.contains("web-executor"), &run, &format!("{shell} script names the plugin's commands"));
    }
    let run = env.aab(&["completions", "tcsh"]);
    env.check(run.exit() == 1 && error_code(&env.json_of(&run)) == Some("invalid_argument"), &run, "an unknown shell is a contract error");
}
