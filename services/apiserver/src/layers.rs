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
            "keel_api::proto",
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
            "keel_api::proto",
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
            "keel_api::proto",
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
            "keel_api::proto",
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
