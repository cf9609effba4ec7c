//! The stream clock: ISO 8601 timestamps, no wall clock.
//!
//! A generated stream's times are data (derived from the seed), so the same
//! seed gives the same coupons-expired-or-not answers on every machine and
//! every day. Times are written in China Standard Time (`+08:00`), the zone
//! the streams are set in; other offsets and `Z` are accepted when reading a
//! store an operator edited.

use std::fmt;

/// Seconds east of UTC for the stream's zone (China Standard Time).
const OFFSET_SECS: i64 = 8 * 3600;

/// An instant, in seconds since the Unix epoch (UTC).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Timestamp(i64);

impl Timestamp {
    /// A local (`+08:00`) date and time. Out-of-range fields roll over.
    pub fn local(year: i64, month: u32, day: u32, hour: u32, minute: u32) -> Timestamp {
        let days = days_from_civil(year, month, day);
        Timestamp(days * 86_400 + i64::from(hour) * 3600 + i64::from(minute) * 60 - OFFSET_SECS)
    }

    pub fn unix_seconds(self) -> i64 {
        self.0
    }

    pub fn plus_minutes(self, minutes: i64) -> Timestamp {
        Timestamp(self.0.saturating_add(minutes.saturating_mul(60)))
    }

    /// Whole minutes from `self` to `later` (negative when `later` is earlier).
    pub fn minutes_until(self, later: Timestamp) -> i64 {
        (later.0 - self.0).div_euclid(60)
    }

    /// `HH:MM` in the stream's zone, for summaries.
    pub fn clock(self) -> String {
        let secs = (self.0 + OFFSET_SECS).rem_euclid(86_400);
        format!("{:02}:{:02}", secs / 3600, secs % 3600 / 60)
    }

    /// Parses `YYYY-MM-DDTHH:MM:SS` (a space also works for `T`) with an
    /// optional `Z` or `±HH:MM` offset; without one the stream's zone is
    /// assumed. `None` if the text is not such a timestamp.
    pub fn parse(text: &str) -> Option<Timestamp> {
        let s = text.trim();
        let b = s.as_bytes();
        if b.len() < 19 || !s.is_ascii() {
            return None;
        }
        let num = |r: std::ops::Range<usize>| -> Option<i64> {
            let part = &s[r];
            if part.bytes().all(|c| c.is_ascii_digit()) {
                part.parse().ok()
            } else {
                None
            }
        };
        if b[4] != b'-'
            || b[7] != b'-'
            || !(b[10] == b'T' || b[10] == b' ')
            || b[13] != b':'
            || b[16] != b':'
        {
            return None;
        }
        let (y, mo, d) = (num(0..4)?, num(5..7)?, num(8..10)?);
        let (h, mi, sec) = (num(11..13)?, num(14..16)?, num(17..19)?);
        if !(1..=12).contains(&mo)
            || d < 1
            || d > days_in_month(y, mo as u32)
            || h > 23
            || mi > 59
            || sec > 59
        {
            return None;
        }
        let mut rest = &s[19..];
        if let Some(frac) = rest.strip_prefix('.') {
            let digits = frac.bytes().take_while(u8::is_ascii_digit).count();
            if digits == 0 {
                return None;
            }
            rest = &frac[digits..];
        }
        let offset = match rest {
            "" => OFFSET_SECS,
            "Z" | "z" => 0,
            _ if rest.len() == 6 && rest.as_bytes()[3] == b':' => {
                let sign = match rest.as_bytes()[0] {
                    b'+' => 1,
                    b'-' => -1,
                    _ => return None,
                };
                let two = |r: std::ops::Range<usize>| -> Option<i64> {
                    let part = &rest[r];
                    part.bytes()
                        .all(|c| c.is_ascii_digit())
                        .then(|| part.parse().ok())
                        .flatten()
                };
                let (oh, om) = (two(1..3)?, two(4..6)?);
                if oh > 23 || om > 59 {
                    return None;
                }
                sign * (oh * 3600 + om * 60)
            }
            _ => return None,
        };
        let days = days_from_civil(y, mo as u32, d as u32);
        Some(Timestamp(days * 86_400 + h * 3600 + mi * 60 + sec - offset))
    }
}

/// `2025-03-14T20:05:00+08:00`.
impl fmt::Display for Timestamp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let local = self.0 + OFFSET_SECS;
        let (days, secs) = (local.div_euclid(86_400), local.rem_euclid(86_400));
        let (y, m, d) = civil_from_days(days);
        write!(
            f,
            "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}+08:00",
            secs / 3600,
            secs % 3600 / 60,
            secs % 60
        )
    }
}

fn is_leap(y: i64) -> bool {
    (y % 4 == 0 && y % 100 != 0) || y % 400 == 0
}

fn days_in_month(y: i64, m: u32) -> i64 {
    match m {
        4 | 6 | 9 | 11 => 30,
        2 if is_leap(y) => 29,
        2 => 28,
        _ => 31,
    }
}

// Howard Hinnant's civil-calendar algorithms (public domain): exact for the
// proleptic Gregorian calendar, no tables, no dependencies.
fn days_from_civil(y: i64, m: u32, d: u32) -> i64 {
    let (m, d) = (i64::from(m), i64::from(d));
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

fn civil_from_days(z: i64) -> (i64, i64, i64) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y, m, d)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_and_parses_back() {
        let t = Timestamp::local(2025, 3, 14, 20, 5);
        assert_eq!(t.to_string(), "2025-03-14T20:05:00+08:00");
        assert_eq!(Timestamp::parse(&t.to_string()), Some(t));
        assert_eq!(Timestamp::parse("2025-03-14T12:05:00Z"), Some(t));
        assert_eq!(Timestamp::parse("2025-03-14 20:05:00"), Some(t));
        assert_eq!(Timestamp::parse("2025-03-14T20:05:00.250+08:00"), Some(t));
        assert_eq!(t.clock(), "20:05");
    }

    #[test]
    fn rolls_over_months_and_leap_days() {
        let t = Timestamp::local(2024, 2, 28, 23, 30).plus_minutes(60);
        assert_eq!(t.to_string(), "2024-02-29T00:30:00+08:00");
        let t = Timestamp::local(2025, 12, 31, 23, 59).plus_minutes(1);
        assert_eq!(t.to_string(), "2026-01-01T00:00:00+08:00");
    }

    #[test]
    fn rejects_garbage() {
        for bad in [
            "",
            "tomorrow",
            "2025-13-01T00:00:00",
            "2025-02-30T00:00:00",
            "2025-01-01T00:00:00+8",
            "２０２５-01-01T00:00:00",
        ] {
            assert_eq!(Timestamp::parse(bad), None, "{bad}");
        }
    }
}
