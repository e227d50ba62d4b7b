//! The kind rule, checked: no kind's name is matched on outside `registry/kinds/` (DESIGN.md,
//! "Adding a kind"). A rule that differs by kind belongs to the kind's module, so that adding a
//! kind is one file and no forgotten `match` arm still compiles.

use std::path::Path;

/// Where a name may be matched on for a reason other than dispatching on the kind, with the
/// reason.
const ALLOWED: &[(&str, &str, &str)] = &[
    (
        "transport/rest/path.rs",
        "namespaces",
        "the URL grammar: /api/v1/namespaces/NS/... names a namespace, whatever the resource",
    ),
    (
        "registry/webhooks/mod.rs",
        "namespaces",
        "a webhook's namespaceSelector chooses a Namespace by its own labels, whatever the \
         webhook's rules (Kubernetes' namespace matcher)",
    ),
    (
        "registry/rbac/escalation.rs",
        "ClusterRole",
        "a binding's roleRef.kind is data: the kind of role it names",
    ),
];

/// The names of every built-in kind and resource: kinds (`Pod`) and plurals (`pods`).
fn names() -> Vec<String> {
    keel_api::builtin_resources()
        .into_iter()
        .chain(keel_api::review_resources())
        .flat_map(|r| [r.kind, r.gvr.resource])
        .collect()
}

/// Whether `line` matches on the string literal `quoted` (`"Pod"`): a `match` arm or pattern
/// (`"Pod" =>`, `"Pod" |`, `| "Pod"`), or a comparison (`== "Pod"`, `!= "Pod"`).
fn matches_on(line: &str, quoted: &str) -> bool {
    let mut rest = line;
    while let Some(at) = rest.find(quoted) {
        let before = rest[..at].trim_end();
        let after = rest[at + quoted.len()..].trim_start();
        if after.starts_with("=>")
            || (after.starts_with('|') && !after.starts_with("||"))
            || (before.ends_with('|') && !before.ends_with("||"))
            || before.ends_with("==")
            || before.ends_with("!=")
            || before.ends_with("matches!(")
        {
            return true;
        }
        rest = &rest[at + quoted.len()..];
    }
    false
}

/// Whether the module in `file` is compiled for tests only: its parent (`mod.rs` beside it,
/// `lib.rs`, or `x.rs` beside the folder `x/` it is in) declares it under `#[cfg(test)]`,
/// whatever its visibility.
fn declared_for_tests(file: &Path) -> bool {
    let (Some(dir), Some(stem)) = (file.parent(), file.file_stem()) else {
        return false;
    };
    let stem = stem.to_string_lossy();
    let parent = [
        dir.join("mod.rs"),
        dir.join("lib.rs"),
        dir.with_extension("rs"),
    ]
    .iter()
    .find_map(|p| std::fs::read_to_string(p).ok())
    .unwrap_or_default();
    let lines: Vec<&str> = parent.lines().map(str::trim).collect();
    let declaration = format!("mod {stem};");
    lines.windows(2).any(|w| {
        w[0] == "#[cfg(test)]"
            && w[1].strip_suffix(&declaration).is_some_and(|visibility| {
                matches!(visibility, "" | "pub " | "pub(crate) " | "pub(super) ")
            })
    })
}

/// Every line outside `registry/kinds/` and test modules that matches on a kind's name:
/// `file:line: text`.
fn violations(src: &Path, names: &[String]) -> Vec<String> {
    let mut found = Vec::new();
    let mut todo = vec![src.to_path_buf()];
    while let Some(dir) = todo.pop() {
        for entry in std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
            let path = entry.unwrap().path();
            let rel = path
                .strip_prefix(src)
                .unwrap()
                .to_string_lossy()
                .replace('\\', "/");
            if path.is_dir() {
                if rel != "registry/kinds" {
                    todo.push(path);
                }
                continue;
            }
            if path.extension().is_none_or(|e| e != "rs") {
                continue;
            }
            if declared_for_tests(&path) {
                continue;
            }
            let text = std::fs::read_to_string(&path).unwrap();
            // Tests may name kinds: everything from the first test module on is left out.
            let code = text.split("#[cfg(test)]").next().unwrap_or("");
            for (i, line) in code.lines().enumerate() {
                if line.trim_start().starts_with("//") {
                    continue;
                }
                for name in names {
                    let quoted = format!("\"{name}\"");
                    let allowed = ALLOWED.iter().any(|(f, n, _)| *f == rel && n == name);
                    if !allowed && matches_on(line, &quoted) {
                        found.push(format!("{rel}:{}: {}", i + 1, line.trim()));
                    }
                }
            }
        }
    }
    found.sort();
    found
}

#[test]
fn no_kind_is_matched_on_outside_its_module() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let found = violations(&src, &names());
    assert!(found.is_empty(), "kind rule broken:\n{}", found.join("\n"));
}

#[test]
fn the_check_sees_a_match_on_a_kind() {
    let dir = std::env::temp_dir().join(format!("keel-kind-rule-{}", std::process::id()));
    std::fs::create_dir_all(dir.join("registry/kinds")).unwrap();
    std::fs::write(
        dir.join("registry/strategy.rs"),
        "fn a(k: &str) {\n    match k {\n        \"Pod\" => {}\n        _ => {}\n    }\n    if k == \"deployments\" {}\n    let _ = matches!(k, \"Lease\" | \"x\");\n    let _ = \"Pod\".len();\n}\n#[cfg(test)]\nmod tests { fn b(k: &str) -> bool { k == \"Pod\" } }\n",
    )
    .unwrap();
    std::fs::write(
        dir.join("registry/mod.rs"),
        "mod strategy;\n#[cfg(test)]\nmod testing;\n#[cfg(test)]\npub(crate) mod fixture;\n",
    )
    .unwrap();
    std::fs::create_dir_all(dir.join("registry/store")).unwrap();
    std::fs::write(
        dir.join("registry/store.rs"),
        "fn s() {}\n#[cfg(test)]\nmod tests;\n",
    )
    .unwrap();
    std::fs::write(
        dir.join("registry/store/tests.rs"),
        "fn a(k: &str) -> bool { k == \"Pod\" }\n",
    )
    .unwrap();
    std::fs::write(
        dir.join("registry/fixture.rs"),
        "fn a(k: &str) -> bool { k == \"Pod\" }\n",
    )
    .unwrap();
    std::fs::write(
        dir.join("registry/testing.rs"),
        "fn a(k: &str) -> bool { k == \"Pod\" }\n",
    )
    .unwrap();
    std::fs::write(
        dir.join("registry/kinds/pod.rs"),
        "fn a(k: &str) -> bool { k == \"Pod\" }\n",
    )
    .unwrap();
    let found = violations(&dir, &names());
    std::fs::remove_dir_all(&dir).unwrap();
    assert_eq!(
        found,
        [
            "registry/strategy.rs:3: \"Pod\" => {}",
            "registry/strategy.rs:6: if k == \"deployments\" {}",
            "registry/strategy.rs:7: let _ = matches!(k, \"Lease\" | \"x\");",
        ]
    );
}
