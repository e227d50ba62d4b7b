//! Reading objects from `-f` files, directories and stdin: YAML (several `---` documents) or
//! JSON (one or several objects), with errors that name the file and the line.

use std::io::Read;
use std::path::Path;

use keel_api::Metadata;
use serde_json::{Map, Value};

use crate::error::Error;

/// The name kubectl gives to objects read from standard input.
pub const STDIN: &str = "STDIN";

/// One object of a manifest file.
#[derive(Debug, Clone, PartialEq)]
pub struct Manifest {
    /// The file as the user named it (a directory's files as `dir/file.yaml`), or `STDIN`.
    pub source: String,
    /// 1-based position among the file's objects.
    pub document: usize,
    pub object: Value,
}

/// A manifest reads as its object: `m.name()`, `m.namespace()`.
impl Metadata for Manifest {
    fn metadata(&self) -> Option<&Map<String, Value>> {
        self.object.metadata()
    }
}

impl Manifest {
    pub fn api_version(&self) -> &str {
        self.object["apiVersion"].as_str().unwrap_or("")
    }

    pub fn kind(&self) -> &str {
        self.object["kind"].as_str().unwrap_or("")
    }
}

/// Reads every object of every `-f` argument, in order: files as given, a directory's
/// `.yaml`, `.yml` and `.json` files by name (not recursively, as kubectl without `-R`), `-`
/// for stdin.
pub fn read_all(paths: &[String]) -> Result<Vec<Manifest>, Error> {
    let mut out = Vec::new();
    for path in paths {
        if path == "-" {
            let mut text = String::new();
            std::io::stdin()
                .read_to_string(&mut text)
                .map_err(|error| Error::Read {
                    path: STDIN.into(),
                    error,
                })?;
            out.extend(parse(&text, STDIN)?);
            continue;
        }
        let p = Path::new(path);
        if !p.exists() {
            return Err(Error::PathNotFound(path.clone()));
        }
        if p.is_dir() {
            for file in manifest_files(p)? {
                out.extend(read_file(&file)?);
            }
        } else {
            out.extend(read_file(path)?);
        }
    }
    Ok(out)
}

fn manifest_files(dir: &Path) -> Result<Vec<String>, Error> {
    let read_err = |error| Error::Read {
        path: dir.display().to_string(),
        error,
    };
    let mut files = Vec::new();
    for entry in std::fs::read_dir(dir).map_err(read_err)? {
        let path = entry.map_err(read_err)?.path();
        let is_manifest = path
            .extension()
            .and_then(|e| e.to_str())
            .is_some_and(|e| matches!(e, "yaml" | "yml" | "json"));
        if is_manifest && path.is_file() {
            files.push(path.display().to_string());
        }
    }
    files.sort();
    Ok(files)
}

fn read_file(path: &str) -> Result<Vec<Manifest>, Error> {
    let text = std::fs::read_to_string(path).map_err(|error| Error::Read {
        path: path.to_string(),
        error,
    })?;
    parse(&text, path)
}

/// Parses the objects of one file. A `List` (`kind: List` or `*List` with `items`) stands for
/// its items, as in kubectl.
pub fn parse(text: &str, source: &str) -> Result<Vec<Manifest>, Error> {
    let documents = parse_documents(text, source)?;
    let mut objects = Vec::new();
    for doc in documents {
        if doc.is_null() {
            continue;
        }
        let Value::Object(map) = &doc else {
            return Err(Error::Decode {
                source_name: source.into(),
                message: format!(
                    "document {} is not an object (it is {})",
                    objects.len() + 1,
                    type_name(&doc)
                ),
            });
        };
        let is_list = map
            .get("kind")
            .and_then(Value::as_str)
            .is_some_and(|k| k.ends_with("List"))
            && map.get("items").is_some_and(Value::is_array);
        if is_list {
            if let Some(Value::Array(items)) = map.get("items") {
                objects.extend(items.iter().cloned());
            }
        } else {
            objects.push(doc);
        }
    }
    objects
        .into_iter()
        .enumerate()
        .map(|(i, object)| {
            for field in ["apiVersion", "kind"] {
                if object[field].as_str().is_none_or(str::is_empty) {
                    return Err(Error::Decode {
                        source_name: source.into(),
                        message: format!(
                            "Object '{}' is missing in document {}",
                            if field == "kind" {
                                "Kind"
                            } else {
                                "apiVersion"
                            },
                            i + 1
                        ),
                    });
                }
            }
            Ok(Manifest {
                source: source.into(),
                document: i + 1,
                object,
            })
        })
        .collect()
}

/// JSON when the text starts like JSON (kubectl sniffs the same way), else YAML, which
/// reads JSON too but reports JSON mistakes less clearly and not several JSON objects in a row.
fn parse_documents(text: &str, source: &str) -> Result<Vec<Value>, Error> {
    let trimmed = text.trim_start();
    if trimmed.starts_with('{') || trimmed.starts_with('[') {
        return serde_json::Deserializer::from_str(text)
            .into_iter::<Value>()
            .map(|r| {
                r.map_err(|e| Error::Parse {
                    source_name: source.into(),
                    line: Some(e.line() as u64),
                    message: strip_location(&e.to_string(), " at line "),
                })
            })
            .collect();
    }
    serde_saphyr::from_multiple::<Value>(text).map_err(|e| {
        let line = e.location().map(|l| l.line()).filter(|l| *l > 0);
        Error::Parse {
            source_name: source.into(),
            line,
            message: strip_location(&e.without_snippet().to_string(), " at line "),
        }
    })
}

/// Drops a trailing "at line L, column C" from a parser's message: keelctl says the line
/// first, as kubectl does (`line 3: mapping values are not allowed in this context`).
fn strip_location(message: &str, marker: &str) -> String {
    match message.rfind(marker) {
        Some(i) => message[..i].to_string(),
        None => message.to_string(),
    }
}

fn type_name(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "a list",
        Value::Object(_) => "an object",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn several_yaml_documents_become_several_objects() {
        let text = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: a\n---\n---\napiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: b\ndata:\n  port: \"80\"\n";
        let objects = parse(text, "x.yaml").unwrap();
        assert_eq!(objects.len(), 2);
        assert_eq!(objects[0].name(), "a");
        assert_eq!(objects[1].object["data"]["port"], json!("80"));
        assert_eq!(objects[1].document, 2);
    }

    #[test]
    fn json_streams_and_lists_are_read() {
        let text = r#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"a"}}
{"apiVersion":"v1","kind":"List","items":[{"apiVersion":"v1","kind":"Pod","metadata":{"name":"p"}}]}"#;
        let objects = parse(text, "x.json").unwrap();
        assert_eq!(
            objects.iter().map(Manifest::kind).collect::<Vec<_>>(),
            ["ConfigMap", "Pod"]
        );
    }

    #[test]
    fn yaml_errors_name_the_line() {
        let text = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: a\n   labels: x\n";
        let e = parse(text, "bad.yaml").unwrap_err().to_string();
        assert!(
            e.starts_with("error: error parsing bad.yaml: line 5: "),
            "{e}"
        );
        assert!(!e.contains("column"), "{e}");
    }

    #[test]
    fn json_errors_name_the_line() {
        let e = parse("{\n\"a\": 1,\n}", "bad.json")
            .unwrap_err()
            .to_string();
        assert!(
            e.starts_with("error: error parsing bad.json: line 3: "),
            "{e}"
        );
    }

    #[test]
    fn objects_need_a_kind() {
        let e = parse("apiVersion: v1\nmetadata:\n  name: a\n", "x.yaml").unwrap_err();
        assert_eq!(
            e.to_string(),
            "error: unable to decode \"x.yaml\": Object 'Kind' is missing in document 1"
        );
        let e = parse("- a\n", "x.yaml").unwrap_err();
        assert!(e.to_string().contains("not an object"), "{e}");
    }
}

/// The `-f` argument of the commands that read manifests.
#[derive(Debug, clap::Args)]
pub struct FileArgs {
    /// File, directory (its .yaml, .yml and .json files) or - for stdin; may be repeated.
    #[arg(
        short = 'f',
        long = "filename",
        required = true,
        value_name = "FILE|DIR|-"
    )]
    pub files: Vec<String>,
}
