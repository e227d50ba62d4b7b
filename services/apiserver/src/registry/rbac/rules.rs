//! RBAC's policy rules: whether a rule allows a request (Kubernetes' `RuleAllows`), and whether
//! one set of rules covers another (Kubernetes' `Covers`), which is what keeps a user from
//! granting, through a Role or a binding, more than the user holds.

use std::collections::BTreeMap;

use serde_json::{Map, Value};

/// What a request wants to do: Kubernetes' authorization attributes, of a resource request
/// or (with `path`) of a non-resource one.
#[derive(Debug, Clone, Copy, Default)]
pub struct Attributes<'a> {
    /// `get`, `list`, `watch`, `create`, `update`, `patch`, `delete`, `deletecollection`,
    /// and the special verbs `escalate`, `bind`, `impersonate`.
    pub verb: &'a str,
    pub group: &'a str,
    /// The plural resource name.
    pub resource: &'a str,
    /// `""`, `status`, `scale`, `finalize`.
    pub subresource: &'a str,
    /// `""`: cluster-scoped, or every namespace.
    pub namespace: &'a str,
    /// `""` when the request names no object (list, watch, create).
    pub name: &'a str,
    /// A non-resource request's URL path (`/healthz`): then only `verb` counts besides it.
    pub path: Option<&'a str>,
}

/// One rule of a role, as `rbac.authorization.k8s.io/v1` `PolicyRule` has it.
#[derive(Debug, Clone, Default, PartialEq, Eq, PartialOrd, Ord)]
pub struct Rule {
    pub verbs: Vec<String>,
    pub api_groups: Vec<String>,
    pub resources: Vec<String>,
    pub resource_names: Vec<String>,
    pub non_resource_urls: Vec<String>,
}

/// The strings of a JSON list (anything else: none).
pub(super) fn strings(v: Option<&Value>) -> Vec<String> {
    v.and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(Value::as_str)
                .map(str::to_string)
                .collect()
        })
        .unwrap_or_default()
}

fn has(list: &[String], v: &str) -> bool {
    list.iter().any(|x| x == v)
}

fn has_or_all(list: &[String], v: &str) -> bool {
    list.iter().any(|x| x == "*" || x == v)
}

impl Rule {
    /// From a role's `rules[i]`; fields of the wrong type hold nothing (validation keeps such
    /// roles out).
    pub fn from_json(rule: &Map<String, Value>) -> Rule {
        let strings = |field: &str| strings(rule.get(field));
        Rule {
            verbs: strings("verbs"),
            api_groups: strings("apiGroups"),
            resources: strings("resources"),
            resource_names: strings("resourceNames"),
            non_resource_urls: strings("nonResourceURLs"),
        }
    }

    /// Kubernetes' `fullAuthority`: every verb on every resource of every group, and on every
    /// non-resource URL (cluster-admin's rules; what `system:masters` is answered holding).
    pub fn full_authority() -> Vec<Rule> {
        let all = || vec!["*".to_string()];
        vec![
            Rule {
                verbs: all(),
                api_groups: all(),
                resources: all(),
                ..Rule::default()
            },
            Rule {
                verbs: all(),
                non_resource_urls: all(),
                ..Rule::default()
            },
        ]
    }

    /// The rules of a Role or ClusterRole object.
    pub fn all_of(role: &Map<String, Value>) -> Vec<Rule> {
        role.get("rules")
            .and_then(Value::as_array)
            .map(|rules| {
                rules
                    .iter()
                    .filter_map(Value::as_object)
                    .map(Rule::from_json)
                    .collect()
            })
            .unwrap_or_default()
    }

    /// Kubernetes' `RuleAllows`: `*` matches any verb, group or resource; `*/status` any
    /// resource's status; `resourceNames` never a request that names no object; a
    /// non-resource URL ending in `*` any path it prefixes.
    pub fn allows(&self, a: &Attributes<'_>) -> bool {
        if !has_or_all(&self.verbs, a.verb) {
            return false;
        }
        if let Some(path) = a.path {
            return self
                .non_resource_urls
                .iter()
                .any(|u| u == "*" || non_resource_url_covers(u, path));
        }
        if !has_or_all(&self.api_groups, a.group) {
            return false;
        }
        let resource_ok = self.resources.iter().any(|r| {
            if a.subresource.is_empty() {
                r == "*" || r == a.resource
            } else {
                r == "*"
                    || r.strip_prefix("*/") == Some(a.subresource)
                    || r.split_once('/') == Some((a.resource, a.subresource))
            }
        });
        resource_ok
            && (self.resource_names.is_empty()
                || (!a.name.is_empty() && has(&self.resource_names, a.name)))
    }

    /// Kubernetes' `BreakdownRule`: the same grant as rules of one verb, one group, one
    /// resource and at most one name each (or one verb and one non-resource URL), so that
    /// each is covered by a single rule or not at all.
    fn breakdown(&self) -> Vec<Rule> {
        let one = |s: &String| vec![s.clone()];
        let mut out = Vec::new();
        for group in &self.api_groups {
            for resource in &self.resources {
                for verb in &self.verbs {
                    let base = Rule {
                        verbs: one(verb),
                        api_groups: one(group),
                        resources: one(resource),
                        ..Rule::default()
                    };
                    if self.resource_names.is_empty() {
                        out.push(base);
                    } else {
                        out.extend(self.resource_names.iter().map(|n| Rule {
                            resource_names: one(n),
                            ..base.clone()
                        }));
                    }
                }
            }
        }
        for url in &self.non_resource_urls {
            for verb in &self.verbs {
                out.push(Rule {
                    verbs: one(verb),
                    non_resource_urls: one(url),
                    ..Rule::default()
                });
            }
        }
        out
    }

    /// Kubernetes' `ruleCovers`: whether this rule grants all of `sub`, a rule of
    /// [`Rule::breakdown`]. A wildcard in `sub` is covered only by the same wildcard.
    fn covers(&self, sub: &Rule) -> bool {
        let all = |owner: &[String], wanted: &[String], wildcard: &str| {
            has(owner, wildcard) || wanted.iter().all(|w| has(owner, w))
        };
        let resources = has(&self.resources, "*")
            || sub.resources.iter().all(|r| {
                has(&self.resources, r)
                    || r.split_once('/')
                        .is_some_and(|(_, s)| has(&self.resources, &format!("*/{s}")))
            });
        let urls = sub.non_resource_urls.iter().all(|p| {
            self.non_resource_urls
                .iter()
                .any(|o| non_resource_url_covers(o, p))
        });
        let names = self.resource_names.is_empty()
            || (!sub.resource_names.is_empty()
                && sub
                    .resource_names
                    .iter()
                    .all(|n| has(&self.resource_names, n)));
        all(&self.verbs, &sub.verbs, "*")
            && all(&self.api_groups, &sub.api_groups, "*")
            && resources
            && urls
            && names
    }

    /// Kubernetes' `CompactString`: `{APIGroups:[""], Resources:["configmaps"], Verbs:["delete"]}`.
    pub fn compact_string(&self) -> String {
        let quoted = |list: &[String]| {
            let items: Vec<String> = list.iter().map(|s| format!("{s:?}")).collect();
            format!("[{}]", items.join(" "))
        };
        let parts: Vec<String> = [
            ("APIGroups", &self.api_groups),
            ("Resources", &self.resources),
            ("NonResourceURLs", &self.non_resource_urls),
            ("ResourceNames", &self.resource_names),
            ("Verbs", &self.verbs),
        ]
        .into_iter()
        .filter(|(_, list)| !list.is_empty())
        .map(|(name, list)| format!("{name}:{}", quoted(list)))
        .collect();
        format!("{{{}}}", parts.join(", "))
    }
}

/// Kubernetes' `nonResourceURLCovers`: equal, or the owner ends in `*` and prefixes the path.
fn non_resource_url_covers(owner: &str, path: &str) -> bool {
    owner == path
        || owner
            .strip_suffix('*')
            .is_some_and(|prefix| path.starts_with(prefix.trim_end_matches('*')))
}

/// Kubernetes' `Covers`: the rules of `servant` that no rule of `owner` grants, each as one
/// verb on one resource (empty: `owner` holds everything `servant` grants).
pub fn uncovered(owner: &[Rule], servant: &[Rule]) -> Vec<Rule> {
    servant
        .iter()
        .flat_map(Rule::breakdown)
        .filter(|sub| !owner.iter().any(|o| o.covers(sub)))
        .collect()
}

/// Kubernetes' `CompactRules`: rules of one group, one resource and at most one name merged
/// into one rule with all their verbs; the rest as they are.
pub fn compact(rules: &[Rule]) -> Vec<Rule> {
    let mut simple: BTreeMap<(String, String, Option<String>), Rule> = BTreeMap::new();
    let mut rest = Vec::new();
    for r in rules {
        if r.api_groups.len() == 1
            && r.resources.len() == 1
            && r.resource_names.len() <= 1
            && r.non_resource_urls.is_empty()
        {
            let key = (
                r.api_groups[0].clone(),
                r.resources[0].clone(),
                r.resource_names.first().cloned(),
            );
            match simple.get_mut(&key) {
                Some(merged) => merged.verbs.extend(r.verbs.iter().cloned()),
                None => {
                    simple.insert(key, r.clone());
                }
            }
        } else {
            rest.push(r.clone());
        }
    }
    rest.into_iter().chain(simple.into_values()).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rule(verbs: &[&str], groups: &[&str], resources: &[&str], names: &[&str]) -> Rule {
        let v = |l: &[&str]| l.iter().map(|s| s.to_string()).collect();
        Rule {
            verbs: v(verbs),
            api_groups: v(groups),
            resources: v(resources),
            resource_names: v(names),
            non_resource_urls: Vec::new(),
        }
    }

    fn urls(verbs: &[&str], urls: &[&str]) -> Rule {
        let v = |l: &[&str]| l.iter().map(|s| s.to_string()).collect();
        Rule {
            verbs: v(verbs),
            non_resource_urls: v(urls),
            ..Rule::default()
        }
    }

    fn covers(owner: &[Rule], servant: &[Rule]) -> bool {
        uncovered(owner, servant).is_empty()
    }

    // The cases of Kubernetes' policy_comparator_test.go, as facts.
    #[test]
    fn exact_and_wildcard_verbs_groups_and_resources() {
        let owner = [rule(&["*"], &["*"], &["*"], &[])];
        assert!(covers(
            &owner,
            &[rule(&["get"], &["apps"], &["deployments"], &[])]
        ));
        assert!(covers(&owner, &[rule(&["*"], &["*"], &["*"], &["x"])]));
        let owner = [rule(&["get", "list"], &[""], &["configmaps"], &[])];
        assert!(covers(
            &owner,
            &[rule(&["get"], &[""], &["configmaps"], &[])]
        ));
        assert!(!covers(
            &owner,
            &[rule(&["delete"], &[""], &["configmaps"], &[])]
        ));
        assert!(!covers(
            &owner,
            &[rule(&["get"], &["apps"], &["configmaps"], &[])]
        ));
        assert!(!covers(&owner, &[rule(&["get"], &[""], &["secrets"], &[])]));
        // A wildcard granted needs the wildcard held.
        assert!(!covers(
            &owner,
            &[rule(&["*"], &[""], &["configmaps"], &[])]
        ));
        assert!(!covers(
            &owner,
            &[rule(&["get"], &["*"], &["configmaps"], &[])]
        ));
        assert!(!covers(&owner, &[rule(&["get"], &[""], &["*"], &[])]));
    }

    #[test]
    fn rules_are_covered_verb_by_verb_across_several_owner_rules() {
        let owner = [
            rule(&["get"], &[""], &["pods"], &[]),
            rule(&["list"], &[""], &["pods"], &[]),
        ];
        assert!(covers(
            &owner,
            &[rule(&["get", "list"], &[""], &["pods"], &[])]
        ));
        let missing = uncovered(
            &owner,
            &[rule(
                &["get", "list", "watch"],
                &[""],
                &["pods", "services"],
                &[],
            )],
        );
        let strings: Vec<String> = compact(&missing).iter().map(Rule::compact_string).collect();
        assert_eq!(
            strings,
            [
                "{APIGroups:[\"\"], Resources:[\"pods\"], Verbs:[\"watch\"]}",
                "{APIGroups:[\"\"], Resources:[\"services\"], Verbs:[\"get\" \"list\" \"watch\"]}",
            ]
        );
    }

    #[test]
    fn subresources_are_covered_by_themselves_by_star_slash_and_by_star() {
        let owner = [rule(&["get"], &[""], &["pods/status", "*/scale"], &[])];
        assert!(covers(
            &owner,
            &[rule(&["get"], &[""], &["pods/status"], &[])]
        ));
        assert!(covers(
            &owner,
            &[rule(&["get"], &[""], &["deployments/scale"], &[])]
        ));
        assert!(!covers(&owner, &[rule(&["get"], &[""], &["pods"], &[])]));
        assert!(!covers(
            &owner,
            &[rule(&["get"], &[""], &["pods/log"], &[])]
        ));
        // The parent resource does not cover its subresources.
        let owner = [rule(&["get"], &[""], &["pods"], &[])];
        assert!(!covers(
            &owner,
            &[rule(&["get"], &[""], &["pods/status"], &[])]
        ));
        assert!(!covers(
            &owner,
            &[rule(&["get"], &[""], &["*/status"], &[])]
        ));
        let owner = [rule(&["get"], &[""], &["*"], &[])];
        assert!(covers(
            &owner,
            &[rule(&["get"], &[""], &["pods/status"], &[])]
        ));
    }

    #[test]
    fn resource_names_narrow_what_is_held() {
        let owner = [rule(&["get"], &[""], &["secrets"], &["a", "b"])];
        assert!(covers(
            &owner,
            &[rule(&["get"], &[""], &["secrets"], &["a"])]
        ));
        assert!(covers(
            &owner,
            &[rule(&["get"], &[""], &["secrets"], &["a", "b"])]
        ));
        assert!(!covers(
            &owner,
            &[rule(&["get"], &[""], &["secrets"], &["c"])]
        ));
        // Unnamed: every object, which names cannot cover.
        assert!(!covers(&owner, &[rule(&["get"], &[""], &["secrets"], &[])]));
        let owner = [rule(&["get"], &[""], &["secrets"], &[])];
        assert!(covers(
            &owner,
            &[rule(&["get"], &[""], &["secrets"], &["c"])]
        ));
    }

    #[test]
    fn non_resource_urls_by_path_and_prefix() {
        let owner = [urls(&["get"], &["/healthz", "/apis/*"])];
        assert!(covers(&owner, &[urls(&["get"], &["/healthz"])]));
        assert!(covers(&owner, &[urls(&["get"], &["/apis/apps/v1"])]));
        assert!(covers(&owner, &[urls(&["get"], &["/apis/*"])]));
        assert!(!covers(&owner, &[urls(&["get"], &["/api"])]));
        assert!(!covers(&owner, &[urls(&["post"], &["/healthz"])]));
        // Resource rules never cover URLs, nor URLs resources.
        assert!(!covers(
            &[rule(&["*"], &["*"], &["*"], &[])],
            &[urls(&["get"], &["/x"])]
        ));
        assert!(!covers(&owner, &[rule(&["get"], &[""], &["pods"], &[])]));
        assert!(covers(
            &[urls(&["*"], &["*"])],
            &[urls(&["get"], &["/x/y"])]
        ));
    }

    #[test]
    fn allows_follows_rule_allows() {
        let r = rule(
            &["get"],
            &["apps"],
            &["deployments/scale", "*/status"],
            &["web"],
        );
        let a = Attributes {
            verb: "get",
            group: "apps",
            resource: "deployments",
            subresource: "scale",
            name: "web",
            ..Attributes::default()
        };
        assert!(r.allows(&a));
        assert!(r.allows(&Attributes {
            resource: "replicasets",
            subresource: "status",
            ..a
        }));
        assert!(!r.allows(&Attributes { name: "", ..a }));
        assert!(!r.allows(&Attributes {
            subresource: "",
            ..a
        }));
        let u = urls(&["get"], &["/metrics", "/debug/*"]);
        let path = |p| Attributes {
            verb: "get",
            path: Some(p),
            ..Attributes::default()
        };
        assert!(u.allows(&path("/metrics")));
        assert!(u.allows(&path("/debug/pprof")));
        assert!(!u.allows(&path("/healthz")));
        assert!(!r.allows(&path("/metrics")));
    }
}
