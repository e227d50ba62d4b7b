//! `metadata.generateName`, as Kubernetes' API server has it (`pkg/storage/names`, and the
//! create retry of 1.32's `RetryGenerateName`): a create without a name but with a
//! `generateName` gets the base, cut to 58 characters, and 5 random characters from an
//! alphabet without vowels; a name that is taken is generated again, up to 8 attempts in all.

use keel_api::{ApiError, Metadata, Object, Reason};
use serde_json::Value;

/// The longest base a generated name keeps (a name is at most 63 characters).
const MAX_BASE: usize = 58;
/// The characters a generated suffix is made of: no vowels, so no words; no `0`, `1`, `3`.
const ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
const SUFFIX: usize = 5;
/// Attempts at a create whose generated name is taken, as Kubernetes makes.
pub const ATTEMPTS: usize = 8;

/// The base of the name to generate, if `obj` asks for one: no `name`, a `generateName`.
pub fn base(obj: &Object) -> Option<String> {
    if !obj.name().is_empty() {
        return None;
    }
    match obj.metadata()?.get("generateName")? {
        Value::String(base) if !base.is_empty() => Some(base.clone()),
        _ => None,
    }
}

/// `base`, cut to [`MAX_BASE`] characters, and a random suffix.
pub fn generate(base: &str) -> String {
    let mut name: String = base.chars().take(MAX_BASE).collect();
    #[cfg(test)]
    if let Some(suffix) = testing::SUFFIXES.with(|s| s.borrow_mut().pop_front()) {
        name.push_str(&suffix);
        return name;
    }
    name.push_str(&random_suffix());
    name
}

/// [`SUFFIX`] characters of [`ALPHABET`], each equally likely: from the random bytes of v4
/// UUIDs (as uids are made; no random number crate besides), but their version and variant
/// bytes, and only bytes below 243 = 9 × 27, which map onto the alphabet evenly.
fn random_suffix() -> String {
    let mut out = String::with_capacity(SUFFIX);
    while out.len() < SUFFIX {
        let bytes = uuid::Uuid::new_v4().into_bytes();
        for (i, b) in bytes.into_iter().enumerate() {
            if i == 6 || i == 8 || b >= 243 || out.len() == SUFFIX {
                continue;
            }
            out.push(char::from(ALPHABET[usize::from(b) % ALPHABET.len()]));
        }
    }
    out
}

/// The suffixes the next generated names get on this thread, for tests of what follows a
/// taken name (a test on tokio's current-thread runtime creates on its own thread).
#[cfg(test)]
pub mod testing {
    use std::cell::RefCell;
    use std::collections::VecDeque;

    thread_local! {
        pub static SUFFIXES: RefCell<VecDeque<String>> = const { RefCell::new(VecDeque::new()) };
    }

    pub fn next_suffixes(suffixes: &[&str]) {
        SUFFIXES.with(|s| {
            s.borrow_mut()
                .extend(suffixes.iter().map(|x| x.to_string()))
        });
    }
}

/// Names `obj` from `base`.
pub fn name(obj: &mut Object, base: &str) {
    obj.set_meta_str("name", &generate(base));
}

/// Every attempt found its name taken (`taken`: the last attempt's `AlreadyExists`):
/// Kubernetes' `NewGenerateNameConflict`, which a client retries after a second.
pub fn conflict(taken: ApiError) -> ApiError {
    let message = format!(
        "{}, the server was not able to generate a unique name for the object",
        taken.message
    );
    ApiError::new(Reason::AlreadyExists, taken.target, message).retry_after(1)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_generated_name_is_the_base_cut_to_58_and_5_characters_of_the_alphabet() {
        let name = generate("web-");
        assert_eq!(name.len(), 9);
        assert!(name.starts_with("web-"));
        assert!(name[4..].bytes().all(|c| ALPHABET.contains(&c)), "{name}");
        let long = generate(&"a".repeat(70));
        assert_eq!(long.len(), MAX_BASE + SUFFIX);
        // Random: 20 names are not all one.
        let names: std::collections::BTreeSet<String> = (0..20).map(|_| generate("x-")).collect();
        assert!(names.len() > 1);
    }

    #[test]
    fn only_an_object_without_a_name_asks_for_one() {
        let obj = |v| Object::from_value(v).unwrap();
        assert_eq!(
            base(&obj(json!({"metadata": {"generateName": "web-"}}))),
            Some("web-".into())
        );
        assert_eq!(
            base(&obj(
                json!({"metadata": {"name": "a", "generateName": "web-"}})
            )),
            None
        );
        assert_eq!(base(&obj(json!({"metadata": {"generateName": ""}}))), None);
        assert_eq!(base(&obj(json!({"metadata": {}}))), None);
    }
}
