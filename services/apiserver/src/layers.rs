//! The layer rule, checked: each layer's source names only the layer below it (DESIGN.md: "A
//! layer only calls the layer below it"). transport → request → registry → storage → etcd.

use std::path::{Path, PathBuf};

/// A layer: its folder under `src/`, and what its source must never name.
struct Layer {
    dir: &'static str,
    forbidden: &'static [&'static str],
}

const LAYERS: [Layer; 5] = [
    Layer {
        dir: "transport",
        forbidden: &[
            "crate::registry",
            "crate::storage",
            "crate::etcd",
            "etcd_client",
        ],
    },
    Layer {
        dir: "request",
        forbidden: &[
            "crate::transport",
            "crate::storage",
            "crate::etcd",
            "tonic",
            "keel_wire",
            "keel_print",
            "etcd_client",
        ],
    },
    Layer {
        dir: "registry",
        forbidden: &[
            "crate::transport",
            "crate::request",
            "crate::etcd",
            "tonic",
            "keel_wire",
            "keel_print",
            "etcd_client",
        ],
    },
    Layer {
        dir: "storage",
        forbidden: &[
            "crate::transport",
            "crate::request",
            "crate::registry",
            "tonic",
            "keel_wire",
            "keel_print",
            "etcd_client",
        ],
    },
    Layer {
        dir: "etcd",
        forbidden: &[
            "crate::transport",
            "crate::request",
            "crate::registry",
            "crate::storage",
            "keel_wire",
            "keel_print",
        ],
    },
];

/// Every `.rs` file under `dir`.
fn sources(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        let entries = std::fs::read_dir(&d).unwrap_or_else(|e| panic!("{}: {e}", d.display()));
        for entry in entries {
            let path = entry.unwrap().path();
            if path.is_dir() {
                todo.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                out.push(path);
            }
        }
    }
    out
}

/// Every place a layer names what it must not: `file:line: text`.
fn violations(src: &Path) -> Vec<String> {
    let mut found = Vec::new();
    for layer in &LAYERS {
        let files = sources(&src.join(layer.dir));
        assert!(!files.is_empty(), "no source under src/{}", layer.dir);
        for file in files {
            let text = std::fs::read_to_string(&file).unwrap();
            for (i, line) in text.lines().enumerate() {
                // `super::super` climbs out of a layer without naming `crate`.
                let escapes = line.contains("super::super");
                if escapes || layer.forbidden.iter().any(|f| line.contains(f)) {
                    found.push(format!("{}:{}: {}", file.display(), i + 1, line.trim()));
                }
            }
        }
    }
    found
}

#[test]
fn each_layer_names_only_the_layer_below_it() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let found = violations(&src);
    assert!(found.is_empty(), "layer rule broken:\n{}", found.join("\n"));
}

#[test]
fn the_check_sees_a_violation() {
    let dir = std::env::temp_dir().join(format!("keel-layers-{}", std::process::id()));
    for layer in &LAYERS {
        std::fs::create_dir_all(dir.join(layer.dir)).unwrap();
        std::fs::write(dir.join(layer.dir).join("mod.rs"), "//! fine\n").unwrap();
    }
    std::fs::write(
        dir.join("storage").join("store.rs"),
        "use crate::registry::strategy;\n",
    )
    .unwrap();
    let found = violations(&dir);
    std::fs::remove_dir_all(&dir).unwrap();
    assert_eq!(found.len(), 1, "{found:?}");
    assert!(found[0].ends_with("store.rs:1: use crate::registry::strategy;"));
}

/// The registry's modules (its files and folders) and, for each, the others it names. A file's
/// `super::x` names the module `x` beside it; in a folder's file, `super::super::x` and
/// `crate::registry::x` do. Test modules are left out: tests may reach anywhere.
fn registry_imports(
    dir: &Path,
) -> std::collections::BTreeMap<String, std::collections::BTreeSet<String>> {
    let mut graph: std::collections::BTreeMap<String, std::collections::BTreeSet<String>> =
        Default::default();
    for file in sources(dir) {
        let rel = file.strip_prefix(dir).unwrap();
        let nested = rel.components().count() > 1;
        let module = rel
            .components()
            .next()
            .and_then(|c| c.as_os_str().to_str())
            .unwrap_or_default()
            .trim_end_matches(".rs")
            .to_string();
        if module == "mod" {
            continue;
        }
        let text = std::fs::read_to_string(&file).unwrap();
        let text = text.split("#[cfg(test)]\nmod ").next().unwrap_or_default();
        let prefixes: &[&str] = if nested {
            &["super::super::", "crate::registry::"]
        } else {
            &["super::", "crate::registry::"]
        };
        let names = graph.entry(module.clone()).or_default();
        for prefix in prefixes {
            for (at, _) in text.match_indices(prefix) {
                let rest = &text[at + prefix.len()..];
                let name: String = rest
                    .chars()
                    .take_while(|c| c.is_ascii_lowercase() || *c == '_')
                    .collect();
                // `super::super::` seen as `super::` + `super`.
                if !name.is_empty() && name != module && name != "super" {
                    names.insert(name);
                }
            }
        }
    }
    let modules: std::collections::BTreeSet<String> = graph.keys().cloned().collect();
    for names in graph.values_mut() {
        names.retain(|n| modules.contains(n));
    }
    graph
}

/// A circle of imports among the registry's modules (`a → b → a`), if there is one.
fn registry_circle(dir: &Path) -> Option<Vec<String>> {
    let graph = registry_imports(dir);
    fn visit(
        m: &str,
        graph: &std::collections::BTreeMap<String, std::collections::BTreeSet<String>>,
        path: &mut Vec<String>,
        done: &mut std::collections::BTreeSet<String>,
    ) -> Option<Vec<String>> {
        if let Some(i) = path.iter().position(|p| p == m) {
            let mut circle = path[i..].to_vec();
            circle.push(m.to_string());
            return Some(circle);
        }
        if done.contains(m) {
            return None;
        }
        path.push(m.to_string());
        for next in graph.get(m).into_iter().flatten() {
            if let Some(c) = visit(next, graph, path, done) {
                return Some(c);
            }
        }
        path.pop();
        done.insert(m.to_string());
        None
    }
    let mut done = std::collections::BTreeSet::new();
    graph
        .keys()
        .find_map(|m| visit(m, &graph, &mut Vec::new(), &mut done))
}

#[test]
fn the_registry_has_no_import_circle() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/registry");
    if let Some(circle) = registry_circle(&dir) {
        panic!(
            "the registry's modules import each other in a circle: {}",
            circle.join(" → ")
        );
    }
}

#[test]
fn the_circle_check_sees_a_circle() {
    let dir = std::env::temp_dir().join(format!("keel-circle-{}", std::process::id()));
    std::fs::create_dir_all(dir.join("c")).unwrap();
    std::fs::write(dir.join("a.rs"), "use super::b::X;\n").unwrap();
    std::fs::write(dir.join("b.rs"), "use crate::registry::c::Y;\n").unwrap();
    std::fs::write(dir.join("c").join("mod.rs"), "use super::super::a::Z;\n").unwrap();
    std::fs::write(
        dir.join("d.rs"),
        "#[cfg(test)]\nmod tests { use super::a::X; }\n",
    )
    .unwrap();
    let circle = registry_circle(&dir);
    std::fs::write(dir.join("c").join("mod.rs"), "mod inner;\nuse inner::W;\n").unwrap();
    let none = registry_circle(&dir);
    std::fs::remove_dir_all(&dir).unwrap();
    assert_eq!(circle.unwrap_or_default(), ["a", "b", "c", "a"]);
    assert_eq!(none, None);
}
