//! Printing objects: `-o table|wide|json|yaml|name`.

use std::io::Write;
use std::time::SystemTime;

use keel_api::Metadata;
use serde::Serialize;
use serde_json::{Value, json};

use crate::error::Error;
use crate::resources::Resource;
use crate::table::{Aligner, columns};

/// How `get` prints what it finds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum Format {
    /// Aligned columns chosen per kind (the default).
    #[default]
    Table,
    /// The table with more columns (e.g. containers, images and selector of Deployments).
    Wide,
    /// The objects as JSON (a `List` when there may be several).
    Json,
    /// The objects as YAML (a `List` when there may be several).
    Yaml,
    /// `kind.group/name` per object.
    Name,
}

/// JSON indented by four spaces, as kubectl prints it.
pub fn to_json(v: &Value) -> String {
    let mut out = Vec::new();
    let formatter = serde_json::ser::PrettyFormatter::with_indent(b"    ");
    let mut ser = serde_json::Serializer::with_formatter(&mut out, formatter);
    // Serializing a JSON value into memory cannot fail.
    let _ = v.serialize(&mut ser);
    String::from_utf8(out).unwrap_or_default()
}

/// YAML as kubectl prints it: keys sorted, block style, lists not indented under their key.
pub fn to_yaml(v: &Value) -> Result<String, Error> {
    serde_saphyr::to_string(v).map_err(|e| Error::Usage(format!("cannot write YAML: {e}")))
}

/// What kubectl prints for several objects: a `v1` `List`.
pub fn list(items: Vec<Value>) -> Value {
    json!({"apiVersion": "v1", "items": items, "kind": "List", "metadata": {"resourceVersion": ""}})
}

/// Prints the objects of one or several `get`s in one format.
pub struct Printer {
    format: Format,
    all_namespaces: bool,
    show_kind: bool,
    aligner: Aligner,
    /// Whether a table (and its header) was printed already; a second resource type's table
    /// is set apart by an empty line, as in kubectl.
    tables: usize,
}

impl Printer {
    pub fn new(format: Format, all_namespaces: bool, show_kind: bool) -> Printer {
        Printer {
            format,
            all_namespaces,
            show_kind,
            aligner: Aligner::default(),
            tables: 0,
        }
    }

    /// A table of `objects` with its header (a new aligner per table), or each object's
    /// name. JSON and YAML go through [`Printer::documents`] instead, which must wrap several
    /// objects in one `List`.
    pub fn table(
        &mut self,
        out: &mut dyn Write,
        resource: &Resource,
        objects: &[Value],
    ) -> Result<(), Error> {
        match self.format {
            Format::Name => {
                for o in objects {
                    writeln!(out, "{}", resource.object_ref(o.name()))?;
                }
            }
            Format::Table | Format::Wide => {
                if objects.is_empty() {
                    return Ok(());
                }
                if self.tables > 0 {
                    writeln!(out)?;
                }
                self.tables += 1;
                self.aligner = Aligner::default();
                self.rows(out, resource, objects, true)?;
            }
            Format::Json | Format::Yaml => {
                for o in objects {
                    self.document(out, o)?;
                }
            }
        }
        Ok(())
    }

    /// Rows for `get -w`: the header only the first time, widths remembered between calls.
    pub fn watch_rows(
        &mut self,
        out: &mut dyn Write,
        resource: &Resource,
        objects: &[Value],
    ) -> Result<(), Error> {
        match self.format {
            Format::Table | Format::Wide => {
                let header = self.tables == 0;
                self.tables = 1;
                self.rows(out, resource, objects, header)
            }
            _ => self.table(out, resource, objects),
        }
    }

    fn rows(
        &mut self,
        out: &mut dyn Write,
        resource: &Resource,
        objects: &[Value],
        header: bool,
    ) -> Result<(), Error> {
        let cols = columns(
            resource,
            self.format == Format::Wide,
            self.all_namespaces,
            self.show_kind,
        );
        let now = SystemTime::now();
        let mut rows = Vec::with_capacity(objects.len() + 1);
        if header {
            rows.push(cols.header());
        }
        rows.extend(objects.iter().map(|o| cols.row(o, now)));
        for line in self.aligner.lines(&rows) {
            writeln!(out, "{line}")?;
        }
        out.flush()?;
        Ok(())
    }

    /// One JSON or YAML document (an object or a `List`); YAML documents after the first
    /// are separated by `---`, as in `kubectl get -w -o yaml`.
    pub fn document(&mut self, out: &mut dyn Write, v: &Value) -> Result<(), Error> {
        match self.format {
            Format::Yaml => {
                if self.tables > 0 {
                    writeln!(out, "---")?;
                }
                write!(out, "{}", to_yaml(v)?)?;
            }
            _ => writeln!(out, "{}", to_json(v))?,
        }
        self.tables += 1;
        out.flush()?;
        Ok(())
    }
}

/// `-o` of the commands that act on objects (`rollout`, `scale`): the object instead of
/// kubectl's sentence about it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum ResultFormat {
    /// The object as JSON.
    Json,
    /// The object as YAML (several separated by `---`).
    Yaml,
    /// `kind.group/name`, nothing else.
    Name,
}

/// Prints what a command did to each object: `deployment.apps/nginx scaled`, or with `-o`
/// the object (as the server answered) or its name, as kubectl's print flags do.
pub struct ResultPrinter {
    format: Option<ResultFormat>,
    documents: Printer,
}

impl ResultPrinter {
    pub fn new(format: Option<ResultFormat>) -> ResultPrinter {
        let documents = match format {
            Some(ResultFormat::Yaml) => Format::Yaml,
            _ => Format::Json,
        };
        ResultPrinter {
            format,
            documents: Printer::new(documents, false, false),
        }
    }

    /// `kind.group/name operation`, or the object in the `-o` format.
    pub fn print(
        &mut self,
        out: &mut dyn Write,
        object: &Value,
        operation: &str,
    ) -> Result<(), Error> {
        match self.format {
            None if operation.is_empty() => writeln!(out, "{}", object_ref_of(object))?,
            None => writeln!(out, "{} {operation}", object_ref_of(object))?,
            Some(ResultFormat::Name) => writeln!(out, "{}", object_ref_of(object))?,
            Some(ResultFormat::Json | ResultFormat::Yaml) => {
                return self.documents.document(out, object);
            }
        }
        out.flush()?;
        Ok(())
    }
}

/// `deployment.apps/nginx`, `pod/web-1`: an object named by its own `kind` and `apiVersion`.
pub fn object_ref_of(o: &Value) -> String {
    let kind = o["kind"].as_str().unwrap_or("").to_ascii_lowercase();
    let group = o["apiVersion"]
        .as_str()
        .and_then(|v| v.split_once('/'))
        .map(|(group, _)| group)
        .unwrap_or("");
    if group.is_empty() {
        format!("{kind}/{}", o.name())
    } else {
        format!("{kind}.{group}/{}", o.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_is_indented_by_four_spaces() {
        assert_eq!(
            to_json(&json!({"a": [1]})),
            "{\n    \"a\": [\n        1\n    ]\n}"
        );
    }

    #[test]
    fn results_print_as_kubectl_prints_them() {
        let d =
            json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "nginx"}});
        let cm = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x"}});
        let print = |format, objects: &[&Value], operation| {
            let mut p = ResultPrinter::new(format);
            let mut out = Vec::new();
            for o in objects {
                p.print(&mut out, o, operation).unwrap();
            }
            String::from_utf8(out).unwrap()
        };
        assert_eq!(
            print(None, &[&d], "scaled"),
            "deployment.apps/nginx scaled\n"
        );
        assert_eq!(print(None, &[&cm], ""), "configmap/x\n");
        assert_eq!(
            print(Some(ResultFormat::Name), &[&d, &cm], "scaled"),
            "deployment.apps/nginx\nconfigmap/x\n"
        );
        assert_eq!(
            print(Some(ResultFormat::Yaml), &[&cm, &cm], "scaled"),
            "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: x\n---\napiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: x\n"
        );
        let json = print(Some(ResultFormat::Json), &[&cm], "scaled");
        assert_eq!(serde_json::from_str::<Value>(&json).unwrap(), cm);
    }

    #[test]
    fn yaml_round_trips() {
        let v = json!({"metadata": {"annotations": {"x": "{\"a\":1}\n", "y": "yes", "z": "010"}}, "spec": {"replicas": 2}});
        let text = to_yaml(&v).unwrap();
        let back: Value = serde_saphyr::from_str(&text).unwrap();
        assert_eq!(back, v);
    }
}
