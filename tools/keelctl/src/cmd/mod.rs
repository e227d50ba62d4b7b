//! One module per subcommand, and what several of them share: reading `TYPE NAME...` and
//! `TYPE/NAME...` arguments.

pub mod api_resources;
pub mod apply;
pub mod create;
pub mod delete;
pub mod diff;
pub mod edit;
pub mod get;
pub mod initialization;
pub mod object_watch;
pub mod objects;
pub mod patch;
pub mod replace;
pub mod rollout;
pub mod scale;
pub mod set_image;
pub mod watch;

use crate::error::Error;

/// The objects a command line names: resource types (as the user typed them) and, for each,
/// the object names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Selection {
    pub resource: String,
    pub names: Vec<String>,
}

/// Reads `TYPE[,TYPE...] [NAME...]` or `TYPE/NAME [TYPE/NAME...]`, as kubectl does. The
/// second form keeps the order given and groups consecutive names of one type.
pub fn parse_selection(args: &[String]) -> Result<Vec<Selection>, Error> {
    let Some(first) = args.first() else {
        return Ok(Vec::new());
    };
    if first.contains('/') {
        let mut out: Vec<Selection> = Vec::new();
        for arg in args {
            let Some((resource, name)) = arg.split_once('/') else {
                return Err(Error::Usage(format!(
                    "there is no need to specify a resource type as a separate argument when passing arguments in resource/name form (e.g. 'keelctl get resource/<resource_name>' instead of 'keelctl get resource resource/<resource_name>'): {arg:?}"
                )));
            };
            if resource.is_empty() || name.is_empty() || name.contains('/') {
                return Err(Error::Usage(format!(
                    "arguments in resource/name form must have a single resource and name: {arg:?}"
                )));
            }
            match out.last_mut() {
                Some(last) if last.resource == resource => last.names.push(name.into()),
                _ => out.push(Selection {
                    resource: resource.into(),
                    names: vec![name.into()],
                }),
            }
        }
        return Ok(out);
    }
    if let Some(bad) = args[1..].iter().find(|a| a.contains('/')) {
        return Err(Error::Usage(format!(
            "there is no need to specify a resource type as a separate argument when passing arguments in resource/name form: {bad:?}"
        )));
    }
    let names: Vec<String> = args[1..].to_vec();
    Ok(first
        .split(',')
        .filter(|r| !r.is_empty())
        .map(|r| Selection {
            resource: r.into(),
            names: names.clone(),
        })
        .collect())
}

/// Exactly one resource type and at least one name (`delete`, `patch`, `edit`, `set image`).
pub fn parse_named(args: &[String]) -> Result<(String, Vec<String>), Error> {
    let selection = parse_selection(args)?;
    match selection.as_slice() {
        [] => Err(Error::Usage(
            "you must specify the type of resource and the name (e.g. 'deployment nginx' or 'deployment/nginx')".into(),
        )),
        [one] if one.names.is_empty() => Err(Error::MissingName),
        [one] => Ok((one.resource.clone(), one.names.clone())),
        _ => Err(Error::Usage(
            "this command takes names of one resource type at a time".into(),
        )),
    }
}

/// Writes a warning on stderr; a closed stderr is no reason to fail the command.
pub fn warn(message: &str) {
    use std::io::Write;
    let _ = writeln!(std::io::stderr(), "Warning: {message}");
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(a: &[&str]) -> Vec<String> {
        a.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn both_forms_of_naming_objects_are_read() {
        assert_eq!(
            parse_selection(&args(&["deploy,cm", "a", "b"])).unwrap(),
            [
                Selection {
                    resource: "deploy".into(),
                    names: args(&["a", "b"])
                },
                Selection {
                    resource: "cm".into(),
                    names: args(&["a", "b"])
                },
            ]
        );
        assert_eq!(
            parse_selection(&args(&["deployment/nginx", "deployment/web", "cm/x"])).unwrap(),
            [
                Selection {
                    resource: "deployment".into(),
                    names: args(&["nginx", "web"])
                },
                Selection {
                    resource: "cm".into(),
                    names: args(&["x"])
                },
            ]
        );
        assert!(parse_selection(&args(&["deployment/nginx", "web"])).is_err());
        assert!(parse_selection(&args(&["deployment", "cm/web"])).is_err());
    }

    #[test]
    fn a_type_without_a_name_is_refused_where_a_name_is_needed() {
        assert!(matches!(
            parse_named(&args(&["cm"])),
            Err(Error::MissingName)
        ));
        assert_eq!(
            parse_named(&args(&["deploy/nginx"])).unwrap(),
            ("deploy".to_string(), args(&["nginx"]))
        );
    }
}
