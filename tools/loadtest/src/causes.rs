//! Client-visible errors grouped by cause, so that a run under faults can say which kind of
//! failure its clients saw and how often, and an error log that lines each one up in time.
//!
//! A cause is the keel error reason and the message with what varies between occurrences taken
//! out (quoted names, numbers), so that "configmaps \"load-3\"" and "configmaps \"load-7\""
//! count as one. The table is bounded: a server that invents a new message per request must
//! not grow it without limit.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{SystemTime, UNIX_EPOCH};

use serde::Serialize;

/// Distinct causes kept; occurrences of any further cause are counted under [`OTHER`].
pub const MAX_CAUSES: usize = 20;
/// Where causes beyond [`MAX_CAUSES`] are counted.
pub const OTHER: &str = "other";
/// A cause longer than this (in characters) is cut, ending in `…`.
pub const MAX_CAUSE_CHARS: usize = 100;
/// The raw message in the error log is cut to this many characters.
const MAX_LOGGED_MESSAGE_CHARS: usize = 300;

/// The cause of an error: `"<reason>: <message, normalized>"`, at most [`MAX_CAUSE_CHARS`].
pub fn cause(reason: &str, message: &str) -> String {
    let full = format!("{reason}: {}", normalize(message));
    if full.chars().count() <= MAX_CAUSE_CHARS {
        return full;
    }
    let mut cut: String = full.chars().take(MAX_CAUSE_CHARS - 1).collect();
    cut.push('…');
    cut
}

/// The cause of a keel API error.
pub fn of_api_error(e: &keel_client::ApiError) -> String {
    cause(&format!("{:?}", e.reason), &e.message)
}

/// A message without what differs between occurrences of one failure: text in double quotes
/// becomes `"*"` (object names), every number not glued to a letter becomes `N` (counters,
/// addresses, ports, durations; `h2` and `etcd-0`'s letters stay), and whitespace runs, line
/// breaks included, become one space.
pub fn normalize(message: &str) -> String {
    let mut out = String::with_capacity(message.len());
    let mut chars = message.chars().peekable();
    // Whether the last character written belongs to a word that began with a letter: its
    // digits are part of it (`h2`, `x86`), other digits are a number.
    let mut in_word = false;
    let mut pending_space = false;
    while let Some(c) = chars.next() {
        if c.is_whitespace() {
            pending_space = !out.is_empty();
            in_word = false;
            continue;
        }
        if pending_space {
            out.push(' ');
            pending_space = false;
        }
        if c == '"' {
            // Up to the closing quote (or the end, if there is none).
            for q in chars.by_ref() {
                if q == '"' {
                    break;
                }
            }
            out.push_str("\"*\"");
            in_word = false;
        } else if c.is_ascii_digit() && !in_word {
            while chars.peek().is_some_and(|d| d.is_ascii_digit()) {
                chars.next();
            }
            out.push('N');
        } else {
            out.push(c);
            in_word = c.is_alphanumeric() || c == '_';
        }
    }
    out
}

/// Occurrences per cause, at most [`MAX_CAUSES`] distinct ones plus [`OTHER`]; in JSON, an
/// object from cause to count.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
#[serde(transparent)]
pub struct ErrorCauses {
    counts: BTreeMap<String, u64>,
}

impl ErrorCauses {
    /// Counts one occurrence.
    pub fn add(&mut self, cause: &str) {
        if let Some(c) = self.counts.get_mut(cause) {
            *c += 1;
            return;
        }
        let distinct = self.counts.len() - usize::from(self.counts.contains_key(OTHER));
        let key = if distinct < MAX_CAUSES { cause } else { OTHER };
        *self.counts.entry(key.to_string()).or_insert(0) += 1;
    }

    /// (count, cause), most frequent first, ties by cause: the order of the human report.
    pub fn by_count(&self) -> Vec<(u64, &str)> {
        let mut rows: Vec<(u64, &str)> =
            self.counts.iter().map(|(k, v)| (*v, k.as_str())).collect();
        rows.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(b.1)));
        rows
    }
}

/// A file that gets one line per client-visible error, as it happens:
/// `<failed: unix time in ms>\t<sent: unix time in ms>\t<what failed>\t<caller>\t<cause>\t<message>`
/// (tabs and line breaks become spaces; the caller is the index of the writer or watcher, or
/// of the request, that failed), so that a harness can attribute errors to the faults it
/// injected, tell a request in flight when a server died from one sent afterwards, and count
/// the errors of each caller.
#[derive(Debug, Clone)]
pub struct ErrorLog {
    file: Arc<Mutex<std::fs::File>>,
}

impl ErrorLog {
    /// `--error-log`'s parser: the file, opened.
    pub fn parse(path: &str) -> Result<ErrorLog, String> {
        ErrorLog::open(Path::new(path)).map_err(|e| format!("{path}: {e}"))
    }

    /// Opens `path` for appending (several runs may share it), creating it if needed.
    pub fn open(path: &Path) -> std::io::Result<ErrorLog> {
        let file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)?;
        Ok(ErrorLog {
            file: Arc::new(Mutex::new(file)),
        })
    }

    /// Writes the line of an error that ends, now, a request sent (or a watch opened) at
    /// `sent`; a failed write is ignored (the counts still hold it).
    pub fn write(&self, what: &str, caller: usize, sent: SystemTime, cause: &str, message: &str) {
        let line = log_line(
            unix_ms(SystemTime::now()),
            unix_ms(sent),
            what,
            caller,
            cause,
            message,
        );
        let mut f = self.file.lock().unwrap_or_else(|e| e.into_inner());
        // One write per line: lines from concurrent writers never interleave.
        let _ = f.write_all(line.as_bytes());
    }
}

fn unix_ms(t: SystemTime) -> u128 {
    t.duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis())
        .unwrap_or(0)
}

fn log_line(
    failed: u128,
    sent: u128,
    what: &str,
    caller: usize,
    cause: &str,
    message: &str,
) -> String {
    let flat = |s: &str| s.replace(['\t', '\n', '\r'], " ");
    let message: String = flat(message)
        .chars()
        .take(MAX_LOGGED_MESSAGE_CHARS)
        .collect();
    format!(
        "{failed}\t{sent}\t{}\t{caller}\t{}\t{message}\n",
        flat(what),
        flat(cause)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_numbers_are_taken_out_of_the_message() {
        assert_eq!(
            normalize("configmaps \"load-3\" not found"),
            "configmaps \"*\" not found"
        );
        assert_eq!(
            normalize(
                "error trying to connect: tcp connect error: Connection refused (os error 111)"
            ),
            "error trying to connect: tcp connect error: Connection refused (os error N)"
        );
        assert_eq!(
            normalize("dns error for http://172.18.0.5:6443 after 30s"),
            "dns error for http://N.N.N.N:N after Ns"
        );
    }

    #[test]
    fn digits_glued_to_letters_are_part_of_a_word() {
        assert_eq!(normalize("h2 protocol error"), "h2 protocol error");
        assert_eq!(normalize("member etcd-1 is down"), "member etcd-N is down");
        assert_eq!(normalize("var_2 and x86"), "var_2 and x86");
    }

    #[test]
    fn whitespace_collapses_and_an_unclosed_quote_ends_the_message() {
        assert_eq!(normalize("  a \n\t b  "), "a b");
        assert_eq!(normalize("name \"unclosed"), "name \"*\"");
    }

    #[test]
    fn a_cause_is_the_reason_and_the_normalized_message_capped() {
        assert_eq!(
            cause("ServiceUnavailable", "transport error"),
            "ServiceUnavailable: transport error"
        );
        let long = cause("InternalError", &"x".repeat(500));
        assert_eq!(long.chars().count(), MAX_CAUSE_CHARS);
        assert!(long.ends_with('…'));
        // Multi-byte characters are cut on a character boundary.
        let wide = cause("InternalError", &"é".repeat(500));
        assert_eq!(wide.chars().count(), MAX_CAUSE_CHARS);
    }

    #[test]
    fn an_api_error_is_counted_by_its_reason() {
        let e = keel_client::ApiError::unavailable("etcd member \"etcd-0\" is down");
        assert_eq!(
            of_api_error(&e),
            "ServiceUnavailable: etcd member \"*\" is down"
        );
    }

    fn count(t: &ErrorCauses, cause: &str) -> Option<u64> {
        t.by_count()
            .into_iter()
            .find(|(_, c)| *c == cause)
            .map(|(n, _)| n)
    }

    #[test]
    fn causes_beyond_the_bound_are_counted_as_other() {
        let mut t = ErrorCauses::default();
        for i in 0..MAX_CAUSES + 5 {
            t.add(&format!("cause {i:02}"));
        }
        t.add("cause 00");
        t.add("cause 99");
        assert_eq!(t.by_count().len(), MAX_CAUSES + 1);
        assert_eq!(count(&t, "cause 00"), Some(2));
        assert_eq!(count(&t, OTHER), Some(6));
        assert_eq!(count(&t, "cause 99"), None);
    }

    #[test]
    fn a_cause_literally_named_other_does_not_take_a_slot() {
        let mut t = ErrorCauses::default();
        t.add(OTHER);
        for i in 0..MAX_CAUSES {
            t.add(&format!("c{i}"));
        }
        assert_eq!(t.by_count().len(), MAX_CAUSES + 1);
        assert_eq!(count(&t, OTHER), Some(1));
    }

    #[test]
    fn in_json_it_is_an_object_from_cause_to_count() {
        let mut t = ErrorCauses::default();
        t.add("Timeout: x");
        t.add("Timeout: x");
        assert_eq!(
            serde_json::to_string(&t).unwrap_or_default(),
            r#"{"Timeout: x":2}"#
        );
    }

    #[test]
    fn the_most_frequent_cause_comes_first() {
        let mut t = ErrorCauses::default();
        for c in ["b", "a", "b", "c", "a", "b"] {
            t.add(c);
        }
        assert_eq!(t.by_count(), [(3, "b"), (2, "a"), (1, "c")]);
    }

    #[test]
    fn a_log_line_is_six_tab_separated_fields_on_one_line() {
        let line = log_line(
            1700000000123,
            1700000000100,
            "patch",
            7,
            "Timeout: a\tb",
            "line one\nline\ttwo",
        );
        assert_eq!(
            line,
            "1700000000123\t1700000000100\tpatch\t7\tTimeout: a b\tline one line two\n"
        );
    }
}
