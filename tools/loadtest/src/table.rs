//! `table`: JSON results as the Markdown table of BENCHMARKS.md, each throughput with its ratio
//! to the etcd ceiling measured in the same run.

use std::io::Read;
use std::path::PathBuf;

use serde_json::Value;

fn load(files: &[PathBuf]) -> Result<Vec<Value>, String> {
    let mut text = String::new();
    if files.is_empty() {
        std::io::stdin()
            .read_to_string(&mut text)
            .map_err(|e| format!("stdin: {e}"))?;
    }
    for f in files {
        text.push_str(&std::fs::read_to_string(f).map_err(|e| format!("{}: {e}", f.display()))?);
        text.push('\n');
    }
    text.lines()
        .filter(|l| l.trim_start().starts_with('{'))
        .map(|l| {
            serde_json::from_str(l).map_err(|e| format!("not a keel-loadtest --json line: {e}"))
        })
        .collect()
}

fn f(v: &Value, k: &str) -> f64 {
    v[k].as_f64().unwrap_or(0.0)
}

fn u(v: &Value, k: &str) -> u64 {
    v[k].as_u64().unwrap_or(0)
}

/// Prints the table; the ceiling for a row is the etcd row of the same writers and objects
/// (puts for spread writers, get+CAS for shared objects), when the run measured it.
pub fn print(files: &[PathBuf]) -> Result<(), String> {
    let rows = load(files)?;
    let ceiling = |mode: &str, writers: u64, objects: u64| -> Option<f64> {
        rows.iter()
            .find(|r| {
                r["mode"] == mode
                    && u(r, "writers") == writers
                    && (mode == "etcd-put" || u(r, "objects") == objects)
            })
            .map(|r| f(r, "ok_per_s"))
    };
    println!(
        "| mode | writers | objects | watchers | ok/s | p50 ms | p90 ms | p99 ms | max ms | conflicts | lost / missed | vs etcd |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    for r in &rows {
        let mode = r["mode"].as_str().unwrap_or("");
        let (w, o) = (u(r, "writers"), u(r, "objects"));
        let l = &r["latency"];
        let vs = match mode {
            "patch" | "replace" if o == 1 => ceiling("etcd-cas", w, 1),
            "patch" | "replace" => ceiling("etcd-put", w, o),
            _ => None,
        }
        .filter(|c| *c > 0.0)
        .map(|c| format!("{:.0}%", 100.0 * f(r, "ok_per_s") / c))
        .unwrap_or_else(|| "–".into());
        let mut mode_label = match r["patch_type"].as_str() {
            Some(p) if !p.is_empty() => format!("{mode} ({p})"),
            _ => mode.to_string(),
        };
        if r["protocol"] == "rest" {
            mode_label.push_str(", REST");
        }
        if r["tls"].as_bool() == Some(true) {
            mode_label.push_str(", TLS");
        }
        let conflicts = if mode == "watch" {
            "–".to_string()
        } else {
            format!("{:.0}%", 100.0 * f(r, "conflict_rate"))
        };
        let faults = if mode == "watch" {
            format!("{} / {}", u(r, "events_missed"), u(r, "events_duplicated"))
        } else {
            u(r, "lost_updates").to_string()
        };
        println!(
            "| {mode_label} | {w} | {o} | {} | {:.0} | {:.2} | {:.2} | {:.2} | {:.2} | {conflicts} | {faults} | {vs} |",
            u(r, "watchers"),
            f(r, "ok_per_s"),
            f(l, "p50_ms"),
            f(l, "p90_ms"),
            f(l, "p99_ms"),
            f(l, "max_ms"),
        );
    }
    Ok(())
}
