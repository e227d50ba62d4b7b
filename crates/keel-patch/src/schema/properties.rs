//! A schema node's `properties`, kept as one sorted slice: large CRD schemas have thousands of
//! nodes, most with a few properties or none, and a `BTreeMap` spends a whole node of eleven
//! entries on each (kilobytes apiece when its values are schema nodes).

/// Named values sorted by name, looked up by binary search.
#[derive(Debug, Clone, PartialEq)]
pub struct Properties<V>(Box<[(Box<str>, V)]>);

impl<V> Default for Properties<V> {
    fn default() -> Self {
        Properties(Box::default())
    }
}

impl<V> Properties<V> {
    /// The value named `name`.
    pub fn get(&self, name: &str) -> Option<&V> {
        self.0
            .binary_search_by(|(k, _)| (**k).cmp(name))
            .ok()
            .map(|i| &self.0[i].1)
    }

    /// The names and values, in name order.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &V)> {
        self.0.iter().map(|(k, v)| (&**k, v))
    }

    pub fn values(&self) -> impl Iterator<Item = &V> {
        self.0.iter().map(|(_, v)| v)
    }

    pub fn values_mut(&mut self) -> impl Iterator<Item = &mut V> {
        self.0.iter_mut().map(|(_, v)| v)
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    pub fn len(&self) -> usize {
        self.0.len()
    }
}

impl<K: Into<Box<str>>, V> FromIterator<(K, V)> for Properties<V> {
    /// The last value of a name given twice wins, as in a map.
    fn from_iter<I: IntoIterator<Item = (K, V)>>(iter: I) -> Self {
        let mut all: Vec<(Box<str>, V)> = iter.into_iter().map(|(k, v)| (k.into(), v)).collect();
        // Stable: of equal names, the later stays last, and is the one kept.
        all.sort_by(|a, b| a.0.cmp(&b.0));
        let mut out: Vec<(Box<str>, V)> = Vec::with_capacity(all.len());
        for (k, v) in all {
            match out.last_mut() {
                Some(last) if last.0 == k => last.1 = v,
                _ => out.push((k, v)),
            }
        }
        Properties(out.into_boxed_slice())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_found_whatever_order_they_came_in_and_the_last_of_a_name_wins() {
        let p: Properties<u32> = [("b", 1), ("a", 2), ("c", 3), ("b", 4)]
            .into_iter()
            .collect();
        assert_eq!(p.len(), 3);
        assert_eq!(p.get("a"), Some(&2));
        assert_eq!(p.get("b"), Some(&4));
        assert_eq!(p.get("c"), Some(&3));
        assert_eq!(p.get("d"), None);
        assert_eq!(
            p.iter().map(|(k, _)| k).collect::<Vec<_>>(),
            ["a", "b", "c"]
        );
        assert!(Properties::<u32>::default().is_empty());
    }
}
