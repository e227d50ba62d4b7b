//! keel's server-side apply engine against the real structured-merge-diff (smd), the library
//! Kubernetes' field manager is built on: random sequences of applies, forced applies and
//! updates by a few managers run through keel-patch (driven as the API server drives it,
//! `services/apiserver/src/registry/managed.rs`) and through `tests/smd-oracle` (smd driven as
//! Kubernetes' field manager drives it), and after every operation the objects, the managed
//! fields and the conflicts must be the same.
//!
//! The oracle is built here with Go, in GOPATH mode against Debian's
//! `golang-k8s-sigs-structured-merge-diff-dev` (smd v4.1.2), which `scripts/install-deps.sh`
//! installs; without Go or the library this test fails, it does not skip.
//!
//! What is compared, and what is not:
//! - The order of a set or a keyed list is compared as a multiset of items: keel merges them in
//!   smd v4.4.2's order (Kubernetes 1.32's), which v4.1.2 does not have (it appends new items;
//!   `apply::tests` checks v4.4.2's order). Atomic lists are compared item by item, in order.
//! - Entries are compared as sets of fields per manager and operation; times are not.
//! - A refused apply is compared by its conflicts: (manager, operation, path) each.
//! - An apply whose result holds a null is refused as invalid on both sides, as Kubernetes
//!   refuses it for a custom resource (422) and as keel's validation does: smd leaves a map or
//!   list whose items its removal took as null, and so must keel-patch. Compared by where the
//!   nulls are.
//!
//! `SMD_ORACLE_SEED` (a number) picks the sequences, `SMD_ORACLE_SEQUENCES` how many;
//! `SMD_ORACLE_GOPATH` builds the oracle against another copy of the library (a GOPATH holding
//! `sigs.k8s.io/structured-merge-diff` and its imports), and `SMD_ORACLE_EXACT_ORDER=1`
//! compares the order of every list too (for a library of v4.2 or later: built once by hand
//! against v4.4.2, Kubernetes 1.32's, nothing differed in order either). `smd_cases.rs` holds the differences this test found, one case each.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod smd;

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use keel_patch::OpenApiSchema;
use keel_patch::fieldpath::Set;
use serde_json::{Map, Value, json};
use smd::{Keel, Outcome, SMD_SCHEMA, open_api};

/// The lists of the schema that are sets or keyed (compared as multisets), by field path
/// (list items add no segment, map keys one).
fn unordered(path: &[String]) -> bool {
    let p: Vec<&str> = path.iter().map(String::as_str).collect();
    matches!(
        p.as_slice(),
        ["tags"]
            | ["items"]
            | ["ports"]
            | ["items", "flags"]
            | ["items", "env"]
            | ["ports", "hosts"]
    )
}

// ---------------------------------------------------------------------------------------
// Random sequences.

/// splitmix64: small, seeded, the same everywhere.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }

    fn chance(&mut self, p: f64) -> bool {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64 <= p
    }

    fn pick<'a, T>(&mut self, xs: &'a [T]) -> &'a T {
        &xs[self.below(xs.len())]
    }

    /// Some of `xs`, each with probability `p`, shuffled.
    fn some<T: Clone>(&mut self, xs: &[T], p: f64) -> Vec<T> {
        let mut out: Vec<T> = xs.iter().filter(|_| self.chance(p)).cloned().collect();
        for i in (1..out.len()).rev() {
            let j = self.below(i + 1);
            out.swap(i, j);
        }
        out
    }
}

/// A random partial object of the schema: each field with probability `p`.
fn object(rng: &mut Rng, p: f64) -> Value {
    let mut m = Map::new();
    let mut put = |rng: &mut Rng, k: &str, f: &dyn Fn(&mut Rng) -> Value| {
        if rng.chance(p) {
            m.insert(k.into(), f(rng));
        }
    };
    put(rng, "mode", &|r| json!(r.pick(&["a", "b", "c"])));
    put(rng, "labels", &|r| {
        string_map(r, &["k1", "k2", "k3"], &["v1", "v2"])
    });
    put(rng, "selector", &|r| {
        string_map(r, &["s1", "s2"], &["x", "y"])
    });
    put(rng, "settings", &|r| {
        let mut s = Map::new();
        for k in r.some(&["s1", "s2", "s3"], 0.5) {
            let mut v = Map::new();
            if r.chance(0.6) {
                v.insert("value".into(), json!(r.pick(&["on", "off"])));
            }
            if r.chance(0.4) {
                v.insert("priority".into(), json!(r.pick(&[1, 2])));
            }
            s.insert(k.into(), Value::Object(v));
        }
        Value::Object(s)
    });
    put(rng, "tags", &|r| json!(r.some(&["a", "b", "c", "d"], 0.5)));
    put(rng, "args", &|r| atomic_list(r));
    put(rng, "spec", &|r| {
        let mut s = Map::new();
        if r.chance(0.5) {
            s.insert("paused".into(), json!(r.chance(0.5)));
        }
        if r.chance(0.6) {
            let mut st = Map::new();
            if r.chance(0.6) {
                st.insert("type".into(), json!(r.pick(&["Recreate", "Rolling"])));
            }
            if r.chance(0.5) {
                st.insert("maxSurge".into(), json!(r.pick(&[1, 2])));
            }
            s.insert("strategy".into(), Value::Object(st));
        }
        Value::Object(s)
    });
    put(rng, "items", &|r| {
        let names = r.some(&["a", "b", "c"], 0.5);
        Value::Array(names.into_iter().map(|n| item(r, n)).collect())
    });
    put(rng, "ports", &|r| {
        let ports = r.some(&[(80, "TCP"), (80, "UDP"), (443, "TCP")], 0.5);
        Value::Array(
            ports
                .into_iter()
                .map(|(n, proto)| port(r, n, proto))
                .collect(),
        )
    });
    Value::Object(m)
}

fn string_map(rng: &mut Rng, keys: &[&str], values: &[&str]) -> Value {
    let mut m = Map::new();
    for k in rng.some(keys, 0.5) {
        m.insert(k.into(), json!(rng.pick(values)));
    }
    Value::Object(m)
}

fn atomic_list(rng: &mut Rng) -> Value {
    let n = rng.below(4);
    Value::Array((0..n).map(|_| json!(rng.pick(&["x", "y", "z"]))).collect())
}

fn item(rng: &mut Rng, name: &str) -> Value {
    let mut m = Map::new();
    m.insert("name".into(), json!(name));
    if rng.chance(0.4) {
        m.insert("value".into(), json!(rng.pick(&["v1", "v2"])));
    }
    if rng.chance(0.3) {
        m.insert("count".into(), json!(rng.pick(&[1, 2, 3])));
    }
    if rng.chance(0.3) {
        m.insert("flags".into(), json!(rng.some(&["f1", "f2", "f3"], 0.5)));
    }
    if rng.chance(0.3) {
        let env: Vec<Value> = rng
            .some(&["e1", "e2"], 0.6)
            .into_iter()
            .map(|n| {
                if rng.chance(0.6) {
                    json!({"name": n, "value": rng.pick(&["1", "2"])})
                } else {
                    json!({"name": n})
                }
            })
            .collect();
        m.insert("env".into(), Value::Array(env));
    }
    if rng.chance(0.3) {
        m.insert("config".into(), string_map(rng, &["c1", "c2"], &["p", "q"]));
    }
    if rng.chance(0.25) {
        m.insert("opts".into(), string_map(rng, &["a", "b"], &["1", "2"]));
    }
    if rng.chance(0.2) {
        m.insert("args".into(), atomic_list(rng));
    }
    Value::Object(m)
}

fn port(rng: &mut Rng, number: u64, protocol: &str) -> Value {
    let mut m = Map::new();
    m.insert("port".into(), json!(number));
    // The default key is sometimes left out: the item is the same.
    if protocol != "TCP" || rng.chance(0.5) {
        m.insert("protocol".into(), json!(protocol));
    }
    if rng.chance(0.4) {
        m.insert("name".into(), json!(rng.pick(&["http", "web"])));
    }
    if rng.chance(0.3) {
        m.insert("hosts".into(), json!(rng.some(&["h1", "h2"], 0.6)));
    }
    Value::Object(m)
}

/// An updater's new object: the live one with a random fragment merged in (a strategic merge
/// patch, so keyed lists merge by key), some of it deleted (nulls, `$patch: delete`,
/// `$deleteFromPrimitiveList`), or a list replaced whole.
fn updated(rng: &mut Rng, live: &Value, schema: &OpenApiSchema) -> Value {
    let mut patch = object(rng, 0.3);
    let Value::Object(fragment) = &mut patch else {
        return live.clone();
    };
    if let Value::Object(l) = live {
        for (k, v) in l {
            if rng.chance(0.12) {
                fragment.insert(k.clone(), Value::Null);
                continue;
            }
            // Deletions inside maps and lists.
            match (k.as_str(), v) {
                ("labels" | "settings", Value::Object(m)) if rng.chance(0.3) => {
                    let mut del = match fragment.get(k) {
                        Some(Value::Object(f)) => f.clone(),
                        _ => Map::new(),
                    };
                    for key in m.keys() {
                        if rng.chance(0.5) {
                            del.insert(key.clone(), Value::Null);
                        }
                    }
                    fragment.insert(k.clone(), Value::Object(del));
                }
                ("items", Value::Array(items)) if rng.chance(0.3) => {
                    let mut list = match fragment.get(k) {
                        Some(Value::Array(f)) => f.clone(),
                        _ => Vec::new(),
                    };
                    let present: Vec<&Value> = list.iter().filter_map(|i| i.get("name")).collect();
                    let gone: Vec<Value> = items
                        .iter()
                        .filter_map(|i| i.get("name"))
                        .filter(|n| !present.contains(n))
                        .filter(|_| rng.chance(0.5))
                        .map(|n| json!({"name": n, "$patch": "delete"}))
                        .collect();
                    list.extend(gone);
                    fragment.insert(k.clone(), Value::Array(list));
                }
                ("tags", Value::Array(tags)) if rng.chance(0.3) => {
                    let gone: Vec<Value> =
                        tags.iter().filter(|_| rng.chance(0.5)).cloned().collect();
                    fragment.insert("$deleteFromPrimitiveList/tags".into(), Value::Array(gone));
                }
                _ => {}
            }
        }
    }
    if rng.chance(0.15) {
        // A list replaced whole, as a merge patch or a PUT replaces it.
        let mut out = live.clone();
        if let Value::Object(o) = &mut out {
            let whole = object(rng, 0.9);
            let field = *rng.pick(&["tags", "items", "ports"]);
            match whole.get(field) {
                Some(v) => o.insert(field.into(), v.clone()),
                None => o.remove(field),
            };
        }
        return out;
    }
    keel_patch::apply_strategic_merge_patch(live, &patch, schema).unwrap_or_else(|_| live.clone())
}

const MANAGERS: [&str; 3] = ["alice", "bob", "carol"];

/// A sequence of 3 to 8 operations by two or three managers, sometimes starting from an object
/// nobody is recorded as owning (the apply after it records `before-first-apply`).
fn sequence(rng: &mut Rng, schema: &OpenApiSchema) -> Vec<Value> {
    let managers = &MANAGERS[..2 + rng.below(2)];
    let n = 3 + rng.below(6);
    let mut ops = Vec::with_capacity(n + 1);
    // The object as keel leaves it, for the next update to start from. The oracle's is
    // compared to it after each step, so either will do.
    let mut keel = Keel::new(schema.clone());
    if rng.chance(0.15) {
        let obj = object(rng, 0.6);
        ops.push(json!({"op": "untracked", "object": obj}));
        keel.run(ops.last().unwrap_or(&Value::Null));
    }
    for _ in 0..n {
        let manager = *rng.pick(managers);
        let op = if rng.chance(0.55) {
            json!({"op": "apply", "manager": manager, "object": object(rng, 0.4),
                   "force": rng.chance(0.25)})
        } else {
            let live = keel.object.clone().map(Value::Object).unwrap_or(json!({}));
            json!({"op": "update", "manager": manager, "object": updated(rng, &live, schema)})
        };
        keel.run(&op);
        ops.push(op);
    }
    ops
}

// ---------------------------------------------------------------------------------------
// The oracle.

/// Builds the oracle (once per test binary run) and returns its path.
fn build_oracle() -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("smd-oracle");
    let src = dir.join("gopath/src/smdoracle");
    std::fs::create_dir_all(&src).expect("the oracle's build directory");
    let here = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/smd-oracle");
    for f in ["main.go", "go.mod"] {
        std::fs::copy(here.join(f), src.join(f)).expect("the oracle's source");
    }
    let library = std::env::var("SMD_ORACLE_GOPATH").unwrap_or_else(|_| "/usr/share/gocode".into());
    let gopath = format!("{}:{library}", dir.join("gopath").display());
    let bin = dir.join("oracle");
    let go = std::env::var("GO").unwrap_or_else(|_| "go".into());
    let out = Command::new(&go)
        .args(["build", "-o"])
        .arg(&bin)
        .arg(".")
        .current_dir(&src)
        // GOPATH mode: the library comes from Debian's package, nothing is downloaded.
        .env("GO111MODULE", "off")
        .env("GOPATH", gopath)
        .env("GOCACHE", dir.join("cache"))
        .env("GOFLAGS", "")
        .output()
        .unwrap_or_else(|e| {
            panic!(
                "cannot run `{go}` to build the smd oracle ({e}): install Go and \
                 structured-merge-diff with scripts/install-deps.sh"
            )
        });
    assert!(
        out.status.success(),
        "building the smd oracle failed (scripts/install-deps.sh installs Go and the library):\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    bin
}

fn run_oracle(bin: &Path, sequences: &[Vec<Value>]) -> Vec<Vec<Outcome>> {
    let input = json!({"schema": SMD_SCHEMA, "type": "root", "sequences": sequences});
    let mut child = Command::new(bin)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the oracle starts");
    let mut stdin = child.stdin.take().expect("the oracle's stdin");
    let text = input.to_string();
    let writer = std::thread::spawn(move || stdin.write_all(text.as_bytes()));
    let out = child.wait_with_output().expect("the oracle runs");
    writer
        .join()
        .expect("the writer thread")
        .expect("the oracle reads its input");
    assert!(
        out.status.success(),
        "the oracle failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let results: Vec<Vec<Value>> = serde_json::from_slice(&out.stdout).expect("the oracle's JSON");
    results
        .into_iter()
        .map(|seq| seq.into_iter().map(oracle_outcome).collect())
        .collect()
}

fn oracle_outcome(r: Value) -> Outcome {
    if let Some(e) = r.get("error").and_then(Value::as_str) {
        return Outcome::Error(e.to_string());
    }
    if let Some(Value::Array(nulls)) = r.get("invalid") {
        return Outcome::Invalid(
            nulls
                .iter()
                .map(|p| p.as_str().unwrap_or("").to_string())
                .collect(),
        );
    }
    if let Some(Value::Array(cs)) = r.get("conflicts") {
        let mut out: Vec<(String, String, String)> = cs
            .iter()
            .map(|c| {
                let s = |k: &str| c.get(k).and_then(Value::as_str).unwrap_or("").to_string();
                (s("manager"), s("operation"), s("path"))
            })
            .collect();
        out.sort();
        return Outcome::Conflicts(out);
    }
    let mut fields = BTreeMap::new();
    for e in r
        .get("managedFields")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        let s = |k: &str| e.get(k).and_then(Value::as_str).unwrap_or("").to_string();
        let set = Set::from_fields_v1(e.get("fieldsV1").unwrap_or(&Value::Null))
            .expect("the oracle's FieldsV1 reads");
        fields.insert((s("manager"), s("operation")), set.to_fields_v1());
    }
    Outcome::Done {
        object: r.get("object").cloned().unwrap_or(json!({})),
        fields,
    }
}

/// `v` with the sets and keyed lists sorted (unless `exact`), so that they compare as
/// multisets.
fn canonical(v: &Value, exact: bool, path: &mut Vec<String>) -> Value {
    match v {
        Value::Object(m) => Value::Object(
            m.iter()
                .map(|(k, x)| {
                    path.push(k.clone());
                    let c = canonical(x, exact, path);
                    path.pop();
                    (k.clone(), c)
                })
                .collect(),
        ),
        Value::Array(items) => {
            let mut out: Vec<Value> = items.iter().map(|x| canonical(x, exact, path)).collect();
            if !exact && unordered(path) {
                out.sort_by_key(Value::to_string);
            }
            Value::Array(out)
        }
        _ => v.clone(),
    }
}

fn comparable(o: &Outcome, exact: bool) -> Outcome {
    match o {
        Outcome::Done { object, fields } => Outcome::Done {
            object: canonical(object, exact, &mut Vec::new()),
            fields: fields.clone(),
        },
        other => other.clone(),
    }
}

fn env_number(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(default)
}

#[test]
fn keel_applies_as_structured_merge_diff_does() {
    let seed = env_number("SMD_ORACLE_SEED", 0x5eed_0032);
    let count = env_number("SMD_ORACLE_SEQUENCES", 300) as usize;
    let exact = std::env::var("SMD_ORACLE_EXACT_ORDER").is_ok_and(|v| v == "1");
    let schema = OpenApiSchema::new(open_api());
    let mut rng = Rng(seed);
    let sequences: Vec<Vec<Value>> = (0..count).map(|_| sequence(&mut rng, &schema)).collect();
    let oracle = run_oracle(&build_oracle(), &sequences);
    assert_eq!(oracle.len(), sequences.len());

    let mut failures = Vec::new();
    let (mut applies, mut conflicts, mut invalid) = (0, 0, 0);
    for (i, (ops, theirs)) in sequences.iter().zip(&oracle).enumerate() {
        let mut keel = Keel::new(schema.clone());
        for (step, (op, theirs)) in ops.iter().zip(theirs).enumerate() {
            let ours = keel.run(op);
            if let Outcome::Error(e) = theirs {
                panic!("the oracle refused sequence {i} step {step} (a generator bug): {e}\n{op}");
            }
            applies += usize::from(op["op"] == "apply");
            conflicts += usize::from(matches!(theirs, Outcome::Conflicts(_)));
            invalid += usize::from(matches!(theirs, Outcome::Invalid(_)));
            if comparable(&ours, exact) != comparable(theirs, exact) {
                failures.push(format!(
                    "sequence {i}, step {step}:\n  ops: {}\n  keel: {ours:?}\n  smd:  {theirs:?}",
                    Value::Array(ops[..=step].to_vec())
                ));
                break;
            }
            // A refused apply leaves everything as it was, on both sides.
        }
    }
    eprintln!(
        "{count} sequences (seed {seed:#x}): {applies} applies, {conflicts} refused for conflicts, \
         {invalid} for nulls, {} differ",
        failures.len()
    );
    assert!(
        failures.is_empty(),
        "{} of {count} sequences differ from structured-merge-diff (seed {seed:#x}; \
         SMD_ORACLE_SEED reproduces). The first ones:\n{}",
        failures.len(),
        failures
            .iter()
            .take(5)
            .cloned()
            .collect::<Vec<_>>()
            .join("\n\n")
    );
}
