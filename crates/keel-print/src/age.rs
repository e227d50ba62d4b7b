//! The AGE column: how long ago a timestamp was, in kubectl's words (`5s`, `3m10s`, `2h`, `4d`).

use std::time::SystemTime;

/// The age of an RFC 3339 timestamp at `now`; `<unknown>` when absent or unreadable.
pub fn since(timestamp: Option<&str>, now: SystemTime) -> String {
    let Some(t) = timestamp.and_then(|t| humantime::parse_rfc3339_weak(t).ok()) else {
        return "<unknown>".into();
    };
    let seconds = match now.duration_since(t) {
        Ok(d) => d.as_secs() as i64,
        Err(e) => -(e.duration().as_secs() as i64),
    };
    human(seconds)
}

/// Kubernetes' `duration.HumanDuration`: precise when short, coarser as it grows.
pub fn human(seconds: i64) -> String {
    // Clocks of two machines disagree a little: up to a second in the future is "now".
    if seconds < -1 {
        return "<invalid>".into();
    }
    if seconds < 0 {
        return "0s".into();
    }
    if seconds < 120 {
        return format!("{seconds}s");
    }
    let minutes = seconds / 60;
    if minutes < 10 {
        let s = seconds % 60;
        return if s == 0 {
            format!("{minutes}m")
        } else {
            format!("{minutes}m{s}s")
        };
    }
    if minutes < 60 * 3 {
        return format!("{minutes}m");
    }
    let hours = seconds / 3600;
    if hours < 8 {
        let m = minutes % 60;
        return if m == 0 {
            format!("{hours}h")
        } else {
            format!("{hours}h{m}m")
        };
    }
    if hours < 48 {
        return format!("{hours}h");
    }
    if hours < 24 * 8 {
        let h = hours % 24;
        return if h == 0 {
            format!("{}d", hours / 24)
        } else {
            format!("{}d{h}h", hours / 24)
        };
    }
    if hours < 24 * 365 * 2 {
        return format!("{}d", hours / 24);
    }
    if hours < 24 * 365 * 8 {
        let days = (hours / 24) % 365;
        return if days == 0 {
            format!("{}y", hours / 24 / 365)
        } else {
            format!("{}y{days}d", hours / 24 / 365)
        };
    }
    format!("{}y", hours / 24 / 365)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn ages_read_like_kubectl() {
        let cases = [
            (-5, "<invalid>"),
            (-1, "0s"),
            (5, "5s"),
            (119, "119s"),
            (120, "2m"),
            (190, "3m10s"),
            (600, "10m"),
            (3 * 3600 - 1, "179m"),
            (3 * 3600, "3h"),
            (7 * 3600 + 60, "7h1m"),
            (20 * 3600, "20h"),
            (4 * 86400, "4d"),
            (4 * 86400 + 3600, "4d1h"),
            (100 * 86400, "100d"),
            (3 * 365 * 86400, "3y"),
            (9 * 365 * 86400, "9y"),
        ];
        for (seconds, want) in cases {
            assert_eq!(human(seconds), want, "{seconds}s");
        }
    }

    #[test]
    fn ages_come_from_timestamps() {
        let created = "2024-01-01T00:00:00Z";
        let now = humantime::parse_rfc3339(created).unwrap() + Duration::from_secs(5);
        assert_eq!(since(Some(created), now), "5s");
        assert_eq!(since(None, now), "<unknown>");
        assert_eq!(since(Some("yesterday"), now), "<unknown>");
    }
}
